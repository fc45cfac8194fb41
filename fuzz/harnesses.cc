#include "harnesses.h"

#include "strata/core/error.h"

namespace strata::fuzz {

void RunHarness(void (*run)(Bytes), Bytes input) {
  try {
    run(input);
  } catch (const InternalError&) {
    throw;
  } catch (const Error&) {
    // A clear rejection: what bad input should get.
  }
}

}  // namespace strata::fuzz
