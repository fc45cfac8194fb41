// Creation ops against hand-written values and loops; random numbers against
// a Philox-4x32-10 written here from the Random123 description, plus
// statistics of 100k samples.
#include <array>
#include <cmath>
#include <cstring>
#include <set>

#include "lazy/op_test_util.h"
#include "strata/lazy/context.h"

namespace strata::test {
namespace {

int64_t ParameterCount(const Tensor& t) { return lazy::LoweringContext({t}).parameter_count(); }

TEST(Creation, ZerosOnesFull) {
  ExpectTensor<float>(zeros({2, 3}), {2, 3}, std::vector<float>(6, 0.0f));
  ExpectTensor<int32_t>(zeros({4}, DType::kS32), {4}, {0, 0, 0, 0});
  ExpectTensor<float>(zeros({}), {}, {0.0f});
  ExpectTensor<float>(zeros({0, 3}), {0, 3}, {});
  ExpectTensor<double>(ones({3}, DType::kF64), {3}, {1, 1, 1});
  ExpectTensor<uint8_t>(ones({2, 2}, DType::kU8), {2, 2}, {1, 1, 1, 1});
  ExpectTensor<float>(full({2, 2}, 2.5), {2, 2}, {2.5f, 2.5f, 2.5f, 2.5f});
  ExpectTensor<int64_t>(full({3}, -7, DType::kS64), {3}, {-7, -7, -7});
  ExpectTensor<float>(full({1, 0}, 3), {1, 0}, {});
  // 0 and 1 are baked in; other values are scalar parameters.
  EXPECT_EQ(ParameterCount(zeros({2})), 0);
  EXPECT_EQ(ParameterCount(ones({2})), 0);
  EXPECT_EQ(ParameterCount(full({2}, 2.5)), 1);
}

TEST(Creation, ConstantAndScalar) {
  // Counted before the values are read: reading materializes a tensor.
  Tensor c = constant(3.5);
  EXPECT_EQ(ParameterCount(c), 0);
  ExpectTensor<float>(c, {}, {3.5f});
  Tensor s = scalar(1.0, DType::kF64);
  EXPECT_EQ(ParameterCount(s), 1);  // even 1 stays a parameter
  ExpectTensor<double>(s, {}, {1.0});
  ExpectTensor<int32_t>(scalar(-4, DType::kS32), {}, {-4});
}

TEST(Creation, ArangeEnd) {
  ExpectTensor<int64_t>(arange(5), {5}, {0, 1, 2, 3, 4});
  ExpectTensor<int64_t>(arange(0), {0}, {});
  ExpectTensor<float>(arange(4, DType::kF32), {4}, {0, 1, 2, 3});
}

TEST(Creation, ArangeStartEndStep) {
  struct Case {
    double start, end, step;
  };
  for (Case c : {Case{0, 1, 0.25}, Case{5, 0, -1.5}, Case{1, 1, 1}, Case{-3, 4, 1}, Case{0, 1, 0.3},
                 Case{2, -2, -0.5}, Case{0.5, 10, 2}}) {
    SCOPED_TRACE(::testing::Message() << c.start << ":" << c.end << ":" << c.step);
    std::vector<double> expected;
    if (c.step > 0) {
      for (double v = 0, i = 0; (v = c.start + i * c.step) < c.end; ++i) expected.push_back(v);
    } else {
      for (double v = 0, i = 0; (v = c.start + i * c.step) > c.end; ++i) expected.push_back(v);
    }
    ExpectTensor<double>(arange(c.start, c.end, c.step, DType::kF64),
                         {static_cast<int64_t>(expected.size())}, expected, 1e-12, 1e-12);
  }
  ExpectTensor<int32_t>(arange(0, 10, 3, DType::kS32), {4}, {0, 3, 6, 9});
  ExpectTensor<float>(arange(1, 4), {3}, {1, 2, 3});
}

TEST(Creation, Eye) {
  for (int64_t n : {0, 1, 3, 5}) {
    std::vector<float> expected =
        Tabulate<float>({n, n}, [](const Dims& i) { return i[0] == i[1] ? 1 : 0; });
    ExpectTensor<float>(eye(n), {n, n}, expected);
  }
  ExpectTensor<int32_t>(eye(2, DType::kS32), {2, 2}, {1, 0, 0, 1});
}

// ---- random ---------------------------------------------------------------------

// Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3")
// of the 128-bit counter (key << 64 | counter), as XLA reads a two-word state.
std::array<uint32_t, 4> Philox(uint64_t key, uint64_t counter, uint64_t high) {
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  std::array<uint32_t, 4> x = {static_cast<uint32_t>(counter), static_cast<uint32_t>(counter >> 32),
                               static_cast<uint32_t>(high), static_cast<uint32_t>(high >> 32)};
  for (int round = 0; round < 10; ++round) {
    uint64_t a = uint64_t{0xD2511F53} * x[0];
    uint64_t b = uint64_t{0xCD9E8D57} * x[2];
    x = {static_cast<uint32_t>(b >> 32) ^ x[1] ^ k0, static_cast<uint32_t>(b),
         static_cast<uint32_t>(a >> 32) ^ x[3] ^ k1, static_cast<uint32_t>(a)};
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return x;
}

// The first n 32-bit words of the stream of (key, counter).
std::vector<uint32_t> PhiloxWords(uint64_t key, uint64_t counter, int64_t n) {
  std::vector<uint32_t> words;
  for (uint64_t block = 0; static_cast<int64_t>(words.size()) < n; ++block) {
    const uint64_t low = counter + block;
    for (uint32_t w : Philox(key, low, key + (low < counter ? 1 : 0))) words.push_back(w);
  }
  words.resize(n);
  return words;
}

TEST(Random, KeyLayout) {
  Tensor key = random_key(1234);
  EXPECT_EQ(key.shape(), Shape(DType::kU64, {2}));
  EXPECT_EQ(key.to_vector<uint64_t>(), (std::vector<uint64_t>{1234, 0}));
}

TEST(Random, UniformF32MatchesPhiloxBits) {
  std::vector<uint32_t> words = PhiloxWords(42, 0, 10);
  std::vector<float> expected;
  for (uint32_t w : words) expected.push_back(static_cast<float>(w >> 8) * 0x1p-24f);
  ExpectTensor<float>(uniform(random_key(42), {2, 5}), {2, 5}, expected);
  ExpectTensor<float>(uniform(42, {2, 5}), {2, 5}, expected);
}

TEST(Random, UniformF64UsesFiftyThreeBits) {
  std::vector<uint32_t> words = PhiloxWords(7, 0, 16);
  std::vector<double> expected;
  for (int i = 0; i < 8; ++i) {
    uint64_t w = words[2 * i] | (uint64_t{words[2 * i + 1]} << 32);
    expected.push_back(static_cast<double>(w >> 11) * 0x1p-53);
  }
  ExpectTensor<double>(uniform(7, {8}, 0, 1, DType::kF64), {8}, expected);
}

TEST(Random, HalfPrecisionUniformUsesTheirSignificands) {
  // f16 keeps 11 significant bits and bf16 8: more would round some values up to 1.
  std::vector<uint32_t> words = PhiloxWords(8, 0, 6);
  std::vector<float> half, brain;
  for (uint32_t w : words) {
    half.push_back(static_cast<float>(w >> 21) * 0x1p-11f);
    brain.push_back(static_cast<float>(w >> 24) * 0x1p-8f);
  }
  ExpectTensor<float>(astype(uniform(8, {6}, 0, 1, DType::kF16), DType::kF32), {6}, half);
  ExpectTensor<float>(astype(uniform(8, {6}, 0, 1, DType::kBF16), DType::kF32), {6}, brain);
}

TEST(Random, UniformStaysBelowHighAfterRounding) {
  // f16 values near 1 are 2^-10 apart: without a clamp, draws in [1 + 2^-11, 1.0008)
  // round up to 1 + 2^-10 > high.
  Tensor u = uniform(random_key(4), {2000}, 1, 1.0008, DType::kF16);
  for (float v : astype(u, DType::kF32).to_vector<float>()) {
    ASSERT_GE(v, 1.0f);
    ASSERT_LT(v, 1.0008f);
  }
}

TEST(Random, SameKeySameNumbersDifferentKeysDiffer) {
  auto a = uniform(random_key(5), {64}).to_vector<float>();
  auto b = uniform(random_key(5), {64}).to_vector<float>();
  auto c = uniform(random_key(6), {64}).to_vector<float>();
  EXPECT_EQ(a, b);
  int same = 0;
  for (size_t i = 0; i < a.size(); ++i) same += a[i] == c[i];
  EXPECT_LT(same, 3);
  EXPECT_EQ(normal(9, {32}).to_vector<float>(), normal(random_key(9), {32}).to_vector<float>());
  EXPECT_NE(normal(9, {32}).to_vector<float>(), normal(10, {32}).to_vector<float>());
}

struct Moments {
  double mean = 0, variance = 0, low = INFINITY, high = -INFINITY;
};
template <typename T>
Moments MomentsOf(const std::vector<T>& v) {
  Moments m;
  for (T x : v) {
    m.mean += x;
    m.low = std::min<double>(m.low, x);
    m.high = std::max<double>(m.high, x);
  }
  m.mean /= static_cast<double>(v.size());
  for (T x : v) m.variance += (x - m.mean) * (x - m.mean);
  m.variance /= static_cast<double>(v.size() - 1);
  return m;
}

TEST(Random, UniformStatistics) {
  struct Case {
    double low, high;
  };
  for (Case c : {Case{0, 1}, Case{-2, 3}, Case{10, 10.5}}) {
    SCOPED_TRACE(::testing::Message() << "[" << c.low << ", " << c.high << ")");
    Tensor u = uniform(random_key(11), {100, 1000}, c.low, c.high);
    ASSERT_EQ(u.shape(), Shape(DType::kF32, {100, 1000}));
    Moments m = MomentsOf(u.to_vector<float>());
    double width = c.high - c.low;
    EXPECT_GE(m.low, c.low);
    EXPECT_LT(m.high, c.high);
    EXPECT_NEAR(m.mean, (c.low + c.high) / 2, 0.005 * width);
    EXPECT_NEAR(m.variance, width * width / 12, 0.01 * width * width / 12 * 3);
  }
}

TEST(Random, NormalStatistics) {
  struct Case {
    double mean, stddev;
  };
  for (Case c : {Case{0, 1}, Case{3, 2}, Case{-1, 0.1}}) {
    SCOPED_TRACE(::testing::Message() << "N(" << c.mean << ", " << c.stddev << ")");
    auto v = normal(random_key(21), {100000}, c.mean, c.stddev).to_vector<float>();
    Moments m = MomentsOf(v);
    EXPECT_NEAR(m.mean, c.mean, 0.015 * c.stddev);
    EXPECT_NEAR(std::sqrt(m.variance), c.stddev, 0.015 * c.stddev);
    int64_t within = 0;
    for (float x : v) within += std::abs(x - c.mean) <= c.stddev;
    EXPECT_NEAR(static_cast<double>(within) / v.size(), 0.6827, 0.01);
    for (float x : v) ASSERT_TRUE(std::isfinite(x));
  }
  Tensor d = normal(1, {3, 0, 2}, 0, 1, DType::kF64);
  EXPECT_EQ(d.shape(), Shape(DType::kF64, {3, 0, 2}));
  EXPECT_EQ(normal(1, {}).shape(), Shape(DType::kF32, {}));
}

TEST(Random, SplitKey) {
  Tensor parent = random_key(77);
  std::vector<Tensor> keys = split_key(parent, 4);
  ASSERT_EQ(keys.size(), 4u);
  std::set<uint64_t> seen;
  for (const Tensor& k : keys) {
    ASSERT_EQ(k.shape(), Shape(DType::kU64, {2}));
    auto words = k.to_vector<uint64_t>();
    EXPECT_EQ(words[1], 0u);
    seen.insert(words[0]);
  }
  EXPECT_EQ(seen.size(), 4u);
  // The documented derivation: Philox words of (key, counter + 2^63), two per child.
  std::vector<uint32_t> words = PhiloxWords(77, uint64_t{1} << 63, 8);
  for (int i = 0; i < 4; ++i) {
    uint64_t expected = words[2 * i] | (uint64_t{words[2 * i + 1]} << 32);
    EXPECT_EQ(keys[i].to_vector<uint64_t>()[0], expected) << i;
  }
  // Deterministic, and children draw different numbers from each other and the parent.
  EXPECT_EQ(split_key(parent, 4)[2].to_vector<uint64_t>(), keys[2].to_vector<uint64_t>());
  auto from_parent = uniform(parent, {16}).to_vector<float>();
  auto from_child0 = uniform(keys[0], {16}).to_vector<float>();
  auto from_child1 = uniform(keys[1], {16}).to_vector<float>();
  EXPECT_NE(from_parent, from_child0);
  EXPECT_NE(from_child0, from_child1);
  EXPECT_TRUE(split_key(parent, 0).empty());
  // Splitting a split key works too.
  EXPECT_EQ(split_key(keys[3], 2).size(), 2u);
}

}  // namespace
}  // namespace strata::test
