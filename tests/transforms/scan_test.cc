// scan against the same loop written as a C++ for-loop over lazy ops.
#include "strata/transforms/scan.h"

#include <gtest/gtest.h>

#include "strata/autograd/grad.h"
#include "strata/lazy/context.h"
#include "strata/lazy/ops.h"
#include "strata/nn/functional.h"

namespace strata {
namespace {

Tensor F(std::vector<float> v, std::vector<int64_t> dims) { return Tensor::FromVector(v, dims); }

void ExpectClose(const Tensor& a, const Tensor& b, double tol = 1e-5) {
  ASSERT_EQ(a.shape(), b.shape());
  auto x = astype(a, DType::kF64).to_vector<double>();
  auto y = astype(b, DType::kF64).to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i)
    EXPECT_NEAR(x[i], y[i], tol * std::max(1.0, std::abs(y[i]))) << i;
}

TEST(Scan, CumulativeSum) {
  auto [carry, ys] = scan(
      [](const Tree& c, const Tree& x) {
        Tensor s = c.leaf() + x.leaf();
        return std::pair{Tree(s), Tree(s)};
      },
      Tree(F({0, 0}, {2})), Tree(F({1, 2, 3, 4, 5, 6}, {3, 2})));
  EXPECT_EQ(carry.leaf().to_vector<float>(), (std::vector<float>{9, 12}));
  EXPECT_EQ(ys.leaf().to_vector<float>(), (std::vector<float>{1, 2, 4, 6, 9, 12}));
}

TEST(Scan, GradientsMatchTheForLoop) {
  Tensor w = F({0.5, -0.3, 0.2, 0.8}, {2, 2});
  Tensor h0 = F({0.1, -0.2}, {1, 2});
  Tensor xs = F({1, 2, 3, 4, 5, 6, -1, 0.5}, {4, 1, 2});
  auto cell = [&](const Tensor& h, const Tensor& x) { return tanh(matmul(h, w) + x); };
  auto [carry, ys] = scan(
      [&](const Tree& c, const Tree& x) {
        Tensor h = cell(c.leaf(), x.leaf());
        return std::pair{Tree(h), Tree(h * 2.0)};
      },
      Tree(h0), Tree(xs));
  Tensor loss = sum(carry.leaf()) + sum(ys.leaf() * ys.leaf());
  // The same loop unrolled.
  Tensor h = h0, ref = zeros({});
  for (int t = 0; t < 4; ++t) {
    h = cell(h, reshape(slice(xs, 0, t, t + 1), {1, 2}));
    ref = ref + sum((h * 2.0) * (h * 2.0));
  }
  ref = ref + sum(h);
  ExpectClose(loss, ref);
  auto g = gradients(loss, {w, h0, xs});
  auto r = gradients(ref, {w, h0, xs});
  for (size_t i = 0; i < g.size(); ++i) ExpectClose(g[i], r[i]);
}

// Dropout inside the body with a carried key: each step draws new bits, and
// the backward loop, recomputing the step from the saved carry (key
// included), draws the same ones: gradients equal the unrolled loop's.
TEST(Scan, RandomBitsDifferPerStepAndBackwardReproducesThem) {
  Tensor w = Tensor::FromVector<double>({0.7, -0.4, 0.3, 0.9, 0.5, -0.8}, {6});
  Tensor xs = Tensor::FromVector<double>(std::vector<double>(4 * 6, 1.0), {4, 6});
  auto step = [&](const Tensor& key, const Tensor& h, const Tensor& x) {
    std::vector<Tensor> keys = split_key(key, 2);
    Tensor next = nn::dropout(tanh(h * w + x), 0.5, keys[1]);
    return std::pair{keys[0], next};
  };
  for (Remat remat : {Remat::kSaveCarries, Remat::kSaveAll}) {
    int calls = 0;
    auto [carry, ys] = scan(
        [&](const Tree& c, const Tree& x) {
          ++calls;
          auto [key, h] = step(c[0].leaf(), c[1].leaf(), x.leaf());
          return std::pair{Tree{key, h}, Tree(h)};
        },
        Tree{random_key(3), zeros({6}, DType::kF64)}, Tree(xs), {.remat = remat});
    Tensor loss = sum(ys.leaf() * ys.leaf()) + sum(carry[1].leaf());
    std::vector<Tensor> g = gradients(loss, {w, xs});
    Tensor key = random_key(3), h = zeros({6}, DType::kF64), ref = zeros({}, DType::kF64);
    std::vector<Tensor> masks;
    for (int64_t t = 0; t < 4; ++t) {
      std::tie(key, h) = step(key, h, reshape(slice(xs, 0, t, t + 1), {6}));
      ref = ref + sum(h * h);
      masks.push_back(ne(h, zeros({6}, DType::kF64)));
    }
    ref = ref + sum(h);
    std::vector<Tensor> r = gradients(ref, {w, xs});
    EXPECT_EQ(calls, 1);  // traced once, for the forward and the backward
    ExpectClose(loss, ref, 1e-12);
    for (size_t i = 0; i < g.size(); ++i) ExpectClose(g[i], r[i], 1e-12);
    // The steps did draw different masks.
    EXPECT_NE(masks[0].to_vector<bool>(), masks[1].to_vector<bool>());
  }
}

}  // namespace
}  // namespace strata
