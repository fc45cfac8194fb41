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
  explicit Error(const std::string& message) : std::runtime_error(WithoutNul(message)) {}

 private:
  // what() is a C string: a NUL byte in a message (from a path or a name a
  // user gave) would end it there, so NUL is written as \x00.
  static std::string WithoutNul(const std::string& message) {
    if (message.find('\0') == std::string::npos) return message;
    std::string out;
    for (char c : message) {
      if (c == '\0') {
        out += "\\x00";
      } else {
        out += c;
      }
    }
    return out;
  }
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
