// kernels.h's kernels that are built once per instruction set (isa.h): each
// builds its kernel with the variant KernelIsa() names, so a program keeps
// the variant it was compiled with.
#include "kernels/isa_kernels.h"
#include "strata/runtime/cpu.h"

namespace strata::runtime {

// Returns `call` made in the namespace of KernelIsa()'s variant.
#define STRATA_CALL_FOR_KERNEL_ISA(call) \
  switch (KernelIsa()) {                 \
    case Isa::kAvx512Bf16:               \
    case Isa::kAvx512:                   \
      return isa_avx512::call;           \
    case Isa::kAvx2:                     \
      return isa_avx2::call;             \
    case Isa::kPortable:                 \
      break;                             \
  }                                      \
  return isa_portable::call

KernelInfo MakeElementwiseKernel(const hlo::Instruction& inst, ThreadPool& pool) {
  STRATA_CALL_FOR_KERNEL_ISA(MakeElementwiseKernel(inst, pool));
}

KernelInfo MakeReduceKernel(const hlo::Instruction& inst, ThreadPool& pool,
                            ScalarFunction to_apply) {
  STRATA_CALL_FOR_KERNEL_ISA(MakeReduceKernel(inst, pool, std::move(to_apply)));
}

KernelInfo MakeFusionKernel(const hlo::Instruction& inst, ThreadPool& pool) {
  STRATA_CALL_FOR_KERNEL_ISA(MakeFusionKernel(inst, pool));
}

KernelInfo MakeAttentionKernel(const hlo::Instruction& inst, ThreadPool& pool) {
  STRATA_CALL_FOR_KERNEL_ISA(MakeAttentionKernel(inst, pool));
}

#undef STRATA_CALL_FOR_KERNEL_ISA

bool FusedKernelRuns(const hlo::Instruction& fusion, ThreadPool& pool) {
  return isa_portable::FusedKernelRuns(fusion, pool);
}

bool FusionReadsElementwise(const hlo::Instruction& fusion, int64_t index) {
  return isa_portable::FusionReadsElementwise(fusion, index);
}

std::vector<bool> FusionElementwiseOperands(const hlo::Instruction& fusion) {
  return isa_portable::FusionElementwiseOperands(fusion);
}

bool IsScalarBroadcast(const hlo::Instruction& inst) {
  return isa_portable::IsScalarBroadcast(inst);
}

bool AcceptsScalarBroadcast(const hlo::Instruction& user, int64_t operand) {
  return isa_portable::AcceptsScalarBroadcast(user, operand);
}

}  // namespace strata::runtime
