// The native reducers (one binary op) shared by the reduce kernel and the
// row reductions inside fusions, so a reduction gives the same bits fused or
// not, built for the includer's instruction set (isa.h).
#pragma once

#include <cmath>
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

// Reduces n contiguous elements. Floating-point sums keep 16 partial sums so
// the loop vectorizes (and rounding error grows more slowly); maxima and
// minima keep 16 partial results for the same reason (a NaN anywhere still
// wins).
template <typename T>
T ReduceContiguous(const T* x, int64_t n, T init, Reducer<T> f) {
  if constexpr (std::is_floating_point_v<T>) {
    const bool max = f.op == hlo::Opcode::kMaximum, min = f.op == hlo::Opcode::kMinimum;
    if ((max || min) && n >= 32) {
      T partial[16];
      for (int k = 0; k < 16; ++k) partial[k] = x[k];
      int64_t i = 16;
      for (; i + 16 <= n; i += 16) {
        if (max) {
          for (int k = 0; k < 16; ++k) {
            const T a = partial[k], b = x[i + k];
            partial[k] = (a > b || a != a) ? a : b;
          }
        } else {
          for (int k = 0; k < 16; ++k) {
            const T a = partial[k], b = x[i + k];
            partial[k] = (a < b || a != a) ? a : b;
          }
        }
      }
      T acc = init;
      for (int k = 0; k < 16; ++k) acc = f(acc, partial[k]);
      for (; i < n; ++i) acc = f(acc, x[i]);
      return acc;
    }
    if (f.op == hlo::Opcode::kAdd && n >= 32) {
      T partial[16] = {};
      int64_t i = 0;
      for (; i + 16 <= n; i += 16) {
        for (int k = 0; k < 16; ++k) partial[k] += x[i + k];
      }
      T sum = 0;
      for (int k = 0; k < 16; ++k) sum += partial[k];
      for (; i < n; ++i) sum += x[i];
      return init + sum;
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
