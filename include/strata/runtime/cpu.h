// The vector instruction sets the runtime's hand-written kernels choose
// from at run time, by what the CPU reports (cpuid), so one binary runs at
// full width on any x86-64 machine. STRATA_ISA=portable|avx2|avx512|avx512bf16 caps
// the choice (a cap above what the CPU has is an Error), and tests and
// benchmarks cap it from code to cover the narrower variants.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

namespace strata::runtime {

enum class Isa : int {
  kPortable = 0,  // plain C++
  kAvx2 = 1,      // AVX2 + FMA (256-bit)
  kAvx512 = 2,    // AVX-512 F, BW, DQ, VL (512-bit)
  // kAvx512 and AVX512_BF16: bf16 dots on vdpbf16ps (two products per f32
  // lane); everything else runs kAvx512's kernels.
  kAvx512Bf16 = 3,
};

std::string_view IsaName(Isa isa);
// The widest this CPU runs.
Isa CpuIsa();
// What the kernels use: CpuIsa(), capped by CapIsa or else STRATA_ISA.
Isa KernelIsa();
// Every variant this CPU runs, narrowest first.
std::vector<Isa> SupportedIsas();
// Caps KernelIsa() at `isa` (nullopt: back to STRATA_ISA or the CPU's);
// an ISA the CPU lacks is an Error. For tests and benchmarks.
void CapIsa(std::optional<Isa> isa);

// Whether bf16 dots run on vdpbf16ps (GemmPairs) rather than widen to f32
// as they are packed (Isa::kAvx512's way): only under Isa::kAvx512Bf16, and
// only on CPUs where the instruction pays. AVX512_BF16 alone does not say
// so: on AMD's Zen 4 and Zen 5 vdpbf16ps does twice the work of an f32 FMA
// per cycle (bench/RESULTS.md); on the Intel Xeon measured (an AMX-class
// part) the paired GEMM ran at 0.6x the f32 one and widening at 1.05x. So
// Intel CPUs widen. Fixed per process (results never depend on timing).
bool PairedBf16Dots();
// Overrides that choice under Isa::kAvx512Bf16 (nullopt: back to the
// CPU's). For tests and benchmarks.
void PairBf16Dots(std::optional<bool> paired);

}  // namespace strata::runtime
