// strata's own GEMM for f32 and f64 dots: C = A · B on one thread, in the
// BLIS layout (operands packed into panels that stay in L2 and L1, a
// register-tiled micro-kernel over them, the widest the CPU runs). The dot kernel splits the work
// across the pool; each piece calls this.
//
// Why not a library: oneDNN's dnnl_sgemm, called from two pool threads at
// once on halves of the model's [1024, 512] products, ran at 77-86 GFLOP/s
// where this runs at 121-128, and under its own OpenMP team it spins
// between GEMMs; OpenBLAS is slow under the OPENBLAS_CORETYPE these machines
// set. bench/RESULTS.md, "strata's own GEMM".
#pragma once

#include <cstdint>
#include <functional>

namespace strata::runtime {

// A matrix as strides in elements: element (i, j) is data[i * row_stride +
// j * col_stride]. Row-major is {data, n, 1}; its transpose {data, 1, n}.
template <typename T>
struct MatrixView {
  T* data;
  int64_t row_stride;
  int64_t col_stride;
};

// C[m, n] = A[m, k] · B[k, n], overwriting C (which is row-major with row
// stride ldc). Every element of C is summed over k in the same order
// whichever pieces the caller splits C into, so results do not depend on
// the thread count. k must be > 0. Defined for float and double.
template <typename T>
void Gemm(int64_t m, int64_t n, int64_t k, MatrixView<const T> a, MatrixView<const T> b, T* c,
          int64_t ldc);

// Packs B[p0 : p0 + kc, j0 : j0 + cols] into `out` as the GEMM's panels:
// each nr columns wide and stored k-major (panel[p * nr + j]), one after
// another, the columns past `cols` in the last one zero.
template <typename T>
using PackBFn =
    std::function<void(int64_t p0, int64_t kc, int64_t j0, int64_t cols, T* out, int64_t nr)>;

// Gemm with a B that exists only as its packer: an implicit matrix such as
// a convolution's patches, built straight into the panels (no im2col copy).
template <typename T>
void GemmPackingB(int64_t m, int64_t n, int64_t k, MatrixView<const T> a, const PackBFn<T>& pack_b,
                  T* c, int64_t ldc);

// ---- B packed once, A supplied a row tile at a time ----
// For products whose A exists only implicitly (a convolution's patches,
// one row per output position) and whose B (the kernel) serves many calls.

// Where the panels of a packed B[k, n] lie: k in blocks of kc, each block's
// nr-wide panels one after another, panel (p0, j0) at p0 * padded_n() +
// j0 * (that block's kc), k-major inside; columns past n are zero.
struct PanelLayout {
  int64_t k = 0, n = 0, kc = 0, nr = 0;
  int64_t padded_n() const { return (n + nr - 1) / nr * nr; }
  int64_t size() const { return k * padded_n(); }
  int64_t panels() const { return padded_n() / nr; }
};
template <typename T>
PanelLayout PanelLayoutFor(int64_t k, int64_t n);
// Packs panels [first, last) of B (all of k) into `out`, sized layout.size().
template <typename T>
void PackPanels(const PanelLayout& layout, MatrixView<const T> b, int64_t first, int64_t last,
                T* out);

// A tile of 1 to GemmTileFor().rows rows of an implicit A, read where it
// lies: element (i, p) at base[i * row_stride + offsets[p]], i < rows.
template <typename T>
struct RowTile {
  const T* base;
  int64_t row_stride;
  int64_t rows;
};
// The tile whose first row is i0 (its rows must not run past m).
template <typename T>
using RowTileFn = std::function<RowTile<T>(int64_t i0)>;

// C[m, n] = A · B, overwriting C (row stride ldc), with B's panels packed by
// PackPanels and A's rows from a_tile, its columns at offsets[0 .. k). Sums
// over k in Gemm's order.
template <typename T>
void GemmRowTiles(int64_t m, const PanelLayout& layout, const T* panels, const int64_t* offsets,
                  const RowTileFn<T>& a_tile, T* c, int64_t ldc);

// dst[j * dst_stride + i] = src[i * src_stride + j] for i < rows, j < cols:
// 8 x 8 blocks in registers where the CPU has AVX2 (f32).
template <typename T>
void Transpose(int64_t rows, int64_t cols, const T* src, int64_t src_stride, T* dst,
               int64_t dst_stride);

// The micro-tile (rows x columns of C) Gemm<T> uses under KernelIsa():
// the micro-kernel is chosen at run time, AVX-512 (6 x 64 f32, 6 x 32
// f64), AVX2/FMA (6 x 16, 6 x 8) or portable (as AVX2's), by kernels/cpu.h.
// Callers that split C cut it on tile edges.
struct GemmTile {
  int64_t rows, columns;
};
template <typename T>
GemmTile GemmTileFor();

// Per-thread packing space, 64-byte aligned, grown on demand and kept:
// slots 0 and 1 are Gemm's (A's and B's panels), 2 and 3 GemmBf16's, 4
// GemmBf16's f32 sums when its caller gave none.
constexpr int kGemmPackingSlots = 5;
constexpr int kGemmBf16SumsSlot = 4;
void* GemmPackingSpace(int slot, int64_t bytes);

// C[m, n] (f32, row stride ldc) = A[m, k] · B[k, n] for bf16 A and B (their
// bits): every product is exact in f32 and the sums are f32. Where
// PairedBf16Dots() the products are vdpbf16ps's, two k at a time (which,
// as the instruction does, flushes subnormal inputs and sums to zero);
// elsewhere the operands are widened to f32 as they are packed and the
// sums are Gemm<float>'s of the widened operands, bit for bit. Each element
// is summed in the same order whichever pieces the caller cuts C into (on
// GemmBf16Tile()'s edges). k must be > 0.
//
// With `narrow`, the result is C rounded to bf16 (as NarrowToBf16 rounds)
// into narrow (row stride ldn), and C is scratch for the f32 sums: under
// every ISA but portable each tile is rounded as it leaves the
// registers, so C is not written at all unless GemmBf16NeedsSums(k) (k
// spans several blocks, or another ISA); c may then be null (per-thread
// space is used if the sums turn out to be needed after all).
void GemmBf16(int64_t m, int64_t n, int64_t k, MatrixView<const uint16_t> a,
              MatrixView<const uint16_t> b, float* c, int64_t ldc, uint16_t* narrow = nullptr,
              int64_t ldn = 0);
bool GemmBf16NeedsSums(int64_t k);
GemmTile GemmBf16Tile();

// dst[i] = src[i] rounded to bf16 (to nearest even; NaNs stay quiet NaNs;
// subnormals kept): hlo::FloatToBFloat16, vectorized where the CPU can.
void NarrowToBf16(const float* src, uint16_t* dst, int64_t n);

}  // namespace strata::runtime
