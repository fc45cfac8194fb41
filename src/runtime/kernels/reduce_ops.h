// The native reducers (one binary op) shared by the reduce kernel and the
// row reductions inside fusions, so a reduction gives the same bits fused or
// not, built for the includer's instruction set (isa.h).
#pragma once

#include <cmath>
#include <cstring>
#include <optional>

#include "kernels/isa.h"
#include "kernels/kernels.h"
#include "strata/hlo/builder.h"

STRATA_ISA_BEGIN
namespace strata::runtime::STRATA_ISA_NAMESPACE {

template <typename T>
struct Reducer {
  hlo::Opcode op;
  T operator()(T a, T b) const {
    if constexpr (std::is_same_v<T, bool>) {
      return (op == hlo::Opcode::kAnd || op == hlo::Opcode::kMinimum) ? (a && b) : (a || b);
    } else {
      switch (op) {
        case hlo::Opcode::kAdd:
          return WrappingAdd(a, b);
        case hlo::Opcode::kMultiply:
          return WrappingMultiply(a, b);
        case hlo::Opcode::kMaximum:
          if constexpr (std::is_floating_point_v<T>) return (a > b || std::isnan(a)) ? a : b;
          return a > b ? a : b;
        case hlo::Opcode::kMinimum:
          if constexpr (std::is_floating_point_v<T>) return (a < b || std::isnan(a)) ? a : b;
          return a < b ? a : b;
        case hlo::Opcode::kAnd:
          if constexpr (std::is_integral_v<T>) return a & b;
          return a;
        case hlo::Opcode::kOr:
          if constexpr (std::is_integral_v<T>) return a | b;
          return a;
        default:
          return a;
      }
    }
  }
};

// 16 lanes of T in one vector (GCC's vector extension: one zmm of floats
// under AVX-512, split into narrower registers elsewhere). Each lane's
// arithmetic is the scalar's, so results are the same bits on every ISA.
template <typename T>
struct Lanes16;
template <>
struct Lanes16<float> {
  typedef float V __attribute__((vector_size(64)));
};
template <>
struct Lanes16<double> {
  typedef double V __attribute__((vector_size(128)));
};

// One step of a float reduction, per lane or per scalar: a sum, or a
// maximum / minimum that keeps a NaN (Reducer's). Vectors pass by reference
// (a function of a narrower target may not take them by value).
enum class Fold { kAdd, kMax, kMin };
template <Fold kFold, typename V>
inline void FoldInto(V& a, const V& b) {
  if constexpr (kFold == Fold::kAdd) {
    a += b;
  } else if constexpr (kFold == Fold::kMax) {
    a = ((a > b) | (a != a)) ? a : b;
  } else {
    a = ((a < b) | (a != a)) ? a : b;
  }
}
template <Fold kFold, typename T>
inline T FoldScalar(T a, T b) {
  if constexpr (kFold == Fold::kAdd) return a + b;
  if constexpr (kFold == Fold::kMax) return (a > b || a != a) ? a : b;
  return (a < b || a != a) ? a : b;
}

// n >= 32 elements: four vectors of 16 partial results each (independent
// chains, so the loop runs at the loads' rate, not at one compare-and-blend
// latency per 16 elements), folded into one vector, its lanes folded as a
// tree, then the tail. A sum adds init last; a max or min folds it first.
template <Fold kFold, typename T>
T FoldContiguous(const T* x, int64_t n, T init) {
  using V = typename Lanes16<T>::V;
  V p[4], b;
  int64_t i = 16;
  std::memcpy(&p[0], x, sizeof b);
  if (n >= 64) {
    for (int j = 1; j < 4; ++j) std::memcpy(&p[j], x + 16 * j, sizeof b);
    for (i = 64; i + 64 <= n; i += 64) {
      for (int j = 0; j < 4; ++j) {
        std::memcpy(&b, x + i + 16 * j, sizeof b);
        FoldInto<kFold>(p[j], b);
      }
    }
    FoldInto<kFold>(p[0], p[1]);
    FoldInto<kFold>(p[2], p[3]);
    FoldInto<kFold>(p[0], p[2]);
  }
  for (; i + 16 <= n; i += 16) {
    std::memcpy(&b, x + i, sizeof b);
    FoldInto<kFold>(p[0], b);
  }
  T lanes[16];
  std::memcpy(lanes, &p[0], sizeof lanes);
  for (int width = 8; width >= 1; width /= 2) {
    for (int k = 0; k < width; ++k) lanes[k] = FoldScalar<kFold>(lanes[k], lanes[k + width]);
  }
  T acc = kFold == Fold::kAdd ? lanes[0] : FoldScalar<kFold>(init, lanes[0]);
  for (; i < n; ++i) acc = FoldScalar<kFold>(acc, x[i]);
  return kFold == Fold::kAdd ? init + acc : acc;
}

// Reduces n contiguous elements. Floating-point sums, maxima and minima
// fold 64 partial results (FoldContiguous): the loop vectorizes, a sum's
// rounding error grows more slowly, and a NaN anywhere still wins (a lane
// keeps its NaN; lanes fold with the same rule). Written with GCC's vector
// extension: GCC leaves the NaN-keeping select of a plain loop scalar.
template <typename T>
T ReduceContiguous(const T* x, int64_t n, T init, Reducer<T> f) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    if (n >= 32) {
      switch (f.op) {
        case hlo::Opcode::kAdd:
          return FoldContiguous<Fold::kAdd>(x, n, init);
        case hlo::Opcode::kMaximum:
          return FoldContiguous<Fold::kMax>(x, n, init);
        case hlo::Opcode::kMinimum:
          return FoldContiguous<Fold::kMin>(x, n, init);
        default:
          break;
      }
    }
  }
  T acc = init;
  for (int64_t i = 0; i < n; ++i) acc = f(acc, x[i]);
  return acc;
}

// hlo::SimpleReducer: the one binary op a reduce's to_apply applies.
using hlo::SimpleReducer;

}  // namespace strata::runtime::STRATA_ISA_NAMESPACE
STRATA_ISA_END
