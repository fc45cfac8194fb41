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

// The micro-tile (rows x columns of C) Gemm<T> uses under KernelIsa():
// the micro-kernel is chosen at run time, AVX-512 (6 x 64 f32, 6 x 32
// f64), AVX2/FMA (6 x 16, 6 x 8) or portable (as AVX2's), by kernels/cpu.h.
// Callers that split C cut it on tile edges.
struct GemmTile {
  int64_t rows, columns;
};
template <typename T>
GemmTile GemmTileFor();

}  // namespace strata::runtime
