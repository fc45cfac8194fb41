// strata's own GEMM for f32 and f64 dots: C = A · B on one thread, in the
// BLIS layout (operands packed into panels that stay in L2 and L1, a
// register-tiled micro-kernel over them). The dot kernel splits the work
// across the pool; each piece calls this.
//
// Why not a library: oneDNN's dnnl_sgemm, called from two pool threads at
// once on halves of the model's [1024, 512] products, ran at 77-86 GFLOP/s
// where this runs at 121-128, and under its own OpenMP team it spins
// between GEMMs; OpenBLAS is slow under the OPENBLAS_CORETYPE these machines
// set. bench/RESULTS.md, "strata's own GEMM".
#pragma once

#include <cstdint>

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

// Whether the AVX2/FMA micro-kernels run (else the portable one): on CPUs
// with AVX2 and FMA, unless a test asked for the portable one.
bool GemmUsesAvx2();
void UsePortableGemmKernelForTesting(bool portable);

}  // namespace strata::runtime
