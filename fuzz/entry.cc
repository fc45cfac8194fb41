// libFuzzer's entry point for one harness, chosen at build time by
// STRATA_FUZZ_HARNESS (its name in kHarnesses). A finding aborts with its
// message, so the fuzzer records the input.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string_view>

#include "harnesses.h"

namespace {

void (*Harness())(strata::fuzz::Bytes) {
  static void (*run)(strata::fuzz::Bytes) = [] {
    for (const strata::fuzz::Harness& h : strata::fuzz::kHarnesses) {
      if (h.name == std::string_view(STRATA_FUZZ_HARNESS)) return h.run;
    }
    std::fprintf(stderr, "no fuzz harness named %s\n", STRATA_FUZZ_HARNESS);
    std::abort();
  }();
  return run;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    strata::fuzz::RunHarness(Harness(), strata::fuzz::Bytes(data, size));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz finding (%s): %s\n", STRATA_FUZZ_HARNESS, e.what());
    std::abort();
  } catch (...) {
    std::fprintf(stderr, "fuzz finding (%s): an exception that is not a std::exception\n",
                 STRATA_FUZZ_HARNESS);
    std::abort();
  }
  return 0;
}
