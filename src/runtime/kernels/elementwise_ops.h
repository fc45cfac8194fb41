// The scalar semantics of the elementwise ops (XLA's, including the integer
// corner cases that would trap in C++), shared by the one-op kernels
// (elementwise.cc) and the fused loops (fusion.cc).
#pragma once

#include <cmath>
#include <limits>
#include <type_traits>

#include "kernels/kernels.h"

namespace strata::runtime::elementwise {

using hlo::Opcode;

template <typename T>
constexpr bool kIsFloat = std::is_floating_point_v<T>;
template <typename T>
constexpr bool kIsBool = std::is_same_v<T, bool>;

template <typename T>
T Unary(Opcode op, T x) {
  if constexpr (kIsBool<T>) {
    return op == Opcode::kNot ? !x : x;
  } else if constexpr (kIsFloat<T>) {
    switch (op) {
      case Opcode::kNegate:
        return -x;
      case Opcode::kAbs:
        return std::abs(x);
      case Opcode::kSign:
        return std::isnan(x) ? x : x > 0 ? T(1) : x < 0 ? T(-1) : x;
      case Opcode::kExp:
        return std::exp(x);
      case Opcode::kExpm1:
        return std::expm1(x);
      case Opcode::kLog:
        return std::log(x);
      case Opcode::kLog1p:
        return std::log1p(x);
      case Opcode::kTanh:
        return std::tanh(x);
      case Opcode::kLogistic:
        return T(1) / (T(1) + std::exp(-x));
      case Opcode::kSqrt:
        return std::sqrt(x);
      case Opcode::kRsqrt:
        return T(1) / std::sqrt(x);
      case Opcode::kSin:
        return std::sin(x);
      case Opcode::kCos:
        return std::cos(x);
      case Opcode::kErf:
        return std::erf(x);
      case Opcode::kFloor:
        return std::floor(x);
      case Opcode::kCeil:
        return std::ceil(x);
      case Opcode::kRoundNearestEven:
        return std::nearbyint(x);
      default:
        return x;
    }
  } else {
    using U = std::make_unsigned_t<T>;
    switch (op) {
      case Opcode::kNegate:
        return static_cast<T>(U(0) - static_cast<U>(x));  // wraps
      case Opcode::kAbs:
        if constexpr (std::is_signed_v<T>)
          return x < 0 ? static_cast<T>(U(0) - static_cast<U>(x)) : x;
        return x;
      case Opcode::kSign:
        if constexpr (std::is_signed_v<T>) return static_cast<T>((x > 0) - (x < 0));
        return static_cast<T>(x != 0);
      case Opcode::kNot:
        return static_cast<T>(~x);
      default:
        return x;
    }
  }
}

// XLA (elemental IR emitter and evaluator alike): a negative exponent gives
// 1 for base 1 and 0 otherwise, even for base -1.
template <typename T>
T IntegerPower(T base, T exponent) {
  if constexpr (std::is_signed_v<T>) {
    if (exponent < 0) return base == 1 ? 1 : 0;
  }
  using U = std::make_unsigned_t<T>;
  U result = 1, b = static_cast<U>(base);
  auto e = static_cast<U>(exponent);
  while (e) {
    if (e & 1) result *= b;
    b *= b;
    e >>= 1;
  }
  return static_cast<T>(result);
}

template <typename T>
struct BinaryOp {
  Opcode op;
  T operator()(T a, T b) const {
    if constexpr (kIsBool<T>) {
      switch (op) {
        case Opcode::kAnd:
          return a && b;
        case Opcode::kOr:
          return a || b;
        case Opcode::kXor:
          return a != b;
        case Opcode::kMaximum:
          return a || b;
        case Opcode::kMinimum:
          return a && b;
        default:
          return a;
      }
    } else if constexpr (kIsFloat<T>) {
      switch (op) {
        case Opcode::kAdd:
          return a + b;
        case Opcode::kSubtract:
          return a - b;
        case Opcode::kMultiply:
          return a * b;
        case Opcode::kDivide:
          return a / b;
        // NaN in either operand propagates, as in XLA.
        case Opcode::kMaximum:
          return (a > b || std::isnan(a)) ? a : b;
        case Opcode::kMinimum:
          return (a < b || std::isnan(a)) ? a : b;
        case Opcode::kPower:
          return std::pow(a, b);
        case Opcode::kRemainder:
          return std::fmod(a, b);
        case Opcode::kAtan2:
          return std::atan2(a, b);
        default:
          return a;
      }
    } else {
      using U = std::make_unsigned_t<T>;
      constexpr int kBits = sizeof(T) * 8;
      switch (op) {
        case Opcode::kAdd:
          return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
        case Opcode::kSubtract:
          return static_cast<T>(static_cast<U>(a) - static_cast<U>(b));
        case Opcode::kMultiply:
          return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
        case Opcode::kDivide:
          if (b == 0) return static_cast<T>(-1);  // XLA: all bits set
          if constexpr (std::is_signed_v<T>) {
            if (a == std::numeric_limits<T>::min() && b == -1) return a;
          }
          return a / b;
        case Opcode::kRemainder:
          if (b == 0) return a;
          if constexpr (std::is_signed_v<T>) {
            if (b == -1) return 0;
          }
          return a % b;
        case Opcode::kMaximum:
          return a > b ? a : b;
        case Opcode::kMinimum:
          return a < b ? a : b;
        case Opcode::kPower:
          return IntegerPower(a, b);
        case Opcode::kAnd:
          return a & b;
        case Opcode::kOr:
          return a | b;
        case Opcode::kXor:
          return a ^ b;
        case Opcode::kShiftLeft:
          return static_cast<U>(b) >= static_cast<U>(kBits)
                     ? T(0)
                     : static_cast<T>(static_cast<U>(a) << b);
        case Opcode::kShiftRightLogical:
          return static_cast<U>(b) >= static_cast<U>(kBits)
                     ? T(0)
                     : static_cast<T>(static_cast<U>(a) >> b);
        case Opcode::kShiftRightArithmetic: {
          // The top bit is the sign for unsigned types too, as in XLA.
          using S = std::make_signed_t<T>;
          auto sa = static_cast<S>(a);
          if (static_cast<U>(b) >= static_cast<U>(kBits))
            return static_cast<T>(sa < 0 ? S(-1) : S(0));
          return static_cast<T>(sa >> b);
        }
        default:
          return a;
      }
    }
  }
};

template <typename T>
bool CompareValues(hlo::Comparison c, T a, T b) {
  switch (c) {
    case hlo::Comparison::kEq:
      return a == b;
    case hlo::Comparison::kNe:
      return a != b;
    case hlo::Comparison::kLt:
      return a < b;
    case hlo::Comparison::kLe:
      return a <= b;
    case hlo::Comparison::kGt:
      return a > b;
    case hlo::Comparison::kGe:
      return a >= b;
  }
  return false;
}

}  // namespace strata::runtime::elementwise
