// sort and compare's TOTALORDER as XLA's text writes them (the comparators
// JAX emits among them), against std::stable_sort over reference orders
// written here from XLA's operation semantics.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "strata/compiler/compile.h"
#include "strata/core/error.h"
#include "strata/hlo/text.h"
#include "test_util.h"

namespace strata::runtime {
namespace {

using test::Arg;
using test::ToHost;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<Buffer> RunText(const std::string& text, const std::vector<Buffer>& args) {
  std::unique_ptr<hlo::Module> m = hlo::ParseModule(text);
  return compiler::Compile(*m)->Run(args);
}

// XLA's total order, written from its definition: -NaN, -inf, negative
// numbers, -0, +0, positive numbers, +inf, +NaN.
int Rank(float x) {
  if (std::isnan(x)) return std::signbit(x) ? 0 : 7;
  if (x == 0) return std::signbit(x) ? 3 : 4;
  if (std::isinf(x)) return x < 0 ? 1 : 6;
  return x < 0 ? 2 : 5;
}
bool TotalLess(float a, float b) {
  if (Rank(a) != Rank(b)) return Rank(a) < Rank(b);
  return !std::isnan(a) && a < b;
}

// Stable permutation of [0, n) by `before`.
template <typename Before>
std::vector<int64_t> StablePermutation(int64_t n, Before before) {
  std::vector<int64_t> p(n);
  std::iota(p.begin(), p.end(), 0);
  std::stable_sort(p.begin(), p.end(), before);
  return p;
}

std::vector<float> RandomFloats(int64_t n, int seed, int distinct) {
  std::mt19937 rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(static_cast<int>(rng() % distinct) - distinct / 2) / 4;
  return v;
}

bool SameBits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

TEST(Sort, OneOperandAscendingAlongTheLastDimension) {
  const char* text = R"(
HloModule m
lt {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = pred[] compare(a, b), direction=LT
}
ENTRY main {
  x = f32[3,50] parameter(0)
  ROOT s = f32[3,50] sort(x), dimensions={1}, to_apply=lt
})";
  const std::vector<float> x = RandomFloats(150, 1, 1000);
  const std::vector<float> got = RunText(text, {Arg(x, {3, 50})})[0].ToVector<float>();
  for (int r = 0; r < 3; ++r) {
    std::vector<float> want(x.begin() + 50 * r, x.begin() + 50 * (r + 1));
    std::sort(want.begin(), want.end());
    EXPECT_EQ(std::vector<float>(got.begin() + 50 * r, got.begin() + 50 * (r + 1)), want) << r;
  }
}

// JAX's lax.sort((keys, values), num_keys=1): the total order on the keys,
// the other operand's parameters unused; stable, so ties keep their order.
TEST(Sort, JaxKeyValueSortInTotalOrderIsStable) {
  const char* text = R"(
HloModule jit_sort, entry_computation_layout={(f32[2,9]{1,0}, s32[2,9]{1,0})->(f32[2,9]{1,0}, s32[2,9]{1,0})}

%region_0.4 (Arg_0.5: f32[], Arg_1.6: f32[], Arg_2.7: s32[], Arg_3.8: s32[]) -> pred[] {
  %Arg_0.5 = f32[] parameter(0)
  %Arg_1.6 = f32[] parameter(1)
  %Arg_2.7 = s32[] parameter(2)
  %Arg_3.8 = s32[] parameter(3)
  ROOT %compare.9 = pred[] compare(f32[] %Arg_0.5, f32[] %Arg_1.6), direction=LT, type=TOTALORDER
}

ENTRY %main.11 (Arg_0.1: f32[2,9], Arg_1.2: s32[2,9]) -> (f32[2,9], s32[2,9]) {
  %Arg_0.1 = f32[2,9]{1,0} parameter(0)
  %Arg_1.2 = s32[2,9]{1,0} parameter(1)
  ROOT %sort.10 = (f32[2,9]{1,0}, s32[2,9]{1,0}) sort(f32[2,9]{1,0} %Arg_0.1, s32[2,9]{1,0} %Arg_1.2), dimensions={1}, is_stable=true, to_apply=%region_0.4
})";
  const float neg_nan = -kNaN;
  const std::vector<float> keys = {3,    -0.0f, kNaN, 0.0f,  -kInf, 1,    neg_nan, 1,       kInf,
                                   -1.5, 2,     2,    -0.0f, 0.0f,  kNaN, -1.5,    neg_nan, 7};
  std::vector<int32_t> values(18);
  std::iota(values.begin(), values.end(), 100);
  auto out = RunText(text, {Arg(keys, {2, 9}), Arg(values, {2, 9})});
  const std::vector<float> got_keys = out[0].ToVector<float>();
  const std::vector<int32_t> got_values = out[1].ToVector<int32_t>();
  for (int r = 0; r < 2; ++r) {
    auto p = StablePermutation(
        9, [&](int64_t a, int64_t b) { return TotalLess(keys[9 * r + a], keys[9 * r + b]); });
    for (int k = 0; k < 9; ++k) {
      EXPECT_TRUE(SameBits(got_keys[9 * r + k], keys[9 * r + p[k]]))
          << "row " << r << " position " << k << ": got " << got_keys[9 * r + k] << ", want "
          << keys[9 * r + p[k]];
      EXPECT_EQ(got_values[9 * r + k], values[9 * r + p[k]]) << r << " " << k;
    }
  }
}

// Sorting along a leading dimension: rows are strided.
TEST(Sort, AlongTheFirstDimensionOfThreeWithTwoOperandsDescending) {
  const char* text = R"(
HloModule m
gt {
  a = s64[] parameter(0)
  b = s64[] parameter(1)
  c = f64[] parameter(2)
  d = f64[] parameter(3)
  ROOT r = pred[] compare(a, b), direction=GT
}
ENTRY main {
  k = s64[7,3,2] parameter(0)
  v = f64[7,3,2] parameter(1)
  ROOT s = (s64[7,3,2], f64[7,3,2]) sort(k, v), dimensions={0}, is_stable=true, to_apply=gt
})";
  std::vector<int64_t> k(42);
  std::vector<double> v(42);
  std::mt19937 rng(3);
  for (int i = 0; i < 42; ++i) {
    k[i] = static_cast<int64_t>(rng() % 5) - 2;
    v[i] = i + 0.5;
  }
  auto out = RunText(text, {Arg(k, {7, 3, 2}), Arg(v, {7, 3, 2})});
  const auto got_k = out[0].ToVector<int64_t>();
  const auto got_v = out[1].ToVector<double>();
  for (int col = 0; col < 6; ++col) {
    auto p =
        StablePermutation(7, [&](int64_t a, int64_t b) { return k[6 * a + col] > k[6 * b + col]; });
    for (int i = 0; i < 7; ++i) {
      EXPECT_EQ(got_k[6 * i + col], k[6 * p[i] + col]);
      EXPECT_EQ(got_v[6 * i + col], v[6 * p[i] + col]) << "column " << col << " row " << i;
    }
  }
}

// A comparator that is more than one compare runs compiled: by |x|
// descending, as a lexicographic second key the other operand ascending
// (the shape of JAX's num_keys=2 comparators).
TEST(Sort, ACompiledComparatorWithTwoKeys) {
  const char* text = R"(
HloModule m
by_magnitude_then_second {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  c = s32[] parameter(2)
  d = s32[] parameter(3)
  abs_a = f32[] abs(a)
  abs_b = f32[] abs(b)
  greater = pred[] compare(abs_a, abs_b), direction=GT
  equal = pred[] compare(abs_a, abs_b), direction=EQ
  second = pred[] compare(c, d), direction=LT
  tie = pred[] and(equal, second)
  ROOT first = pred[] or(greater, tie)
}
ENTRY main {
  x = f32[40] parameter(0)
  y = s32[40] parameter(1)
  ROOT s = (f32[40], s32[40]) sort(x, y), dimensions={0}, to_apply=by_magnitude_then_second
})";
  const std::vector<float> x = RandomFloats(40, 5, 9);
  std::vector<int32_t> y(40);
  for (int i = 0; i < 40; ++i) y[i] = (i * 17) % 11;
  auto out = RunText(text, {Arg(x, {40}), Arg(y, {40})});
  auto p = StablePermutation(40, [&](int64_t a, int64_t b) {
    if (std::abs(x[a]) != std::abs(x[b])) return std::abs(x[a]) > std::abs(x[b]);
    return y[a] < y[b];
  });
  const auto gx = out[0].ToVector<float>();
  const auto gy = out[1].ToVector<int32_t>();
  for (int i = 0; i < 40; ++i) {
    EXPECT_EQ(gx[i], x[p[i]]) << i;
    EXPECT_EQ(gy[i], y[p[i]]) << i;
  }
}

// LT over NaNs is no strict weak order: XLA leaves the order unspecified.
// It must still be a permutation of the input, and nothing may crash
// (libstdc++'s own sorts may read outside the range under such a comparator).
TEST(Sort, AComparatorThatIsNoOrderGivesSomePermutation) {
  for (const char* root : {"compare(a, b), direction=NE", "compare(a, b), direction=LT",
                           "compare(a, b), direction=GE"}) {
    SCOPED_TRACE(root);
    const std::string text = fmt::format(R"(
HloModule m
odd {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = pred[] {}
}}
ENTRY main {{
  x = f32[300] parameter(0)
  ROOT s = f32[300] sort(x), dimensions={{0}}, to_apply=odd
}})",
                                         root);
    std::vector<float> x = RandomFloats(300, 7, 50);
    for (int i = 0; i < 300; i += 7) x[i] = kNaN;
    std::vector<float> got = RunText(text, {Arg(x, {300})})[0].ToVector<float>();
    auto key = [](float f) { return std::isnan(f) ? kInf * 2 : f; };
    std::vector<float> a, b;
    for (float f : x) a.push_back(key(f));
    for (float f : got) b.push_back(key(f));
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    EXPECT_EQ(a, b);
  }
}

TEST(Sort, EveryKeyTypeRunsNatively) {
  // u8 ascending, s32 descending, pred ascending, f64 total order: each against std::stable_sort.
  {
    const char* text = R"(
HloModule m
lt { a = u8[] parameter(0)
  b = u8[] parameter(1)
  ROOT r = pred[] compare(a, b), direction=LT }
ENTRY main { x = u8[20] parameter(0)
  ROOT s = u8[20] sort(x), dimensions={0}, to_apply=lt })";
    std::vector<uint8_t> x(20);
    for (int i = 0; i < 20; ++i) x[i] = static_cast<uint8_t>((i * 97) % 256);
    auto got = RunText(text, {Arg(x, {20})})[0].ToVector<uint8_t>();
    std::sort(x.begin(), x.end());
    EXPECT_EQ(got, x);
  }
  {
    const char* text = R"(
HloModule m
first { a = pred[] parameter(0)
  b = pred[] parameter(1)
  i = s32[] parameter(2)
  j = s32[] parameter(3)
  ROOT r = pred[] compare(a, b), direction=LT }
ENTRY main { x = pred[10] parameter(0)
  y = s32[10] parameter(1)
  ROOT s = (pred[10], s32[10]) sort(x, y), dimensions={0}, is_stable=true, to_apply=first })";
    const std::vector<bool> x = {true, false, true, true, false, false, true, false, true, false};
    std::vector<int32_t> y(10);
    std::iota(y.begin(), y.end(), 0);
    auto out = RunText(text, {Arg(x, {10}), Arg(y, {10})});
    auto p = StablePermutation(10, [&](int64_t a, int64_t b) { return x[a] < x[b]; });
    std::vector<int32_t> want;
    for (int64_t i : p) want.push_back(y[i]);
    EXPECT_EQ(out[1].ToVector<int32_t>(), want);
    EXPECT_EQ(ToHost<bool>(out[0]),
              std::vector<bool>({false, false, false, false, false, true, true, true, true, true}));
  }
  {
    const char* text = R"(
HloModule m
gt { a = f64[] parameter(0)
  b = f64[] parameter(1)
  ROOT r = pred[] compare(b, a), direction=LT, type=TOTALORDER }
ENTRY main { x = f64[8] parameter(0)
  ROOT s = f64[8] sort(x), dimensions={0}, to_apply=gt })";
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const std::vector<double> x = {1, -nan, 0.0, nan, -0.0, -3, 1e300, -1e-300};
    auto got = RunText(text, {Arg(x, {8})})[0].ToVector<double>();
    // compare(b, a) LT is "a after b": descending total order.
    ASSERT_EQ(got.size(), 8u);
    EXPECT_TRUE(std::isnan(got[0]) && !std::signbit(got[0]));
    EXPECT_EQ(got[1], 1e300);
    EXPECT_EQ(got[2], 1);
    EXPECT_TRUE(got[3] == 0 && !std::signbit(got[3]));
    EXPECT_TRUE(got[4] == 0 && std::signbit(got[4]));
    EXPECT_EQ(got[5], -1e-300);
    EXPECT_EQ(got[6], -3);
    EXPECT_TRUE(std::isnan(got[7]) && std::signbit(got[7]));
  }
}

// XLA's topk: the k largest (or smallest) of each row along the last
// dimension, in total order, ties by position; against std::stable_sort.
TEST(TopK, AgainstAStableSortOfEachRow) {
  for (const char* largest : {"true", "false"}) {
    SCOPED_TRACE(largest);
    const std::string text = fmt::format(R"(
HloModule m
ENTRY main {{
  x = f32[3,40] parameter(0)
  ROOT t = (f32[3,5], s32[3,5]) topk(x), k=5, largest={}
}})",
                                         largest);
    std::vector<float> x = RandomFloats(120, 9, 15);  // many ties
    x[7] = kNaN;
    x[50] = -kNaN;
    x[51] = -0.0f;
    auto out = RunText(text, {Arg(x, {3, 40})});
    const auto values = out[0].ToVector<float>();
    const auto indices = out[1].ToVector<int32_t>();
    const bool top = std::string(largest) == "true";
    for (int r = 0; r < 3; ++r) {
      auto p = StablePermutation(40, [&](int64_t a, int64_t b) {
        const float u = x[40 * r + a], v = x[40 * r + b];
        return top ? TotalLess(v, u) : TotalLess(u, v);
      });
      for (int j = 0; j < 5; ++j) {
        EXPECT_EQ(indices[5 * r + j], p[j]) << r << " " << j;
        EXPECT_TRUE(SameBits(values[5 * r + j], x[40 * r + p[j]])) << r << " " << j;
      }
    }
  }
  // Errors name the problem.
  EXPECT_THAT(
      [] {
        hlo::ParseModule(
            "HloModule m\nENTRY e {\n  x = f32[4] parameter(0)\n"
            "  ROOT t = (f32[5], s32[5]) topk(x), k=5\n}\n");
      },
      testing::ThrowsMessage<Error>(
          testing::HasSubstr("k = 5 is out of range for a last dimension of 4")));
  EXPECT_THAT(
      [] {
        hlo::ParseModule(
            "HloModule m\nENTRY e {\n  x = f32[4] parameter(0)\n"
            "  ROOT t = (f32[2], s32[2]) topk(x)\n}\n");
      },
      testing::ThrowsMessage<Error>(testing::HasSubstr("missing attribute 'k'")));
}

// Rows too long to sort in memory are an Error at compile naming the op,
// never an overflowed scratch size (a fuzzed shape compiles).
TEST(Sort, RowsTooLongForScratchAreErrors) {
  for (const char* root : {"ROOT s = f32[2,1000000000000000] sort(x), dimensions={1}, to_apply=lt",
                           "ROOT t = (f32[2,3], s32[2,3]) topk(y), k=3"}) {
    const std::string text = fmt::format(R"(
HloModule m
lt {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = pred[] compare(a, b), direction=LT
}}
ENTRY main {{
  x = f32[2,1000000000000000] parameter(0)
  y = f32[2,3000000000] parameter(1)
  {}
}})",
                                         root);
    EXPECT_THAT([&] { compiler::Compile(*hlo::ParseModule(text)); },
                testing::ThrowsMessage<Error>(testing::HasSubstr(
                    std::string(root).find("sort") != std::string::npos
                        ? "rows of 1000000000000000 elements need more than 2^40 bytes"
                        : "a last dimension of 3000000000 elements is more than its "
                          "s32 positions can name")))
        << root;
  }
}

TEST(Compare, TotalOrderAgainstItsDefinition) {
  const char* text = R"(
HloModule m
ENTRY main {
  a = f32[64] parameter(0)
  b = f32[64] parameter(1)
  lt = pred[64] compare(a, b), direction=LT, type=TOTALORDER
  eq = pred[64] compare(a, b), direction=EQ, type=TOTALORDER
  ge = pred[64] compare(a, b), direction=GE, type=FLOAT
  ROOT t = (pred[64], pred[64], pred[64]) tuple(lt, eq, ge)
})";
  const std::vector<float> special = {-kNaN, -kInf, -2, -0.0f, 0.0f, 2, kInf, kNaN};
  std::vector<float> a, b;
  for (float x : special) {
    for (float y : special) {
      a.push_back(x);
      b.push_back(y);
    }
  }
  auto out = RunText(text, {Arg(a, {64}), Arg(b, {64})});
  const auto lt = ToHost<bool>(out[0]);
  const auto eq = ToHost<bool>(out[1]);
  const auto ge = ToHost<bool>(out[2]);
  for (int i = 0; i < 64; ++i) {
    SCOPED_TRACE(fmt::format("{} vs {}", a[i], b[i]));
    EXPECT_EQ(lt[i], TotalLess(a[i], b[i]));
    EXPECT_EQ(eq[i], !TotalLess(a[i], b[i]) && !TotalLess(b[i], a[i]));
    EXPECT_EQ(ge[i], a[i] >= b[i]);  // FLOAT: IEEE, NaN unordered
  }
}

TEST(Sort, TextRoundTripsAndBadSortsAreErrorsNamingTheProblem) {
  const char* good = R"(HloModule m

lt (a: f32[], b: f32[], c: s32[], d: s32[]) -> pred[] {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  c = s32[] parameter(2)
  d = s32[] parameter(3)
  ROOT r = pred[] compare(a, b), direction=LT, type=TOTALORDER
}

ENTRY main (x: f32[2,3], y: s32[2,3]) -> (f32[2,3], s32[2,3]) {
  x = f32[2,3] parameter(0)
  y = s32[2,3] parameter(1)
  ROOT s = (f32[2,3], s32[2,3]) sort(x, y), dimensions={1}, is_stable=true, to_apply=lt
}
)";
  std::unique_ptr<hlo::Module> m = hlo::ParseModule(good);
  EXPECT_EQ(hlo::ToText(*m), good);
  auto bad = [&](std::string from, std::string to, std::string message) {
    std::string text = good;
    const size_t at = text.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    text.replace(at, from.size(), to);
    EXPECT_THAT([&] { hlo::ParseModule(text); },
                testing::ThrowsMessage<Error>(testing::HasSubstr(message)))
        << to;
  };
  bad("y = s32[2,3]", "y = s32[3,2]", "every operand must have operand 0's [2,3]");
  bad("(f32[2,3], s32[2,3]) sort(x, y)", "f32[2,3] sort(x)", "comparator lt takes 4 parameters");
  bad("dimensions={1}, is_stable", "dimensions={2}, is_stable", "sort dimension 2 is out of range");
  bad("dimensions={1}, is_stable", "dimensions={0,1}, is_stable", "expected one sort dimension");
  bad(", to_apply=lt\n}\n", "\n}\n", "sort is missing attribute 'to_apply'");
  bad("c = s32[] parameter(2)", "c = s64[] parameter(2)", "comparator lt parameter 2 is s64[]");
  bad("ROOT r = pred[] compare(a, b), direction=LT, type=TOTALORDER", "ROOT r = f32[] add(a, b)",
      "comparator lt must return pred[]");
  bad("type=TOTALORDER", "type=PARTIAL", "expected a comparison type");
}

}  // namespace
}  // namespace strata::runtime
