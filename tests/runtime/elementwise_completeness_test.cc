// Driven by the opcode list: every elementwise opcode, for every dtype its
// shape rule accepts, compiles and runs, one op alone and (floats) inside a
// fused loop, and gives what this file's own reference computes from XLA's
// operation semantics. The kernels come from the opcode rows' kernel
// columns, so this checks each row's expression against an independent
// one; a row added without a reference here fails.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "host_values.h"
#include "strata/compiler/compile.h"
#include "strata/core/error.h"
#include "strata/hlo/opcode.h"
#include "test_util.h"

namespace strata::runtime {
namespace {

using hlo::Opcode;

std::vector<Opcode> ElementwiseOpcodes() {
  std::vector<Opcode> ops;
#define STRATA_ADD_OPCODE(e, name, kind, ...)                                    \
  if (hlo::IsElementwiseUnary(Opcode::e) || hlo::IsElementwiseBinary(Opcode::e)) \
    ops.push_back(Opcode::e);
  STRATA_HLO_OPCODES(STRATA_ADD_OPCODE)
#undef STRATA_ADD_OPCODE
  return ops;
}

std::vector<DType> AllDTypes() {
  return {
#define STRATA_DTYPE_VALUE(e, name, size) DType::e,
      STRATA_DTYPES(STRATA_DTYPE_VALUE)
#undef STRATA_DTYPE_VALUE
  };
}

// Floating-point reference in double; nullopt when this file has none.
std::optional<double> FloatReference(Opcode op, double a, double b) {
  switch (op) {
    case Opcode::kNegate:
      return -a;
    case Opcode::kAbs:
      return std::fabs(a);
    case Opcode::kSign:
      return std::isnan(a) ? a : a > 0 ? 1.0 : a < 0 ? -1.0 : a;
    case Opcode::kExp:
      return std::exp(a);
    case Opcode::kExpm1:
      return std::expm1(a);
    case Opcode::kLog:
      return std::log(a);
    case Opcode::kLog1p:
      return std::log1p(a);
    case Opcode::kTanh:
      return std::tanh(a);
    case Opcode::kLogistic:
      return 1 / (1 + std::exp(-a));
    case Opcode::kSqrt:
      return std::sqrt(a);
    case Opcode::kRsqrt:
      return 1 / std::sqrt(a);
    case Opcode::kSin:
      return std::sin(a);
    case Opcode::kCos:
      return std::cos(a);
    case Opcode::kErf:
      return std::erf(a);
    case Opcode::kTan:
      return std::sin(a) / std::cos(a);
    case Opcode::kCbrt:  // the real cube root, negative for negative a
      return std::copysign(std::pow(std::fabs(a), 1.0 / 3.0), a);
    case Opcode::kFloor:
      return std::floor(a);
    case Opcode::kCeil:
      return std::ceil(a);
    case Opcode::kRoundNearestEven:  // ties to even
      return std::isfinite(a) ? a - std::remainder(a, 1.0) : a;
    case Opcode::kRoundNearestAfz:  // ties away from zero
      return std::isfinite(a) ? std::trunc(a + std::copysign(0.5, a)) : a;
    case Opcode::kAdd:
      return a + b;
    case Opcode::kSubtract:
      return a - b;
    case Opcode::kMultiply:
      return a * b;
    case Opcode::kDivide:
      return a / b;
    case Opcode::kMaximum:
      return std::isnan(a) || std::isnan(b) ? NAN : std::fmax(a, b);
    case Opcode::kMinimum:
      return std::isnan(a) || std::isnan(b) ? NAN : std::fmin(a, b);
    case Opcode::kPower:
      return std::pow(a, b);
    case Opcode::kRemainder:
      return std::fmod(a, b);
    case Opcode::kAtan2:
      return std::atan2(a, b);
    default:
      return std::nullopt;
  }
}

// Integer reference over the dtype's bit width (two's complement wrap-around,
// XLA's results where C++ would trap); nullopt when this file has none.
template <typename T>
std::optional<T> IntegerReference(Opcode op, T a, T b) {
  // At least unsigned int wide: narrower types promote to (signed) int,
  // where 65535 * 65535 would overflow.
  using N = std::make_unsigned_t<T>;
  using U = std::common_type_t<N, unsigned>;
  constexpr int bits = sizeof(T) * 8;
  const U ua = static_cast<N>(a), ub = static_cast<N>(b);
  switch (op) {
    case Opcode::kNegate:
      return static_cast<T>(U(~ua + 1));
    case Opcode::kAbs:
      return std::is_signed_v<T> && a < 0 ? static_cast<T>(U(~ua + 1)) : a;
    case Opcode::kSign:
      return static_cast<T>(a > 0 ? 1 : a == 0 ? 0 : -1);
    case Opcode::kNot:
      return static_cast<T>(U(~ua));
    case Opcode::kPopulationCount: {
      int count = 0;
      for (int i = 0; i < bits; ++i) count += (ua >> i) & 1;
      return static_cast<T>(count);
    }
    case Opcode::kCountLeadingZeros: {
      int count = 0;
      for (int i = bits - 1; i >= 0 && !((ua >> i) & 1); --i) ++count;
      return static_cast<T>(count);
    }
    case Opcode::kAdd:
      return static_cast<T>(U(ua + ub));
    case Opcode::kSubtract:
      return static_cast<T>(U(ua - ub));
    case Opcode::kMultiply:
      return static_cast<T>(U(ua * ub));
    case Opcode::kDivide:  // x / 0 is -1 (all bits); MIN / -1 is MIN
      if (b == 0) return static_cast<T>(U(~U(0)));
      if (std::is_signed_v<T> && a == std::numeric_limits<T>::min() && b == static_cast<T>(-1))
        return a;
      return static_cast<T>(a / b);
    case Opcode::kRemainder:  // x % 0 is x; MIN % -1 is 0
      if (b == 0) return a;
      if (std::is_signed_v<T> && b == static_cast<T>(-1)) return 0;
      return static_cast<T>(a % b);
    case Opcode::kMaximum:
      return a > b ? a : b;
    case Opcode::kMinimum:
      return a < b ? a : b;
    case Opcode::kPower: {  // negative exponents: 1 for base 1, else 0
      if (std::is_signed_v<T> && b < 0) return static_cast<T>(a == 1 ? 1 : 0);
      U result = 1, square = ua;  // by squaring, modulo 2^bits
      for (U e = ub; e != 0; e >>= 1, square = U(square * square)) {
        if (e & 1) result = U(result * square);
      }
      return static_cast<T>(result);
    }
    case Opcode::kAnd:
      return static_cast<T>(ua & ub);
    case Opcode::kOr:
      return static_cast<T>(ua | ub);
    case Opcode::kXor:
      return static_cast<T>(ua ^ ub);
    case Opcode::kShiftLeft:
      return ub >= U(bits) ? T(0) : static_cast<T>(U(ua << ub));
    case Opcode::kShiftRightLogical:
      return ub >= U(bits) ? T(0) : static_cast<T>(U(ua >> ub));
    case Opcode::kShiftRightArithmetic: {
      const bool negative = (ua >> (bits - 1)) & 1;
      if (ub >= U(bits)) return static_cast<T>(negative ? U(~U(0)) : U(0));
      U shifted = U(ua >> ub);
      if (negative && ub > 0) shifted |= U(~U(0)) << (bits - ub);
      return static_cast<T>(shifted);
    }
    default:
      return std::nullopt;
  }
}

std::optional<bool> PredReference(Opcode op, bool a, bool b) {
  switch (op) {
    case Opcode::kNot:
      return !a;
    case Opcode::kAnd:
      return a && b;
    case Opcode::kOr:
      return a || b;
    case Opcode::kXor:
      return a != b;
    default:
      return std::nullopt;
  }
}

// `op` on parameters of `n` elements of `dtype`, as HLO text.
std::string OneOp(Opcode op, DType dtype, int64_t n) {
  const bool unary = hlo::IsElementwiseUnary(op);
  const std::string t = std::string(DTypeName(dtype)) + "[" + std::to_string(n) + "]";
  return "HloModule m\nENTRY e {\n  a = " + t + " parameter(0)\n" +
         (unary ? "" : "  b = " + t + " parameter(1)\n") + "  ROOT r = " + t + " " +
         std::string(hlo::OpcodeName(op)) + (unary ? "(a)" : "(a, b)") + "\n}\n";
}

bool Accepts(Opcode op, DType t) {
  try {
    hlo::ParseModule(OneOp(op, t, 2));
    return true;
  } catch (const Error&) {
    return false;
  }
}

// The operands: every pair of a few values, including the corner cases.
template <typename T>
std::vector<T> Values() {
  if constexpr (std::is_same_v<T, bool>) {
    return {false, true};
  } else if constexpr (std::is_floating_point_v<T>) {
    return {-2.5, -1, -0.5, -0.0, 0, 0.25, 1, 2.5, 3, INFINITY, NAN};
  } else {
    std::vector<T> v = {0, 1, 2, 3, 5, 7, std::numeric_limits<T>::max()};
    if constexpr (std::is_signed_v<T>) {
      for (T x : {T(-1), T(-2), T(-7), std::numeric_limits<T>::min()}) v.push_back(x);
    } else {
      v.push_back(static_cast<T>(std::numeric_limits<T>::max() - 1));
    }
    v.push_back(static_cast<T>(sizeof(T) * 8));  // a shift by the width
    return v;
  }
}

template <typename T>
Buffer Arg(const std::vector<T>& values) {
  return test::Arg(values, {static_cast<int64_t>(values.size())});
}

// All pairs of `values` (each with 0 for a unary op).
template <typename T>
std::pair<std::vector<T>, std::vector<T>> Pairs(Opcode op, const std::vector<T>& values) {
  const bool unary = hlo::IsElementwiseUnary(op);
  std::vector<T> a, b;
  for (T x : values)
    for (T y : unary ? std::vector<T>{T(0)} : values) {
      a.push_back(x);
      b.push_back(y);
    }
  return {a, b};
}

// The op on n elements of `dtype`, alone or (`fused`) inside a kLoop
// fusion, compiled as written: no folding, so the kernel computes every
// element. Null, with a failure, when it does not compile.
std::unique_ptr<Executable> CompileOneOp(Opcode op, DType dtype, int64_t n, bool fused) {
  const bool unary = hlo::IsElementwiseUnary(op);
  const std::string t = std::string(DTypeName(dtype)) + "[" + std::to_string(n) + "]";
  const std::string call = std::string(hlo::OpcodeName(op)) + (unary ? "(p0)" : "(p0, p1)");
  const std::string params =
      "  p0 = " + t + " parameter(0)\n" + (unary ? "" : "  p1 = " + t + " parameter(1)\n");
  std::string text = "HloModule m\n";
  if (fused) {
    text += "body {\n" + params + "  ROOT r = " + t + " " + call + "\n}\nENTRY e {\n" + params +
            "  ROOT f = " + t + " fusion(" + (unary ? "p0" : "p0, p1") +
            "), kind=kLoop, calls=body\n}\n";
  } else {
    text += "ENTRY e {\n" + params + "  ROOT r = " + t + " " + call + "\n}\n";
  }
  compiler::CompileOptions as_written;
  as_written.run_passes = false;
  try {
    return compiler::Compile(*hlo::ParseModule(text), as_written);
  } catch (const Error& e) {
    ADD_FAILURE() << "the shape rule accepts it but it does not compile: " << e.what();
    return nullptr;
  }
}

// Runs op on all pairs of Values<T>() and checks each element against the
// reference; `fused`: the op alone inside a kLoop fusion.
template <typename T>
void Check(Opcode op, DType dtype, bool fused) {
  const bool unary = hlo::IsElementwiseUnary(op);
  const auto [a, b] = Pairs(op, Values<T>());
  const int64_t n = static_cast<int64_t>(a.size());
  std::unique_ptr<Executable> exe = CompileOneOp(op, dtype, n, fused);
  if (!exe) return;
  std::vector<Buffer> args = {Arg(a)};
  if (!unary) args.push_back(Arg(b));
  std::vector<T> got = test::ToHost<T>(exe->Run(args)[0]);
  for (int64_t i = 0; i < n; ++i) {
    SCOPED_TRACE(testing::Message() << "a = " << +a[i] << ", b = " << +b[i]);
    if constexpr (std::is_same_v<T, bool>) {
      std::optional<bool> expected = PredReference(op, a[i], b[i]);
      ASSERT_TRUE(expected) << "no reference for this op on pred";
      EXPECT_EQ(got[i], *expected);
    } else if constexpr (std::is_floating_point_v<T>) {
      std::optional<double> expected = FloatReference(op, a[i], b[i]);
      ASSERT_TRUE(expected) << "no reference for this op on floats";
      const T e = static_cast<T>(*expected);
      if (std::isnan(e)) {
        EXPECT_TRUE(std::isnan(got[i])) << got[i];
      } else if (std::isinf(e) || e == 0) {
        EXPECT_EQ(got[i], e);
      } else {
        const double tolerance = (std::is_same_v<T, float> ? 4e-7 : 1e-15) * std::fabs(e);
        EXPECT_NEAR(got[i], e, tolerance);
      }
    } else {
      std::optional<T> expected = IntegerReference<T>(op, a[i], b[i]);
      ASSERT_TRUE(expected) << "no reference for this op on integers";
      EXPECT_EQ(+got[i], +*expected);
    }
  }
}

// f16 / bf16: every pair of the float values (all exact in both), run as
// XLA's CPU backend runs them: in f32, the result rounded to the half type
// once. The reference is the double result rounded to f32, then to the half
// type; transcendental ops may differ from it by one half ulp (their f32
// result is within an f32 ulp, which can cross a half rounding boundary).
void CheckHalf(Opcode op, DType dtype, bool fused) {
  const host::Format format = host::FormatOf(dtype);
  const bool unary = hlo::IsElementwiseUnary(op);
  const std::vector<float> floats = Values<float>();
  const auto [a, b] = Pairs(op, std::vector<double>(floats.begin(), floats.end()));
  const int64_t n = static_cast<int64_t>(a.size());
  std::unique_ptr<Executable> exe = CompileOneOp(op, dtype, n, fused);
  if (!exe) return;
  std::vector<Buffer> args = {host::HalfBuffer(dtype, a, {n})};
  if (!unary) args.push_back(host::HalfBuffer(dtype, b, {n}));
  const std::vector<double> got_values = host::HalfValues(exe->Run(args)[0]);
  ASSERT_EQ(got_values.size(), static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    SCOPED_TRACE(testing::Message() << "a = " << a[i] << ", b = " << b[i]);
    const double got = got_values[i];
    std::optional<double> reference = FloatReference(op, a[i], b[i]);
    ASSERT_TRUE(reference) << "no reference for this op on floats";
    const double e = static_cast<double>(
        host::RoundTo(format, host::RoundTo(host::FormatOf(DType::kF32), *reference)));
    if (std::isnan(e)) {
      EXPECT_TRUE(std::isnan(got)) << got;
    } else if (std::isinf(e) || e == 0) {
      EXPECT_EQ(got, e);
    } else {
      EXPECT_NEAR(got, e, std::ldexp(std::fabs(e), -format.fraction_bits)) << "expected " << e;
    }
  }
}

template <typename T>
void CheckBothWays(Opcode op, DType dtype) {
  {
    SCOPED_TRACE("one op");
    Check<T>(op, dtype, false);
  }
  if (std::is_floating_point_v<T>) {
    SCOPED_TRACE("in a fused loop");
    Check<T>(op, dtype, true);
  }
}

TEST(ElementwiseCompleteness, EveryOpcodeRunsForEveryDTypeItsShapeRuleAccepts) {
  int checked = 0;
  for (Opcode op : ElementwiseOpcodes()) {
    for (DType dtype : AllDTypes()) {
      if (!Accepts(op, dtype)) continue;
      SCOPED_TRACE(std::string(hlo::OpcodeName(op)) + " on " + std::string(DTypeName(dtype)));
      switch (dtype) {
        case DType::kPred:
          CheckBothWays<bool>(op, dtype);
          break;
        case DType::kS8:
          CheckBothWays<int8_t>(op, dtype);
          break;
        case DType::kS16:
          CheckBothWays<int16_t>(op, dtype);
          break;
        case DType::kU16:
          CheckBothWays<uint16_t>(op, dtype);
          break;
        case DType::kC64:  // complex_test.cc's
        case DType::kC128:
        case DType::kToken:
          continue;
        case DType::kS32:
          CheckBothWays<int32_t>(op, dtype);
          break;
        case DType::kS64:
          CheckBothWays<int64_t>(op, dtype);
          break;
        case DType::kU8:
          CheckBothWays<uint8_t>(op, dtype);
          break;
        case DType::kU32:
          CheckBothWays<uint32_t>(op, dtype);
          break;
        case DType::kU64:
          CheckBothWays<uint64_t>(op, dtype);
          break;
        case DType::kF32:
          CheckBothWays<float>(op, dtype);
          break;
        case DType::kF64:
          CheckBothWays<double>(op, dtype);
          break;
        case DType::kF16:
        case DType::kBF16: {
          SCOPED_TRACE("one op");
          CheckHalf(op, dtype, false);
          SCOPED_TRACE("in a fused loop");
          CheckHalf(op, dtype, true);
          break;
        }
      }
      ++checked;
    }
  }
  EXPECT_GE(checked, 100);  // 27 float ops x 2 dtypes, the integer ops x 6, ...
}

}  // namespace
}  // namespace strata::runtime
