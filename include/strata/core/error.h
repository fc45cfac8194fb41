// Errors: user mistakes throw strata::Error with a message naming what was
// expected and what was found; broken internal invariants throw
// strata::InternalError through STRATA_CHECK. Nothing aborts on user input.
#pragma once

#include <fmt/core.h>

#include <stdexcept>
#include <string>

namespace strata {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

class InternalError : public Error {
 public:
  explicit InternalError(const std::string& message) : Error("internal error: " + message) {}
};

// Throws strata::Error with a fmt-formatted message.
template <typename... Args>
[[noreturn]] void Fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace strata

// Checked assertion for internal invariants; throws instead of aborting.
#define STRATA_CHECK(cond, ...)                                                            \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      throw ::strata::InternalError(std::string(__FILE__ ":") + std::to_string(__LINE__) + \
                                    ": " #cond " " + ::fmt::format(__VA_ARGS__));          \
    }                                                                                      \
  } while (0)
