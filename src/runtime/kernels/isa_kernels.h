// The kernels built once per instruction set (isa.h). Each variant's
// namespace declares them; isa_dispatch.cc defines kernels.h's functions of
// the same names by calling the variant KernelIsa() names.
#pragma once

#include "kernels/kernels.h"

#define STRATA_ISA_KERNELS                                                                  \
  KernelInfo MakeElementwiseKernel(const hlo::Instruction& inst, ThreadPool& pool);         \
  KernelInfo MakeReduceKernel(const hlo::Instruction& inst, ThreadPool& pool,               \
                              ScalarFunction to_apply);                                     \
  KernelInfo MakeFusionKernel(const hlo::Instruction& inst, ThreadPool& pool);              \
  KernelInfo MakeAttentionKernel(const hlo::Instruction& inst, ThreadPool& pool);           \
  /* The planner's questions, the same in every variant (the portable one answers them). */ \
  bool FusedKernelRuns(const hlo::Instruction& fusion, ThreadPool& pool);                   \
  bool FusionReadsElementwise(const hlo::Instruction& fusion, int64_t index);               \
  std::vector<bool> FusionElementwiseOperands(const hlo::Instruction& fusion);              \
  bool IsScalarBroadcast(const hlo::Instruction& inst);                                     \
  bool AcceptsScalarBroadcast(const hlo::Instruction& user, int64_t operand);

namespace strata::runtime::isa_portable {
STRATA_ISA_KERNELS
}  // namespace strata::runtime::isa_portable
namespace strata::runtime::isa_avx2 {
STRATA_ISA_KERNELS
}  // namespace strata::runtime::isa_avx2
namespace strata::runtime::isa_avx512 {
STRATA_ISA_KERNELS
}  // namespace strata::runtime::isa_avx512

#undef STRATA_ISA_KERNELS
