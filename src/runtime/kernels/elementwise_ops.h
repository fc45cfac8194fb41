// The scalar semantics of the elementwise ops (XLA's, including the integer
// corner cases that would trap in C++), shared by the one-op kernels
// (elementwise.cc) and the fused loops (fusion.cc), built for the includer's
// instruction set (isa.h).
#pragma once

#include <bit>
#include <cmath>
#include <limits>
#include <type_traits>

#include "kernels/isa.h"
#include "kernels/kernels.h"
#include "strata/hlo/opcode.h"

STRATA_ISA_BEGIN
namespace strata::runtime::STRATA_ISA_NAMESPACE {

// e^x over floats, vectorized (elementwise.cc); `out` may be `x`.
void ExpFloats(const float* x, float* out, int64_t n);
// 1 / (1 + e^-x) over floats, through ExpFloats; `out` may be `x`.
void LogisticFloats(const float* x, float* out, int64_t n);
// tanh over floats, a polynomial near 0 and ExpFloats beyond; `out` may be `x`.
void TanhFloats(const float* x, float* out, int64_t n);

namespace elementwise {

using hlo::Opcode;

template <typename T>
constexpr bool kIsFloat = std::is_floating_point_v<T>;
template <typename T>
constexpr bool kIsBool = std::is_same_v<T, bool>;

// ---- the helpers the opcode rows' kernels use -------------------------------

// The column of an op whose element types exclude that class (never run:
// shape inference rejects the type first, and kernels are built only for
// types the row takes).
struct NoKernelTag {};
inline NoKernelTag NoKernel() { return {}; }

template <typename T>
T FloatSign(T x) {
  return std::isnan(x) ? x : x > 0 ? T(1) : x < 0 ? T(-1) : x;
}
// NaN in either operand propagates, as in XLA.
template <typename T>
T FloatMax(T a, T b) {
  return (a > b || std::isnan(a)) ? a : b;
}
template <typename T>
T FloatMin(T a, T b) {
  return (a < b || std::isnan(a)) ? a : b;
}

// Integers wrap (signed overflow is undefined in C++): computed unsigned.
template <typename T>
using Unsigned = std::make_unsigned_t<std::conditional_t<std::is_same_v<T, bool>, uint8_t, T>>;
// The word the arithmetic runs in: at least unsigned int, since narrower
// types promote to (signed) int, where u16 65535 * 65535 would overflow.
template <typename T>
using Word = std::common_type_t<Unsigned<T>, unsigned>;
template <typename T>
Word<T> AsWord(T x) {
  return static_cast<Unsigned<T>>(x);
}
template <typename T>
T WrapNegate(T x) {
  return static_cast<T>(Word<T>(0) - AsWord(x));
}
template <typename T>
T WrapAdd(T a, T b) {
  return static_cast<T>(AsWord(a) + AsWord(b));
}
template <typename T>
T WrapSubtract(T a, T b) {
  return static_cast<T>(AsWord(a) - AsWord(b));
}
template <typename T>
T WrapMultiply(T a, T b) {
  return static_cast<T>(AsWord(a) * AsWord(b));
}
template <typename T>
T IntegerAbs(T x) {
  if constexpr (std::is_signed_v<T>) return x < 0 ? WrapNegate(x) : x;
  return x;
}
template <typename T>
T IntegerSign(T x) {
  if constexpr (std::is_signed_v<T>) return static_cast<T>((x > 0) - (x < 0));
  return static_cast<T>(x != 0);
}
// Booleans negate; integers flip every bit.
template <typename T>
T BitNot(T x) {
  if constexpr (kIsBool<T>) {
    return !x;
  } else {
    return static_cast<T>(~x);
  }
}
// The set bits of an integer, and its zero bits above the highest set one
// (XLA's popcnt and count-leading-zeros; a boolean is one bit).
template <typename T>
T PopCount(T x) {
  if constexpr (kIsBool<T>) {
    return x;
  } else {
    return static_cast<T>(std::popcount(static_cast<std::make_unsigned_t<T>>(x)));
  }
}
template <typename T>
T CountLeadingZeros(T x) {
  if constexpr (kIsBool<T>) {
    return !x;
  } else {
    return static_cast<T>(std::countl_zero(static_cast<std::make_unsigned_t<T>>(x)));
  }
}
// XLA: x / 0 is all bits set; INT_MIN / -1 is INT_MIN.
template <typename T>
T IntegerDivide(T a, T b) {
  if (b == 0) return static_cast<T>(-1);
  if constexpr (std::is_signed_v<T>) {
    if (a == std::numeric_limits<T>::min() && b == -1) return a;
  }
  return a / b;
}
// XLA: x % 0 is x; x % -1 is 0.
template <typename T>
T IntegerRemainder(T a, T b) {
  if (b == 0) return a;
  if constexpr (std::is_signed_v<T>) {
    if (b == -1) return 0;
  }
  return a % b;
}

// XLA (elemental IR emitter and evaluator alike): a negative exponent gives
// 1 for base 1 and 0 otherwise, even for base -1.
template <typename T>
T IntegerPower(T base, T exponent) {
  if constexpr (std::is_signed_v<T>) {
    if (exponent < 0) return base == 1 ? 1 : 0;
  }
  using U = Word<T>;
  U result = 1, b = AsWord(base);
  U e = AsWord(exponent);
  while (e) {
    if (e & 1) result *= b;
    b *= b;
    e >>= 1;
  }
  return static_cast<T>(result);
}

// Shifts by the bit width or more give 0 (or the sign, arithmetic).
template <typename T>
T ShiftLeft(T a, T b) {
  return AsWord(b) >= sizeof(T) * 8 ? T(0) : static_cast<T>(AsWord(a) << AsWord(b));
}
template <typename T>
T ShiftRightLogical(T a, T b) {
  using U = Unsigned<T>;
  return static_cast<U>(b) >= static_cast<U>(sizeof(T) * 8)
             ? T(0)
             : static_cast<T>(static_cast<U>(a) >> b);
}
// The top bit is the sign for unsigned types too, as in XLA.
template <typename T>
T ShiftRightArithmetic(T a, T b) {
  using S = std::make_signed_t<T>;
  const auto sa = static_cast<S>(a);
  if (static_cast<Unsigned<T>>(b) >= static_cast<Unsigned<T>>(sizeof(T) * 8))
    return static_cast<T>(sa < 0 ? S(-1) : S(0));
  return static_cast<T>(sa >> b);
}

// Whether the row of `op` takes element type T.
template <typename T>
constexpr bool Takes(hlo::ElementTypes types) {
  if constexpr (kIsBool<T>) return hlo::TakesPred(types);
  if constexpr (kIsFloat<T>) return hlo::TakesFloats(types);
  return hlo::TakesIntegers(types);
}

// Throws naming the op and the kind of element (elementwise.cc).
[[noreturn]] void NoKernelFor(Opcode op, const char* element);
template <typename T>
constexpr const char* ElementKind() {
  return kIsBool<T> ? "pred" : kIsFloat<T> ? "floats" : "integers";
}

// ---- the kernels, generated from the rows -----------------------------------

// The rows the kernels are generated from: the opcode list (a test compiles
// this header over a row of its own, to see a row claiming an element type
// without its kernel fail to build).
#ifndef STRATA_ELEMENTWISE_ROWS
#define STRATA_ELEMENTWISE_ROWS STRATA_HLO_OPCODES
#endif

// Calls f with op's scalar kernel for T as a callable (T(T) for a unary op,
// T(T, T) for a binary one), so each op runs in a loop of its own; an op
// whose row does not take T is an Error.
#define STRATA_KERNEL_ROW(e, name, kind, ...) STRATA_KERNEL_ROW_##kind(e, __VA_ARGS__)
#define STRATA_KERNEL_ROW_Other(...)
#define STRATA_KERNEL_ROW_Collective(...)
#define STRATA_KERNEL_ROW_Unary(e, complex, api, types, float_kernel, integer_kernel, vector, vjp) \
  case Opcode::e:                                                                                  \
    if constexpr (Takes<T>(hlo::ElementTypes::k##types)) {                                         \
      if constexpr (kIsFloat<T>) {                                                                 \
        return f([](T x) -> T { return float_kernel; });                                           \
      } else {                                                                                     \
        return f([](T x) -> T { return integer_kernel; });                                         \
      }                                                                                            \
    }                                                                                              \
    break;
#define STRATA_KERNEL_ROW_Binary(...)

template <typename T, typename F>
[[gnu::always_inline]] inline std::invoke_result_t<F&, T (*)(T)> WithUnaryKernel(Opcode op, F&& f) {
  switch (op) {
    STRATA_ELEMENTWISE_ROWS(STRATA_KERNEL_ROW)
    default:
      break;
  }
  NoKernelFor(op, ElementKind<T>());
}

#undef STRATA_KERNEL_ROW_Unary
#undef STRATA_KERNEL_ROW_Binary
#define STRATA_KERNEL_ROW_Unary(...)
#define STRATA_KERNEL_ROW_Binary(e, complex, api, types, float_kernel, integer_kernel, vector, \
                                 vjp)                                                          \
  case Opcode::e:                                                                              \
    if constexpr (Takes<T>(hlo::ElementTypes::k##types)) {                                     \
      if constexpr (kIsFloat<T>) {                                                             \
        return f([](T a, T b) -> T { return float_kernel; });                                  \
      } else {                                                                                 \
        return f([](T a, T b) -> T { return integer_kernel; });                                \
      }                                                                                        \
    }                                                                                          \
    break;

template <typename T, typename F>
[[gnu::always_inline]] inline std::invoke_result_t<F&, T (*)(T, T)> WithBinaryKernel(Opcode op,
                                                                                     F&& f) {
  switch (op) {
    STRATA_ELEMENTWISE_ROWS(STRATA_KERNEL_ROW)
    default:
      break;
  }
  NoKernelFor(op, ElementKind<T>());
}

#undef STRATA_KERNEL_ROW
#undef STRATA_KERNEL_ROW_Other
#undef STRATA_KERNEL_ROW_Collective
#undef STRATA_KERNEL_ROW_Unary
#undef STRATA_KERNEL_ROW_Binary

// The f32 array routine of op's row, or nullptr.
#define STRATA_VECTOR_ROW(e, name, kind, ...) STRATA_VECTOR_ROW_##kind(e, __VA_ARGS__)
#define STRATA_VECTOR_ROW_Other(...)
#define STRATA_VECTOR_ROW_Collective(...)
#define STRATA_VECTOR_ROW_Binary(...)
#define STRATA_VECTOR_ROW_Unary(e, complex, api, types, float_kernel, integer_kernel, vector, vjp) \
  case Opcode::e:                                                                                  \
    return vector;
inline void (*VectorKernelOf(Opcode op))(const float*, float*, int64_t) {
  switch (op) {
    STRATA_ELEMENTWISE_ROWS(STRATA_VECTOR_ROW)
    default:
      return nullptr;
  }
}
#undef STRATA_VECTOR_ROW
#undef STRATA_VECTOR_ROW_Other
#undef STRATA_VECTOR_ROW_Collective
#undef STRATA_VECTOR_ROW_Binary
#undef STRATA_VECTOR_ROW_Unary

// One element (the fused loops' interpreter reads ops at run time).
template <typename T>
T Unary(Opcode op, T x) {
  return WithUnaryKernel<T>(op, [x](auto kernel) { return kernel(x); });
}

template <typename T>
struct BinaryOp {
  Opcode op;
  T operator()(T a, T b) const {
    return WithBinaryKernel<T>(op, [a, b](auto kernel) { return kernel(a, b); });
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

// XLA's TOTALORDER compare: floats compared as their bits read as signed
// integers with the negative ones' magnitude bits flipped, so
// -NaN < -inf < ... < -0 < +0 < ... < inf < +NaN. Integers as they are.
template <typename F>
auto TotalOrderKey(F x) {
  using I = std::conditional_t<sizeof(F) == 4, int32_t, int64_t>;
  const I bits = std::bit_cast<I>(x);
  return bits < 0 ? static_cast<I>(bits ^ std::numeric_limits<I>::max()) : bits;
}
template <typename T>
bool CompareTotalOrder(hlo::Comparison c, T a, T b) {
  if constexpr (kIsFloat<T>) {
    return CompareValues(c, TotalOrderKey(a), TotalOrderKey(b));
  } else {
    return CompareValues(c, a, b);
  }
}

}  // namespace elementwise
}  // namespace strata::runtime::STRATA_ISA_NAMESPACE
STRATA_ISA_END
