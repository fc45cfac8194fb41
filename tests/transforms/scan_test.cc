// scan against the same loop written as a C++ for-loop over lazy ops.
#include "strata/transforms/scan.h"

#include <gtest/gtest.h>

#include "strata/autograd/grad.h"
#include "strata/lazy/context.h"
#include "strata/lazy/ops.h"

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

}  // namespace
}  // namespace strata
