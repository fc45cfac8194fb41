// The instruction set one compilation of a kernel file is built for.
//
// The files whose loops the compiler vectorizes (elementwise.cc, fusion.cc,
// reduce.cc and the headers of their scalar ops) are compiled once per
// runtime::Isa: the file itself is the portable variant, and a two-line
// wrapper in kernels/isa/ defines STRATA_KERNEL_ISA and includes it for each
// wider one. Each compilation puts its code in a namespace of its own
// (STRATA_ISA_NAMESPACE: isa_portable, isa_avx2, isa_avx512) and opens
// `#pragma GCC target` only after its includes, so only its own functions are
// built for the wide instructions. The standard library's and the project's
// inline functions stay baseline: the linker keeps one copy of each, and it
// could otherwise keep an AVX-512 copy for code that runs on any machine.
// isa_dispatch.cc picks the variant KernelIsa() names when a kernel is built.
#pragma once

#ifndef STRATA_KERNEL_ISA
#define STRATA_KERNEL_ISA 0  // runtime::Isa::kPortable
#endif

// Opens and closes a region whose functions (lambdas too) are built for
// `flags`: GCC's pragma, or clang's (the fuzz build's compiler).
// _Pragma takes one string literal, which clang-format would split.
// clang-format off
#ifdef __clang__
#define STRATA_TARGET_BEGIN(flags) \
  _Pragma(STRATA_PRAGMA_STRING(clang attribute push(__attribute__((target(flags))), apply_to = function)))
#define STRATA_TARGET_END _Pragma("clang attribute pop")
#else
#define STRATA_TARGET_BEGIN(flags) \
  _Pragma("GCC push_options") _Pragma(STRATA_PRAGMA_STRING(GCC target(flags)))
#define STRATA_TARGET_END _Pragma("GCC pop_options")
#endif
#define STRATA_PRAGMA_STRING(text) #text
// clang-format on

#if STRATA_KERNEL_ISA == 0
#define STRATA_ISA_NAMESPACE isa_portable
#define STRATA_ISA_BEGIN
#define STRATA_ISA_END
#elif STRATA_KERNEL_ISA == 1  // runtime::Isa::kAvx2: what cpu.cc checks for it
#define STRATA_ISA_NAMESPACE isa_avx2
#define STRATA_ISA_BEGIN STRATA_TARGET_BEGIN("avx2,fma")
#define STRATA_ISA_END STRATA_TARGET_END
#elif STRATA_KERNEL_ISA == 2  // runtime::Isa::kAvx512
#define STRATA_ISA_NAMESPACE isa_avx512
#define STRATA_ISA_BEGIN STRATA_TARGET_BEGIN("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")
#define STRATA_ISA_END STRATA_TARGET_END
#else
#error "STRATA_KERNEL_ISA must be 0 (portable), 1 (avx2) or 2 (avx512)"
#endif
