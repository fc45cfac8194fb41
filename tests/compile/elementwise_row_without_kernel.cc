// Compiled (never run) by the Layering-style CTest
// ElementwiseRows.ARowClaimingAnElementTypeWithoutItsKernelDoesNotBuild: a
// row that says exp takes integers but gives no integer kernel. Built with
// -DSTRATA_ROW_TYPES=Float it is a well-formed row and must compile.
#include <cstdint>

#ifndef STRATA_ROW_TYPES
#define STRATA_ROW_TYPES Numeric
#endif
#define STRATA_ELEMENTWISE_ROWS(V)                                                            \
  V(kExp, "exponential", Unary, Complex, Api(exp), STRATA_ROW_TYPES, std::exp(x), NoKernel(), \
    nullptr, Grads(g))
#include "kernels/elementwise_ops.h"

int main() {
  using strata::hlo::Opcode;
  namespace elementwise = strata::runtime::STRATA_ISA_NAMESPACE::elementwise;  // isa.h's portable
  return static_cast<int>(elementwise::Unary<int32_t>(Opcode::kExp, 1) +
                          elementwise::Unary<float>(Opcode::kExp, 0.0f));
}
