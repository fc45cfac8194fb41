// cholesky and triangular-solve on batches of f32 / f64 matrices (the last
// two dimensions, row-major), as XLA defines them:
// - cholesky(a), lower=L: the factor of a symmetric positive-definite a
//   read from one triangle (a = l l^T, or u^T u with lower=false); the other
//   triangle of the result is 0. A matrix that is not positive definite
//   gives NaN in every element of its factor (XLA's result there is
//   unspecified: strata makes it impossible to miss).
// - triangular-solve(a, b): x with op(a) x = b (left_side) or x op(a) = b,
//   op(a) = a or a^T (transpose_a), a read from its lower or upper triangle,
//   its diagonal taken as ones when unit_diagonal. Batches run in parallel.
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/kernels.h"

namespace strata::runtime {
namespace {

// Factors one n x n matrix into `out` (the lower factor l, a = l l^T, read
// from a's lower triangle; the upper case is its transpose).
template <typename T>
void Cholesky(const T* a, T* out, int64_t n, bool lower) {
  // Work on the lower triangle: with lower=false a^T's lower triangle is a's upper.
  auto at = [&](int64_t i, int64_t j) { return lower ? a[i * n + j] : a[j * n + i]; };
  std::vector<T> l(n * n, T(0));
  bool definite = true;
  for (int64_t j = 0; j < n && definite; ++j) {
    T d = at(j, j);
    for (int64_t k = 0; k < j; ++k) d -= l[j * n + k] * l[j * n + k];
    if (!(d > T(0))) {
      definite = false;
      break;
    }
    const T root = std::sqrt(d);
    l[j * n + j] = root;
    for (int64_t i = j + 1; i < n; ++i) {
      T s = at(i, j);
      for (int64_t k = 0; k < j; ++k) s -= l[i * n + k] * l[j * n + k];
      l[i * n + j] = s / root;
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      out[i * n + j] = !definite ? std::numeric_limits<T>::quiet_NaN()
                       : lower   ? l[i * n + j]
                                 : l[j * n + i];
    }
  }
}

// Solves for one batch element. a is m x m; b is m x k (left) or k x m.
template <typename T>
void TriangularSolve(const T* a, const T* b, T* x, int64_t m, int64_t k,
                     const hlo::LinalgOptions& o) {
  // The triangular matrix actually applied, t = op(a), read from a's triangle.
  const bool lower_t = o.lower != o.transpose_a;  // transposing swaps the triangle
  auto t = [&](int64_t i, int64_t j) -> T {
    if (i == j && o.unit_diagonal) return T(1);
    const int64_t r = o.transpose_a ? j : i, c = o.transpose_a ? i : j;
    const bool inside = o.lower ? c <= r : c >= r;
    return inside ? a[r * m + c] : T(0);
  };
  if (o.left_side) {
    // t x = b: x is m x k; forward substitution when t is lower, backward when upper.
    for (int64_t col = 0; col < k; ++col) {
      for (int64_t s = 0; s < m; ++s) {
        const int64_t i = lower_t ? s : m - 1 - s;
        T v = b[i * k + col];
        for (int64_t s2 = 0; s2 < s; ++s2) {
          const int64_t j = lower_t ? s2 : m - 1 - s2;
          v -= t(i, j) * x[j * k + col];
        }
        x[i * k + col] = v / t(i, i);
      }
    }
    return;
  }
  // x t = b: x is k x m; row r of x solves t^T x_r^T = b_r^T, whose matrix
  // t^T is upper when t is lower: columns from the last when t is lower.
  for (int64_t row = 0; row < k; ++row) {
    for (int64_t s = 0; s < m; ++s) {
      const int64_t j = lower_t ? m - 1 - s : s;
      T v = b[row * m + j];
      for (int64_t s2 = 0; s2 < s; ++s2) {
        const int64_t i = lower_t ? m - 1 - s2 : s2;
        v -= x[row * m + i] * t(i, j);
      }
      x[row * m + j] = v / t(j, j);
    }
  }
}

template <typename T>
KernelInfo MakeTyped(const hlo::Instruction& inst, ThreadPool* pool) {
  const Shape& a = inst.operand(0)->shape();
  const int64_t m = a.dim(a.rank() - 1);
  const int64_t batch = m == 0 ? 0 : a.num_elements() / (m * m);
  if (inst.opcode() == hlo::Opcode::kCholesky) {
    const bool lower = inst.linalg.lower;
    return {[=](const KernelArgs& args) {
      const T* in = reinterpret_cast<const T*>(args.operands[0]);
      T* out = reinterpret_cast<T*>(args.outputs[0]);
      pool->ParallelFor(batch, 1, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) Cholesky(in + i * m * m, out + i * m * m, m, lower);
      });
    }};
  }
  const Shape& b = inst.operand(1)->shape();
  // b's other dimension: [..., m, k] (left_side) or [..., k, m].
  const int64_t k = b.dim(b.rank() - (inst.linalg.left_side ? 1 : 2));
  const hlo::LinalgOptions options = inst.linalg;
  return {[=](const KernelArgs& args) {
    const T* at = reinterpret_cast<const T*>(args.operands[0]);
    const T* bt = reinterpret_cast<const T*>(args.operands[1]);
    T* out = reinterpret_cast<T*>(args.outputs[0]);
    pool->ParallelFor(batch, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        TriangularSolve(at + i * m * m, bt + i * m * k, out + i * m * k, m, k, options);
      }
    });
  }};
}

}  // namespace

KernelInfo MakeLinalgKernel(const hlo::Instruction& inst, ThreadPool& pool) {
  if (inst.shape().dtype() == DType::kF64) return MakeTyped<double>(inst, &pool);
  return MakeTyped<float>(inst, &pool);
}

}  // namespace strata::runtime
