#pragma once

#include "strata/hlo/module.h"

namespace strata::hlo {

// Checks every shape and dtype rule, operand and parameter numbering, and the
// signatures of called computations. Throws strata::Error naming the
// computation, the instruction, its operands' shapes and what was expected.
void Verify(const Module& module);
void VerifyComputation(const Computation& computation);

}  // namespace strata::hlo
