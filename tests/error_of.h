// The message of the strata::Error a piece of test code throws.
#pragma once

#include <string>

#include "strata/core/error.h"

namespace strata::test {

// What running `fn` throws as a strata::Error; "" when it throws nothing.
template <typename Fn>
std::string ErrorOf(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace strata::test
