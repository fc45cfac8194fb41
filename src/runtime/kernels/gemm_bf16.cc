// GemmBf16 (gemm.h): a product of bf16 matrices summed in f32.
//
// Under Isa::kAvx512Bf16 the micro-kernel is vdpbf16ps, which adds to each
// f32 lane the products of one pair of bf16 values from each operand: k is
// taken two at a time. B's panels hold, for each pair of k and each of the
// tile's 64 columns, the column's two values side by side (32 bits), so one
// 512-bit load is 16 columns' pairs; A's panels hold each row's pair, which
// is broadcast. A 6 x 64 tile of C is 24 accumulators, as in the f32 kernel,
// but each instruction does twice the products. Both operands are packed
// (a pair of k rows is interleaved on the way). Loops and blocking follow
// gemm.cc's: columns in blocks of nc, k in blocks of kc, rows in blocks of
// mc.
//
// Under AVX2, and AVX-512 without BF16, both operands are widened to f32
// (exact: a bf16 is an f32's top half) as they are packed, and the f32
// micro-kernel of that ISA runs over them with the f32 GEMM's blocking
// (GemmWide): Gemm<float>'s sums of the widened operands, bit for bit.
// The portable level widens A into a row-major f32 copy, B straight into
// the f32 panels through GemmPackingB, and runs Gemm<float>.
#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <vector>

#include "kernels/gemm.h"
#include "kernels/gemm_tile.h"
#include "kernels/kernels.h"
#include "kernels/transpose_avx2.h"
#include "strata/hlo/literal.h"
#include "strata/runtime/cpu.h"

namespace strata::runtime {
namespace {

constexpr int64_t kMr = 6, kNr = 64, kKc = 512, kMc = 72, kNc = 3072;

// The pair (x[p], x[p + 1]) of a line whose k-stride is `stride`, the
// second 0 past k.
inline uint32_t Pair(const uint16_t* x, int64_t stride, int64_t p, int64_t k) {
  uint32_t low = x[p * stride];
  uint32_t high = p + 1 < k ? x[(p + 1) * stride] : 0;
  return low | high << 16;
}

// Pairs q < full of a line with k contiguous: one 32-bit load each.
inline void ContiguousPairs(const uint16_t* x, int64_t full, uint32_t* out, int64_t out_stride) {
  for (int64_t q = 0; q < full; ++q) {
    uint32_t pair;
    std::memcpy(&pair, x + 2 * q, sizeof pair);
    out[q * out_stride] = pair;
  }
}

// A whole line (a row of A, a column of B) of k elements with stride
// `stride` into every out_stride-th slot of out: its (k + 1) / 2 pairs.
inline void PackLine(const uint16_t* x, int64_t stride, int64_t k, uint32_t* out,
                     int64_t out_stride) {
  const int64_t pairs = (k + 1) / 2, full = k / 2;
  int64_t q = 0;
  if (stride == 1) {
    ContiguousPairs(x, full, out, out_stride);
    q = full;
  }
  for (; q < pairs; ++q) out[q * out_stride] = Pair(x, stride, 2 * q, k);
}

// Sixteen columns of B stored transposed (each column's k contiguous),
// pairs q0..q0 + 15 of each, into a panel's rows: out[r * kNr + c] = pair
// q0 + r of column c. A 16 x 16 transpose of 32-bit words in registers
// (two unpack rounds within 128-bit lanes, then two of whole lanes).
__attribute__((target("avx512f"))) void TransposePairs16Avx512(const uint16_t* column0,
                                                               int64_t col_stride, uint32_t* out) {
  // (maskz forms, all lanes kept: GCC 12 warns of the plain ones' undefined operand.)
  __m512i r[16], t[16];
#pragma GCC unroll 16
  for (int c = 0; c < 16; ++c) r[c] = _mm512_loadu_si512(column0 + c * col_stride);
    // t[2i], t[2i + 1]: words of columns 2i and 2i + 1 interleaved.
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_maskz_unpacklo_epi32(0xffff, r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_maskz_unpackhi_epi32(0xffff, r[2 * i], r[2 * i + 1]);
  }
  // r[4i + w]: lane L holds word 4L + w of columns 4i..4i + 3.
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    r[4 * i] = _mm512_maskz_unpacklo_epi64(0xff, t[4 * i], t[4 * i + 2]);
    r[4 * i + 1] = _mm512_maskz_unpackhi_epi64(0xff, t[4 * i], t[4 * i + 2]);
    r[4 * i + 2] = _mm512_maskz_unpacklo_epi64(0xff, t[4 * i + 1], t[4 * i + 3]);
    r[4 * i + 3] = _mm512_maskz_unpackhi_epi64(0xff, t[4 * i + 1], t[4 * i + 3]);
  }
  // Word 4L + w of all sixteen columns: lane L of r[w], r[4 + w], r[8 + w], r[12 + w].
#pragma GCC unroll 4
  for (int w = 0; w < 4; ++w) {
    const __m512i even_lo = _mm512_maskz_shuffle_i32x4(0xffff, r[w], r[4 + w], 0x88);
    const __m512i odd_lo = _mm512_maskz_shuffle_i32x4(0xffff, r[w], r[4 + w], 0xdd);
    const __m512i even_hi = _mm512_maskz_shuffle_i32x4(0xffff, r[8 + w], r[12 + w], 0x88);
    const __m512i odd_hi = _mm512_maskz_shuffle_i32x4(0xffff, r[8 + w], r[12 + w], 0xdd);
    _mm512_storeu_si512(out + w * kNr, _mm512_maskz_shuffle_i32x4(0xffff, even_lo, even_hi, 0x88));
    _mm512_storeu_si512(out + (4 + w) * kNr,
                        _mm512_maskz_shuffle_i32x4(0xffff, odd_lo, odd_hi, 0x88));
    _mm512_storeu_si512(out + (8 + w) * kNr,
                        _mm512_maskz_shuffle_i32x4(0xffff, even_lo, even_hi, 0xdd));
    _mm512_storeu_si512(out + (12 + w) * kNr,
                        _mm512_maskz_shuffle_i32x4(0xffff, odd_lo, odd_hi, 0xdd));
  }
}

// B[kc, cols] (rows p0.. of the view) into kNr-wide panels of pairs:
// panel[q * kNr + j] = (B[2q, j], B[2q + 1, j]); columns past `cols` zero.
// (Run under Isa::kAvx512Bf16 only.)
void PackPairsB(int64_t kc, int64_t cols, MatrixView<const uint16_t> b, uint32_t* out) {
  const int64_t pairs = (kc + 1) / 2, full = kc / 2;
  for (int64_t j0 = 0; j0 < cols; j0 += kNr, out += kNr * pairs) {
    const int64_t width = std::min(kNr, cols - j0);
    const uint16_t* src = b.data + j0 * b.col_stride;
    if (b.col_stride == 1) {  // row-major: interleave two rows
      for (int64_t q = 0; q < pairs; ++q) {
        const uint16_t* r0 = src + 2 * q * b.row_stride;
        const uint16_t* r1 = 2 * q + 1 < kc ? r0 + b.row_stride : nullptr;
        uint32_t* o = out + q * kNr;
        if (r1) {
          for (int64_t j = 0; j < width; ++j) o[j] = r0[j] | static_cast<uint32_t>(r1[j]) << 16;
        } else {
          for (int64_t j = 0; j < width; ++j) o[j] = r0[j];
        }
        std::fill(o + width, o + kNr, 0u);
      }
      continue;
    }
    int64_t j = 0;
    if (b.row_stride == 1) {  // stored transposed: a column's pairs are contiguous
      const int64_t blocked = full / 16 * 16;
      for (; j + 16 <= width; j += 16) {
        for (int64_t q = 0; q < blocked; q += 16)
          TransposePairs16Avx512(src + j * b.col_stride + 2 * q, b.col_stride, out + q * kNr + j);
        for (int64_t c = j; c < j + 16; ++c) {
          const uint16_t* column = src + c * b.col_stride;
          ContiguousPairs(column + 2 * blocked, full - blocked, out + blocked * kNr + c, kNr);
          for (int64_t q = full; q < pairs; ++q) out[q * kNr + c] = Pair(column, 1, 2 * q, kc);
        }
      }
    }
    for (; j < width; ++j) {
      PackLine(src + j * b.col_stride, b.row_stride, kc, out + j, kNr);
    }
    for (int64_t q = 0; q < pairs; ++q) std::fill(out + q * kNr + width, out + (q + 1) * kNr, 0u);
  }
}

// A[rows, kc] into kMr-tall panels of pairs: panel[q * kMr + i] =
// (A[i, 2q], A[i, 2q + 1]); rows past `rows` zero.
void PackPairsA(int64_t rows, int64_t kc, MatrixView<const uint16_t> a, uint32_t* out) {
  const int64_t pairs = (kc + 1) / 2, full = kc / 2;
  for (int64_t i0 = 0; i0 < rows; i0 += kMr, out += kMr * pairs) {
    const int64_t height = std::min(kMr, rows - i0);
    const uint16_t* block = a.data + i0 * a.row_stride;
    if (a.row_stride == 1 && height == kMr) {  // stored transposed: rows of k side by side
      for (int64_t q = 0; q < full; ++q) {
        const uint16_t* r0 = block + 2 * q * a.col_stride;
        const uint16_t* r1 = r0 + a.col_stride;
        for (int64_t i = 0; i < kMr; ++i)
          out[q * kMr + i] = r0[i] | static_cast<uint32_t>(r1[i]) << 16;
      }
      for (int64_t q = full; q < pairs; ++q) {
        for (int64_t i = 0; i < kMr; ++i) out[q * kMr + i] = block[2 * q * a.col_stride + i];
      }
      continue;
    }
    for (int64_t i = 0; i < height; ++i) {
      PackLine(block + i * a.row_stride, a.col_stride, kc, out + i, kMr);
    }
    for (int64_t i = height; i < kMr; ++i) {
      for (int64_t q = 0; q < pairs; ++q) out[q * kMr + i] = 0;
    }
  }
}

// The 6 x 64 tile over `pairs` pairs of k: C (row stride ldc) = or += A · B,
// or with `narrow` the same sums rounded to bf16 into narrow (row stride
// ldn) and C only read. Row i's pair q of A is the 32 bits at a + i * a_row
// + q * a_pair (in bf16 elements): a packed panel ({2, 2 * kMr}), or A's
// own rows ({row stride, 2}).
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16"))) void TileAvx512Bf16(
    int64_t pairs, const uint16_t* a, int64_t a_row, int64_t a_pair, const uint32_t* b, float* c,
    int64_t ldc, bool accumulate, uint16_t* narrow = nullptr, int64_t ldn = 0) {
  __m512 acc[kMr][4];
#pragma GCC unroll 6
  for (int i = 0; i < kMr; ++i) {
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) acc[i][v] = _mm512_setzero_ps();
  }
  for (int64_t q = 0; q < pairs; ++q) {
    __m512bh bv[4];
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) bv[v] = (__m512bh)_mm512_load_si512(b + v * 16);
#pragma GCC unroll 6
    for (int i = 0; i < kMr; ++i) {
      int pair;
      std::memcpy(&pair, a + i * a_row, sizeof pair);
      __m512i x = _mm512_set1_epi32(pair);
#if defined(__clang__)
      // clang 16 crashes (-O1 and up) folding the broadcast into vdpbf16ps's
      // operand; an empty asm keeps it a separate vpbroadcastd.
      asm("" : "+v"(x));
#endif
#pragma GCC unroll 4
      for (int v = 0; v < 4; ++v) acc[i][v] = _mm512_dpbf16_ps(acc[i][v], (__m512bh)x, bv[v]);
    }
    a += a_pair;
    b += kNr;
  }
#pragma GCC unroll 6
  for (int i = 0; i < kMr; ++i) {
    float* out = accumulate || !narrow ? c + i * ldc : nullptr;
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) {
      if (accumulate) acc[i][v] = _mm512_add_ps(acc[i][v], _mm512_loadu_ps(out + v * 16));
      if (narrow) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(narrow + i * ldn + v * 16),
                            RoundToBf16Avx512(_mm512_castps_si512(acc[i][v])));
      } else {
        _mm512_storeu_ps(out + v * 16, acc[i][v]);
      }
    }
  }
}

// An edge tile's sums (rows x columns of `edge`, row stride lde) into C,
// added to what C holds with `accumulate`; with `narrow` rounded to bf16
// into it instead of stored.
void StoreEdge(const float* edge, int64_t lde, int64_t rows, int64_t columns, bool accumulate,
               float* c, int64_t ldc, uint16_t* narrow, int64_t ldn) {
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < columns; ++j) {
      float v = edge[i * lde + j];
      if (accumulate) v += c[i * ldc + j];
      if (narrow) {
        narrow[i * ldn + j] = hlo::FloatToBFloat16(v);
      } else {
        c[i * ldc + j] = v;
      }
    }
  }
}

// GemmBf16's packing space (gemm.h's slots 2 and 3).
template <typename T>
T* Space(int slot, int64_t elements) {
  return static_cast<T*>(GemmPackingSpace(2 + slot, elements * static_cast<int64_t>(sizeof(T))));
}

// With `narrow`, the last block of k rounds each tile's sums to bf16 into
// narrow as they leave the registers; C holds the earlier blocks' sums (and
// is not touched when k fits one block).
void GemmPairs(int64_t m, int64_t n, int64_t k, MatrixView<const uint16_t> a,
               MatrixView<const uint16_t> b, float* c, int64_t ldc, uint16_t* narrow, int64_t ldn) {
  const int64_t nc_max = std::min(kNc, (n + kNr - 1) / kNr * kNr);
  const int64_t pairs_max = (std::min(kKc, k) + 1) / 2;
  const int64_t mc_max = std::min(kMc, (m + kMr - 1) / kMr * kMr);
  uint32_t* packed_a = Space<uint32_t>(0, mc_max * pairs_max);
  uint32_t* packed_b = Space<uint32_t>(1, nc_max * pairs_max);
  alignas(64) float edge[kMr * kNr];
  for (int64_t j0 = 0; j0 < n; j0 += kNc) {
    const int64_t nc = std::min(kNc, n - j0);
    for (int64_t p0 = 0; p0 < k; p0 += kKc) {
      const int64_t kc = std::min(kKc, k - p0), pairs = (kc + 1) / 2;
      const bool accumulate = p0 > 0, narrowing = narrow && p0 + kc >= k;
      PackPairsB(kc, nc,
                 {b.data + p0 * b.row_stride + j0 * b.col_stride, b.row_stride, b.col_stride},
                 packed_b);
      // A's rows hold k side by side: full row tiles read their pairs in
      // place (packing A cost more than the product where B is one panel
      // wide, as attention's products are); only a last, short row tile is
      // packed. An odd kc packs all (its last pair needs a zero).
      const bool in_place = a.col_stride == 1 && kc % 2 == 0;
      for (int64_t i0 = 0; i0 < m; i0 += kMc) {
        const int64_t mc = std::min(kMc, m - i0);
        const uint16_t* a_block = a.data + i0 * a.row_stride + p0 * a.col_stride;
        const int64_t packed_from = in_place ? mc / kMr * kMr : 0;
        if (packed_from < mc) {
          PackPairsA(mc - packed_from, kc,
                     {a_block + packed_from * a.row_stride, a.row_stride, a.col_stride},
                     packed_a + packed_from * pairs);
        }
        for (int64_t jr = 0; jr < nc; jr += kNr) {
          const int64_t width = std::min(kNr, nc - jr);
          const uint32_t* b_panel = packed_b + jr * pairs;
          for (int64_t ir = 0; ir < mc; ir += kMr) {
            const int64_t height = std::min(kMr, mc - ir);
            const uint16_t* a_panel = reinterpret_cast<const uint16_t*>(packed_a + ir * pairs);
            int64_t a_row = 2, a_pair = 2 * kMr;
            if (ir < packed_from) {
              a_panel = a_block + ir * a.row_stride;
              a_row = a.row_stride;
              a_pair = 2;
            }
            float* tile = narrowing && !accumulate ? nullptr : c + (i0 + ir) * ldc + j0 + jr;
            uint16_t* narrow_tile = narrowing ? narrow + (i0 + ir) * ldn + j0 + jr : nullptr;
            if (height == kMr && width == kNr) {
              TileAvx512Bf16(pairs, a_panel, a_row, a_pair, b_panel, tile, ldc, accumulate,
                             narrow_tile, ldn);
              continue;
            }
            TileAvx512Bf16(pairs, a_panel, a_row, a_pair, b_panel, edge, kNr, false);
            StoreEdge(edge, kNr, height, width, accumulate, tile, ldc, narrow_tile, ldn);
          }
        }
      }
    }
  }
}

// ---- AVX2 (and AVX-512 without BF16): operands widened as they are packed ----
// The f32 GEMM's tiles and blocking (gemm.cc's Config for the ISA), so each
// element is summed in Gemm<float>'s order: both operands are widened into
// f32 panels (A's 6 rows k-major, B's 16 or 64 columns k-major), the f32
// tile of FMAs runs over them, and the last block of k rounds the tile to
// bf16 as it leaves the registers.
constexpr int64_t kWideMr = 6, kWideMaxNr = 64, kWideKc = 512, kWideMc = 72, kWideNc = 3072;

// Eight bf16 values → eight f32 (exact: a bf16 is an f32's top half).
__attribute__((target("avx2"))) inline __m256 WidenAvx2(const uint16_t* x) {
  const __m128i half = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(half), 16));
}

// B[kc, cols] into nr-wide f32 panels (panel[p * nr + j]; nr a multiple
// of 8, each panel 32-byte aligned); columns past `cols` zero. (AVX2
// instructions: it packs for the AVX-512 tile too.)
__attribute__((target("avx2"))) void PackWideBAvx2(int64_t kc, int64_t cols, int64_t nr,
                                                   MatrixView<const uint16_t> b, float* out) {
  for (int64_t j0 = 0; j0 < cols; j0 += nr, out += nr * kc) {
    const int64_t width = std::min(nr, cols - j0);
    const uint16_t* src = b.data + j0 * b.col_stride;
    int64_t p = 0;
    if (width == nr && b.col_stride == 1) {  // row-major: 8 of a row's values at once
      for (; p < kc; ++p) {
        const uint16_t* row = src + p * b.row_stride;
        for (int64_t j = 0; j < nr; j += 8) _mm256_store_ps(out + p * nr + j, WidenAvx2(row + j));
      }
    } else if (width == nr && b.row_stride == 1) {  // stored transposed: 8 x 8 blocks
      for (; p + 8 <= kc; p += 8) {
        for (int64_t j = 0; j < nr; j += 8) {
          __m256 r[8];
          for (int c = 0; c < 8; ++c) r[c] = WidenAvx2(src + (j + c) * b.col_stride + p);
          Transpose8x8Avx2(r);
          for (int q = 0; q < 8; ++q) _mm256_store_ps(out + (p + q) * nr + j, r[q]);
        }
      }
    }
    for (; p < kc; ++p) {
      const uint16_t* row = src + p * b.row_stride;
      float* o = out + p * nr;
      for (int64_t j = 0; j < width; ++j) o[j] = hlo::BFloat16ToFloat(row[j * b.col_stride]);
      std::fill(o + width, o + nr, 0.0f);
    }
  }
}

// A[rows, kc] into kWideMr-tall f32 panels (panel[p * kWideMr + i]); rows
// past `rows` zero. `out` must have 2 floats of room past the last panel.
__attribute__((target("avx2"))) void PackWideAAvx2(int64_t rows, int64_t kc,
                                                   MatrixView<const uint16_t> a, float* out) {
  for (int64_t i0 = 0; i0 < rows; i0 += kWideMr, out += kWideMr * kc) {
    const int64_t height = std::min(kWideMr, rows - i0);
    const uint16_t* block = a.data + i0 * a.row_stride;
    int64_t p = 0;
    if (height == kWideMr && a.col_stride == 1) {
      // Eight k of the six rows, transposed as 8 x 8 with two zero rows:
      // each k's column is stored 8 wide, its last 2 lanes overwritten by
      // the next k's (or, after the last, by what is packed next).
      for (; p + 8 <= kc; p += 8) {
        __m256 r[8];
        for (int i = 0; i < kWideMr; ++i) r[i] = WidenAvx2(block + i * a.row_stride + p);
        r[6] = r[7] = _mm256_setzero_ps();
        Transpose8x8Avx2(r);
        for (int q = 0; q < 8; ++q) _mm256_storeu_ps(out + (p + q) * kWideMr, r[q]);
      }
    }
    for (; p < kc; ++p) {
      float* o = out + p * kWideMr;
      for (int64_t i = 0; i < height; ++i)
        o[i] = hlo::BFloat16ToFloat(block[i * a.row_stride + p * a.col_stride]);
      std::fill(o + height, o + kWideMr, 0.0f);
    }
  }
}

// The f32 micro-kernels (gemm_tile.h) over the widened panels: C (row
// stride ldc) = or += A · B over kc, or with `narrow` the sums rounded to
// bf16 into narrow (row stride ldn) as they leave the registers. The tile
// is 6 x 16 under AVX2, 6 x 64 under AVX-512.
using WideTile = void (*)(int64_t kc, const float* a, const float* b, float* c, int64_t ldc,
                          bool accumulate, uint16_t* narrow, int64_t ldn);
__attribute__((target("avx2,fma"), flatten)) void TileWideAvx2(int64_t kc, const float* a,
                                                               const float* b, float* c,
                                                               int64_t ldc, bool accumulate,
                                                               uint16_t* narrow, int64_t ldn) {
  TileKernel<Avx2<float>, float, kWideMr, 2>(kc, a, 1, kWideMr, b, c, ldc, accumulate, nullptr,
                                             narrow, ldn);
}
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma"), flatten)) void TileWideAvx512(
    int64_t kc, const float* a, const float* b, float* c, int64_t ldc, bool accumulate,
    uint16_t* narrow, int64_t ldn) {
  TileKernel<Avx512<float>, float, kWideMr, 4>(kc, a, 1, kWideMr, b, c, ldc, accumulate, nullptr,
                                               narrow, ldn);
}

// GemmPairs' loops over the widened panels (both operands always packed:
// a bf16 A cannot be broadcast in place), with a tile_kernel nr columns
// wide (at most kWideMaxNr).
void GemmWide(int64_t m, int64_t n, int64_t k, MatrixView<const uint16_t> a,
              MatrixView<const uint16_t> b, float* c, int64_t ldc, uint16_t* narrow, int64_t ldn,
              WideTile tile_kernel, int64_t nr) {
  const int64_t nc_max = std::min(kWideNc, (n + nr - 1) / nr * nr);
  const int64_t kc_max = std::min(kWideKc, k);
  const int64_t mc_max = std::min(kWideMc, (m + kWideMr - 1) / kWideMr * kWideMr);
  float* packed_a = Space<float>(0, mc_max * kc_max + 2);
  float* packed_b = Space<float>(1, nc_max * kc_max);
  alignas(64) float edge[kWideMr * kWideMaxNr];
  for (int64_t j0 = 0; j0 < n; j0 += kWideNc) {
    const int64_t nc = std::min(kWideNc, n - j0);
    for (int64_t p0 = 0; p0 < k; p0 += kWideKc) {
      const int64_t kc = std::min(kWideKc, k - p0);
      const bool accumulate = p0 > 0, narrowing = narrow && p0 + kc >= k;
      PackWideBAvx2(kc, nc, nr,
                    {b.data + p0 * b.row_stride + j0 * b.col_stride, b.row_stride, b.col_stride},
                    packed_b);
      for (int64_t i0 = 0; i0 < m; i0 += kWideMc) {
        const int64_t mc = std::min(kWideMc, m - i0);
        PackWideAAvx2(mc, kc,
                      {a.data + i0 * a.row_stride + p0 * a.col_stride, a.row_stride, a.col_stride},
                      packed_a);
        for (int64_t jr = 0; jr < nc; jr += nr) {
          const int64_t width = std::min(nr, nc - jr);
          const float* b_panel = packed_b + jr * kc;
          for (int64_t ir = 0; ir < mc; ir += kWideMr) {
            const int64_t height = std::min(kWideMr, mc - ir);
            const float* a_panel = packed_a + ir * kc;
            float* tile = narrowing && !accumulate ? nullptr : c + (i0 + ir) * ldc + j0 + jr;
            uint16_t* narrow_tile = narrowing ? narrow + (i0 + ir) * ldn + j0 + jr : nullptr;
            if (height == kWideMr && width == nr) {
              tile_kernel(kc, a_panel, b_panel, tile, ldc, accumulate, narrow_tile, ldn);
              continue;
            }
            tile_kernel(kc, a_panel, b_panel, edge, nr, false, nullptr, 0);
            StoreEdge(edge, nr, height, width, accumulate, tile, ldc, narrow_tile, ldn);
          }
        }
      }
    }
  }
}

void GemmWidened(int64_t m, int64_t n, int64_t k, MatrixView<const uint16_t> a,
                 MatrixView<const uint16_t> b, float* c, int64_t ldc) {
  float* wide_a = Space<float>(0, m * k);
  for (int64_t i = 0; i < m; ++i) {
    const uint16_t* row = a.data + i * a.row_stride;
    float* out = wide_a + i * k;
    if (a.col_stride == 1) {
      for (int64_t p = 0; p < k; ++p) out[p] = hlo::BFloat16ToFloat(row[p]);
    } else {
      for (int64_t p = 0; p < k; ++p) out[p] = hlo::BFloat16ToFloat(row[p * a.col_stride]);
    }
  }
  GemmPackingB<float>(
      m, n, k, {wide_a, k, 1},
      [&](int64_t p0, int64_t kc, int64_t j0, int64_t cols, float* out, int64_t nr) {
        for (int64_t jp = 0; jp < cols; jp += nr, out += nr * kc) {
          const int64_t width = std::min(nr, cols - jp);
          for (int64_t p = 0; p < kc; ++p) {
            const uint16_t* src = b.data + (p0 + p) * b.row_stride + (j0 + jp) * b.col_stride;
            float* o = out + p * nr;
            if (b.col_stride == 1) {
              for (int64_t j = 0; j < width; ++j) o[j] = hlo::BFloat16ToFloat(src[j]);
            } else {
              for (int64_t j = 0; j < width; ++j)
                o[j] = hlo::BFloat16ToFloat(src[j * b.col_stride]);
            }
            std::fill(o + width, o + nr, 0.0f);
          }
        }
      },
      c, ldc);
}

// dst[i] = src[i] rounded to bf16: hlo::FloatToBFloat16 sixteen at a time
// (RoundToBf16; AVX2: the same arithmetic eight at a time).
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl"))) void NarrowAvx512(const float* src,
                                                                                uint16_t* dst,
                                                                                int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                        RoundToBf16Avx512(_mm512_loadu_si512(src + i)));
  }
  for (; i < n; ++i) dst[i] = hlo::FloatToBFloat16(src[i]);
}

__attribute__((target("avx2"))) void NarrowAvx2(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                        RoundToBf16Avx2(_mm256_loadu_ps(src + i), _mm256_loadu_ps(src + i + 8)));
  }
  for (; i < n; ++i) dst[i] = hlo::FloatToBFloat16(src[i]);
}

}  // namespace

void NarrowToBf16(const float* src, uint16_t* dst, int64_t n) {
  const Isa isa = KernelIsa();
  if (isa >= Isa::kAvx512) return NarrowAvx512(src, dst, n);
  if (isa >= Isa::kAvx2) return NarrowAvx2(src, dst, n);
  for (int64_t i = 0; i < n; ++i) dst[i] = hlo::FloatToBFloat16(src[i]);
}

GemmTile GemmBf16Tile() { return PairedBf16Dots() ? GemmTile{kMr, kNr} : GemmTileFor<float>(); }

bool GemmBf16NeedsSums(int64_t k) {
  if (PairedBf16Dots()) return k > kKc;
  return KernelIsa() == Isa::kPortable || k > kWideKc;
}

void GemmBf16(int64_t m, int64_t n, int64_t k, MatrixView<const uint16_t> a,
              MatrixView<const uint16_t> b, float* c, int64_t ldc, uint16_t* narrow, int64_t ldn) {
  if (narrow && !c && GemmBf16NeedsSums(k)) {  // (the ISA was capped after the caller asked)
    c = static_cast<float*>(GemmPackingSpace(kGemmBf16SumsSlot, m * n * int64_t{sizeof(float)}));
    ldc = n;
  }
  if (PairedBf16Dots()) {
    GemmPairs(m, n, k, a, b, c, ldc, narrow, ldn);
    return;
  }
  if (KernelIsa() >= Isa::kAvx2) {
    // The f32 GEMM's tile under this ISA: 6 x 16 or 6 x 64.
    const WideTile tile = KernelIsa() == Isa::kAvx2 ? TileWideAvx2 : TileWideAvx512;
    return GemmWide(m, n, k, a, b, c, ldc, narrow, ldn, tile, GemmTileFor<float>().columns);
  }
  GemmWidened(m, n, k, a, b, c, ldc);
  if (!narrow) return;
  for (int64_t i = 0; i < m; ++i) NarrowToBf16(c + i * ldc, narrow + i * ldn, n);
}

}  // namespace strata::runtime
