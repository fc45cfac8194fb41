// Every opcode of hlo/opcode.h's list, in order: what the opcode-driven
// tests iterate.
#pragma once

#include <vector>

#include "strata/hlo/opcode.h"

namespace strata::test_support {

inline std::vector<hlo::Opcode> AllOpcodes() {
  return {
#define STRATA_TEST_OPCODE(e, ...) hlo::Opcode::e,
      STRATA_HLO_OPCODES(STRATA_TEST_OPCODE)
#undef STRATA_TEST_OPCODE
  };
}

}  // namespace strata::test_support
