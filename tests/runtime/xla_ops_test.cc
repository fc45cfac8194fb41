// XLA's ops that strata runs as others (hlo/expand.h: batch norms, map,
// asynchronous collectives, copy-start / copy-done) and its linear algebra
// (cholesky, triangular-solve), each against an independent reference: plain
// loops in double, finite differences, residuals of the solved system, and
// values worked out by hand.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "strata/compiler/compile.h"
#include "strata/core/error.h"
#include "strata/hlo/text.h"
#include "strata/runtime/communicator.h"
#include "test_util.h"

namespace strata::runtime {
namespace {

using test::Arg;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr const char* kAdd = R"(add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
)";

std::vector<Buffer> RunHlo(const std::string& computations, const std::string& entry,
                           const std::vector<Buffer>& args) {
  return compiler::Compile(
             *hlo::ParseModule("HloModule m\n" + computations + "ENTRY main {\n" + entry + "}\n"))
      ->Run(args);
}

std::string ParseError(const std::string& computations, const std::string& entry) {
  try {
    auto m = hlo::ParseModule("HloModule m\n" + computations + "ENTRY main {\n" + entry + "}\n");
    compiler::Compile(*m);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

std::vector<float> Random(int64_t n, uint32_t seed, float low = -1, float high = 1) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(low, high);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// ---- batch norm ------------------------------------------------------------------------------
// x is [N, C, W] with the features at dimension 1.
constexpr int64_t kN = 3, kC = 2, kW = 4;
constexpr double kEps = 1e-3;

int64_t At(int64_t n, int64_t c, int64_t w) { return (n * kC + c) * kW + w; }

struct Normalized {
  std::vector<double> out, mean, variance;
};

// Training-mode batch norm in double, by loops.
Normalized TrainingReference(const std::vector<double>& x, const std::vector<double>& scale,
                             const std::vector<double>& offset) {
  Normalized r{std::vector<double>(x.size()), std::vector<double>(kC), std::vector<double>(kC)};
  for (int64_t c = 0; c < kC; ++c) {
    double sum = 0, squares = 0;
    for (int64_t n = 0; n < kN; ++n)
      for (int64_t w = 0; w < kW; ++w) sum += x[At(n, c, w)];
    r.mean[c] = sum / (kN * kW);
    for (int64_t n = 0; n < kN; ++n)
      for (int64_t w = 0; w < kW; ++w) squares += std::pow(x[At(n, c, w)] - r.mean[c], 2);
    r.variance[c] = squares / (kN * kW);
    for (int64_t n = 0; n < kN; ++n) {
      for (int64_t w = 0; w < kW; ++w) {
        r.out[At(n, c, w)] =
            (x[At(n, c, w)] - r.mean[c]) / std::sqrt(r.variance[c] + kEps) * scale[c] + offset[c];
      }
    }
  }
  return r;
}

std::vector<double> Widen(const std::vector<float>& v) { return {v.begin(), v.end()}; }

void ExpectNear(const std::vector<float>& got, const std::vector<double>& want, double tol,
                const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], tol * (1 + std::abs(want[i]))) << what << " [" << i << "]";
  }
}

TEST(BatchNorm, TrainingNormalizesEachFeatureWithTheBatchsStatistics) {
  const auto x = Random(kN * kC * kW, 1, -2, 3), scale = Random(kC, 2), offset = Random(kC, 3);
  auto out = RunHlo("",
                    R"(  x = f32[3,2,4] parameter(0)
  scale = f32[2] parameter(1)
  offset = f32[2] parameter(2)
  ROOT bn = (f32[3,2,4], f32[2], f32[2]) batch-norm-training(x, scale, offset), epsilon=0.001, feature_index=1
)",
                    {Arg(x, {kN, kC, kW}), Arg(scale, {kC}), Arg(offset, {kC})});
  const Normalized want = TrainingReference(Widen(x), Widen(scale), Widen(offset));
  ExpectNear(test::ToHost<float>(out[0]), want.out, 1e-5, "output");
  ExpectNear(test::ToHost<float>(out[1]), want.mean, 1e-6, "mean");
  ExpectNear(test::ToHost<float>(out[2]), want.variance, 1e-6, "variance");
}

TEST(BatchNorm, InferenceNormalizesWithTheGivenStatistics) {
  const auto x = Random(kN * kC * kW, 4), scale = Random(kC, 5), offset = Random(kC, 6);
  const std::vector<float> mean = {0.25f, -0.5f}, variance = {2.0f, 0.5f};
  auto out = RunHlo("",
                    R"(  x = f32[3,2,4] parameter(0)
  scale = f32[2] parameter(1)
  offset = f32[2] parameter(2)
  mean = f32[2] parameter(3)
  variance = f32[2] parameter(4)
  ROOT bn = f32[3,2,4] batch-norm-inference(x, scale, offset, mean, variance), epsilon=0.001, feature_index=1
)",
                    {Arg(x, {kN, kC, kW}), Arg(scale, {kC}), Arg(offset, {kC}), Arg(mean, {kC}),
                     Arg(variance, {kC})});
  std::vector<double> want(x.size());
  for (int64_t n = 0; n < kN; ++n)
    for (int64_t c = 0; c < kC; ++c)
      for (int64_t w = 0; w < kW; ++w) {
        want[At(n, c, w)] =
            (x[At(n, c, w)] - mean[c]) / std::sqrt(variance[c] + kEps) * scale[c] + offset[c];
      }
  ExpectNear(test::ToHost<float>(out[0]), want, 1e-5, "output");
}

// batch-norm-grad is the gradient of training-mode batch norm: checked
// against central differences of the double reference's sum(out * dy).
TEST(BatchNorm, GradIsTheGradientOfTrainingByFiniteDifferences) {
  const auto x = Random(kN * kC * kW, 7, -2, 3), scale = Random(kC, 8), offset = Random(kC, 9);
  const auto dy = Random(kN * kC * kW, 10);
  const Normalized stats = TrainingReference(Widen(x), Widen(scale), Widen(offset));
  const std::vector<float> mean(stats.mean.begin(), stats.mean.end());
  const std::vector<float> variance(stats.variance.begin(), stats.variance.end());
  auto out = RunHlo("",
                    R"(  x = f32[3,2,4] parameter(0)
  scale = f32[2] parameter(1)
  mean = f32[2] parameter(2)
  variance = f32[2] parameter(3)
  dy = f32[3,2,4] parameter(4)
  ROOT g = (f32[3,2,4], f32[2], f32[2]) batch-norm-grad(x, scale, mean, variance, dy), epsilon=0.001, feature_index=1
)",
                    {Arg(x, {kN, kC, kW}), Arg(scale, {kC}), Arg(mean, {kC}), Arg(variance, {kC}),
                     Arg(dy, {kN, kC, kW})});
  auto loss = [&](std::vector<double> xs, std::vector<double> s, std::vector<double> o) {
    const Normalized r = TrainingReference(xs, s, o);
    double l = 0;
    for (size_t i = 0; i < r.out.size(); ++i) l += r.out[i] * dy[i];
    return l;
  };
  auto derivative = [&](int which, size_t i) {
    std::vector<double> v[3] = {Widen(x), Widen(scale), Widen(offset)};
    const double h = 1e-6;
    v[which][i] += h;
    const double up = loss(v[0], v[1], v[2]);
    v[which][i] -= 2 * h;
    return (up - loss(v[0], v[1], v[2])) / (2 * h);
  };
  const size_t sizes[3] = {x.size(), scale.size(), offset.size()};
  const char* names[3] = {"grad_operand", "grad_scale", "grad_offset"};
  for (int which = 0; which < 3; ++which) {
    std::vector<double> want(sizes[which]);
    for (size_t i = 0; i < want.size(); ++i) want[i] = derivative(which, i);
    ExpectNear(test::ToHost<float>(out[which]), want, 1e-4, names[which]);
  }
}

TEST(BatchNorm, AFeatureIndexOutOfRangeOrAWrongVectorIsAnError) {
  EXPECT_THAT(ParseError("", R"(  x = f32[3,2] parameter(0)
  v = f32[2] parameter(1)
  ROOT bn = (f32[3,2], f32[2], f32[2]) batch-norm-training(x, v, v), epsilon=0.001, feature_index=2
)"),
              HasSubstr("feature_index 2 is out of range"));
  EXPECT_THAT(ParseError("", R"(  x = f32[3,2] parameter(0)
  v = f32[3] parameter(1)
  ROOT bn = (f32[3,2], f32[2], f32[2]) batch-norm-training(x, v, v), epsilon=0.001, feature_index=1
)"),
              HasSubstr("must be f32[2] (the operand's features), got f32[3]"));
}

// ---- map -------------------------------------------------------------------------------------
TEST(Map, AppliesItsScalarFunctionToEveryElement) {
  const std::string f = R"(f {
  a = f32[] parameter(0)
  b = s32[] parameter(1)
  bf = f32[] convert(b)
  m = f32[] maximum(a, bf)
  two = f32[] constant(2)
  ROOT r = f32[] multiply(m, two)
}
)";
  const std::vector<float> x = {-1, 5, 2.5f, 0, 7, -3};
  const std::vector<int32_t> y = {0, 1, 3, -2, 9, -4};
  auto out = RunHlo(f, R"(  x = f32[2,3] parameter(0)
  y = s32[2,3] parameter(1)
  ROOT m = f32[2,3] map(x, y), dimensions={0,1}, to_apply=f
)",
                    {Arg(x, {2, 3}), Arg(y, {2, 3})});
  std::vector<float> want;
  for (size_t i = 0; i < x.size(); ++i) want.push_back(2 * std::max(x[i], float(y[i])));
  EXPECT_EQ(test::ToHost<float>(out[0]), want);
}

TEST(Map, AFunctionThatIsNotElementwiseOrAWrongSignatureIsAnError) {
  const std::string f = R"(g {
  a = f32[] parameter(0)
  ROOT r = f32[1] reshape(a)
}
)";
  EXPECT_THAT(ParseError(f, "  x = f32[3] parameter(0)\n  ROOT m = f32[3] map(x), to_apply=g\n"),
              HasSubstr("must return a scalar"));
  const std::string h = R"(h {
  a = f32[] parameter(0)
  t = (f32[]) tuple(a)
  ROOT r = f32[] get-tuple-element(t), index=0
}
)";
  EXPECT_THAT(ParseError(h, "  x = f32[3] parameter(0)\n  ROOT m = f32[3] map(x), to_apply=h\n"),
              HasSubstr("is not elementwise"));
  EXPECT_THAT(ParseError(kAdd, R"(  x = f32[3] parameter(0)
  y = f32[2] parameter(1)
  ROOT m = f32[3] map(x, y), dimensions={0}, to_apply=add
)"),
              HasSubstr("every operand must have operand 0's"));
}

// ---- reduce-precision ------------------------------------------------------------------------
// The reference rounds by arithmetic, not bits: |x| to a multiple of its
// quantum 2^(exponent - mantissa_bits), ties to even, where exponent is x's own (floor log2) or,
// below the source type's smallest normal, that one's (the source's subnormals are kept when the
// narrow format has as many exponent bits); then, if the narrow format has fewer exponent bits than
// the source, anything at or past 2^(narrow_bias + 1) is infinite and anything below its smallest
// normal 2^(1 - narrow_bias) is zero (XLA flushes the narrow subnormals).
double ReducedReference(double x, int source_exponent_bits, int exponent_bits, int mantissa_bits) {
  const double inf = std::numeric_limits<double>::infinity();
  if (std::isnan(x)) return mantissa_bits > 0 ? x : inf;
  if (std::isinf(x) || x == 0) return x;
  const int source_bias = (1 << (source_exponent_bits - 1)) - 1;
  const int e = std::max(std::ilogb(x), 1 - source_bias);
  const double quantum = std::ldexp(1.0, e - mantissa_bits);
  const double scaled = std::abs(x) / quantum, below = std::floor(scaled);
  // Ties go to an even last kept bit: the significand's lowest, or with no
  // mantissa bits the biased exponent's lowest (the bit pattern's).
  const bool odd = mantissa_bits > 0 ? std::fmod(below, 2) == 1 : (e + source_bias) % 2 != 0;
  const bool up = scaled - below > 0.5 || (scaled - below == 0.5 && odd);
  double r = (below + (up ? 1 : 0)) * quantum;
  if (exponent_bits < source_exponent_bits) {
    const int bias = (1 << (exponent_bits - 1)) - 1;
    if (r >= std::ldexp(1.0, bias + 1)) r = inf;
    if (r < std::ldexp(1.0, 1 - bias)) r = 0;
  }
  return std::copysign(r, x);
}

// Values across the whole range of T: random exponents and mantissas, the
// specials, and the ties and edges of each narrow format tested.
template <typename T>
std::vector<T> RoundingInputs() {
  using L = std::numeric_limits<T>;
  std::vector<T> v = {0,         -T(0),       L::infinity(), -L::infinity(),  L::quiet_NaN(),
                      L::max(),  L::lowest(), L::min(),      L::denorm_min(), -L::denorm_min(),
                      1,         T(1.5),      T(65504),      T(65519.99),     T(65520),
                      T(-65536), T(6.1e-5),   T(6.0e-5),     T(3.0e-5),       T(1.0e-8)};
  for (int m : {2, 3, 7, 10}) {  // exactly halfway above 1 and above 1 + one step: ties
    v.push_back(T(1) + std::ldexp(T(1), -m - 1));
    v.push_back(T(1) + 3 * std::ldexp(T(1), -m - 1));
    v.push_back(-(T(2) - std::ldexp(T(1), -m - 1)));  // rounds up into the next exponent
  }
  std::mt19937 rng(47);
  std::uniform_int_distribution<int> exponent(L::min_exponent - L::digits - 1, L::max_exponent);
  std::uniform_real_distribution<double> mantissa(0.5, 1.0);
  for (int i = 0; i < 2000; ++i) {
    const double m = (i % 2 ? -1 : 1) * mantissa(rng);
    v.push_back(static_cast<T>(std::ldexp(m, exponent(rng))));
  }
  return v;
}

template <typename T>
void CheckReducePrecision(const char* type, int source_exponent_bits, int exponent_bits,
                          int mantissa_bits) {
  const std::vector<T> x = RoundingInputs<T>();
  const int64_t n = static_cast<int64_t>(x.size());
  auto out = RunHlo("",
                    fmt::format("  x = {0}[{1}] parameter(0)\n"
                                "  ROOT r = {0}[{1}] reduce-precision(x), exponent_bits={2}, "
                                "mantissa_bits={3}\n",
                                type, n, exponent_bits, mantissa_bits),
                    {Arg(x, {n})});
  const std::vector<T> got = test::ToHost<T>(out[0]);
  for (int64_t i = 0; i < n; ++i) {
    const T want =
        static_cast<T>(ReducedReference(x[i], source_exponent_bits, exponent_bits, mantissa_bits));
    const bool same = std::isnan(want)
                          ? std::isnan(got[i])
                          : got[i] == want && std::signbit(got[i]) == std::signbit(want);
    EXPECT_TRUE(same) << type << " e" << exponent_bits << "m" << mantissa_bits << " of "
                      << fmt::format("{:a}", x[i]) << ": got " << fmt::format("{:a}", got[i])
                      << ", want " << fmt::format("{:a}", want);
  }
}

TEST(ReducePrecision, RoundsToTheNarrowFormatsPrecisionAndRange) {
  // bf16, f16, an f8 e4m3-like and e5m2 format, one with no mantissa bits,
  // and the source's own format (nothing changes).
  for (auto [e, m] : {std::pair{8, 7}, {5, 10}, {4, 3}, {5, 2}, {3, 0}, {1, 1}, {8, 23}}) {
    CheckReducePrecision<float>("f32", 8, e, m);
  }
  for (auto [e, m] : {std::pair{8, 7}, {5, 10}, {8, 23}, {11, 30}, {11, 52}, {2, 0}}) {
    CheckReducePrecision<double>("f64", 11, e, m);
  }
}

TEST(ReducePrecision, KeepsNaNsAndMakesThemInfiniteWithoutMantissaBits) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> x = {nan, -nan, 1};
  for (int m : {0, 4}) {
    auto out = RunHlo("",
                      fmt::format("  x = f32[3] parameter(0)\n  ROOT r = f32[3] "
                                  "reduce-precision(x), exponent_bits=5, mantissa_bits={}\n",
                                  m),
                      {Arg(x, {3})});
    const std::vector<float> got = test::ToHost<float>(out[0]);
    if (m == 0) {
      EXPECT_EQ(got[0], std::numeric_limits<float>::infinity());
      EXPECT_EQ(got[1], std::numeric_limits<float>::infinity());  // XLA: +inf either sign
    } else {
      EXPECT_TRUE(std::isnan(got[0]) && std::isnan(got[1]));
    }
    EXPECT_EQ(got[2], 1.0f);
  }
}

TEST(ReducePrecision, BadOperandsOrBitCountsAreErrorsNamingThem) {
  EXPECT_THAT(ParseError("",
                         "  x = s32[3] parameter(0)\n  ROOT r = s32[3] reduce-precision(x), "
                         "exponent_bits=5, mantissa_bits=2\n"),
              AllOf(HasSubstr("reduce-precision"), HasSubstr("operand must be floats")));
  EXPECT_THAT(ParseError("",
                         "  x = f32[3] parameter(0)\n  ROOT r = f32[3] reduce-precision(x), "
                         "exponent_bits=0, mantissa_bits=2\n"),
              HasSubstr("exponent_bits must be at least 1, got 0"));
  EXPECT_THAT(ParseError("",
                         "  x = f32[3] parameter(0)\n  ROOT r = f32[3] reduce-precision(x), "
                         "exponent_bits=5, mantissa_bits=-1\n"),
              HasSubstr("mantissa_bits must be at least 0, got -1"));
  EXPECT_THAT(ParseError("",
                         "  x = f32[3] parameter(0)\n  ROOT r = f32[3] reduce-precision(x), "
                         "exponent_bits=5\n"),
              HasSubstr("mantissa_bits"));
}

// ---- asynchronous collectives and copies ----------------------------------------------------
TEST(AsyncCollectives, StartAndDoneGiveTheCollectivesValuesOnEachPartition) {
  const std::string text = std::string("HloModule m, num_partitions=2\n") + kAdd + R"(
ENTRY main {
  x = f32[2] parameter(0)
  ars = f32[2] all-reduce-start(x), channel_id=1, replica_groups={{0,1}}, to_apply=add
  ard = f32[2] all-reduce-done(ars)
  ags = (f32[2], f32[4]) all-gather-start(x), channel_id=2, replica_groups={{0,1}}, dimensions={0}
  agd = f32[4] all-gather-done(ags)
  cps = (f32[2], f32[2], u32[], u32[]) collective-permute-start(x), channel_id=3, source_target_pairs={{0,1},{1,0}}
  cpd = f32[2] collective-permute-done(cps)
  cs = (f32[2], f32[2], u32[]) copy-start(x)
  cd = f32[2] copy-done(cs)
  ROOT out = (f32[2], f32[4], f32[2], f32[2]) tuple(ard, agd, cpd, cd)
}
)";
  Client client(2, 1);
  compiler::CompileOptions options;
  options.client = &client;
  auto exe = compiler::Compile(*hlo::ParseModule(text), options);
  const std::vector<std::vector<float>> xs = {{1, 2}, {10, 20}};
  std::vector<std::vector<Buffer>> args(2);
  for (int p = 0; p < 2; ++p) args[p] = {Buffer::FromVector<float>(xs[p], {2}, client.device(p))};
  auto comm = MakeInProcessCommunicator(2);
  auto out = exe->RunPartitioned(args, {client.device(0), client.device(1)}, *comm);
  for (int p = 0; p < 2; ++p) {
    SCOPED_TRACE(p);
    EXPECT_EQ(out[p][0].ToVector<float>(), (std::vector<float>{11, 22}));
    EXPECT_EQ(out[p][1].ToVector<float>(), (std::vector<float>{1, 2, 10, 20}));
    EXPECT_EQ(out[p][2].ToVector<float>(), xs[1 - p]);
    EXPECT_EQ(out[p][3].ToVector<float>(), xs[p]);
  }
}

TEST(AsyncCollectives, ADoneOfSomethingElseIsAnError) {
  EXPECT_THAT(ParseError("", "  x = f32[2] parameter(0)\n  ROOT d = f32[2] all-gather-done(x)\n"),
              HasSubstr("expects its -start's tuple"));
}

// ---- cholesky --------------------------------------------------------------------------------
// n x n symmetric positive-definite matrices m m^T + n I, a batch of `batch`.
std::vector<double> PositiveDefinite(int64_t batch, int64_t n, uint32_t seed) {
  const auto m = Random(batch * n * n, seed);
  std::vector<double> a(batch * n * n);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = i == j ? n : 0;
        for (int64_t k = 0; k < n; ++k) s += m[(b * n + i) * n + k] * m[(b * n + j) * n + k];
        a[(b * n + i) * n + j] = s;
      }
  return a;
}

template <typename T>
void CheckCholesky(const char* type, bool lower) {
  SCOPED_TRACE(std::string(type) + (lower ? " lower" : " upper"));
  constexpr int64_t kBatch = 3, kSize = 5;
  const std::vector<double> a = PositiveDefinite(kBatch, kSize, 11);
  const std::vector<T> given(a.begin(), a.end());
  auto out = RunHlo("",
                    fmt::format("  a = {0}[3,5,5] parameter(0)\n"
                                "  ROOT l = {0}[3,5,5] cholesky(a), lower={1}\n",
                                type, lower ? "true" : "false"),
                    {Arg(given, {kBatch, kSize, kSize})});
  const std::vector<T> l = test::ToHost<T>(out[0]);
  const double tol = sizeof(T) == 4 ? 1e-5 : 1e-12;
  for (int64_t b = 0; b < kBatch; ++b) {
    auto f = [&](int64_t i, int64_t j) { return double(l[(b * kSize + i) * kSize + j]); };
    for (int64_t i = 0; i < kSize; ++i) {
      for (int64_t j = 0; j < kSize; ++j) {
        const bool other_triangle = lower ? j > i : j < i;
        if (other_triangle) EXPECT_EQ(f(i, j), 0) << b << " " << i << " " << j;
        // l l^T (or u^T u) gives a back.
        double s = 0;
        for (int64_t k = 0; k < kSize; ++k) s += lower ? f(i, k) * f(j, k) : f(k, i) * f(k, j);
        const double want = a[(b * kSize + i) * kSize + j];
        EXPECT_NEAR(s, want, tol * std::abs(want) + tol) << b << " " << i << " " << j;
      }
      EXPECT_GT(f(i, i), 0);
    }
  }
}

TEST(Cholesky, FactorsGiveTheMatrixBackInEveryTypeAndTriangle) {
  CheckCholesky<float>("f32", true);
  CheckCholesky<float>("f32", false);
  CheckCholesky<double>("f64", true);
  CheckCholesky<double>("f64", false);
}

TEST(Cholesky, AMatrixThatIsNotPositiveDefiniteGivesNaNsAndOthersInTheBatchAreUnharmed) {
  // [[1, 2], [2, 1]] has eigenvalues 3 and -1; [[4, 2], [2, 2]] = l l^T with l = [[2, 0], [1, 1]].
  auto out =
      RunHlo("", "  a = f32[2,2,2] parameter(0)\n  ROOT l = f32[2,2,2] cholesky(a), lower=true\n",
             {Arg(std::vector<float>{1, 2, 2, 1, 4, 2, 2, 2}, {2, 2, 2})});
  const auto l = test::ToHost<float>(out[0]);
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(std::isnan(l[i])) << i;
  EXPECT_EQ(std::vector<float>(l.begin() + 4, l.end()), (std::vector<float>{2, 0, 1, 1}));
}

// ---- triangular-solve ------------------------------------------------------------------------
TEST(TriangularSolve, EveryCombinationOfOptionsSolvesItsSystem) {
  constexpr int64_t kBatch = 2, kM = 4, kK = 3;
  std::vector<float> a = Random(kBatch * kM * kM, 21);
  for (int64_t b = 0; b < kBatch; ++b)
    for (int64_t i = 0; i < kM; ++i) a[(b * kM + i) * kM + i] += 3;  // well conditioned
  const std::vector<float> rhs = Random(kBatch * kM * kK, 22);
  for (bool left : {true, false}) {
    for (bool lower : {true, false}) {
      for (bool unit : {true, false}) {
        for (bool transpose : {true, false}) {
          SCOPED_TRACE(
              fmt::format("left={} lower={} unit={} transpose={}", left, lower, unit, transpose));
          const std::string b_dims = left ? "2,4,3" : "2,3,4";
          auto out = RunHlo(
              "",
              fmt::format("  a = f32[2,4,4] parameter(0)\n  b = f32[{}] parameter(1)\n"
                          "  ROOT x = f32[{}] triangular-solve(a, b), left_side={}, lower={}, "
                          "unit_diagonal={}, transpose_a={}\n",
                          b_dims, b_dims, left, lower, unit,
                          transpose ? "TRANSPOSE" : "NO_TRANSPOSE"),
              {Arg(a, {kBatch, kM, kM}), Arg(rhs, left ? std::vector<int64_t>{kBatch, kM, kK}
                                                       : std::vector<int64_t>{kBatch, kK, kM})});
          const auto x = test::ToHost<float>(out[0]);
          for (int64_t b = 0; b < kBatch; ++b) {
            // op(a) as the solve reads it: one triangle, maybe a unit diagonal, maybe transposed.
            auto t = [&](int64_t i, int64_t j) -> double {
              const int64_t r = transpose ? j : i, c = transpose ? i : j;
              if (r == c && unit) return 1;
              if (lower ? c > r : c < r) return 0;
              return a[(b * kM + r) * kM + c];
            };
            for (int64_t p = 0; p < (left ? kM : kK); ++p) {
              for (int64_t q = 0; q < (left ? kK : kM); ++q) {
                double s = 0;  // (op(a) x)[p][q], or (x op(a))[p][q]
                for (int64_t k = 0; k < kM; ++k) {
                  s += left ? t(p, k) * x[(b * kM + k) * kK + q]
                            : x[(b * kK + p) * kM + k] * t(k, q);
                }
                const double want = rhs[b * kM * kK + p * (left ? kK : kM) + q];
                EXPECT_NEAR(s, want, 1e-5) << b << " " << p << " " << q;
              }
            }
          }
        }
      }
    }
  }
}

TEST(TriangularSolve, EmptyBatchesAndMatricesGiveEmptyResults) {
  auto out = RunHlo("", R"(  a = f32[0,2,2] parameter(0)
  b = f32[0,2,3] parameter(1)
  l = f32[0,2,2] cholesky(a), lower=true
  x = f32[0,2,3] triangular-solve(l, b), left_side=true, lower=true, transpose_a=NO_TRANSPOSE
  e = f32[3,0,0] parameter(2)
  f = f32[3,0,0] cholesky(e)
  ROOT r = (f32[0,2,3], f32[3,0,0]) tuple(x, f)
)",
                    {Arg(std::vector<float>{}, {0, 2, 2}), Arg(std::vector<float>{}, {0, 2, 3}),
                     Arg(std::vector<float>{}, {3, 0, 0})});
  EXPECT_EQ(out[0].shape(), Shape(DType::kF32, {0, 2, 3}));
  EXPECT_EQ(out[1].shape(), Shape(DType::kF32, {3, 0, 0}));
}

TEST(TriangularSolve, MismatchedShapesAreErrorsNamingWhatWasExpected) {
  EXPECT_THAT(ParseError("", R"(  a = f32[3,4] parameter(0)
  ROOT l = f32[3,4] cholesky(a), lower=true
)"),
              HasSubstr("must be square matrices [..., m, m], got f32[3,4]"));
  EXPECT_THAT(ParseError("", R"(  a = f32[4,4] parameter(0)
  b = f32[3,4] parameter(1)
  ROOT x = f32[3,4] triangular-solve(a, b), left_side=true, lower=true, transpose_a=NO_TRANSPOSE
)"),
              HasSubstr("b's second-to-last dimension must be a's 4, got 3"));
  EXPECT_THAT(ParseError("", R"(  a = s32[2,2] parameter(0)
  ROOT l = s32[2,2] cholesky(a)
)"),
              HasSubstr("must be f32 or f64"));
}

// ---- XLA's client-library custom calls --------------------------------------------------------
std::string Call(const std::string& target, const std::string& type, int64_t n, int operands,
                 const std::string& config = "") {
  std::string text, names;
  for (int i = 0; i < operands; ++i) {
    text += fmt::format("  p{} = {}[{}] parameter({})\n", i, type, n, i);
    names += fmt::format("{}p{}", i ? ", " : "", i);
  }
  return text + fmt::format("  ROOT r = {}[{}] custom-call({}), custom_call_target=\"{}\"{}\n",
                            type, n, names, target,
                            config.empty() ? "" : ", backend_config=\"" + config + "\"");
}

template <typename T>
std::vector<T> RunCall(const std::string& target, const std::vector<std::vector<T>>& args) {
  std::vector<Buffer> buffers;
  const int64_t n = static_cast<int64_t>(args[0].size());
  for (const auto& a : args) buffers.push_back(Arg(a, {n}));
  const std::string type = sizeof(T) == 8 ? "f64" : "f32";
  return test::ToHost<T>(
      RunHlo("", Call(target, type, n, static_cast<int>(args.size())), buffers)[0]);
}

TEST(LibraryCalls, ElementwiseMathMatchesTheCLibraryAcrossEachDomain) {
  const std::vector<double> unit = {-1, -0.999, -0.5, -1e-8, 0, 1e-8, 0.3, 0.999, 1, 1.5, NAN};
  const std::vector<double> wide = {-1e200, -1e30, -700, -20, -1,  -1e-10, 0,     1e-10, 0.5,
                                    1,      1.001, 3,    20,  700, 1e30,   1e200, NAN};
  struct Case {
    const char* target;
    double (*reference)(double);
    const std::vector<double>* inputs;
  };
  const Case cases[] = {
      {"xla_builder.math.Acos", [](double x) { return std::acos(x); }, &unit},
      {"xla_builder.math.Asin", [](double x) { return std::asin(x); }, &unit},
      {"xla_builder.math.Atan", [](double x) { return std::atan(x); }, &wide},
      {"xla_builder.math.Asinh", [](double x) { return std::asinh(x); }, &wide},
      {"xla_builder.math.Acosh", [](double x) { return std::acosh(x); }, &wide},
      {"xla_builder.math.Cosh", [](double x) { return std::cosh(x); }, &wide},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.target);
    const std::vector<double> got = RunCall<double>(c.target, {*c.inputs});
    for (size_t i = 0; i < got.size(); ++i) {
      const double want = c.reference((*c.inputs)[i]);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got[i])) << (*c.inputs)[i] << " gave " << got[i];
      } else if (std::isinf(want)) {
        EXPECT_EQ(got[i], want) << (*c.inputs)[i];
      } else {
        EXPECT_NEAR(got[i], want, 4e-15 * std::abs(want) + 1e-300) << (*c.inputs)[i];
      }
    }
    // f32: the same within its precision (values that fit in it).
    std::vector<float> narrow;
    for (double v : *c.inputs) {
      if (!(std::abs(v) > 1e35)) narrow.push_back(static_cast<float>(v));
    }
    const std::vector<float> got32 = RunCall<float>(c.target, {narrow});
    for (size_t i = 0; i < narrow.size(); ++i) {
      const double want = c.reference(narrow[i]);
      if (std::isnan(want) || std::isinf(static_cast<float>(want))) {
        EXPECT_EQ(std::isnan(got32[i]), std::isnan(want)) << narrow[i];
      } else {
        EXPECT_NEAR(got32[i], want, 2e-6 * std::abs(want) + 1e-37) << narrow[i];
      }
    }
  }
}

TEST(LibraryCalls, NextAfterStepsOneUlpTowardItsSecondOperand) {
  const float denormal = std::numeric_limits<float>::denorm_min();
  const std::vector<float> x = {1, 1, -1, 0, 0, -0.0f, 2, NAN, 1, 3.4028235e38f, -denormal};
  const std::vector<float> y = {2, 0, -2, 1, -1, 0.0f, 2, 1, NAN, INFINITY, 0};
  const std::vector<float> got = RunCall<float>("xla_builder.math.NextAfter", {x, y});
  for (size_t i = 0; i < x.size(); ++i) {
    const float want = std::nextafter(x[i], y[i]);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got[i])) << i;
    } else {
      EXPECT_EQ(got[i], want) << x[i] << " toward " << y[i];
      EXPECT_EQ(std::signbit(got[i]), std::signbit(want)) << x[i] << " toward " << y[i];
    }
  }
  const std::vector<double> xd = {1, -1e300, 0};
  const std::vector<double> yd = {0, -INFINITY, -1};
  const std::vector<double> gotd = RunCall<double>("xla_builder.math.NextAfter", {xd, yd});
  for (size_t i = 0; i < xd.size(); ++i) EXPECT_EQ(gotd[i], std::nextafter(xd[i], yd[i])) << i;
}

TEST(LibraryCalls, PolygammaGivesKnownValues) {
  const double pi = 3.14159265358979323846, catalan = 0.91596559417721901505;
  const std::vector<double> n = {0, 1, 2, 3, 1, 0, 1.5, -1, 4};
  const std::vector<double> x = {1, 1, 1, 0.5, 0.25, 0.5, 1, 1, 10};
  // psi(1) = -gamma, psi'(1) = pi^2 / 6, psi''(1) = -2 zeta(3), psi'''(1/2) = pi^4,
  // psi'(1/4) = pi^2 + 8 G, psi(1/2) = -gamma - 2 ln 2, and psi''''(10) =
  // -24 sum_{k>=10} 1/k^5 (summed here, its tail past 10^6 below 1e-24).
  double tail = 0;
  for (int k = 1000000; k >= 10; --k) tail += 1.0 / std::pow(double(k), 5);
  const std::vector<double> want = {-0.57721566490153286,
                                    pi * pi / 6,
                                    -2.4041138063191886,
                                    std::pow(pi, 4),
                                    pi * pi + 8 * catalan,
                                    -0.57721566490153286 - 2 * std::log(2.0),
                                    NAN,
                                    NAN,
                                    -24 * tail};
  const std::vector<double> got = RunCall<double>("xla_builder.math.Polygamma", {n, x});
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << i;
    } else {
      EXPECT_NEAR(got[i], want[i], 1e-12 * std::abs(want[i])) << "n=" << n[i] << " x=" << x[i];
    }
  }
}

TEST(LibraryCalls, RegularizedIncompleteBetaMatchesClosedForms) {
  std::vector<double> a, b, x, want;
  for (double v : {0.05, 0.3, 0.5, 0.77, 0.99}) {
    a.insert(a.end(), {1, 2.5, 1, 2, 3.5});
    b.insert(b.end(), {1, 1, 4.2, 2, 3.5});
    x.insert(x.end(), {v, v, v, v, 0.5});
    want.insert(want.end(),
                {v, std::pow(v, 2.5), 1 - std::pow(1 - v, 4.2), 3 * v * v - 2 * v * v * v, 0.5});
  }
  a.insert(a.end(), {-1, 1, 2});
  b.insert(b.end(), {1, 1, 0});
  x.insert(x.end(), {0.5, 1.5, 0.5});
  want.insert(want.end(), {NAN, NAN, NAN});
  const std::vector<double> got =
      RunCall<double>("xla_builder.math.RegularizedIncompleteBeta", {a, b, x});
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << i;
    } else {
      EXPECT_NEAR(got[i], want[i], 1e-13) << "a=" << a[i] << " b=" << b[i] << " x=" << x[i];
    }
  }
}

// P(a, x) by Simpson's rule on its integral, in u = sqrt(t) so that the
// integrand 2 u^(2a-1) e^(-u^2) is smooth at 0 for a >= 1.
double LowerGammaBySimpson(double a, double x) {
  const int n = 20000;
  const double h = std::sqrt(x) / n;
  auto f = [&](double u) { return 2 * std::pow(u, 2 * a - 1) * std::exp(-u * u); };
  double s = f(0) + f(std::sqrt(x));
  for (int i = 1; i < n; ++i) s += (i % 2 ? 4 : 2) * f(i * h);
  return s * h / 3 / std::tgamma(a);
}

TEST(LibraryCalls, IncompleteGammaGradientsMatchFiniteDifferencesOfItsIntegral) {
  std::vector<double> a, x;
  for (double av : {1.5, 2.0, 3.7}) {
    for (double xv : {0.5, 2.0, 6.0}) {
      a.push_back(av);
      x.push_back(xv);
    }
  }
  const auto grad_a = RunCall<double>("xla_builder.math.IgammaGradA", {a, x});
  const auto sample_grad = RunCall<double>("xla_builder.math.RandomGammaGrad", {a, x});
  for (size_t i = 0; i < a.size(); ++i) {
    const double h = 1e-4;
    const double dp_da =
        (LowerGammaBySimpson(a[i] + h, x[i]) - LowerGammaBySimpson(a[i] - h, x[i])) / (2 * h);
    const double density = std::pow(x[i], a[i] - 1) * std::exp(-x[i]) / std::tgamma(a[i]);
    EXPECT_NEAR(grad_a[i], dp_da, 1e-7) << "a=" << a[i] << " x=" << x[i];
    EXPECT_NEAR(sample_grad[i], -dp_da / density, 1e-6 * (1 + std::abs(dp_da / density)))
        << "a=" << a[i] << " x=" << x[i];
  }
}

TEST(LibraryCalls, MatrixDiagonalAndEinsumMatchLoops) {
  const auto x = Random(2 * 3 * 4, 31);
  auto diagonal = RunHlo("", R"(  x = f32[2,3,4] parameter(0)
  ROOT d = f32[2,3] custom-call(x), custom_call_target="xla_builder.matrix.GetMatrixDiagonalViaGather"
)",
                         {Arg(x, {2, 3, 4})});
  std::vector<float> want;
  for (int b = 0; b < 2; ++b)
    for (int i = 0; i < 3; ++i) want.push_back(x[(b * 3 + i) * 4 + i]);
  EXPECT_EQ(test::ToHost<float>(diagonal[0]), want);

  // A batched matrix product with the batch dim last in the result.
  const auto a = Random(2 * 3 * 4, 32), c = Random(2 * 4 * 5, 33);
  auto product = RunHlo("", R"(  a = f32[2,3,4] parameter(0)
  c = f32[2,4,5] parameter(1)
  ROOT p = f32[3,5,2] custom-call(a, c), custom_call_target="xla_builder.matrix.Einsum", backend_config="bij,bjk->ikb"
)",
                        {Arg(a, {2, 3, 4}), Arg(c, {2, 4, 5})});
  const auto got = test::ToHost<float>(product[0]);
  for (int b = 0; b < 2; ++b)
    for (int i = 0; i < 3; ++i)
      for (int k = 0; k < 5; ++k) {
        double s = 0;
        for (int j = 0; j < 4; ++j) s += double(a[(b * 3 + i) * 4 + j]) * c[(b * 4 + j) * 5 + k];
        EXPECT_NEAR(got[(i * 5 + k) * 2 + b], s, 1e-5) << b << i << k;
      }
  // Dims in one operand only and not in the result are summed first.
  auto summed = RunHlo("", R"(  a = f32[2,3] parameter(0)
  v = f32[4] parameter(1)
  ROOT p = f32[4] custom-call(a, v), custom_call_target="xla_builder.matrix.Einsum", backend_config="ij,k->k"
)",
                       {Arg(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3}),
                        Arg(std::vector<float>{1, -1, 0.5f, 2}, {4})});
  EXPECT_EQ(test::ToHost<float>(summed[0]), (std::vector<float>{21, -21, 10.5f, 42}));
}

TEST(LibraryCalls, XlaCpusTopKCallIsTopK) {
  auto out = RunHlo("", R"(  x = f32[2,5] parameter(0)
  ROOT t = (f32[2,2], s32[2,2]) custom-call(x), custom_call_target="TopK", largest=true
)",
                    {Arg(std::vector<float>{3, 9, 1, 9, 4, -1, -5, 0, 7, 2}, {2, 5})});
  EXPECT_EQ(test::ToHost<float>(out[0]), (std::vector<float>{9, 9, 7, 2}));
  EXPECT_EQ(test::ToHost<int32_t>(out[1]), (std::vector<int32_t>{1, 3, 3, 4}));
}

TEST(LibraryCalls, WrongOperandsAConfigOrAnUnknownTargetAreErrorsNamingThem) {
  EXPECT_THAT(ParseError("", Call("xla_builder.math.Polygamma", "f32", 3, 1)),
              HasSubstr("takes 2 operand(s), found 1"));
  EXPECT_THAT(ParseError("", Call("xla_builder.math.Polygamma", "s32", 3, 2)),
              HasSubstr("takes f32 or f64"));
  EXPECT_THAT(ParseError("", Call("xla_builder.matrix.Einsum", "f32", 3, 2, "i,i")),
              HasSubstr("expected \"<a>,<b>-><result>\""));
  EXPECT_THAT(ParseError("", Call("xla_builder.matrix.Einsum", "f32", 3, 2, "i,j->k")),
              HasSubstr("result dimension 'k' is in neither operand"));
  EXPECT_THAT(ParseError("", Call("xla_builder.tridiagonal.TridiagonalSolver", "f32", 3, 2)),
              AllOf(HasSubstr("'xla_builder.tridiagonal.TridiagonalSolver' is not supported"),
                    HasSubstr("xla_builder.math.{Acos")));
}

// ---- gather and scatter with batching dims (what JAX emits for take_along_axis) ----------------
// out[b][j] = x[b][idx[b][j]]: operand dim 0 is indexed by the indices' dim 0.
TEST(BatchingDims, GatherAndScatterPairAnOperandDimWithAnIndicesDim) {
  const std::vector<float> x = {10, 11, 12, 20, 21, 22};
  const std::vector<int32_t> idx = {2, 0, 1, 1};
  auto out = RunHlo(kAdd, R"(  x = f32[2,3] parameter(0)
  i = s32[2,2,1] parameter(1)
  ROOT g = f32[2,2] gather(x, i), offset_dims={}, collapsed_slice_dims={1}, start_index_map={1}, operand_batching_dims={0}, start_indices_batching_dims={0}, index_vector_dim=2, slice_sizes={1,1}
)",
                    {Arg(x, {2, 3}), Arg(idx, {2, 2, 1})});
  std::vector<float> want;
  for (int b = 0; b < 2; ++b)
    for (int j = 0; j < 2; ++j) want.push_back(x[b * 3 + idx[b * 2 + j]]);
  EXPECT_EQ(test::ToHost<float>(out[0]), want);

  // The same indices with the vector dim implicit, scattering (adding) u back.
  const std::vector<float> u = {1, 2, 3, 4};
  out = RunHlo(kAdd, R"(  x = f32[2,3] parameter(0)
  i = s32[2,2] parameter(1)
  u = f32[2,2] parameter(2)
  ROOT s = f32[2,3] scatter(x, i, u), update_window_dims={}, inserted_window_dims={1}, scatter_dims_to_operand_dims={1}, input_batching_dims={0}, scatter_indices_batching_dims={0}, index_vector_dim=2, to_apply=add
)",
               {Arg(x, {2, 3}), Arg(idx, {2, 2}), Arg(u, {2, 2})});
  std::vector<float> scattered = x;
  for (int b = 0; b < 2; ++b)
    for (int j = 0; j < 2; ++j) scattered[b * 3 + idx[b * 2 + j]] += u[b * 2 + j];
  EXPECT_EQ(test::ToHost<float>(out[0]), scattered);

  EXPECT_THAT(ParseError("", R"(  x = f32[2,3] parameter(0)
  i = s32[3,2,1] parameter(1)
  ROOT g = f32[3,2] gather(x, i), offset_dims={}, collapsed_slice_dims={1}, start_index_map={1}, operand_batching_dims={0}, start_indices_batching_dims={0}, index_vector_dim=2, slice_sizes={1,1}
)"),
              HasSubstr("batching dims 0 (size 2) and 0 (size 3) differ"));
}

// ---- rng-bit-generator with three-fry --------------------------------------------------------
std::vector<Buffer> ThreeFry(const std::string& bits, uint64_t key, uint64_t counter) {
  return RunHlo("",
                fmt::format("  k = u64[2] parameter(0)\n  ROOT r = (u64[2], {}) "
                            "rng-bit-generator(k), algorithm=rng_three_fry\n",
                            bits),
                {Arg(std::vector<uint64_t>{key, counter}, {2})});
}

// Random123's known answers for Threefry-2x32-20 (key, counter -> two words),
// one counter drawn as a u64, low word first.
TEST(ThreeFry, GivesThreefry2x32KnownAnswers) {
  struct Answer {
    uint64_t key, counter, bits;
  };
  const Answer answers[] = {
      {0, 0, 0x99ba4efe6b200159ull},
      {~0ull, ~0ull, 0xbb002be71cb996fcull},
      {0x0370734413198a2eull, 0x85a308d3243f6a88ull, 0x483df7a0c4923a9cull},
  };
  for (const Answer& a : answers) {
    auto out = ThreeFry("u64[]", a.key, a.counter);
    EXPECT_EQ(test::ToHost<uint64_t>(out[1]), (std::vector<uint64_t>{a.bits}));
    EXPECT_EQ(test::ToHost<uint64_t>(out[0]), (std::vector<uint64_t>{a.key, a.counter + 1}));
  }
}

// XLA:CPU's bits for one state (jaxlib 0.10.2): a u32 result is split in
// halves along its first even dimension (else its largest).
TEST(ThreeFry, LaysOutBitsAsXlaDoes) {
  const uint64_t key = 0x0123456789abcdefull, counter = 0xfedcba9876543210ull;
  auto odd = ThreeFry("u32[5]", key, counter);
  EXPECT_EQ(test::ToHost<uint32_t>(odd[1]),
            (std::vector<uint32_t>{0xaed4a37f, 0x1130d111, 0xc3cc4d02, 0x798e402e, 0xaee5264e}));
  EXPECT_EQ(test::ToHost<uint64_t>(odd[0])[1], counter + 3);
  auto even = ThreeFry("u32[2,3]", key, counter);
  EXPECT_EQ(test::ToHost<uint32_t>(even[1]),
            (std::vector<uint32_t>{0xaed4a37f, 0xc3cc4d02, 0xaee5264e, 0x1130d111, 0x798e402e,
                                   0xb089da7a}));
  auto square = ThreeFry("u32[3,3]", key, counter);
  EXPECT_EQ(test::ToHost<uint32_t>(square[1]),
            (std::vector<uint32_t>{0xaed4a37f, 0xc3cc4d02, 0xaee5264e, 0x1130d111, 0x798e402e,
                                   0xb089da7a, 0x49b105a8, 0xe8e52210, 0xf0a39a78}));
  EXPECT_EQ(test::ToHost<uint64_t>(square[0])[1], counter + 6);
  auto wide = ThreeFry("u64[4]", key, counter);
  EXPECT_EQ(test::ToHost<uint64_t>(wide[1]),
            (std::vector<uint64_t>{0x1130d111aed4a37full, 0x798e402ec3cc4d02ull,
                                   0xb089da7aaee5264eull, 0xaf0a8d9949b105a8ull}));
}

}  // namespace
}  // namespace strata::runtime
