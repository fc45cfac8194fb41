// Rotary embeddings and grouped-query causal attention against plain loops.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "gradient_check.h"
#include "strata/nn/functional.h"

namespace strata {
namespace {

std::vector<double> Random(size_t n, int seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(-1, 1);
  std::vector<double> v(n);
  for (double& x : v) x = dist(rng);
  return v;
}

TEST(Rotary, MatchesTheHuggingFaceFormula) {
  const int64_t s = 3, d = 4;
  auto tables = nn::rotary_tables(s, d, 10000.0, DType::kF64);
  std::vector<double> xs = Random(2 * s * d, 1);  // [2 heads, S, D]
  auto out = nn::apply_rotary(Tensor::FromVector(xs, {2, s, d}), tables.cos, tables.sin)
                 .to_vector<double>();
  for (int64_t h = 0; h < 2; ++h) {
    for (int64_t p = 0; p < s; ++p) {
      for (int64_t i = 0; i < d; ++i) {
        double freq = std::pow(10000.0, -2.0 * static_cast<double>(i % (d / 2)) / d);
        double angle = p * freq;
        const double* x = &xs[(h * s + p) * d];
        double rotated = i < d / 2 ? -x[i + d / 2] : x[i - d / 2];
        double expected = x[i] * std::cos(angle) + rotated * std::sin(angle);
        EXPECT_NEAR(out[(h * s + p) * d + i], expected, 1e-12) << h << "," << p << "," << i;
      }
    }
  }
}

TEST(Attention, GroupedQueryCausalMatchesLoops) {
  const int64_t b = 2, h = 4, kv = 2, s = 3, d = 5;
  auto q = Random(b * h * s * d, 2), k = Random(b * kv * s * d, 3), v = Random(b * kv * s * d, 4);
  auto out = nn::scaled_dot_product_attention(Tensor::FromVector(q, {b, h, s, d}),
                                              Tensor::FromVector(k, {b, kv, s, d}),
                                              Tensor::FromVector(v, {b, kv, s, d}))
                 .to_vector<double>();
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t hi = 0; hi < h; ++hi) {
      int64_t ki = hi / (h / kv);
      for (int64_t i = 0; i < s; ++i) {
        std::vector<double> w;
        double max = -INFINITY, total = 0;
        for (int64_t j = 0; j <= i; ++j) {  // causal
          double dot = 0;
          for (int64_t e = 0; e < d; ++e)
            dot += q[((bi * h + hi) * s + i) * d + e] * k[((bi * kv + ki) * s + j) * d + e];
          w.push_back(dot / std::sqrt(static_cast<double>(d)));
          max = std::max(max, w.back());
        }
        for (double& x : w) total += (x = std::exp(x - max));
        for (int64_t e = 0; e < d; ++e) {
          double expected = 0;
          for (int64_t j = 0; j <= i; ++j)
            expected += w[j] / total * v[((bi * kv + ki) * s + j) * d + e];
          EXPECT_NEAR(out[((bi * h + hi) * s + i) * d + e], expected, 1e-12);
        }
      }
    }
  }
  EXPECT_THROW(nn::scaled_dot_product_attention(zeros({1, 3, 2, 4}), zeros({1, 2, 2, 4}),
                                                zeros({1, 2, 2, 4})),
               Error);
}

TEST(Attention, Gradients) {
  CheckGradients("apply_rotary",
                 [](auto& x) {
                   auto t = nn::rotary_tables(3, 4, 10000.0, DType::kF64);
                   return sum(nn::apply_rotary(x[0], t.cos, t.sin) * x[0]);
                 },
                 {{{2, 3, 4}}});
  CheckGradients(
      "gqa causal attention",
      [](auto& x) { return sum(tanh(nn::scaled_dot_product_attention(x[0], x[1], x[2]))); },
      {{{1, 4, 3, 2}}, {{1, 2, 3, 2}}, {{1, 2, 3, 2}}});
}

}  // namespace
}  // namespace strata
