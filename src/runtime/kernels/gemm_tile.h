// The GEMMs' register tile (gemm.cc's f32 and f64 micro-kernels,
// gemm_bf16.cc's widened bf16 one): 256- and 512-bit vector ops and the
// tile loop over them, and the vectorized rounding of f32 to bf16.
// Included only by kernel sources: every function here carries its
// target, and only functions named for their ISA may hold its
// instructions (tests/runtime/wide_instructions.sh).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <type_traits>

namespace strata::runtime {

// Sixteen f32 lanes (their bits) rounded to bf16 as hlo::FloatToBFloat16
// rounds, in integer arithmetic: ties to even, NaNs quiet, subnormals
// rounded as the scalar rounding does (vcvtneps2bf16 would flush them).
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl"))) inline __m256i RoundToBf16Avx512(
    __m512i x) {
  const __m512i one = _mm512_set1_epi32(1), bias = _mm512_set1_epi32(0x7fff);
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
  const __m512i quiet = _mm512_set1_epi32(0x40);
  // (maskz forms: GCC 12 warns of the unmasked ones' undefined operand.)
  const __m512i high = _mm512_maskz_srli_epi32(0xffff, x, 16);
  const __m512i lsb = _mm512_and_si512(high, one);
  const __m512i rounded =
      _mm512_maskz_srli_epi32(0xffff, _mm512_add_epi32(_mm512_add_epi32(x, bias), lsb), 16);
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, abs_mask), inf);
  const __m512i nans = _mm512_or_si512(high, quiet);
  return _mm512_maskz_cvtepi32_epi16(0xffff, _mm512_mask_blend_epi32(nan, rounded, nans));
}

// Sixteen f32 lanes (two vectors, in order) rounded to bf16 as
// hlo::FloatToBFloat16 rounds: RoundToBf16Avx512's integer arithmetic eight
// lanes at a time.
__attribute__((target("avx2"))) inline __m256i RoundToBf16Avx2(__m256 low, __m256 high) {
  const __m256i one = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7fff);
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
  const __m256i quiet = _mm256_set1_epi32(0x40);
  __m256i half[2];
  const __m256 halves[2] = {low, high};
  for (int h = 0; h < 2; ++h) {
    const __m256i x = _mm256_castps_si256(halves[h]);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), one);
    const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, bias), lsb), 16);
    // |x| > inf as signed ints: both sides are non-negative.
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, abs_mask), inf);
    const __m256i nans = _mm256_or_si256(_mm256_srli_epi32(x, 16), quiet);
    half[h] = _mm256_blendv_epi8(rounded, nans, nan);
  }
  // Each lane holds at most 0xffff: packing with unsigned saturation keeps
  // it; the pack works per 128-bit half, so put the quarters back in order.
  return _mm256_permute4x64_epi64(_mm256_packus_epi32(half[0], half[1]), 0xd8);
}

// 256- and 512-bit vector ops on T, so one micro-kernel serves f32 and f64.
// Each carries its target; the micro-kernels that use them are flattened
// (every call inlined), which the compiler can do only into a function of
// the same target, so a baseline build never holds a wide instruction outside
// them. (always_inline would have to inline them into the baseline
// TileKernel first, and fail.) Vectors pass by reference: a baseline
// function may not pass or return them by value (clang refuses it; GCC
// warns).
#define STRATA_VECTOR_OPS(target, V, lanes, T, suffix, width)                            \
  using Vector = V;                                                                      \
  static constexpr int kLanes = lanes;                                                   \
  target static void Zero(V& r) { r = _mm##width##_setzero_##suffix(); }                 \
  target static void Load(V& r, const T* p) { r = _mm##width##_load_##suffix(p); }       \
  target static void Broadcast(V& r, const T* p) { r = _mm##width##_set1_##suffix(*p); } \
  target static void Fma(V& acc, const V& x, const V& y) {                               \
    acc = _mm##width##_fmadd_##suffix(x, y, acc);                                        \
  }                                                                                      \
  target static void AddUnaligned(V& acc, const T* p) {                                  \
    acc = _mm##width##_add_##suffix(_mm##width##_loadu_##suffix(p), acc);                \
  }                                                                                      \
  target static void StoreUnaligned(T* p, const V& x) { _mm##width##_storeu_##suffix(p, x); }
#define STRATA_AVX2 __attribute__((target("avx2,fma"))) inline
#define STRATA_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma"))) inline
template <typename T>
struct Avx2;
template <>
struct Avx2<float> {
  STRATA_VECTOR_OPS(STRATA_AVX2, __m256, 8, float, ps, 256)
  // A tile's row (kVectors vectors, an even number) rounded to bf16 at p.
  template <int kVectors>
  STRATA_AVX2 static void StoreRounded(uint16_t* p, const __m256 (&row)[kVectors]) {
    static_assert(kVectors % 2 == 0);
    for (int v = 0; v < kVectors; v += 2) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(p + v * 8),
                          RoundToBf16Avx2(row[v], row[v + 1]));
    }
  }
};
template <>
struct Avx2<double> {
  STRATA_VECTOR_OPS(STRATA_AVX2, __m256d, 4, double, pd, 256)
};
template <typename T>
struct Avx512;
template <>
struct Avx512<float> {
  STRATA_VECTOR_OPS(STRATA_AVX512, __m512, 16, float, ps, 512)
  template <int kVectors>
  STRATA_AVX512 static void StoreRounded(uint16_t* p, const __m512 (&row)[kVectors]) {
    for (int v = 0; v < kVectors; ++v) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(p + v * 16),
                          RoundToBf16Avx512(_mm512_castps_si512(row[v])));
    }
  }
};
template <>
struct Avx512<double> {
  STRATA_VECTOR_OPS(STRATA_AVX512, __m512d, 8, double, pd, 512)
};
#undef STRATA_AVX2
#undef STRATA_AVX512
#undef STRATA_VECTOR_OPS

// The tile in kMr x kVectors accumulators: per k, kVectors loads of the B
// panel, kMr broadcasts of A, kMr * kVectors FMAs. S is Avx2<T> or
// Avx512<T>; the caller, flattened, compiles this with S's target.
// With kIndirect, column p of A starts at a + offsets[p] instead (a_cs
// unused): rows of an implicit A read where they lie. With `narrow` (f32
// only) the tile's sums (plus C's, with `accumulate`) are rounded to bf16
// into narrow (row stride ldn) as they leave the registers, and C is only
// read (null unless accumulating).
template <typename S, typename T, int kMr, int kVectors, bool kIndirect = false>
inline void TileKernel(int64_t kc, const T* a, int64_t a_rs, int64_t a_cs, const T* b, T* c,
                       int64_t ldc, bool accumulate, const int64_t* offsets = nullptr,
                       uint16_t* narrow = nullptr, int64_t ldn = 0) {
  constexpr int kL = S::kLanes, kNr = kVectors * kL;
  if (c) {
    for (int i = 0; i < kMr; ++i) {
      _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc + kNr - 1), _MM_HINT_T0);
    }
  }
  typename S::Vector acc[kMr][kVectors];
#pragma GCC unroll 16
  for (int i = 0; i < kMr; ++i) {
#pragma GCC unroll 4
    for (int v = 0; v < kVectors; ++v) S::Zero(acc[i][v]);
  }
#pragma GCC unroll 4
  for (int64_t p = 0; p < kc; ++p) {
    typename S::Vector bv[kVectors];
#pragma GCC unroll 4
    for (int v = 0; v < kVectors; ++v) S::Load(bv[v], b + v * kL);
    const T* column = a;
    if constexpr (kIndirect) column = a + offsets[p];
#pragma GCC unroll 16
    for (int i = 0; i < kMr; ++i) {
      typename S::Vector x;
      S::Broadcast(x, column + i * a_rs);
#pragma GCC unroll 4
      for (int v = 0; v < kVectors; ++v) S::Fma(acc[i][v], x, bv[v]);
    }
    if constexpr (!kIndirect) a += a_cs;
    b += kNr;
  }
#pragma GCC unroll 16
  for (int i = 0; i < kMr; ++i) {
    T* out = accumulate || !narrow ? c + i * ldc : nullptr;
#pragma GCC unroll 4
    for (int v = 0; v < kVectors; ++v) {
      if (accumulate) S::AddUnaligned(acc[i][v], out + v * kL);
      if (!narrow) S::StoreUnaligned(out + v * kL, acc[i][v]);
    }
    if constexpr (std::is_same_v<T, float>) {
      if (narrow) S::template StoreRounded<kVectors>(narrow + i * ldn, acc[i]);
    }
  }
}

}  // namespace strata::runtime
