// The GEMM of gemm.h. Loops, outermost first (BLIS's order):
//   columns of C in blocks of kNc: pack B's [kKc, kNc] block into kNr-wide
//     panels (lives in L3, each panel in L1 while it is used);
//   k in blocks of kKc;
//     rows of C in blocks of kMc: an A stored transposed is packed into
//       kMr-tall panels (lives in L2); a row-major A is read in place;
//       the micro-kernel: a kMr × kNr tile of C held in registers, summed
//       over the kKc block from one A panel and one B panel.
// Packing pads partial panels with zeros, so the micro-kernel always runs a
// full tile; an edge tile goes through a local buffer.
#include "kernels/gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <type_traits>

namespace strata::runtime {
namespace {

template <typename T>
struct Blocking;
template <>
struct Blocking<float> {
  static constexpr int64_t kMr = 6, kNr = 16, kKc = 512, kMc = 72, kNc = 3072;
};
template <>
struct Blocking<double> {
  static constexpr int64_t kMr = 6, kNr = 8, kKc = 256, kMc = 72, kNc = 2048;
};

// C tile (row stride ldc) = or += A · B panel over kc, where A's element
// (i, p) is a[i * a_rs + p * a_cs]: a packed panel ({1, kMr}) or A's own
// rows read in place ({row stride, 1}).
template <typename T>
using MicroKernel = void (*)(int64_t kc, const T* a, int64_t a_rs, int64_t a_cs, const T* b, T* c,
                             int64_t ldc, bool accumulate);

// 256-bit vector ops on T, so one micro-kernel serves f32 (8 lanes) and f64 (4).
#define STRATA_AVX2 __attribute__((target("avx2,fma"), always_inline)) static inline
template <typename T>
struct Avx2;
template <>
struct Avx2<float> {
  using V = __m256;
  static constexpr int kLanes = 8;
  STRATA_AVX2 V Zero() { return _mm256_setzero_ps(); }
  STRATA_AVX2 V Load(const float* p) { return _mm256_load_ps(p); }
  STRATA_AVX2 V LoadU(const float* p) { return _mm256_loadu_ps(p); }
  STRATA_AVX2 V Broadcast(const float* p) { return _mm256_broadcast_ss(p); }
  STRATA_AVX2 V Fma(V x, V y, V z) { return _mm256_fmadd_ps(x, y, z); }
  STRATA_AVX2 V Add(V x, V y) { return _mm256_add_ps(x, y); }
  STRATA_AVX2 void StoreU(float* p, V x) { _mm256_storeu_ps(p, x); }
};
template <>
struct Avx2<double> {
  using V = __m256d;
  static constexpr int kLanes = 4;
  STRATA_AVX2 V Zero() { return _mm256_setzero_pd(); }
  STRATA_AVX2 V Load(const double* p) { return _mm256_load_pd(p); }
  STRATA_AVX2 V LoadU(const double* p) { return _mm256_loadu_pd(p); }
  STRATA_AVX2 V Broadcast(const double* p) { return _mm256_broadcast_sd(p); }
  STRATA_AVX2 V Fma(V x, V y, V z) { return _mm256_fmadd_pd(x, y, z); }
  STRATA_AVX2 V Add(V x, V y) { return _mm256_add_pd(x, y); }
  STRATA_AVX2 void StoreU(double* p, V x) { _mm256_storeu_pd(p, x); }
};
#undef STRATA_AVX2

// The 6-row tile in 12 accumulators (two vectors per row, kNr = 2 lanes).
template <typename T>
__attribute__((target("avx2,fma"))) void KernelAvx2(int64_t kc, const T* a, int64_t a_rs,
                                                    int64_t a_cs, const T* b, T* c, int64_t ldc,
                                                    bool accumulate) {
  using S = Avx2<T>;
  constexpr int kL = S::kLanes;
  static_assert(Blocking<T>::kMr == 6 && Blocking<T>::kNr == 2 * kL);
  for (int i = 0; i < 6; ++i) {
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc + 2 * kL - 1), _MM_HINT_T0);
  }
  typename S::V acc[6][2];
#pragma GCC unroll 6
  for (int i = 0; i < 6; ++i) acc[i][0] = acc[i][1] = S::Zero();
#pragma GCC unroll 4
  for (int64_t p = 0; p < kc; ++p) {
    const typename S::V b0 = S::Load(b), b1 = S::Load(b + kL);
#pragma GCC unroll 6
    for (int i = 0; i < 6; ++i) {
      const typename S::V x = S::Broadcast(a + i * a_rs);
      acc[i][0] = S::Fma(x, b0, acc[i][0]);
      acc[i][1] = S::Fma(x, b1, acc[i][1]);
    }
    a += a_cs;
    b += 2 * kL;
  }
#pragma GCC unroll 6
  for (int i = 0; i < 6; ++i) {
    T* out = c + i * ldc;
    if (accumulate) {
      acc[i][0] = S::Add(S::LoadU(out), acc[i][0]);
      acc[i][1] = S::Add(S::LoadU(out + kL), acc[i][1]);
    }
    S::StoreU(out, acc[i][0]);
    S::StoreU(out + kL, acc[i][1]);
  }
}

// For CPUs without AVX2/FMA: the same tile in plain loops.
template <typename T>
void KernelPortable(int64_t kc, const T* a, int64_t a_rs, int64_t a_cs, const T* b, T* c,
                    int64_t ldc, bool accumulate) {
  constexpr int64_t kMr = Blocking<T>::kMr, kNr = Blocking<T>::kNr;
  T acc[kMr][kNr] = {};
  for (int64_t p = 0; p < kc; ++p, a += a_cs, b += kNr) {
    for (int64_t i = 0; i < kMr; ++i) {
      for (int64_t j = 0; j < kNr; ++j) acc[i][j] += a[i * a_rs] * b[j];
    }
  }
  for (int64_t i = 0; i < kMr; ++i) {
    for (int64_t j = 0; j < kNr; ++j)
      c[i * ldc + j] = accumulate ? c[i * ldc + j] + acc[i][j] : acc[i][j];
  }
}

bool CpuHasAvx2Fma() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}

std::atomic<bool> portable_for_testing{false};

template <typename T>
MicroKernel<T> SelectKernel() {
  if (CpuHasAvx2Fma() && !portable_for_testing.load(std::memory_order_relaxed)) {
    return KernelAvx2<T>;
  }
  return KernelPortable<T>;
}

// 8 rows of 8 floats → 8 columns (AVX2 in-register transpose).
__attribute__((target("avx2"))) inline void Transpose8x8(__m256 r[8]) {
  __m256 t[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  __m256 u[8];
  for (int i = 0; i < 2; ++i) {
    u[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
    u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
    r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
  }
}

// A full 16-column panel of a B stored transposed (columns contiguous in k).
__attribute__((target("avx2"))) int64_t PackColumnsF32Avx2(int64_t kc, const float* src,
                                                           int64_t col_stride, float* out) {
  int64_t p = 0;
  for (; p + 8 <= kc; p += 8) {
    for (int half = 0; half < 2; ++half) {
      __m256 r[8];
      for (int j = 0; j < 8; ++j) r[j] = _mm256_loadu_ps(src + (half * 8 + j) * col_stride + p);
      Transpose8x8(r);
      for (int q = 0; q < 8; ++q) _mm256_storeu_ps(out + (p + q) * 16 + half * 8, r[q]);
    }
  }
  return p;
}

// A[rows, kc] into kMr-tall panels, each stored k-major (panel[p * kMr + i]).
template <typename T>
void PackA(int64_t rows, int64_t kc, MatrixView<const T> a, T* out) {
  constexpr int64_t kMr = Blocking<T>::kMr;
  for (int64_t i0 = 0; i0 < rows; i0 += kMr, out += kMr * kc) {
    int64_t height = std::min(kMr, rows - i0);
    const T* src = a.data + i0 * a.row_stride;
    if (a.row_stride == 1 && height == kMr) {  // A stored transposed: rows adjacent
      for (int64_t p = 0; p < kc; ++p)
        std::memcpy(out + p * kMr, src + p * a.col_stride, sizeof(T) * kMr);
      continue;
    }
    for (int64_t i = 0; i < height; ++i) {
      const T* row = src + i * a.row_stride;
      for (int64_t p = 0; p < kc; ++p) out[p * kMr + i] = row[p * a.col_stride];
    }
    for (int64_t i = height; i < kMr; ++i) {
      for (int64_t p = 0; p < kc; ++p) out[p * kMr + i] = T(0);
    }
  }
}

// B[kc, cols] into kNr-wide panels, each stored k-major (panel[p * kNr + j]).
template <typename T>
void PackB(int64_t kc, int64_t cols, MatrixView<const T> b, T* out) {
  constexpr int64_t kNr = Blocking<T>::kNr;
  for (int64_t j0 = 0; j0 < cols; j0 += kNr, out += kNr * kc) {
    int64_t width = std::min(kNr, cols - j0);
    const T* src = b.data + j0 * b.col_stride;
    if (b.col_stride == 1 && width == kNr) {  // B row-major: a panel row is contiguous
      for (int64_t p = 0; p < kc; ++p)
        std::memcpy(out + p * kNr, src + p * b.row_stride, sizeof(T) * kNr);
      continue;
    }
    int64_t done = 0;
    if constexpr (std::is_same_v<T, float>) {
      if (b.row_stride == 1 && width == kNr && CpuHasAvx2Fma())
        done = PackColumnsF32Avx2(kc, src, b.col_stride, out);
    }
    for (int64_t j = 0; j < width; ++j) {
      const T* column = src + j * b.col_stride;
      for (int64_t p = done; p < kc; ++p) out[p * kNr + j] = column[p * b.row_stride];
    }
    for (int64_t j = width; j < kNr; ++j) {
      for (int64_t p = 0; p < kc; ++p) out[p * kNr + j] = T(0);
    }
  }
}

// Per-thread packing space, 64-byte aligned, grown on demand and kept.
template <typename T>
T* PackingSpace(int slot, int64_t elements) {
  struct Space {
    std::unique_ptr<T, decltype(&std::free)> data{nullptr, &std::free};
    int64_t capacity = 0;
  };
  thread_local Space spaces[2];
  Space& s = spaces[slot];
  if (s.capacity < elements) {
    size_t bytes = (static_cast<size_t>(elements) * sizeof(T) + 63) / 64 * 64;
    s.data.reset(static_cast<T*>(std::aligned_alloc(64, bytes)));
    if (!s.data) throw std::bad_alloc();
    s.capacity = elements;
  }
  return s.data.get();
}

}  // namespace

bool GemmUsesAvx2() { return CpuHasAvx2Fma() && !portable_for_testing.load(); }

void UsePortableGemmKernelForTesting(bool portable) { portable_for_testing.store(portable); }

template <typename T>
void Gemm(int64_t m, int64_t n, int64_t k, MatrixView<const T> a, MatrixView<const T> b, T* c,
          int64_t ldc) {
  using B = Blocking<T>;
  const MicroKernel<T> kernel = SelectKernel<T>();
  int64_t nc_max = std::min(B::kNc, (n + B::kNr - 1) / B::kNr * B::kNr);
  int64_t kc_max = std::min(B::kKc, k);
  int64_t mc_max = std::min(B::kMc, (m + B::kMr - 1) / B::kMr * B::kMr);
  T* packed_a = PackingSpace<T>(0, mc_max * kc_max);
  T* packed_b = PackingSpace<T>(1, nc_max * kc_max);
  alignas(64) T edge[B::kMr * B::kNr];
  // A row-major A is read in place: its rows are sequential streams, and
  // packing them cost more than it saved (most of all for narrow B). A
  // stored transposed is packed: in place, each k would touch a new line.
  bool pack_a = a.col_stride != 1;
  for (int64_t j0 = 0; j0 < n; j0 += B::kNc) {
    int64_t nc = std::min(B::kNc, n - j0);
    for (int64_t p0 = 0; p0 < k; p0 += B::kKc) {
      int64_t kc = std::min(B::kKc, k - p0);
      bool accumulate = p0 > 0;
      PackB<T>(kc, nc, {b.data + p0 * b.row_stride + j0 * b.col_stride, b.row_stride, b.col_stride},
               packed_b);
      for (int64_t i0 = 0; i0 < m; i0 += B::kMc) {
        int64_t mc = std::min(B::kMc, m - i0);
        MatrixView<const T> a_block{a.data + i0 * a.row_stride + p0 * a.col_stride, a.row_stride,
                                    a.col_stride};
        if (pack_a) PackA<T>(mc, kc, a_block, packed_a);
        for (int64_t jr = 0; jr < nc; jr += B::kNr) {
          int64_t width = std::min(B::kNr, nc - jr);
          const T* b_panel = packed_b + jr * kc;
          for (int64_t ir = 0; ir < mc; ir += B::kMr) {
            int64_t height = std::min(B::kMr, mc - ir);
            const T* a_panel = packed_a + ir * kc;
            int64_t a_rs = 1, a_cs = B::kMr;
            if (!pack_a && height == B::kMr) {
              a_panel = a_block.data + ir * a.row_stride;
              a_rs = a.row_stride;
              a_cs = 1;
            } else if (!pack_a && jr == 0) {  // the last, partial rows: packed, zero-padded
              PackA<T>(height, kc, {a_block.data + ir * a.row_stride, a.row_stride, 1},
                       packed_a + ir * kc);
            }
            T* tile = c + (i0 + ir) * ldc + j0 + jr;
            if (height == B::kMr && width == B::kNr) {
              kernel(kc, a_panel, a_rs, a_cs, b_panel, tile, ldc, accumulate);
              continue;
            }
            kernel(kc, a_panel, a_rs, a_cs, b_panel, edge, B::kNr, false);
            for (int64_t i = 0; i < height; ++i) {
              for (int64_t j = 0; j < width; ++j) {
                T v = edge[i * B::kNr + j];
                tile[i * ldc + j] = accumulate ? tile[i * ldc + j] + v : v;
              }
            }
          }
        }
      }
    }
  }
}

template void Gemm<float>(int64_t, int64_t, int64_t, MatrixView<const float>,
                          MatrixView<const float>, float*, int64_t);
template void Gemm<double>(int64_t, int64_t, int64_t, MatrixView<const double>,
                           MatrixView<const double>, double*, int64_t);

}  // namespace strata::runtime
