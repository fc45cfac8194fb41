// Elementwise ops against loops over std::vector data: broadcasting, torch's
// type promotion table, scalars, unary functions, comparisons, where, clamp.
#include <limits>
#include <numbers>

#include "lazy/op_test_util.h"
#include "strata/lazy/context.h"

namespace strata::test {
namespace {

// Result of a broadcasting binary op computed with index loops.
template <typename R, typename A, typename B, typename F>
std::vector<R> BroadcastReference(const std::vector<A>& a, const Dims& a_dims,
                                  const std::vector<B>& b, const Dims& b_dims, const Dims& out_dims,
                                  F f) {
  auto source = [&](const Dims& index, const Dims& dims) {
    Dims i(dims.size());
    size_t offset = out_dims.size() - dims.size();
    for (size_t d = 0; d < dims.size(); ++d) i[d] = dims[d] == 1 ? 0 : index[offset + d];
    return Ravel(i, dims);
  };
  return Tabulate<R>(out_dims,
                     [&](const Dims& i) { return f(a[source(i, a_dims)], b[source(i, b_dims)]); });
}

TEST(Elementwise, ArithmeticBroadcasts) {
  Dims a_dims = {2, 1, 3}, b_dims = {4, 1}, out = {2, 4, 3};
  auto a = RandomValues<float>(6, 1);
  auto b = RandomValues<float>(4, 2, 0.5, 3);
  Tensor ta = Tensor::FromVector(a, a_dims), tb = Tensor::FromVector(b, b_dims);
  ExpectTensor<float>(ta + tb, out,
                      BroadcastReference<float>(a, a_dims, b, b_dims, out, std::plus<float>()));
  ExpectTensor<float>(ta - tb, out,
                      BroadcastReference<float>(a, a_dims, b, b_dims, out, std::minus<float>()));
  ExpectTensor<float>(
      ta * tb, out, BroadcastReference<float>(a, a_dims, b, b_dims, out, std::multiplies<float>()));
  ExpectTensor<float>(ta / tb, out,
                      BroadcastReference<float>(a, a_dims, b, b_dims, out, std::divides<float>()),
                      1e-6);
  ExpectTensor<float>(maximum(ta, tb), out,
                      BroadcastReference<float>(a, a_dims, b, b_dims, out,
                                                [](float x, float y) { return std::max(x, y); }));
  ExpectTensor<float>(minimum(tb, ta), out,
                      BroadcastReference<float>(b, b_dims, a, a_dims, out,
                                                [](float x, float y) { return std::min(x, y); }));
  ExpectTensor<float>(-ta, a_dims, {-a[0], -a[1], -a[2], -a[3], -a[4], -a[5]});
}

TEST(Elementwise, ScalarsOnEitherSide) {
  Tensor x = Tensor::FromVector<float>({1, 2, 4}, {3});
  ExpectTensor<float>(x + 1.5, {3}, {2.5f, 3.5f, 5.5f});
  ExpectTensor<float>(10 - x, {3}, {9, 8, 6});
  ExpectTensor<float>(x * 3, {3}, {3, 6, 12});
  ExpectTensor<float>(1 / x, {3}, {1, 0.5f, 0.25f});
  ExpectTensor<float>(x / 4, {3}, {0.25f, 0.5f, 1});
  ExpectTensor<float>(x - 1, {3}, {0, 1, 3});
}

TEST(Elementwise, ScalarsAreParametersUnlessZeroOrOne) {
  Tensor x = Tensor::FromVector<float>({1, 2}, {2});
  EXPECT_EQ(lazy::LoweringContext({x * 2.5}).parameter_count(), 2);
  EXPECT_EQ(lazy::LoweringContext({x * 1}).parameter_count(), 1);
  EXPECT_EQ(lazy::LoweringContext({x + 0}).parameter_count(), 1);
}

struct PromotionCase {
  DType a, b, expected;
};
void PrintTo(const PromotionCase& c, std::ostream* os) {
  *os << DTypeName(c.a) << " + " << DTypeName(c.b) << " -> " << DTypeName(c.expected);
}

class Promotion : public ::testing::TestWithParam<PromotionCase> {};

// Tensors of each dtype holding {1, 0}.
Tensor OneZero(DType dtype) { return astype(Tensor::FromVector<int32_t>({1, 0}, {2}), dtype); }

TEST_P(Promotion, TensorTensor) {
  const PromotionCase& c = GetParam();
  Tensor r = OneZero(c.a) + OneZero(c.b);
  EXPECT_EQ(r.dtype(), c.expected) << DTypeName(c.a) << " + " << DTypeName(c.b);
  EXPECT_EQ((OneZero(c.b) + OneZero(c.a)).dtype(), c.expected);
  if (c.expected != DType::kPred) {
    ExpectTensor<double>(astype(r, DType::kF64), {2}, {2, 0});
  } else {
    EXPECT_EQ(BoolValues(r), (std::vector<uint8_t>{1, 0}));  // bool + bool is logical or
  }
}

INSTANTIATE_TEST_SUITE_P(Lazy, Promotion,
                         ::testing::Values(PromotionCase{DType::kPred, DType::kS32, DType::kS32},
                                           PromotionCase{DType::kPred, DType::kU8, DType::kU8},
                                           PromotionCase{DType::kPred, DType::kF32, DType::kF32},
                                           PromotionCase{DType::kPred, DType::kPred, DType::kPred},
                                           PromotionCase{DType::kS32, DType::kF32, DType::kF32},
                                           PromotionCase{DType::kS64, DType::kF32, DType::kF32},
                                           PromotionCase{DType::kS64, DType::kF16, DType::kF16},
                                           PromotionCase{DType::kS32, DType::kS64, DType::kS64},
                                           PromotionCase{DType::kS8, DType::kS32, DType::kS32},
                                           PromotionCase{DType::kU8, DType::kS8,
                                                         DType::kS16},  // torch's
                                           PromotionCase{DType::kU16, DType::kS16, DType::kS32},
                                           PromotionCase{DType::kU8, DType::kS16, DType::kS16},
                                           PromotionCase{DType::kU8, DType::kS32, DType::kS32},
                                           PromotionCase{DType::kU32, DType::kS32, DType::kS64},
                                           PromotionCase{DType::kF32, DType::kF64, DType::kF64},
                                           PromotionCase{DType::kF16, DType::kBF16, DType::kF32},
                                           PromotionCase{DType::kF16, DType::kF32, DType::kF32}));

// Complex numbers and tokens exist in HLO programs only: a lazy tensor of
// either is an Error, never a tensor whose gradients would be real ones.
TEST(Elementwise, ComplexAndTokenTensorsAreRefused) {
  Tensor x = Tensor::FromVector<float>({1, 2}, {2});
  for (DType t : {DType::kC64, DType::kC128, DType::kToken}) {
    SCOPED_TRACE(std::string(DTypeName(t)));
    try {
      Tensor bad = astype(x, t);
      ADD_FAILURE() << "astype gave " << bad.shape().ToString();
    } catch (const Error& e) {
      // A token fails the convert's shape rule first (no op makes one from data).
      const std::string expected =
          t == DType::kToken ? "cannot make token[2]" : "not supported by the lazy tensor API";
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  }
}

TEST(Elementwise, ScalarPromotion) {
  Tensor f32 = Tensor::FromVector<float>({2, 4}, {2});
  Tensor s64 = Tensor::FromVector<int64_t>({2, 5}, {2});
  Tensor s32 = Tensor::FromVector<int32_t>({3, -3}, {2});
  ExpectTensor<float>(f32 * 2.5, {2}, {5, 10});     // f32 stays f32
  ExpectTensor<float>(s64 * 2.5, {2}, {5, 12.5f});  // float scalar on ints: f32
  ExpectTensor<int64_t>(s64 * 2, {2}, {4, 10});     // integral scalar adopts s64
  ExpectTensor<int32_t>(s32 + 1, {2}, {4, -2});     // ... and s32
  ExpectTensor<float>(s32 + 0.5, {2}, {3.5f, -2.5f});
  ExpectTensor<float>(s64 / 2, {2}, {1, 2.5f});  // true division, as torch
  ExpectTensor<double>(Tensor::FromVector<double>({1}, {1}) * 3, {1}, {3});
  Tensor flags = BoolTensor({1, 0}, {2});
  ExpectTensor<int64_t>(flags + 1, {2}, {2, 1});  // bool + int scalar: s64, as torch
  ExpectTensor<int64_t>(flags * 1, {2}, {1, 0});
  ExpectTensor<float>(flags * 0.5, {2}, {0.5f, 0});
  ExpectTensor<float>(s32 * std::numeric_limits<double>::infinity(), {2}, {INFINITY, -INFINITY});
}

TEST(Elementwise, IntegerOps) {
  std::vector<int32_t> a = {7, -7, 9, -9, 0, 5};
  std::vector<int32_t> b = {2, 2, -4, -4, 3, 5};
  Tensor ta = Tensor::FromVector(a, {6}), tb = Tensor::FromVector(b, {6});
  std::vector<int32_t> sum, product, rem;
  std::vector<float> quotient;
  for (size_t i = 0; i < a.size(); ++i) {
    sum.push_back(a[i] + b[i]);
    product.push_back(a[i] * b[i]);
    quotient.push_back(static_cast<float>(a[i]) / static_cast<float>(b[i]));
    int32_t r = a[i] % b[i];
    if (r != 0 && ((r < 0) != (b[i] < 0))) r += b[i];  // Python's sign-of-divisor rule
    rem.push_back(r);
  }
  ExpectTensor<int32_t>(ta + tb, {6}, sum);
  ExpectTensor<int32_t>(ta * tb, {6}, product);
  ExpectTensor<float>(ta / tb, {6}, quotient, 1e-6);
  ExpectTensor<int32_t>(remainder(ta, tb), {6}, rem);
  ExpectTensor<int32_t>(abs(ta), {6}, {7, 7, 9, 9, 0, 5});
}

TEST(Elementwise, FloatRemainderTakesDivisorSign) {
  std::vector<double> a = {5.5, -5.5, 5.5, -5.5, 3};
  std::vector<double> b = {2, 2, -2, -2, 1.5};
  std::vector<double> expected;
  for (size_t i = 0; i < a.size(); ++i) expected.push_back(a[i] - b[i] * std::floor(a[i] / b[i]));
  ExpectTensor<double>(remainder(Tensor::FromVector(a, {5}), Tensor::FromVector(b, {5})), {5},
                       expected, 1e-12);
}

TEST(Elementwise, UnaryFunctions) {
  std::vector<float> x = RandomValues<float>(16, 9, 0.1, 3);
  x[0] = -x[0];
  x[1] = -2.5f;
  Tensor t = Tensor::FromVector(x, {4, 4});
  auto map = [&](auto f) {
    std::vector<float> out;
    for (float v : x) out.push_back(static_cast<float>(f(static_cast<double>(v))));
    return out;
  };
  auto positive = [&](auto f) { return map([&](double v) { return f(std::abs(v)); }); };
  ExpectTensor<float>(abs(t), {4, 4}, map([](double v) { return std::abs(v); }));
  ExpectTensor<float>(sign(t), {4, 4}, map([](double v) { return (v > 0) - (v < 0); }));
  ExpectTensor<float>(exp(t), {4, 4}, map([](double v) { return std::exp(v); }), 1e-5);
  ExpectTensor<float>(log(abs(t)), {4, 4}, positive([](double v) { return std::log(v); }), 1e-5,
                      1e-6);
  ExpectTensor<float>(log1p(abs(t)), {4, 4}, positive([](double v) { return std::log1p(v); }),
                      1e-5);
  ExpectTensor<float>(expm1(t), {4, 4}, map([](double v) { return std::expm1(v); }), 1e-5, 1e-6);
  ExpectTensor<float>(tanh(t), {4, 4}, map([](double v) { return std::tanh(v); }), 1e-5, 1e-6);
  ExpectTensor<float>(sigmoid(t), {4, 4}, map([](double v) { return 1 / (1 + std::exp(-v)); }),
                      1e-5, 1e-6);
  ExpectTensor<float>(sqrt(abs(t)), {4, 4}, positive([](double v) { return std::sqrt(v); }), 1e-6);
  ExpectTensor<float>(rsqrt(abs(t)), {4, 4}, positive([](double v) { return 1 / std::sqrt(v); }),
                      1e-5);
  ExpectTensor<float>(sin(t), {4, 4}, map([](double v) { return std::sin(v); }), 1e-5, 1e-6);
  ExpectTensor<float>(cos(t), {4, 4}, map([](double v) { return std::cos(v); }), 1e-5, 1e-6);
  ExpectTensor<float>(erf(t), {4, 4}, map([](double v) { return std::erf(v); }), 1e-5, 1e-6);
  ExpectTensor<float>(floor(t), {4, 4}, map([](double v) { return std::floor(v); }));
  ExpectTensor<float>(ceil(t), {4, 4}, map([](double v) { return std::ceil(v); }));
  ExpectTensor<float>(pow(abs(t), 2), {4, 4}, map([](double v) { return v * v; }), 1e-6);
  ExpectTensor<float>(pow(abs(t), 0.5), {4, 4}, positive([](double v) { return std::sqrt(v); }),
                      1e-5);
  // Integer inputs of float functions become f32, as torch.
  ExpectTensor<float>(exp(Tensor::FromVector<int32_t>({0, 1}, {2})), {2},
                      {1, std::numbers::e_v<float>}, 1e-6);
  ExpectTensor<int32_t>(floor(Tensor::FromVector<int32_t>({-3, 4}, {2})), {2}, {-3, 4});
}

TEST(Elementwise, ComparisonsAndLogic) {
  std::vector<float> a = {1, 2, 3, NAN};
  std::vector<float> b = {2, 2, 2, 2};
  Tensor ta = Tensor::FromVector(a, {4}), tb = Tensor::FromVector(b, {4});
  auto table = [&](auto f) {
    std::vector<uint8_t> out;
    for (size_t i = 0; i < a.size(); ++i) out.push_back(f(a[i], b[i]) ? 1 : 0);
    return out;
  };
  EXPECT_EQ(BoolValues(eq(ta, tb)), table([](float x, float y) { return x == y; }));
  EXPECT_EQ(BoolValues(ne(ta, tb)), table([](float x, float y) { return x != y; }));
  EXPECT_EQ(BoolValues(lt(ta, tb)), table([](float x, float y) { return x < y; }));
  EXPECT_EQ(BoolValues(le(ta, tb)), table([](float x, float y) { return x <= y; }));
  EXPECT_EQ(BoolValues(gt(ta, tb)), table([](float x, float y) { return x > y; }));
  EXPECT_EQ(BoolValues(ge(ta, tb)), table([](float x, float y) { return x >= y; }));
  // Mixed dtypes compare after promotion; a scalar-shaped operand broadcasts.
  Tensor i = Tensor::FromVector<int32_t>({1, 2, 3}, {3});
  EXPECT_EQ(BoolValues(lt(i, Tensor::FromVector<float>({2.5f}, {}))),
            (std::vector<uint8_t>{1, 1, 0}));
  Tensor p = BoolTensor({1, 1, 0, 0}, {4}), q = BoolTensor({1, 0, 1, 0}, {4});
  EXPECT_EQ(BoolValues(logical_and(p, q)), (std::vector<uint8_t>{1, 0, 0, 0}));
  EXPECT_EQ(BoolValues(logical_or(p, q)), (std::vector<uint8_t>{1, 1, 1, 0}));
  EXPECT_EQ(BoolValues(logical_not(p)), (std::vector<uint8_t>{0, 0, 1, 1}));
  EXPECT_EQ(BoolValues(logical_not(Tensor::FromVector<int32_t>({0, 5}, {2}))),
            (std::vector<uint8_t>{1, 0}));
  EXPECT_EQ(BoolValues(p * q), (std::vector<uint8_t>{1, 0, 0, 0}));  // bool * bool is and, as torch
  EXPECT_EQ(BoolValues(maximum(p, q)), (std::vector<uint8_t>{1, 1, 1, 0}));
}

TEST(Elementwise, WhereBroadcastsAndPromotes) {
  Tensor condition = BoolTensor({1, 0, 1}, {3});
  Tensor a = Tensor::FromVector<int32_t>({10, 20}, {2, 1});
  Tensor b = Tensor::FromVector<float>({0.5f, 1.5f, 2.5f}, {3});
  std::vector<uint8_t> c = {1, 0, 1};
  std::vector<float> av = {10, 20}, bv = {0.5f, 1.5f, 2.5f};
  ExpectTensor<float>(where(condition, a, b), {2, 3}, Tabulate<float>({2, 3}, [&](const Dims& i) {
                        return c[i[1]] ? av[i[0]] : bv[i[1]];
                      }));
}

TEST(Elementwise, ClampAndAstype) {
  Tensor x = Tensor::FromVector<float>({-3, -0.5f, 0.5f, 3, NAN}, {5});
  ExpectTensor<float>(clamp(x, -1, 1), {5}, {-1, -0.5f, 0.5f, 1, NAN});
  ExpectTensor<float>(clamp(x, std::nullopt, 0), {5}, {-3, -0.5f, 0, 0, NAN});
  ExpectTensor<float>(clamp(x, 0, std::nullopt), {5}, {0, 0, 0.5f, 3, NAN});
  ExpectTensor<int32_t>(astype(Tensor::FromVector<float>({-1.7f, 2.9f}, {2}), DType::kS32), {2},
                        {-1, 2});
  ExpectTensor<int32_t>(clamp(Tensor::FromVector<int32_t>({-5, 5}, {2}), -2, 2), {2}, {-2, 2});
}

TEST(Elementwise, HalfPrecisionComputesInF32) {
  Tensor h = astype(Tensor::FromVector<float>({1, 2, -3}, {3}), DType::kF16);
  Tensor r = -(h * h + 1);
  ASSERT_EQ(r.dtype(), DType::kF16);
  ExpectTensor<float>(astype(r, DType::kF32), {3}, {-2, -5, -10});
  Tensor e = exp(h);
  ASSERT_EQ(e.dtype(), DType::kF16);
  ExpectTensor<float>(astype(e, DType::kF32), {3},
                      {std::exp(1.0f), std::exp(2.0f), std::exp(-3.0f)}, 1e-3);
  Tensor b = astype(Tensor::FromVector<float>({0.5f, 3, -4}, {3}), DType::kBF16);
  EXPECT_EQ(BoolValues(gt(h, b)), (std::vector<uint8_t>{1, 0, 1}));
  EXPECT_EQ((h + b).dtype(), DType::kF32);  // f16 with bf16 meets in f32, as torch
}

TEST(Elementwise, InPlaceOperatorsRebindOnlyOneHandle) {
  Tensor a = Tensor::FromVector<float>({1, 2}, {2});
  Tensor b = a;
  a += Tensor::FromVector<float>({10, 10}, {2});
  a *= Tensor::FromVector<float>({2, 2}, {2});
  ExpectTensor<float>(a, {2}, {22, 24});
  ExpectTensor<float>(b, {2}, {1, 2});
}

}  // namespace
}  // namespace strata::test
