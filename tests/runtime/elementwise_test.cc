// Elementwise opcodes against std:: math and hand-worked XLA corner cases:
// every unary and binary op on the types it accepts, compare, select, clamp,
// is-finite, and convert / bitcast-convert between every pair of types.
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "runtime/test_util.h"

namespace strata::runtime::test {
namespace {

using hlo::Comparison;
using hlo::Opcode;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

template <typename T>
Shape VectorShape(int64_t n) {
  return Shape(DTypeOf<T>::value, {n});
}

template <typename T>
std::vector<T> RunUnary(Opcode op, const std::vector<T>& x) {
  const int64_t n = static_cast<int64_t>(x.size());
  Graph g({VectorShape<T>(n)});
  return ToHost<T>(g.Run(g.b.Unary(op, g.params[0]), {Arg(x, {n})})[0]);
}

template <typename T, typename R = T>
std::vector<R> RunBinary(Opcode op, const std::vector<T>& a, const std::vector<T>& b) {
  const int64_t n = static_cast<int64_t>(a.size());
  Graph g({VectorShape<T>(n), VectorShape<T>(n)});
  return ToHost<R>(g.Run(g.b.Binary(op, g.params[0], g.params[1]), {Arg(a, {n}), Arg(b, {n})})[0]);
}

// Round half to even from floor, independent of the rounding mode.
template <typename T>
T RoundHalfEven(T x) {
  if (!std::isfinite(x)) return x;
  T f = std::floor(x), diff = x - f;
  T r = diff > T(0.5) ? f + 1 : diff < T(0.5) ? f : (std::fmod(f, T(2)) == 0 ? f : f + 1);
  return r == 0 ? std::copysign(T(0), x) : r;
}

// Float unary references, evaluated in long double and rounded once.
template <typename T>
T UnaryReference(Opcode op, T x) {
  long double v = x;
  switch (op) {
    case Opcode::kNegate:
      return -x;
    case Opcode::kAbs:
      return std::fabs(x);
    case Opcode::kSign:
      return std::isnan(x) || x == 0 ? x : std::copysign(T(1), x);
    case Opcode::kExp:
      return static_cast<T>(std::exp(v));
    case Opcode::kExpm1:
      return static_cast<T>(std::expm1(v));
    case Opcode::kLog:
      return static_cast<T>(std::log(v));
    case Opcode::kLog1p:
      return static_cast<T>(std::log1p(v));
    case Opcode::kTanh:
      return static_cast<T>(std::tanh(v));
    case Opcode::kLogistic:
      return static_cast<T>(1 / (1 + std::exp(-v)));
    case Opcode::kSqrt:
      return static_cast<T>(std::sqrt(v));
    case Opcode::kRsqrt:
      return static_cast<T>(1 / std::sqrt(v));
    case Opcode::kSin:
      return static_cast<T>(std::sin(v));
    case Opcode::kCos:
      return static_cast<T>(std::cos(v));
    case Opcode::kErf:
      return static_cast<T>(std::erf(v));
    case Opcode::kFloor:
      return std::floor(x);
    case Opcode::kCeil:
      return std::ceil(x);
    case Opcode::kRoundNearestEven:
      return RoundHalfEven(x);
    default:
      ADD_FAILURE() << "no reference for " << hlo::OpcodeName(op);
      return x;
  }
}

struct UnaryCase {
  Opcode op;
  double lo, hi;  // random input range
};
// clang-format off
constexpr UnaryCase kFloatUnary[] = {
    {Opcode::kNegate, -10, 10}, {Opcode::kAbs, -10, 10},     {Opcode::kSign, -10, 10},
    {Opcode::kExp, -20, 20},    {Opcode::kExpm1, -20, 20},   {Opcode::kLog, 1e-3, 100},
    {Opcode::kLog1p, -0.999, 100}, {Opcode::kTanh, -10, 10}, {Opcode::kLogistic, -20, 20},
    {Opcode::kSqrt, 0, 100},    {Opcode::kRsqrt, 1e-3, 100}, {Opcode::kSin, -10, 10},
    {Opcode::kCos, -10, 10},    {Opcode::kErf, -4, 4},       {Opcode::kFloor, -10, 10},
    {Opcode::kCeil, -10, 10},   {Opcode::kRoundNearestEven, -10, 10},
};
// clang-format on

template <typename T>
void CheckFloatUnary() {
  const double rel = 8 * std::numeric_limits<T>::epsilon();
  for (const UnaryCase& c : kFloatUnary) {
    SCOPED_TRACE(std::string(hlo::OpcodeName(c.op)) + " on " +
                 std::string(DTypeName(DTypeOf<T>::value)));
    std::vector<T> x = Random<T>(1000, 7, c.lo, c.hi);
    // Ties for rounding, signed zeros, NaN and infinities.
    for (double s : {0.0, -0.0, 0.5, -0.5, 1.5, 2.5, -2.5, -0.3, kNaN, kInf, -kInf})
      x.push_back(static_cast<T>(s));
    std::vector<T> expected;
    for (T v : x) expected.push_back(UnaryReference(c.op, v));
    EXPECT_TRUE(AllClose(expected, RunUnary(c.op, x), rel));
  }
}

TEST(ElementwiseUnary, FloatOpsMatchStdMath) {
  CheckFloatUnary<float>();
  CheckFloatUnary<double>();
}

TEST(ElementwiseUnary, ExpAtTheEdgesOfFloat) {
  // The vectorized exp leaves its polynomial where 2^k stops being normal:
  // subnormal results, overflow, 0 below -104 (and for masked -inf scores),
  // NaN. Mixed into a long run of ordinary values so every path runs in one
  // call, and in both halves of the 512-element chunks.
  std::vector<float> edges = {-INFINITY, -1000.f, -104.5f, -104.f, -103.9f, -100.f, -95.f,
                              -90.f,     -87.5f,  -87.f,   -86.9f, 0.f,     -0.f,   1e-30f,
                              87.9f,     88.f,    88.5f,   88.72f, 88.8f,   100.f,  INFINITY};
  std::vector<float> x = Random<float>(3000, 11, -30, 30);
  for (size_t i = 0; i < edges.size(); ++i) x[i * 97 + 5] = edges[i];
  x[2999] = NAN;
  std::vector<float> got = RunUnary(Opcode::kExp, x);
  for (size_t i = 0; i < x.size(); ++i) {
    float want = std::exp(x[i]);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got[i])) << x[i];
    } else if (want == 0 || std::isinf(want) || want < 1.2e-38f) {
      EXPECT_EQ(got[i], want) << "exp(" << x[i] << ")";  // zero, subnormal, infinity: exact
    } else {
      EXPECT_NEAR(got[i], want, 2.5e-7 * want) << "exp(" << x[i] << ")";
    }
  }
}

// The vectorized tanh: a polynomial below |x| = 0.625, e^{2|x|} above, 1
// beyond 9. Checked in ulps of the double-precision tanh rounded to float,
// on a dense sweep and on each branch's edges, in one long call so every
// chunk boundary is crossed.
TEST(ElementwiseUnary, TanhWithinTwoUlpsOnEveryBranch) {
  std::vector<float> x = Random<float>(4000, 13, -12, 12);
  const std::vector<float> edges = {
      0.f, -0.f,  1e-30f, -1e-30f, 1e-8f, 0.1f, 0.6249f, 0.625f,  -0.625f,  0.6251f,  1.f,
      4.f, 8.99f, 9.f,    9.01f,   -9.5f, 20.f, 100.f,   -1000.f, INFINITY, -INFINITY};
  for (size_t i = 0; i < edges.size(); ++i) x[i * 131 + 7] = edges[i];
  for (int i = 0; i < 200; ++i)
    x[3000 + i] = -0.7f + 0.007f * static_cast<float>(i);  // around 0.625
  x[3999] = NAN;
  const std::vector<float> got = RunUnary(Opcode::kTanh, x);
  for (size_t i = 0; i < x.size(); ++i) {
    const float want = static_cast<float>(std::tanh(static_cast<double>(x[i])));
    if (std::isnan(x[i])) {
      EXPECT_TRUE(std::isnan(got[i]));
      continue;
    }
    EXPECT_EQ(std::signbit(got[i]), std::signbit(want)) << "tanh(" << x[i] << ")";
    const double ulp = std::max(static_cast<double>(std::fabs(std::nextafter(want, 2.0f) - want)),
                                static_cast<double>(std::numeric_limits<float>::denorm_min()));
    const double error = std::fabs(static_cast<double>(got[i]) - want) / ulp;
    EXPECT_LE(error, 2.0) << "tanh(" << x[i] << "): got " << got[i] << ", want " << want;
  }
}

TEST(ElementwiseUnary, SignedZeroAndNaN) {
  auto sign_bits = [](const std::vector<float>& v) {
    std::vector<bool> bits;
    for (float f : v) bits.push_back(std::signbit(f));
    return bits;
  };
  std::vector<float> x = {0.0f, -0.0f, -0.3f};
  EXPECT_EQ(sign_bits(RunUnary(Opcode::kNegate, x)), (std::vector<bool>{true, false, false}));
  EXPECT_EQ(sign_bits(RunUnary(Opcode::kAbs, x)), (std::vector<bool>{false, false, false}));
  EXPECT_EQ(sign_bits(RunUnary(Opcode::kSign, x)), (std::vector<bool>{false, true, true}));
  EXPECT_EQ(sign_bits(RunUnary(Opcode::kCeil, x)), (std::vector<bool>{false, true, true}));
  EXPECT_EQ(sign_bits(RunUnary(Opcode::kRoundNearestEven, x)),
            (std::vector<bool>{false, true, true}));
  EXPECT_TRUE(std::isnan(RunUnary(Opcode::kSign, std::vector<float>{NAN})[0]));
  EXPECT_EQ(RunUnary(Opcode::kRoundNearestEven, std::vector<double>{0.5, 1.5, 2.5, -3.5, 4.4}),
            (std::vector<double>{0, 2, 2, -4, 4}));
}

// Integer unary ops wrap like two's complement hardware: -INT_MIN == INT_MIN.
template <typename T>
T IntUnaryReference(Opcode op, T x) {
  using U = std::make_unsigned_t<T>;
  const T negated = static_cast<T>(U(0) - static_cast<U>(x));
  switch (op) {
    case Opcode::kNegate:
      return negated;
    case Opcode::kAbs:
      return x < T(0) ? negated : x;
    case Opcode::kSign:
      return x > T(0) ? T(1) : x < T(0) ? T(-1) : T(0);
    case Opcode::kNot:
      return static_cast<T>(~static_cast<U>(x));
    default:
      return x;
  }
}

template <typename T>
void CheckIntUnary() {
  using L = std::numeric_limits<T>;
  std::vector<T> x = RandomBits<T>(500, 3);
  for (T s : {L::min(), L::max(), T(0), T(1), static_cast<T>(-1), T(5)}) x.push_back(s);
  for (Opcode op : {Opcode::kNegate, Opcode::kAbs, Opcode::kSign, Opcode::kNot}) {
    SCOPED_TRACE(std::string(hlo::OpcodeName(op)) + " on " +
                 std::string(DTypeName(DTypeOf<T>::value)));
    std::vector<T> expected;
    for (T v : x) expected.push_back(IntUnaryReference(op, v));
    EXPECT_TRUE(AllClose(expected, RunUnary(op, x)));
  }
}

TEST(ElementwiseUnary, IntegerOpsWrap) {
  CheckIntUnary<int8_t>();
  CheckIntUnary<int32_t>();
  CheckIntUnary<int64_t>();
  CheckIntUnary<uint8_t>();
  CheckIntUnary<uint32_t>();
  CheckIntUnary<uint64_t>();
  EXPECT_EQ(RunUnary(Opcode::kAbs, std::vector<int32_t>{INT32_MIN, -5})[0], INT32_MIN);
  EXPECT_EQ(RunUnary(Opcode::kNot, std::vector<bool>{true, false}),
            (std::vector<bool>{false, true}));
}

template <typename T>
T MaxPropagatingNaN(T a, T b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<T>::quiet_NaN();
  return a > b ? a : b;
}
template <typename T>
T MinPropagatingNaN(T a, T b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<T>::quiet_NaN();
  return a < b ? a : b;
}

template <typename T>
T FloatBinaryReference(Opcode op, T a, T b) {
  long double x = a, y = b;
  switch (op) {
    case Opcode::kAdd:
      return a + b;
    case Opcode::kSubtract:
      return a - b;
    case Opcode::kMultiply:
      return a * b;
    case Opcode::kDivide:
      return a / b;
    case Opcode::kMaximum:
      return MaxPropagatingNaN(a, b);
    case Opcode::kMinimum:
      return MinPropagatingNaN(a, b);
    case Opcode::kPower:
      return static_cast<T>(std::pow(x, y));
    case Opcode::kRemainder:
      return static_cast<T>(std::fmod(x, y));
    case Opcode::kAtan2:
      return static_cast<T>(std::atan2(x, y));
    default:
      ADD_FAILURE() << "no reference for " << hlo::OpcodeName(op);
      return a;
  }
}

template <typename T>
void CheckFloatBinary() {
  const double rel = 8 * std::numeric_limits<T>::epsilon();
  std::vector<T> a = Random<T>(1000, 11, -10, 10), b = Random<T>(1000, 12, -10, 10);
  // Integral exponents so that power sees negative bases with real results.
  for (size_t i = 0; i < b.size(); i += 2) b[i] = std::round(b[i] / 2);
  const double specials[][2] = {{kNaN, 1},     {1, kNaN}, {kNaN, kNaN}, {kInf, 1}, {1, kInf},
                                {-kInf, kInf}, {1, 0},    {-1, 0},      {0, 0},    {-0.0, 0},
                                {0, -2},       {-2, 3},   {2, -3},      {-8, 0.5}, {7, -2},
                                {-7, 2},       {1, kNaN}, {kNaN, 0}};
  for (const auto& [x, y] : specials) {
    a.push_back(static_cast<T>(x));
    b.push_back(static_cast<T>(y));
  }
  for (Opcode op :
       {Opcode::kAdd, Opcode::kSubtract, Opcode::kMultiply, Opcode::kDivide, Opcode::kMaximum,
        Opcode::kMinimum, Opcode::kPower, Opcode::kRemainder, Opcode::kAtan2}) {
    SCOPED_TRACE(std::string(hlo::OpcodeName(op)) + " on " +
                 std::string(DTypeName(DTypeOf<T>::value)));
    std::vector<T> expected;
    for (size_t i = 0; i < a.size(); ++i) expected.push_back(FloatBinaryReference(op, a[i], b[i]));
    EXPECT_TRUE(AllClose(expected, RunBinary(op, a, b), rel));
  }
}

TEST(ElementwiseBinary, FloatOpsMatchStdMath) {
  CheckFloatBinary<float>();
  CheckFloatBinary<double>();
}

TEST(ElementwiseBinary, NaNPropagates) {
  std::vector<float> a = {NAN, 1, NAN, 1, 2}, b = {1, NAN, 1, NAN, 3};
  for (Opcode op : {Opcode::kAdd, Opcode::kMaximum, Opcode::kMinimum}) {
    auto out = RunBinary(op, a, b);
    for (int i = 0; i < 4; ++i)
      EXPECT_TRUE(std::isnan(out[i])) << hlo::OpcodeName(op) << " element " << i;
    EXPECT_FALSE(std::isnan(out[4]));
  }
}

// XLA's integer semantics: wrapping arithmetic, x / 0 = -1 (all bits set),
// x % 0 = x, INT_MIN / -1 = INT_MIN, shifts by >= the bit width saturate,
// negative powers are 0 unless the base is 1.
template <typename T>
T IntBinaryReference(Opcode op, T a, T b) {
  using U = std::make_unsigned_t<T>;
  constexpr U kBits = sizeof(T) * 8;
  const U ua = static_cast<U>(a), ub = static_cast<U>(b);
  const bool int_min_by_minus_one =
      std::is_signed_v<T> && a == std::numeric_limits<T>::min() && b == T(-1);
  switch (op) {
    case Opcode::kAdd:
      return static_cast<T>(ua + ub);
    case Opcode::kSubtract:
      return static_cast<T>(ua - ub);
    case Opcode::kMultiply:
      return static_cast<T>(ua * ub);
    case Opcode::kDivide:
      return b == 0 ? static_cast<T>(~U(0)) : int_min_by_minus_one ? a : static_cast<T>(a / b);
    case Opcode::kRemainder:
      return b == 0 ? a : int_min_by_minus_one ? T(0) : static_cast<T>(a % b);
    case Opcode::kMaximum:
      return a > b ? a : b;
    case Opcode::kMinimum:
      return a < b ? a : b;
    case Opcode::kAnd:
      return static_cast<T>(ua & ub);
    case Opcode::kOr:
      return static_cast<T>(ua | ub);
    case Opcode::kXor:
      return static_cast<T>(ua ^ ub);
    case Opcode::kShiftLeft:
      return ub >= kBits ? T(0) : static_cast<T>(static_cast<U>(ua << ub));
    case Opcode::kShiftRightLogical:
      return ub >= kBits ? T(0) : static_cast<T>(ua >> ub);
    case Opcode::kShiftRightArithmetic: {  // the top bit is the sign, also for unsigned types
      U fill = static_cast<std::make_signed_t<T>>(a) < 0 ? static_cast<U>(~U(0)) : U(0);
      if (ub >= kBits) return static_cast<T>(fill);
      if (ub == 0) return a;
      return static_cast<T>(static_cast<U>(ua >> ub) | static_cast<U>(fill << (kBits - ub)));
    }
    case Opcode::kPower: {
      if constexpr (std::is_signed_v<T>) {
        if (b < 0) return a == T(1) ? T(1) : T(0);
      }
      U result = 1;
      for (U i = 0; i < ub; ++i) result = static_cast<U>(result * ua);
      return static_cast<T>(result);
    }
    default:
      ADD_FAILURE() << "no reference for " << hlo::OpcodeName(op);
      return a;
  }
}

template <typename T>
void CheckIntBinary() {
  using L = std::numeric_limits<T>;
  constexpr int kBits = sizeof(T) * 8;
  // Half small values (signs, exact division), half arbitrary bit patterns.
  std::vector<T> a = Random<T>(400, 21, std::is_signed_v<T> ? -20 : 0, 20);
  std::vector<T> b = Random<T>(400, 22, std::is_signed_v<T> ? -6 : 0, 6);
  std::vector<T> wide_a = RandomBits<T>(400, 23), wide_b = RandomBits<T>(400, 24);
  a.insert(a.end(), wide_a.begin(), wide_a.end());
  b.insert(b.end(), wide_b.begin(), wide_b.end());
  const T specials[][2] = {
      {L::min(), static_cast<T>(-1)}, {L::min(), 0}, {L::max(), 0}, {0, 0}, {L::max(), L::max()}};
  for (const auto& [x, y] : specials) {
    a.push_back(x);
    b.push_back(y);
  }
  // Shift amounts and exponents around the bit width (negative ones too).
  std::vector<T> amounts = Random<T>(a.size(), 25, std::is_signed_v<T> ? -2 : 0, 2 * kBits);
  std::vector<T> exponents = Random<T>(a.size(), 26, std::is_signed_v<T> ? -3 : 0, kBits + 2);
  for (Opcode op :
       {Opcode::kAdd, Opcode::kSubtract, Opcode::kMultiply, Opcode::kDivide, Opcode::kRemainder,
        Opcode::kMaximum, Opcode::kMinimum, Opcode::kAnd, Opcode::kOr, Opcode::kXor, Opcode::kPower,
        Opcode::kShiftLeft, Opcode::kShiftRightLogical, Opcode::kShiftRightArithmetic}) {
    SCOPED_TRACE(std::string(hlo::OpcodeName(op)) + " on " +
                 std::string(DTypeName(DTypeOf<T>::value)));
    const bool shift = op == Opcode::kShiftLeft || op == Opcode::kShiftRightLogical ||
                       op == Opcode::kShiftRightArithmetic;
    const std::vector<T>& rhs = shift ? amounts : op == Opcode::kPower ? exponents : b;
    std::vector<T> expected;
    for (size_t i = 0; i < a.size(); ++i) expected.push_back(IntBinaryReference(op, a[i], rhs[i]));
    EXPECT_TRUE(AllClose(expected, RunBinary(op, a, rhs)));
  }
}

TEST(ElementwiseBinary, IntegerOpsFollowXla) {
  CheckIntBinary<int8_t>();
  CheckIntBinary<int32_t>();
  CheckIntBinary<int64_t>();
  CheckIntBinary<uint8_t>();
  CheckIntBinary<uint32_t>();
  CheckIntBinary<uint64_t>();
}

TEST(ElementwiseBinary, IntegerCornerCasesByHand) {
  struct Case {
    Opcode op;
    int32_t a, b, expected;
  };
  // clang-format off
  const Case cases[] = {
      {Opcode::kDivide, -7, 2, -3},         {Opcode::kDivide, 7, -2, -3},
      {Opcode::kDivide, -7, 0, -1},         {Opcode::kDivide, 5, 0, -1},
      {Opcode::kDivide, INT32_MIN, -1, INT32_MIN},
      {Opcode::kRemainder, -7, 2, -1},      {Opcode::kRemainder, 7, -2, 1},
      {Opcode::kRemainder, -7, -2, -1},     {Opcode::kRemainder, 5, 0, 5},
      {Opcode::kRemainder, INT32_MIN, -1, 0},
      {Opcode::kShiftLeft, 1, 31, INT32_MIN}, {Opcode::kShiftLeft, 1, 32, 0},
      {Opcode::kShiftLeft, 1, -1, 0},       {Opcode::kShiftRightLogical, -8, 1, 0x7FFFFFFC},
      {Opcode::kShiftRightLogical, -1, 32, 0}, {Opcode::kShiftRightArithmetic, -8, 1, -4},
      {Opcode::kShiftRightArithmetic, -8, 40, -1}, {Opcode::kShiftRightArithmetic, 8, 40, 0},
      {Opcode::kPower, 2, 10, 1024},        {Opcode::kPower, -2, 3, -8},
      {Opcode::kPower, 0, 0, 1},            {Opcode::kPower, 2, -1, 0},
      {Opcode::kPower, 1, -5, 1},           {Opcode::kPower, -1, -3, 0},
      {Opcode::kPower, 3, 21, 1870418611},  // 3^21 wrapped to 32 bits
  };
  // clang-format on
  for (const Case& c : cases) {
    EXPECT_EQ(RunBinary<int32_t>(c.op, {c.a}, {c.b})[0], c.expected)
        << c.a << " " << hlo::OpcodeName(c.op) << " " << c.b;
  }
  EXPECT_EQ(RunBinary<uint32_t>(Opcode::kDivide, {7u}, {0u})[0], 0xFFFFFFFFu);
  EXPECT_EQ(RunBinary<uint32_t>(Opcode::kRemainder, {7u}, {0u})[0], 7u);
  EXPECT_EQ(RunBinary<int64_t>(Opcode::kDivide, {INT64_MIN}, {-1})[0], INT64_MIN);
  EXPECT_EQ(RunBinary<int64_t>(Opcode::kShiftRightArithmetic, {INT64_MIN}, {64})[0], -1);
}

TEST(ElementwiseBinary, PredLogic) {
  std::vector<bool> a = {false, false, true, true}, b = {false, true, false, true};
  EXPECT_EQ(RunBinary(Opcode::kAnd, a, b), (std::vector<bool>{false, false, false, true}));
  EXPECT_EQ(RunBinary(Opcode::kOr, a, b), (std::vector<bool>{false, true, true, true}));
  EXPECT_EQ(RunBinary(Opcode::kXor, a, b), (std::vector<bool>{false, true, true, false}));
}

template <typename T>
bool CompareReference(Comparison c, T a, T b) {
  switch (c) {
    case Comparison::kEq:
      return a == b;
    case Comparison::kNe:
      return !(a == b);
    case Comparison::kLt:
      return a < b;
    case Comparison::kLe:
      return a <= b;
    case Comparison::kGt:
      return a > b;
    case Comparison::kGe:
      return a >= b;
  }
  return false;
}

template <typename T>
void CheckCompare(std::vector<T> a, std::vector<T> b) {
  const int64_t n = static_cast<int64_t>(a.size());
  for (Comparison c : {Comparison::kEq, Comparison::kNe, Comparison::kLt, Comparison::kLe,
                       Comparison::kGt, Comparison::kGe}) {
    SCOPED_TRACE(std::string(hlo::ComparisonName(c)) + " on " +
                 std::string(DTypeName(DTypeOf<T>::value)));
    Graph g({VectorShape<T>(n), VectorShape<T>(n)});
    auto out = ToHost<bool>(
        g.Run(g.b.Compare(g.params[0], g.params[1], c), {Arg(a, {n}), Arg(b, {n})})[0]);
    std::vector<bool> expected;
    for (int64_t i = 0; i < n; ++i) expected.push_back(CompareReference(c, a[i], b[i]));
    EXPECT_EQ(out, expected);
  }
}

TEST(Compare, AllDirectionsAndTypes) {
  std::vector<float> fa = Random<float>(200, 31, -3, 3), fb = Random<float>(200, 32, -3, 3);
  for (size_t i = 0; i < 40; ++i) fb[i] = fa[i];  // equal pairs
  const std::pair<float, float> specials[] = {
      {NAN, 1.0f}, {1.0f, NAN}, {NAN, NAN}, {-0.0f, 0.0f}, {INFINITY, INFINITY}};
  for (const auto& [x, y] : specials) {
    fa.push_back(x);
    fb.push_back(y);
  }
  CheckCompare(fa, fb);
  CheckCompare(std::vector<double>(fa.begin(), fa.end()),
               std::vector<double>(fb.begin(), fb.end()));
  CheckCompare(Random<int32_t>(200, 33, -3, 3), Random<int32_t>(200, 34, -3, 3));
  CheckCompare(Random<int64_t>(200, 35, -3, 3), Random<int64_t>(200, 36, -3, 3));
  // Unsigned: 0x80000000 is large, not negative.
  CheckCompare(std::vector<uint32_t>{0x80000000u, 1, 5, 0xFFFFFFFFu},
               std::vector<uint32_t>{1, 0x80000000u, 5, 0});
  CheckCompare(std::vector<uint8_t>{200, 1, 7}, std::vector<uint8_t>{1, 200, 7});
  CheckCompare(std::vector<bool>{false, false, true, true},
               std::vector<bool>{false, true, false, true});
}

TEST(Compare, NaNIsUnorderedByHand) {
  auto run = [](Comparison c) {
    Graph g({VectorShape<float>(2), VectorShape<float>(2)});
    return ToHost<bool>(g.Run(g.b.Compare(g.params[0], g.params[1], c),
                              {Arg<float>({NAN, NAN}, {2}), Arg<float>({NAN, 1}, {2})})[0]);
  };
  EXPECT_EQ(run(Comparison::kNe), (std::vector<bool>{true, true}));
  EXPECT_EQ(run(Comparison::kEq), (std::vector<bool>{false, false}));
  EXPECT_EQ(run(Comparison::kLt), (std::vector<bool>{false, false}));
  EXPECT_EQ(run(Comparison::kGe), (std::vector<bool>{false, false}));
}

template <typename T>
void CheckSelect() {
  const int64_t n = 300;
  std::vector<bool> p;
  for (int v : Random<int32_t>(n, 41, 0, 1)) p.push_back(v != 0);
  std::vector<T> x = Random<T>(n, 42, -100, 100), y = Random<T>(n, 43, -100, 100);
  Shape vec = VectorShape<T>(n);
  {
    Graph g({Shape(DType::kPred, {n}), vec, vec});
    auto out = g.Run(g.b.Select(g.params[0], g.params[1], g.params[2]),
                     {Arg(p, {n}), Arg(x, {n}), Arg(y, {n})});
    std::vector<T> expected;
    for (int64_t i = 0; i < n; ++i) expected.push_back(p[i] ? x[i] : y[i]);
    EXPECT_EQ(ToHost<T>(out[0]), expected);
  }
  for (bool scalar : {true, false}) {
    Graph g({Shape(DType::kPred, {}), vec, vec});
    auto out = g.Run(g.b.Select(g.params[0], g.params[1], g.params[2]),
                     {Arg(std::vector<bool>{scalar}, {}), Arg(x, {n}), Arg(y, {n})});
    EXPECT_EQ(ToHost<T>(out[0]), scalar ? x : y);
  }
}

TEST(Select, ArrayAndScalarPredicate) {
  CheckSelect<float>();
  CheckSelect<int32_t>();
  CheckSelect<double>();
}

template <typename T>
void CheckClamp() {
  const int64_t n = 300;
  std::vector<T> x = Random<T>(n, 51, -100, 100), lo = Random<T>(n, 52, -60, 0),
                 hi = Random<T>(n, 53, 0, 60);
  for (bool scalar_bounds : {false, true}) {
    SCOPED_TRACE(scalar_bounds ? "scalar bounds" : "array bounds");
    std::vector<int64_t> bound_dims =
        scalar_bounds ? std::vector<int64_t>{} : std::vector<int64_t>{n};
    std::vector<T> l = scalar_bounds ? std::vector<T>{T(-10)} : lo,
                   h = scalar_bounds ? std::vector<T>{T(25)} : hi;
    Graph g({Shape(DTypeOf<T>::value, bound_dims), VectorShape<T>(n),
             Shape(DTypeOf<T>::value, bound_dims)});
    auto out = g.Run(g.b.Clamp(g.params[0], g.params[1], g.params[2]),
                     {Arg(l, bound_dims), Arg(x, {n}), Arg(h, bound_dims)});
    std::vector<T> expected;
    for (int64_t i = 0; i < n; ++i) {
      T low = l[scalar_bounds ? 0 : i], high = h[scalar_bounds ? 0 : i];
      expected.push_back(x[i] < low ? low : x[i] > high ? high : x[i]);
    }
    EXPECT_EQ(ToHost<T>(out[0]), expected);
  }
}

TEST(Clamp, ArrayAndScalarBounds) {
  CheckClamp<float>();
  CheckClamp<int32_t>();
  CheckClamp<int64_t>();
}

TEST(IsFinite, SpecialValues) {
  std::vector<double> x = {0, -0.0, 1.5, -1e30, 1e-40, kNaN, kInf, -kInf};
  std::vector<bool> expected = {true, true, true, true, true, false, false, false};
  for (DType t : {DType::kF32, DType::kF64}) {
    Graph g({Shape(DType::kF64, {8})});
    auto* converted = t == DType::kF64 ? g.params[0] : g.b.Convert(g.params[0], t);
    EXPECT_EQ(ToHost<bool>(g.Run(g.b.IsFinite(converted), {Arg(x, {8})})[0]), expected)
        << DTypeName(t);
  }
}

// --- convert -----------------------------------------------------------------
// Values travel as long double, which holds every value of every dtype here
// exactly (64-bit significand), so each expected result is rounded only once.
static_assert(std::numeric_limits<long double>::digits >= 64);

struct TypeDesc {
  DType dtype;
  int bytes;
  bool is_float, is_signed;
  int mantissa_bits = 0, min_exponent = 0, max_exponent = 0;  // floats: normal exponent range
};
// clang-format off
constexpr TypeDesc kTypes[] = {
    {DType::kPred, 1, false, false},       {DType::kS8, 1, false, true},
    {DType::kS32, 4, false, true},         {DType::kS64, 8, false, true},
    {DType::kU8, 1, false, false},         {DType::kU32, 4, false, false},
    {DType::kU64, 8, false, false},        {DType::kF16, 2, true, true, 10, -14, 15},
    {DType::kBF16, 2, true, true, 7, -126, 127}, {DType::kF32, 4, true, true, 23, -126, 127},
    {DType::kF64, 8, true, true, 52, -1022, 1023},
};
// clang-format on

long double IntMin(const TypeDesc& t) {
  return t.is_signed ? -std::ldexp(1.0L, 8 * t.bytes - 1) : 0;
}
long double IntMax(const TypeDesc& t) {
  return t.dtype == DType::kPred ? 1 : std::ldexp(1.0L, 8 * t.bytes - (t.is_signed ? 1 : 0)) - 1;
}

// Round to nearest even into a float format; overflow goes to infinity.
long double RoundToFormat(long double v, const TypeDesc& t) {
  if (v == 0 || !std::isfinite(v)) return v;
  int e;
  std::frexp(std::fabs(v), &e);  // |v| in [2^(e-1), 2^e)
  long double ulp = std::ldexp(1.0L, std::max(e - 1, t.min_exponent) - t.mantissa_bits);
  long double r = std::nearbyint(v / ulp) * ulp;
  if (std::fabs(r) >= std::ldexp(1.0L, t.max_exponent + 1)) return std::copysign(INFINITY, v);
  return r;
}

bool Representable(long double v, const TypeDesc& t) {
  if (t.is_float) return std::isnan(v) || RoundToFormat(v, t) == v;
  return std::isfinite(v) && v == std::trunc(v) && v >= IntMin(t) && v <= IntMax(t);
}

uint16_t EncodeHalf(long double v) {  // v must be exactly representable
  uint16_t sign = std::signbit(v) ? 0x8000 : 0;
  v = std::fabs(v);
  if (std::isnan(v)) return 0x7e00;
  if (std::isinf(v)) return sign | 0x7c00;
  if (v == 0) return sign;
  int e;
  std::frexp(v, &e);
  if (e - 1 < -14) return sign | static_cast<uint16_t>(std::ldexp(v, 24));  // subnormal
  return sign | static_cast<uint16_t>((e - 1 + 15) << 10) |
         static_cast<uint16_t>(std::ldexp(v, 11 - e) - 1024);
}

long double DecodeHalf(uint16_t h) {
  int exponent = (h >> 10) & 31, mantissa = h & 1023;
  long double v = exponent == 0 ? std::ldexp(static_cast<long double>(mantissa), -24)
                  : exponent == 31
                      ? (mantissa ? NAN : INFINITY)
                      : std::ldexp(static_cast<long double>(1024 + mantissa), exponent - 25);
  return h & 0x8000 ? -v : v;
}

void Encode(long double v, const TypeDesc& t, uint8_t* p) {
  switch (t.dtype) {
    case DType::kF16: {
      uint16_t h = EncodeHalf(v);
      std::memcpy(p, &h, 2);
      return;
    }
    case DType::kBF16: {
      uint16_t h = static_cast<uint16_t>(std::bit_cast<uint32_t>(static_cast<float>(v)) >> 16);
      std::memcpy(p, &h, 2);
      return;
    }
    case DType::kF32: {
      float f = static_cast<float>(v);
      std::memcpy(p, &f, 4);
      return;
    }
    case DType::kF64: {
      double d = static_cast<double>(v);
      std::memcpy(p, &d, 8);
      return;
    }
    default: {  // integers: little-endian two's complement
      uint64_t bits =
          v < 0 ? static_cast<uint64_t>(static_cast<int64_t>(v)) : static_cast<uint64_t>(v);
      std::memcpy(p, &bits, t.bytes);
    }
  }
}

long double Decode(const uint8_t* p, const TypeDesc& t) {
  switch (t.dtype) {
    case DType::kF16:
      return DecodeHalf(static_cast<uint16_t>(p[0] | p[1] << 8));
    case DType::kBF16:
      return std::bit_cast<float>(static_cast<uint32_t>(p[0] | p[1] << 8) << 16);
    case DType::kF32:
      return std::bit_cast<float>(
          static_cast<uint32_t>(p[0] | p[1] << 8 | p[2] << 16 | p[3] << 24));
    case DType::kF64: {
      double d;
      std::memcpy(&d, p, 8);
      return d;
    }
    default: {
      uint64_t bits = 0;
      std::memcpy(&bits, p, t.bytes);
      const int unused = 64 - 8 * t.bytes;
      if (t.is_signed) return static_cast<int64_t>(bits << unused) >> unused;
      return bits;  // pred: the raw byte, so 2 would not pass as true
    }
  }
}

// XLA's convert: to pred is != 0; float to integer truncates, saturates and
// maps NaN to 0; integer to integer wraps; to float rounds to nearest even.
long double ExpectedConversion(long double v, const TypeDesc& from, const TypeDesc& to) {
  if (to.dtype == DType::kPred) return (v != 0 || std::isnan(v)) ? 1 : 0;
  if (to.is_float) return std::isnan(v) ? v : RoundToFormat(v, to);
  if (from.is_float) {
    if (std::isnan(v)) return 0;
    return std::clamp(std::trunc(v), IntMin(to), IntMax(to));
  }
  uint64_t bits = v < 0 ? static_cast<uint64_t>(static_cast<int64_t>(v)) : static_cast<uint64_t>(v);
  std::vector<uint8_t> bytes(8);
  std::memcpy(bytes.data(), &bits, 8);
  return Decode(bytes.data(), to);
}

long double Pow2(int e) { return std::ldexp(1.0L, e); }

// clang-format off
const std::vector<long double> kConvertValues = {
    0, 1, -1, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 0.25, 3.75, -3.75, 100.25, 127, 128, -128, -129, 200, 255,
    256, 300, -300, 1000.5,
    2049, 2051, 65504, 65519, 65520, 70000,           // f16: ties at 2048 + 1, 2048 + 3; overflow at 65520
    1 + Pow2(-11), 1 + 3 * Pow2(-11),                 // f16 ties: to 1, to 1 + 2^-9
    1 + Pow2(-8), 1 + 3 * Pow2(-8),                   // bf16 ties: to 1, to 1 + 2^-6
    1 + Pow2(-11) + Pow2(-40), 1 + Pow2(-8) + Pow2(-40),  // just above a tie: must round up
    Pow2(24) + 1, Pow2(24) + Pow2(16) + 1,            // f32 tie; above a bf16 tie
    Pow2(-24), 3 * Pow2(-26), Pow2(-25), Pow2(-25) + Pow2(-40),  // f16 subnormals
    Pow2(31) - 1, Pow2(31), -Pow2(31), -Pow2(31) - 1, Pow2(32) - 1, Pow2(32), Pow2(53) + 1,
    Pow2(63) - 1, -Pow2(63), Pow2(64) - 1, static_cast<long double>(1e20f), static_cast<long double>(-1e20f),
    static_cast<long double>(3.0e38f), 1e300, static_cast<long double>(0.1f), static_cast<long double>(0.1),
    NAN, INFINITY, -INFINITY};
// clang-format on

TEST(Convert, EveryPairOfTypes) {
  for (const TypeDesc& from : kTypes) {
    std::vector<long double> inputs;
    for (long double v : kConvertValues) {
      if (Representable(v, from)) inputs.push_back(v);
    }
    const int64_t n = static_cast<int64_t>(inputs.size());
    std::vector<uint8_t> bytes(n * from.bytes);
    for (int64_t i = 0; i < n; ++i) Encode(inputs[i], from, bytes.data() + i * from.bytes);
    Buffer x = Buffer::FromHost(Shape(from.dtype, {n}), bytes, Cpu());
    for (const TypeDesc& to : kTypes) {
      SCOPED_TRACE(std::string(DTypeName(from.dtype)) + " -> " + std::string(DTypeName(to.dtype)));
      Graph g({x.shape()});
      Buffer out = g.Run(g.b.Convert(g.params[0], to.dtype), {x})[0];
      int bad = 0;
      for (int64_t i = 0; i < n && bad < 5; ++i) {
        long double expected = ExpectedConversion(inputs[i], from, to);
        long double got = Decode(out.data() + i * to.bytes, to);
        if (expected == got || (std::isnan(expected) && std::isnan(got))) continue;
        ++bad;
        ADD_FAILURE() << "convert(" << Show(inputs[i]) << "): expected " << Show(expected)
                      << ", got " << Show(got);
      }
    }
  }
}

TEST(BitcastConvert, ReinterpretsBits) {
  std::vector<float> f = {1.0f, -0.0f, INFINITY, 3.5f, std::bit_cast<float>(0x7fc00001u)};
  std::vector<uint32_t> bits;
  for (float v : f) bits.push_back(std::bit_cast<uint32_t>(v));
  const int64_t n = static_cast<int64_t>(f.size());
  {
    Graph g({Shape(DType::kF32, {n})});
    EXPECT_EQ(
        g.Run(g.b.BitcastConvert(g.params[0], DType::kU32), {Arg(f, {n})})[0].ToVector<uint32_t>(),
        bits);
  }
  {
    Graph g({Shape(DType::kF32, {n})});
    auto out =
        g.Run(g.b.BitcastConvert(g.params[0], DType::kS32), {Arg(f, {n})})[0].ToVector<int32_t>();
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(static_cast<uint32_t>(out[i]), bits[i]);
  }
  {
    Graph g({Shape(DType::kU32, {n})});
    auto out =
        g.Run(g.b.BitcastConvert(g.params[0], DType::kF32), {Arg(bits, {n})})[0].ToVector<float>();
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(std::bit_cast<uint32_t>(out[i]), bits[i]);
  }
  {
    std::vector<int64_t> words = {0, INT64_MIN, 0x3ff0000000000000};
    Graph g({Shape(DType::kS64, {3})});
    auto out = g.Run(g.b.BitcastConvert(g.params[0], DType::kF64), {Arg(words, {3})})[0]
                   .ToVector<double>();
    EXPECT_EQ(out[0], 0.0);
    EXPECT_TRUE(out[1] == 0.0 && std::signbit(out[1]));
    EXPECT_EQ(out[2], 1.0);
  }
}

}  // namespace
}  // namespace strata::runtime::test
