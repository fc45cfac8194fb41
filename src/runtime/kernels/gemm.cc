// The GEMM of gemm.h. Loops, outermost first (BLIS's order):
//   columns of C in blocks of nc: pack B's [kc, nc] block into nr-wide
//     panels (lives in L3, each panel in L1 while it is used);
//   k in blocks of kc;
//     rows of C in blocks of mc: A is read in place (row-major or stored
//       transposed; only a last, partial row panel is packed);
//       the micro-kernel: an mr × nr tile of C held in registers, summed
//       over the kc block from one A panel and one B panel.
// The micro-kernel and its blocking (Config) are chosen per call by
// KernelIsa(): AVX-512, AVX2/FMA or portable.
// Packing pads partial panels with zeros, so the micro-kernel always runs a
// full tile; an edge tile goes through a local buffer.
// GemmRowTiles runs the same micro-kernels over a B packed once by the
// caller and an A that is never packed: each tile's rows are read where
// they lie, column p at offsets[p] (indirect kernels, one per tile height).
#include "kernels/gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <type_traits>

#include "kernels/gemm_tile.h"
#include "kernels/transpose_avx2.h"
#include "strata/runtime/cpu.h"

namespace strata::runtime {
namespace {

// A micro-kernel and the blocking it is run with: the tile is mr x nr, k
// is cut in blocks of kc, rows of C in blocks of mc, columns in blocks of
// nc (mc a multiple of mr, nc of nr).
template <typename T>
using MicroKernel = void (*)(int64_t kc, const T* a, int64_t a_rs, int64_t a_cs, const T* b, T* c,
                             int64_t ldc, bool accumulate);
// C tile (row stride ldc) = or += A · B panel over kc, where A's element
// (i, p) is a[i * a_rs + p * a_cs]: a packed panel ({1, mr}) or A's own
// rows read in place ({row stride, 1}).
// The same over A's element (i, p) at a[i * a_rs + offsets[p]].
template <typename T>
using IndirectKernel = void (*)(int64_t kc, const T* a, int64_t a_rs, const int64_t* offsets,
                                const T* b, T* c, int64_t ldc, bool accumulate);
template <typename T>
struct Config {
  MicroKernel<T> kernel;
  int64_t mr, nr, kc, mc, nc;
  // The kernel cut to 1 .. mr - 1 rows (index = rows), for the last, short
  // row tile: it reads A in place like a full one. None for portable.
  const MicroKernel<T>* short_rows = nullptr;
  // The kernel over columns at offsets, per row count 1 .. mr (index = rows).
  const IndirectKernel<T>* indirect = nullptr;
};
constexpr int64_t kMaxTile = 6 * 64;  // elements of the largest tile (edge buffers)

// AVX2: 6 rows x 2 vectors (12 of the 16 registers hold the tile); fewer
// rows for the last row tile.
template <typename T, int kRows = 6>
__attribute__((target("avx2,fma"), flatten)) void KernelAvx2(int64_t kc, const T* a, int64_t a_rs,
                                                             int64_t a_cs, const T* b, T* c,
                                                             int64_t ldc, bool accumulate) {
  TileKernel<Avx2<T>, T, kRows, 2>(kc, a, a_rs, a_cs, b, c, ldc, accumulate);
}

// AVX-512: 6 rows x 4 vectors (24 of the 32 registers). Of 6 x 4, 7 x 3,
// 8 x 3, 12 x 2, 14 x 2 and 16 x 1, 6 x 4 ran fastest on a Zen 4
// (bench/RESULTS.md): the fewest loads per FMA but one, and A's rows read
// in place are 6 streams, as with AVX2.
template <typename T, int kRows = 6>
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma"), flatten)) void KernelAvx512(
    int64_t kc, const T* a, int64_t a_rs, int64_t a_cs, const T* b, T* c, int64_t ldc,
    bool accumulate) {
  TileKernel<Avx512<T>, T, kRows, 4>(kc, a, a_rs, a_cs, b, c, ldc, accumulate);
}

// The tiles over an A whose columns lie at offsets (GemmRowTiles), of 1 to
// 6 rows; index = rows.
template <typename T, int kRows>
__attribute__((target("avx2,fma"), flatten)) void IndirectAvx2(int64_t kc, const T* a, int64_t a_rs,
                                                               const int64_t* offsets, const T* b,
                                                               T* c, int64_t ldc, bool accumulate) {
  TileKernel<Avx2<T>, T, kRows, 2, true>(kc, a, a_rs, 0, b, c, ldc, accumulate, offsets);
}
template <typename T, int kRows>
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma"), flatten)) void IndirectAvx512(
    int64_t kc, const T* a, int64_t a_rs, const int64_t* offsets, const T* b, T* c, int64_t ldc,
    bool accumulate) {
  TileKernel<Avx512<T>, T, kRows, 4, true>(kc, a, a_rs, 0, b, c, ldc, accumulate, offsets);
}
template <typename T>
constexpr IndirectKernel<T> kIndirectAvx2[7] = {nullptr,
                                                IndirectAvx2<T, 1>,
                                                IndirectAvx2<T, 2>,
                                                IndirectAvx2<T, 3>,
                                                IndirectAvx2<T, 4>,
                                                IndirectAvx2<T, 5>,
                                                IndirectAvx2<T, 6>};
template <typename T>
constexpr IndirectKernel<T> kIndirectAvx512[7] = {nullptr,
                                                  IndirectAvx512<T, 1>,
                                                  IndirectAvx512<T, 2>,
                                                  IndirectAvx512<T, 3>,
                                                  IndirectAvx512<T, 4>,
                                                  IndirectAvx512<T, 5>,
                                                  IndirectAvx512<T, 6>};

template <typename T>
constexpr MicroKernel<T> kShortAvx2[6] = {nullptr,          KernelAvx2<T, 1>, KernelAvx2<T, 2>,
                                          KernelAvx2<T, 3>, KernelAvx2<T, 4>, KernelAvx2<T, 5>};
template <typename T>
constexpr MicroKernel<T> kShortAvx512[6] = {nullptr,
                                            KernelAvx512<T, 1>,
                                            KernelAvx512<T, 2>,
                                            KernelAvx512<T, 3>,
                                            KernelAvx512<T, 4>,
                                            KernelAvx512<T, 5>};

// For CPUs without AVX2/FMA: a 6 x kNr tile in plain loops.
template <typename T, int64_t kNr>
void KernelPortable(int64_t kc, const T* a, int64_t a_rs, int64_t a_cs, const T* b, T* c,
                    int64_t ldc, bool accumulate) {
  constexpr int64_t kMr = 6;
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

template <typename T, int64_t kNr, int64_t kMr>
void IndirectPortable(int64_t kc, const T* a, int64_t a_rs, const int64_t* offsets, const T* b,
                      T* c, int64_t ldc, bool accumulate) {
  T acc[kMr][kNr] = {};
  for (int64_t p = 0; p < kc; ++p, b += kNr) {
    for (int64_t i = 0; i < kMr; ++i) {
      for (int64_t j = 0; j < kNr; ++j) acc[i][j] += a[offsets[p] + i * a_rs] * b[j];
    }
  }
  for (int64_t i = 0; i < kMr; ++i) {
    for (int64_t j = 0; j < kNr; ++j)
      c[i * ldc + j] = accumulate ? c[i * ldc + j] + acc[i][j] : acc[i][j];
  }
}
template <typename T, int64_t kNr>
constexpr IndirectKernel<T> kIndirectPortable[7] = {nullptr,
                                                    IndirectPortable<T, kNr, 1>,
                                                    IndirectPortable<T, kNr, 2>,
                                                    IndirectPortable<T, kNr, 3>,
                                                    IndirectPortable<T, kNr, 4>,
                                                    IndirectPortable<T, kNr, 5>,
                                                    IndirectPortable<T, kNr, 6>};

// The blocking per variant. kc x nr of B (the panel every row tile of a
// row block reuses) stays near L1's size; mc x kc of a packed A in L2.
template <typename T>
Config<T> ConfigFor(Isa isa) {
  constexpr bool f32 = std::is_same_v<T, float>;
  switch (isa) {
    case Isa::kAvx512Bf16:
    case Isa::kAvx512:
      return f32 ? Config<T>{KernelAvx512<T>,   6, 64, 512, 72, 3072, kShortAvx512<T>,
                             kIndirectAvx512<T>}
                 : Config<T>{KernelAvx512<T>,   6, 32, 256, 72, 2048, kShortAvx512<T>,
                             kIndirectAvx512<T>};
    case Isa::kAvx2:
      return f32 ? Config<T>{KernelAvx2<T>, 6, 16, 512, 72, 3072, kShortAvx2<T>, kIndirectAvx2<T>}
                 : Config<T>{KernelAvx2<T>, 6, 8, 256, 72, 2048, kShortAvx2<T>, kIndirectAvx2<T>};
    case Isa::kPortable:
      break;
  }
  return f32 ? Config<T>{KernelPortable<T, 16>,   6, 16, 512, 72, 3072, nullptr,
                         kIndirectPortable<T, 16>}
             : Config<T>{KernelPortable<T, 8>,   6, 8, 256, 72, 2048, nullptr,
                         kIndirectPortable<T, 8>};
}

// A full nr-column panel (nr a multiple of 8) of a B stored transposed
// (columns contiguous in k), 8 x 8 blocks at a time.
__attribute__((target("avx2"))) int64_t PackColumnsF32Avx2(int64_t kc, int64_t nr, const float* src,
                                                           int64_t col_stride, float* out) {
  int64_t p = 0;
  for (; p + 8 <= kc; p += 8) {
    for (int64_t j0 = 0; j0 < nr; j0 += 8) {
      __m256 r[8];
      for (int j = 0; j < 8; ++j) r[j] = _mm256_loadu_ps(src + (j0 + j) * col_stride + p);
      Transpose8x8Avx2(r);
      for (int q = 0; q < 8; ++q) _mm256_storeu_ps(out + (p + q) * nr + j0, r[q]);
    }
  }
  return p;
}

// A[rows, kc] into kMr-tall panels, each stored k-major (panel[p * kMr + i]),
// the rows past `rows` zero (the last, partial row panel of a GEMM).
template <typename T>
void PackA(int64_t rows, int64_t kc, MatrixView<const T> a, T* out, int64_t kMr) {
  for (int64_t i0 = 0; i0 < rows; i0 += kMr, out += kMr * kc) {
    int64_t height = std::min(kMr, rows - i0);
    const T* src = a.data + i0 * a.row_stride;
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
void PackB(int64_t kc, int64_t cols, MatrixView<const T> b, T* out, int64_t kNr) {
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
      if (b.row_stride == 1 && width == kNr && kNr % 8 == 0 && KernelIsa() >= Isa::kAvx2)
        done = PackColumnsF32Avx2(kc, kNr, src, b.col_stride, out);
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

template <typename T>
T* PackingSpace(int slot, int64_t elements) {
  return static_cast<T*>(GemmPackingSpace(slot, elements * static_cast<int64_t>(sizeof(T))));
}

}  // namespace

void* GemmPackingSpace(int slot, int64_t bytes) {
  struct Space {
    std::unique_ptr<uint8_t, decltype(&std::free)> data{nullptr, &std::free};
    int64_t capacity = 0;
  };
  thread_local Space spaces[kGemmPackingSlots];
  Space& s = spaces[slot];
  if (s.capacity < bytes) {
    const size_t rounded = (static_cast<size_t>(bytes) + 63) / 64 * 64;
    s.data.reset(static_cast<uint8_t*>(std::aligned_alloc(64, rounded)));
    if (!s.data) throw std::bad_alloc();
    s.capacity = bytes;
  }
  return s.data.get();
}

template <typename T>
GemmTile GemmTileFor() {
  Config<T> config = ConfigFor<T>(KernelIsa());
  return {config.mr, config.nr};
}

// C = A · B with B's blocks packed by pack_b(p0, kc, j0, nc, out, nr).
template <typename T, typename PackBlock>
void GemmWith(int64_t m, int64_t n, int64_t k, MatrixView<const T> a, const PackBlock& pack_b, T* c,
              int64_t ldc) {
  const Config<T> B = ConfigFor<T>(KernelIsa());
  const MicroKernel<T> kernel = B.kernel;
  int64_t nc_max = std::min(B.nc, (n + B.nr - 1) / B.nr * B.nr);
  int64_t kc_max = std::min(B.kc, k);
  int64_t mc_max = std::min(B.mc, (m + B.mr - 1) / B.mr * B.mr);
  T* packed_a = PackingSpace<T>(0, mc_max * kc_max);
  T* packed_b = PackingSpace<T>(1, nc_max * kc_max);
  alignas(64) T edge[kMaxTile];
  // A is read in place, row-major or stored transposed: packing it cost
  // more than it saved. Row-major rows are sequential streams (most of all
  // for narrow B); a transposed A gives each k-step its mr values side by
  // side, and packing it (a copy of mr values per k-step) cost more than the
  // product in the small batched GEMMs of attention (bench/RESULTS.md).
  // Only the last, partial row panel is packed, zero-padded.
  for (int64_t j0 = 0; j0 < n; j0 += B.nc) {
    int64_t nc = std::min(B.nc, n - j0);
    for (int64_t p0 = 0; p0 < k; p0 += B.kc) {
      int64_t kc = std::min(B.kc, k - p0);
      bool accumulate = p0 > 0;
      pack_b(p0, kc, j0, nc, packed_b, B.nr);
      for (int64_t i0 = 0; i0 < m; i0 += B.mc) {
        int64_t mc = std::min(B.mc, m - i0);
        MatrixView<const T> a_block{a.data + i0 * a.row_stride + p0 * a.col_stride, a.row_stride,
                                    a.col_stride};
        for (int64_t jr = 0; jr < nc; jr += B.nr) {
          int64_t width = std::min(B.nr, nc - jr);
          const T* b_panel = packed_b + jr * kc;
          for (int64_t ir = 0; ir < mc; ir += B.mr) {
            int64_t height = std::min(B.mr, mc - ir);
            const T* a_panel = packed_a + ir * kc;
            int64_t a_rs = 1, a_cs = B.mr;
            // The last, short row tile: a kernel of its height where there
            // is one, else packed and zero-padded to a full tile.
            const bool short_kernel = height < B.mr && B.short_rows;
            if (height == B.mr || short_kernel) {
              a_panel = a_block.data + ir * a.row_stride;
              a_rs = a.row_stride;
              a_cs = a.col_stride;
            } else if (jr == 0) {
              PackA<T>(height, kc, {a_block.data + ir * a.row_stride, a.row_stride, a.col_stride},
                       packed_a + ir * kc, B.mr);
            }
            const MicroKernel<T> run = short_kernel ? B.short_rows[height] : kernel;
            T* tile = c + (i0 + ir) * ldc + j0 + jr;
            if ((height == B.mr || short_kernel) && width == B.nr) {
              run(kc, a_panel, a_rs, a_cs, b_panel, tile, ldc, accumulate);
              continue;
            }
            run(kc, a_panel, a_rs, a_cs, b_panel, edge, B.nr, false);
            for (int64_t i = 0; i < height; ++i) {
              for (int64_t j = 0; j < width; ++j) {
                T v = edge[i * B.nr + j];
                tile[i * ldc + j] = accumulate ? tile[i * ldc + j] + v : v;
              }
            }
          }
        }
      }
    }
  }
}

template <typename T>
void Gemm(int64_t m, int64_t n, int64_t k, MatrixView<const T> a, MatrixView<const T> b, T* c,
          int64_t ldc) {
  GemmWith<T>(
      m, n, k, a,
      [&](int64_t p0, int64_t kc, int64_t j0, int64_t nc, T* out, int64_t nr) {
        PackB<T>(kc, nc,
                 {b.data + p0 * b.row_stride + j0 * b.col_stride, b.row_stride, b.col_stride}, out,
                 nr);
      },
      c, ldc);
}

template <typename T>
void GemmPackingB(int64_t m, int64_t n, int64_t k, MatrixView<const T> a, const PackBFn<T>& pack_b,
                  T* c, int64_t ldc) {
  GemmWith<T>(m, n, k, a, pack_b, c, ldc);
}

template <typename T>
PanelLayout PanelLayoutFor(int64_t k, int64_t n) {
  const Config<T> config = ConfigFor<T>(KernelIsa());
  return {k, n, config.kc, config.nr};
}

template <typename T>
void PackPanels(const PanelLayout& layout, MatrixView<const T> b, int64_t first, int64_t last,
                T* out) {
  const int64_t padded = layout.padded_n();
  for (int64_t p0 = 0; p0 < layout.k; p0 += layout.kc) {
    const int64_t kc = std::min(layout.kc, layout.k - p0);
    for (int64_t panel = first; panel < last; ++panel) {
      const int64_t j0 = panel * layout.nr;
      PackB<T>(kc, std::min(layout.nr, layout.n - j0),
               {b.data + p0 * b.row_stride + j0 * b.col_stride, b.row_stride, b.col_stride},
               out + p0 * padded + j0 * kc, layout.nr);
    }
  }
}

// Rows in blocks of up to 16 tiles, k in blocks of kc: each panel of the k
// block runs against the block's tiles in turn (it stays in L2; the tiles'
// rows of A, read in place, in L1).
template <typename T>
void GemmRowTiles(int64_t m, const PanelLayout& layout, const T* panels, const int64_t* offsets,
                  const RowTileFn<T>& a_tile, T* c, int64_t ldc) {
  const Config<T> B = ConfigFor<T>(KernelIsa());
  constexpr int64_t kMaxTiles = 16;
  const int64_t padded = layout.padded_n();
  alignas(64) T edge[kMaxTile];
  RowTile<T> tiles[kMaxTiles];
  int64_t first[kMaxTiles];  // each tile's first row
  for (int64_t i0 = 0; i0 < m;) {
    int64_t count = 0, rows = 0;
    for (; count < kMaxTiles && i0 + rows < m; ++count) {
      first[count] = i0 + rows;
      tiles[count] = a_tile(i0 + rows);
      rows += tiles[count].rows;
    }
    for (int64_t p0 = 0; p0 < layout.k; p0 += layout.kc) {
      const int64_t kc = std::min(layout.kc, layout.k - p0);
      const bool accumulate = p0 > 0;
      for (int64_t jr = 0; jr < layout.n; jr += B.nr) {
        const int64_t width = std::min(B.nr, layout.n - jr);
        const T* b_panel = panels + p0 * padded + jr * kc;
        for (int64_t t = 0; t < count; ++t) {
          const RowTile<T>& a = tiles[t];
          T* tile = c + first[t] * ldc + jr;
          const IndirectKernel<T> run = B.indirect[a.rows];
          if (width == B.nr) {
            run(kc, a.base, a.row_stride, offsets + p0, b_panel, tile, ldc, accumulate);
            continue;
          }
          run(kc, a.base, a.row_stride, offsets + p0, b_panel, edge, B.nr, false);
          for (int64_t i = 0; i < a.rows; ++i) {
            for (int64_t j = 0; j < width; ++j) {
              T v = edge[i * B.nr + j];
              tile[i * ldc + j] = accumulate ? tile[i * ldc + j] + v : v;
            }
          }
        }
      }
    }
    i0 += rows;
  }
}

__attribute__((target("avx2"))) void TransposeBlocksF32Avx2(int64_t rows, int64_t cols,
                                                            const float* src, int64_t src_stride,
                                                            float* dst, int64_t dst_stride) {
  for (int64_t i0 = 0; i0 + 8 <= rows; i0 += 8) {
    for (int64_t j0 = 0; j0 + 8 <= cols; j0 += 8) {
      __m256 r[8];
      for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + (i0 + i) * src_stride + j0);
      Transpose8x8Avx2(r);
      for (int j = 0; j < 8; ++j) _mm256_storeu_ps(dst + (j0 + j) * dst_stride + i0, r[j]);
    }
  }
}

template <typename T>
void Transpose(int64_t rows, int64_t cols, const T* src, int64_t src_stride, T* dst,
               int64_t dst_stride) {
  int64_t done_rows = 0, done_cols = 0;  // the block of 8 x 8 tiles done in registers
  if constexpr (std::is_same_v<T, float>) {
    if (KernelIsa() >= Isa::kAvx2) {
      TransposeBlocksF32Avx2(rows, cols, src, src_stride, dst, dst_stride);
      done_rows = rows / 8 * 8;
      done_cols = cols / 8 * 8;
    }
  }
  // The rest in 16 x 16 tiles (a column read whole would sit in a few
  // cache sets when rows are a power of two apart).
  auto tiles = [&](int64_t i_lo, int64_t i_hi, int64_t j_lo, int64_t j_hi) {
    constexpr int64_t kTile = 16;
    for (int64_t j0 = j_lo; j0 < j_hi; j0 += kTile) {
      for (int64_t i0 = i_lo; i0 < i_hi; i0 += kTile) {
        for (int64_t j = j0; j < std::min(j_hi, j0 + kTile); ++j) {
          for (int64_t i = i0; i < std::min(i_hi, i0 + kTile); ++i)
            dst[j * dst_stride + i] = src[i * src_stride + j];
        }
      }
    }
  };
  tiles(0, done_rows, done_cols, cols);
  tiles(done_rows, rows, 0, cols);
}

#define STRATA_ROW_TILES(T)                                                                   \
  template PanelLayout PanelLayoutFor<T>(int64_t, int64_t);                                   \
  template void PackPanels<T>(const PanelLayout&, MatrixView<const T>, int64_t, int64_t, T*); \
  template void GemmRowTiles<T>(int64_t, const PanelLayout&, const T*, const int64_t*,        \
                                const RowTileFn<T>&, T*, int64_t);                            \
  template void Transpose<T>(int64_t, int64_t, const T*, int64_t, T*, int64_t);
STRATA_ROW_TILES(float)
STRATA_ROW_TILES(double)
#undef STRATA_ROW_TILES

template void GemmPackingB<float>(int64_t, int64_t, int64_t, MatrixView<const float>,
                                  const PackBFn<float>&, float*, int64_t);
template void GemmPackingB<double>(int64_t, int64_t, int64_t, MatrixView<const double>,
                                   const PackBFn<double>&, double*, int64_t);
template void Gemm<float>(int64_t, int64_t, int64_t, MatrixView<const float>,
                          MatrixView<const float>, float*, int64_t);
template void Gemm<double>(int64_t, int64_t, int64_t, MatrixView<const double>,
                           MatrixView<const double>, double*, int64_t);
template GemmTile GemmTileFor<float>();
template GemmTile GemmTileFor<double>();

}  // namespace strata::runtime
