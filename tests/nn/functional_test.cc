// nn functions: values against formulas worked in the test, gradients
// against finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "gradient_check.h"
#include "strata/nn/functional.h"

namespace strata {
namespace {

using nn::Reduction;

Tensor D(std::vector<double> v, std::vector<int64_t> dims) { return Tensor::FromVector(v, dims); }

TEST(Functional, ActivationValues) {
  std::vector<double> xs = {-2, -0.5, 0.25, 1.5};
  Tensor x = D(xs, {4});
  auto relu = nn::relu(x).to_vector<double>();
  auto gelu = nn::gelu(x).to_vector<double>();
  auto gelu_tanh = nn::gelu(x, true).to_vector<double>();
  auto silu = nn::silu(x).to_vector<double>();
  for (size_t i = 0; i < xs.size(); ++i) {
    double v = xs[i];
    EXPECT_DOUBLE_EQ(relu[i], v > 0 ? v : 0);
    EXPECT_NEAR(gelu[i], 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))), 1e-12);
    EXPECT_NEAR(gelu_tanh[i],
                0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))), 1e-12);
    EXPECT_NEAR(silu[i], v / (1 + std::exp(-v)), 1e-12);
  }
}

TEST(Functional, LossValues) {
  Tensor logits = D({1, 2, 3, 0, 0, 0, 5, 1, 1}, {3, 3});
  Tensor target = Tensor::FromVector<int64_t>({2, -100, 0}, {3});
  // Hand-worked: row 0: -log(e^3 / (e+e^2+e^3)); row 2: -log(e^5/(e^5+2e)); row 1 ignored.
  double r0 = -(3 - std::log(std::exp(1) + std::exp(2) + std::exp(3)));
  double r2 = -(5 - std::log(std::exp(5) + 2 * std::exp(1)));
  EXPECT_NEAR(nn::cross_entropy(logits, target).item<double>(), (r0 + r2) / 2, 1e-12);
  EXPECT_NEAR(nn::cross_entropy(logits, target, -100, Reduction::kSum).item<double>(), r0 + r2,
              1e-12);
  auto none = nn::cross_entropy(logits, target, -100, Reduction::kNone).to_vector<double>();
  EXPECT_NEAR(none[0], r0, 1e-12);
  EXPECT_EQ(none[1], 0.0);
  EXPECT_NEAR(nn::mse_loss(D({1, 2}, {2}), D({0, 4}, {2})).item<double>(), (1 + 4) / 2.0, 1e-12);
  EXPECT_THROW(nn::cross_entropy(logits, D({1, 2, 3}, {3})), Error);
  EXPECT_THROW(nn::mse_loss(D({1}, {1}), D({1, 2}, {2})), Error);
}

// An ignored row counts for nothing, a masked (-inf) logit in it included:
// the loss and the other rows' gradients are as without that row, and its
// own gradient is 0, as with torch's ignore_index. (-log_softmax there is
// +inf at the masked class, and +inf * 0 would make the loss NaN.)
TEST(Functional, IgnoredRowsWithMaskedLogitsCountForNothing) {
  const double inf = std::numeric_limits<double>::infinity();
  Tensor logits = D({1, 2, 3, -inf, 0, 0, 5, 1, 1}, {3, 3});
  Tensor target = Tensor::FromVector<int64_t>({2, -100, 0}, {3});
  double r0 = -(3 - std::log(std::exp(1) + std::exp(2) + std::exp(3)));
  double r2 = -(5 - std::log(std::exp(5) + 2 * std::exp(1)));
  Tensor loss = nn::cross_entropy(logits, target);
  EXPECT_NEAR(loss.item<double>(), (r0 + r2) / 2, 1e-12);
  std::vector<double> g = gradients(loss, {logits})[0].to_vector<double>();
  // d/dz of the mean of -log softmax(z)[label]: (softmax(z) - onehot) / 2.
  const double z0 = std::exp(1) + std::exp(2) + std::exp(3);
  EXPECT_NEAR(g[0], std::exp(1) / z0 / 2, 1e-12);
  EXPECT_NEAR(g[2], (std::exp(3) / z0 - 1) / 2, 1e-12);
  for (int j = 3; j < 6; ++j) EXPECT_EQ(g[j], 0.0) << "ignored row, column " << j - 3;
  const double z2 = std::exp(5) + 2 * std::exp(1);
  EXPECT_NEAR(g[6], (std::exp(5) / z2 - 1) / 2, 1e-12);
}

TEST(Functional, NormValues) {
  Tensor x = D({1, 2, 3, 4}, {1, 4});
  double ms = (1 + 4 + 9 + 16) / 4.0;
  auto rms = nn::rms_norm(x, D({1, 1, 1, 2}, {4}), 1e-6).to_vector<double>();
  EXPECT_NEAR(rms[3], 2 * 4 / std::sqrt(ms + 1e-6), 1e-12);
  auto ln = nn::layer_norm(x, std::nullopt, std::nullopt, 1e-5).to_vector<double>();
  double var = (2.25 + 0.25 + 0.25 + 2.25) / 4;
  EXPECT_NEAR(ln[0], -1.5 / std::sqrt(var + 1e-5), 1e-12);
}

TEST(Functional, DropoutIsKeyedAndScaled) {
  Tensor x = ones({1000}, DType::kF64);
  Tensor key = random_key(7);
  auto a = nn::dropout(x, 0.25, key).to_vector<double>();
  auto b = nn::dropout(x, 0.25, key).to_vector<double>();
  EXPECT_EQ(a, b);  // same key, same mask
  int kept = 0;
  for (double v : a) {
    EXPECT_TRUE(v == 0.0 || std::abs(v - 1 / 0.75) < 1e-12) << v;
    kept += v != 0.0;
  }
  EXPECT_NEAR(kept / 1000.0, 0.75, 0.05);
  EXPECT_EQ(nn::dropout(x, 0.25, key, /*training=*/false).to_vector<double>(),
            x.to_vector<double>());
}

TEST(Functional, Gradients) {
  CheckGradients(
      "relu,gelu,silu",
      [](auto& x) {
        return sum(nn::relu(x[0]) + nn::gelu(x[0]) + nn::gelu(x[0], true) * 2.0 + nn::silu(x[0]));
      },
      {{{6}}});
  CheckGradients("cross_entropy",
                 [](auto& x) {
                   Tensor target = Tensor::FromVector<int64_t>({1, -100, 3}, {3});
                   return nn::cross_entropy(x[0], target);
                 },
                 {{{3, 4}}});
  CheckGradients("mse", [](auto& x) { return nn::mse_loss(x[0], x[1]); }, {{{5}}, {{5}}});
  CheckGradients("rms_norm",
                 [](auto& x) {
                   return sum(nn::rms_norm(x[0], x[1]) * D({1, 2, 3}, {3}));
                 },
                 {{{2, 3}}, {{3}}});
  CheckGradients("layer_norm",
                 [](auto& x) {
                   return sum(nn::layer_norm(x[0], x[1], x[2]) * D({1, -2, 3, 0.5}, {4}));
                 },
                 {{{2, 4}}, {{4}}, {{4}}});
  CheckGradients("dropout",
                 [](auto& x) { return sum(nn::dropout(x[0], 0.5, random_key(3)) * x[0]); },
                 {{{8}}});
}

TEST(Functional, LinearIsXTimesWeightTransposedPlusBias) {
  // x [2, 3], weight [2, 3], bias [2]: y[n][o] = sum_i x[n][i] w[o][i] + b[o].
  const std::vector<double> x = {1, 2, 3, -1, 0, 4}, w = {0.5, -1, 2, 3, 0.25, -2}, b = {10, -10};
  std::vector<double> expected;
  for (int n = 0; n < 2; ++n)
    for (int o = 0; o < 2; ++o) {
      double y = b[o];
      for (int i = 0; i < 3; ++i) y += x[n * 3 + i] * w[o * 3 + i];
      expected.push_back(y);
    }
  std::vector<double> got = nn::linear(D(x, {2, 3}), D(w, {2, 3}), D(b, {2})).to_vector<double>();
  ASSERT_EQ(got.size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_DOUBLE_EQ(got[i], expected[i]) << i;
  EXPECT_EQ(nn::linear(D(x, {1, 2, 3}), D(w, {2, 3})).shape().dims(),
            (std::vector<int64_t>{1, 2, 2}));
  EXPECT_THROW(nn::linear(D(x, {3, 2}), D(w, {2, 3})), Error);
  EXPECT_THROW(nn::linear(D(x, {2, 3}), D(w, {2, 3}), D({1, 2, 3}, {3})), Error);
  EXPECT_THROW(nn::linear(D(x, {2, 3}), D(w, {6})), Error);
}

}  // namespace
}  // namespace strata
