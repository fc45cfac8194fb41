// Rotary embeddings and grouped-query causal attention against plain loops.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "gradient_check.h"
#include "strata/autograd/grad.h"
#include "strata/compiler/compile.h"
#include "strata/hlo/text.h"
#include "strata/lazy/context.h"
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

// Positions at dim 1 of [B, S, H, D] (Hugging Face's unsqueeze_dim=2): each
// head rotated by its position, as the loop above does per [S, D] matrix.
TEST(Rotary, PositionsAtAnyDimMatchTheFormula) {
  const int64_t b = 2, s = 3, h = 2, d = 4;
  auto tables = nn::rotary_tables(s, d, 10000.0, DType::kF64);
  std::vector<double> xs = Random(b * s * h * d, 9);
  auto out = nn::apply_rotary(Tensor::FromVector(xs, {b, s, h, d}), tables.cos, tables.sin, 1)
                 .to_vector<double>();
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t p = 0; p < s; ++p) {
      for (int64_t hi = 0; hi < h; ++hi) {
        const double* x = &xs[((bi * s + p) * h + hi) * d];
        for (int64_t i = 0; i < d; ++i) {
          double angle = p * std::pow(10000.0, -2.0 * static_cast<double>(i % (d / 2)) / d);
          double rotated = i < d / 2 ? -x[i + d / 2] : x[i - d / 2];
          EXPECT_NEAR(out[((bi * s + p) * h + hi) * d + i],
                      x[i] * std::cos(angle) + rotated * std::sin(angle), 1e-12);
        }
      }
    }
  }
  // The tables must match the positions' dim, which must come before the last.
  EXPECT_THROW(nn::apply_rotary(zeros({2, 3, 2, 4}), tables.cos, tables.sin, 2), Error);
  EXPECT_THROW(nn::apply_rotary(zeros({2, 3, 2, 4}), tables.cos, tables.sin, 3), Error);
  EXPECT_THROW(nn::apply_rotary(zeros({2, 3, 2, 4}), tables.cos, tables.sin, -5), Error);
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

// f32 (o, dq, dk, dv) within 5e-5 of the largest of the f64 reference's.
void ExpectMatchesDoubles(const std::vector<Tensor>& got, const std::vector<Tensor>& reference) {
  const char* names[] = {"o", "dq", "dk", "dv"};
  for (int i = 0; i < 4; ++i) {
    auto values = got[i].to_vector<float>();
    auto want = reference[i].to_vector<double>();
    ASSERT_EQ(values.size(), want.size());
    double largest = 1;
    for (double x : want) largest = std::max(largest, std::abs(x));
    for (size_t x = 0; x < values.size(); ++x) {
      ASSERT_NEAR(values[x], want[x], 5e-5 * largest) << names[i] << "[" << x << "]";
    }
  }
}

// The fused kernels (f32) against the composite of primitives run in
// doubles over the same numbers, output and gradients; the composite's own
// gradients are checked against finite differences above. The compiled
// program is one call each way and holds no [B, H, S, S] array.
TEST(FusedAttention, MatchesTheCompositeInDoublesWithItsGradients) {
  const int64_t b = 2, h = 4, kv = 2, s = 70, d = 16;
  for (bool causal : {true, false}) {
    SCOPED_TRACE(causal ? "causal" : "not causal");
    auto floats = [](const std::vector<double>& v) {
      return std::vector<float>(v.begin(), v.end());
    };
    auto qv = floats(Random(b * h * s * d, 5)), kvals = floats(Random(b * kv * s * d, 6)),
         vv = floats(Random(b * kv * s * d, 7)), wv = floats(Random(b * h * s * d, 8));
    auto run = [&](DType dtype) {
      auto make = [&](const std::vector<float>& x, std::vector<int64_t> dims) {
        return astype(Tensor::FromVector(x, std::move(dims)), dtype);
      };
      Tensor q = make(qv, {b, h, s, d}), k = make(kvals, {b, kv, s, d}),
             v = make(vv, {b, kv, s, d}), w = make(wv, {b, h, s, d});
      Tensor out = nn::scaled_dot_product_attention(q, k, v, causal);
      Tensor loss = sum(out * w);
      std::vector<Tensor> results = gradients(loss, {q, k, v});
      results.insert(results.begin(), out);
      return results;
    };
    std::vector<Tensor> fused = run(DType::kF32), reference = run(DType::kF64);
    // (Before the values are read, which makes them data.)
    auto exe = compiler::Compile(lazy::LoweringContext(fused).module());
    int calls = 0;
    for (const auto& c : exe->module().computations()) {
      for (const auto& inst : c->instructions()) {
        calls += inst->opcode() == hlo::Opcode::kCustomCall;
        for (const Shape& leaf : inst->shape().Leaves()) {
          EXPECT_NE(leaf.dims(), (std::vector<int64_t>{b, h, s, s})) << hlo::ToText(*inst);
        }
      }
    }
    EXPECT_EQ(calls, 2) << hlo::ToText(exe->module());
    ExpectMatchesDoubles(fused, reference);
  }
}

// The [B, S, H, D] layout, fused (f32, one call each way, no transpose in
// the program) against the [B, H, S, D] composite in doubles over the same
// numbers transposed; the unfused bshd form the same way.
TEST(FusedAttention, PositionsBeforeHeadsMatchesTheCompositeWithItsGradients) {
  const int64_t b = 2, h = 4, kv = 2, s = 70, d = 16;
  auto floats = [](const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); };
  auto qv = floats(Random(b * s * h * d, 15)), kvals = floats(Random(b * s * kv * d, 16)),
       vv = floats(Random(b * s * kv * d, 17)), wv = floats(Random(b * s * h * d, 18));
  auto heads_first = [](const Tensor& t) { return permute(t, {0, 2, 1, 3}); };
  // Inputs [B, S, n, D]; results (o, dq, dk, dv) [B, S, n, D].
  auto run = [&](DType dtype, bool bshd, bool fused) {
    auto make = [&](const std::vector<float>& x, int64_t n) {
      return astype(Tensor::FromVector(x, {b, s, n, d}), dtype);
    };
    Tensor q = make(qv, h), k = make(kvals, kv), v = make(vv, kv), w = make(wv, h);
    Tensor out =
        bshd ? nn::scaled_dot_product_attention(q, k, v, true, fused, nn::AttentionLayout::kBSHD)
             : heads_first(nn::scaled_dot_product_attention(heads_first(q), heads_first(k),
                                                            heads_first(v), true, fused));
    std::vector<Tensor> results = gradients(sum(out * w), {q, k, v});
    results.insert(results.begin(), out);
    return results;
  };
  std::vector<Tensor> reference = run(DType::kF64, false, false);
  for (bool fused : {true, false}) {
    SCOPED_TRACE(fused ? "fused" : "composite");
    std::vector<Tensor> got = run(DType::kF32, true, fused);
    if (fused) {
      auto exe = compiler::Compile(lazy::LoweringContext(got).module());
      int calls = 0, transposes = 0;
      for (const auto& c : exe->module().computations()) {
        for (const auto& inst : c->instructions()) {
          calls += inst->opcode() == hlo::Opcode::kCustomCall;
          transposes += inst->opcode() == hlo::Opcode::kTranspose;
        }
      }
      EXPECT_EQ(calls, 2) << hlo::ToText(exe->module());
      EXPECT_EQ(transposes, 0) << hlo::ToText(exe->module());
    }
    ExpectMatchesDoubles(got, reference);
  }
  EXPECT_THROW(
      nn::scaled_dot_product_attention(zeros({1, 3, 4, 8}), zeros({1, 2, 4, 8}),
                                       zeros({1, 2, 4, 8}), true, true, nn::AttentionLayout::kBSHD),
      Error);
}

TEST(FusedAttention, ASecondDerivativeNamesTheUnfusedForm) {
  Tensor q = Tensor::FromVector(std::vector<float>(2 * 3 * 4, 0.5f), {1, 2, 3, 4});
  Tensor k = Tensor::FromVector(std::vector<float>(2 * 3 * 4, 0.25f), {1, 2, 3, 4});
  Tensor loss = sum(nn::scaled_dot_product_attention(q, k, k) * q);
  Tensor dq = gradients(loss, {q})[0];
  try {
    gradients(sum(dq * dq), {q});
    ADD_FAILURE() << "a second derivative through the fused kernel";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fused=*/false"), std::string::npos) << e.what();
  }
  // The unfused form has one (checked against finite differences in op_gradients_test).
  Tensor unfused = sum(nn::scaled_dot_product_attention(q, k, k, true, false) * q);
  Tensor dq2 = gradients(unfused, {q})[0];
  EXPECT_EQ(gradients(sum(dq2 * dq2), {q})[0].shape(), q.shape());
}

// With a mask, the fused call's gradients of q, k and v are the composite's
// (scores + mask, softmax, product, in doubles); one of the mask is an Error
// naming the unfused form.
TEST(FusedAttention, AMaskedCallMatchesTheCompositeAndItsMaskGetsNoGradient) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  auto random = [&](std::vector<int64_t> dims) {
    std::vector<float> v(dims[0] * dims[1] * dims[2] * dims[3]);
    for (float& x : v) x = dist(rng);
    return Tensor::FromVector(v, dims);
  };
  Tensor q = random({2, 2, 5, 4}), k = random({2, 1, 5, 4}), v = random({2, 1, 5, 4});
  Tensor mask = random({2, 1, 5, 5}) * 3.0;
  const double scale = 0.5;
  Tensor weights = random({2, 2, 5, 4});
  nn::AttentionOutput fused = nn::fused_attention(q, k, v, true, scale, mask);
  std::vector<Tensor> got = gradients(sum(fused.out * weights), {q, k, v});
  // The composite in doubles: k and v repeated for the two query heads.
  Tensor qd = astype(q, DType::kF64), kd = astype(k, DType::kF64), vd = astype(v, DType::kF64);
  auto wide = [](const Tensor& t) { return concat({t, t}, 1); };
  Tensor s = matmul(qd, transpose(wide(kd), -1, -2)) * scale + astype(mask, DType::kF64);
  Tensor rows = unsqueeze(arange(5), 1), cols = unsqueeze(arange(5), 0);
  s = where(ge(rows, cols), s, constant(-INFINITY, DType::kF64));
  Tensor out = matmul(softmax(s, -1), wide(vd));
  std::vector<Tensor> want = gradients(sum(out * astype(weights, DType::kF64)), {qd, kd, vd});
  got.insert(got.begin(), fused.out);
  want.insert(want.begin(), out);
  ExpectMatchesDoubles(got, want);
  try {
    gradients(sum(nn::fused_attention(q, k, v, true, scale, mask).out), {mask});
    ADD_FAILURE() << "a gradient of the mask through the fused kernel";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no gradient for its mask"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace strata
