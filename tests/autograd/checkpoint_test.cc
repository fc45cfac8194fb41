// checkpoint(fn, inputs): same values and gradients as without it (checked
// against finite differences), recomputation visible in the optimized HLO,
// and less planned memory for the backward program.
#include <gtest/gtest.h>

#include <random>

#include "gradient_check.h"
#include "strata/autograd/grad.h"
#include "strata/compiler/compile.h"
#include "strata/hlo/text.h"
#include "strata/lazy/context.h"
#include "strata/lazy/ops.h"

namespace strata {
namespace {

Tensor Random(std::vector<int64_t> dims, uint32_t seed, double scale = 0.5) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(-scale, scale);
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::vector<double> v(n);
  for (double& x : v) x = dist(rng);
  return Tensor::FromVector(v, dims);
}

// One "layer" with several intermediates per element: what checkpointing
// stops the backward pass from keeping.
Tensor Layer(const Tensor& h, const Tensor& w) {
  Tensor a = matmul(h, w);
  Tensor b = tanh(a);
  Tensor c = sin(a) * b;
  return c + exp(-(b * b)) * h;
}

TEST(Checkpoint, GradientsMatchFiniteDifferences) {
  Tensor w = Random({3, 3}, 7);
  // The closure reads `w`: a captured outer tensor must get its gradient too.
  CheckGradients(
      "checkpointed layers",
      [&](const std::vector<Tensor>& x) {
        Tensor h = x[0];
        for (int i = 0; i < 2; ++i) {
          h = checkpoint(
              [&](const std::vector<Tensor>& in) { return std::vector{Layer(in[0], in[1])}; },
              {h, x[1]})[0];
        }
        return sum(Layer(h, w) * h);
      },
      {{{2, 3}}, {{3, 3}}});
  CheckGradients("captured weight",
                 [&](const std::vector<Tensor>& x) {
                   Tensor v = x[0] * 2.0;  // pending outer value read by the region
                   auto out = checkpoint(
                       [&](const std::vector<Tensor>& in) {
                         return std::vector{Layer(in[0], v), sum(matmul(in[0], v))};  // two outputs
                       },
                       {x[1]});
                   return sum(out[0]) + out[1] * 0.5;
                 },
                 {{{3, 3}}, {{2, 3}}});
}

TEST(Checkpoint, SameValuesAndGradientsAsWithout) {
  Tensor x = Random({4, 8}, 1), w1 = Random({8, 8}, 2), w2 = Random({8, 8}, 3);
  auto loss = [&](bool use_checkpoint) {
    auto body = [&](const std::vector<Tensor>& in) {
      return std::vector{Layer(Layer(in[0], in[1]), in[2])};
    };
    Tensor h = use_checkpoint ? checkpoint(body, {x, w1, w2})[0] : body({x, w1, w2})[0];
    return mean(h * h);
  };
  Tensor plain = loss(false), ckpt = loss(true);
  auto g_plain = gradients(plain, {x, w1, w2});
  auto g_ckpt = gradients(ckpt, {x, w1, w2});
  EXPECT_NEAR(plain.item<double>(), ckpt.item<double>(), 1e-12);
  for (size_t i = 0; i < g_plain.size(); ++i) {
    auto a = g_plain[i].to_vector<double>(), b = g_ckpt[i].to_vector<double>();
    ASSERT_EQ(a.size(), b.size());
    for (size_t k = 0; k < a.size(); ++k) EXPECT_NEAR(a[k], b[k], 1e-12) << i << " " << k;
  }
}

// Builds the backward program of an 8-layer stack, with or without one
// checkpoint per layer, and compiles it.
std::unique_ptr<runtime::Executable> BackwardProgram(bool use_checkpoint) {
  const int64_t n = 512, d = 256;  // activations outweigh the weights' gradients
  Tensor x = astype(Random({n, d}, 11), DType::kF32);
  std::vector<Tensor> ws;
  for (int i = 0; i < 8; ++i) ws.push_back(astype(Random({d, d}, 20 + i, 0.05), DType::kF32));
  Tensor h = x;
  for (const Tensor& w : ws) {
    auto body = [](const std::vector<Tensor>& in) { return std::vector{Layer(in[0], in[1])}; };
    h = use_checkpoint ? checkpoint(body, {h, w})[0] : body({h, w})[0];
  }
  Tensor loss = sum(h);
  std::vector<Tensor> roots = gradients(loss, ws);
  roots.push_back(loss);  // as a training step would (else the last forward is dead code)
  lazy::LoweringContext lowering(roots);
  return compiler::Compile(lowering.module());
}

int64_t Count(const hlo::Module& module, hlo::Opcode opcode) {
  int64_t n = 0;
  for (const auto& c : module.computations()) {
    for (const auto& inst : c->instructions()) n += inst->opcode() == opcode;
  }
  return n;
}

TEST(Checkpoint, BackwardRecomputesAndPlansLessMemory) {
  auto plain = BackwardProgram(false);
  auto ckpt = BackwardProgram(true);
  // The forward runs twice under checkpointing: each layer's tanh and sine
  // appear once more in the optimized program (CSE cannot merge them back
  // across the opt-barrier), and the barriers are there.
  EXPECT_EQ(Count(plain->module(), hlo::Opcode::kOptimizationBarrier), 0);
  EXPECT_EQ(Count(ckpt->module(), hlo::Opcode::kOptimizationBarrier), 8);
  EXPECT_EQ(Count(ckpt->module(), hlo::Opcode::kSin), Count(plain->module(), hlo::Opcode::kSin) + 8)
      << Count(ckpt->module(), hlo::Opcode::kSin) << " "
      << Count(plain->module(), hlo::Opcode::kSin);
  EXPECT_GT(Count(ckpt->module(), hlo::Opcode::kDot), Count(plain->module(), hlo::Opcode::kDot));
  // Without checkpointing every layer's [512, 256] intermediates live until
  // its backward step; with it, only each layer's input does.
  int64_t plain_peak = plain->stats().planned_peak_bytes;
  int64_t ckpt_peak = ckpt->stats().planned_peak_bytes;
  RecordProperty("plain_peak_bytes", std::to_string(plain_peak));
  RecordProperty("checkpoint_peak_bytes", std::to_string(ckpt_peak));
  EXPECT_LT(ckpt_peak, plain_peak * 3 / 4) << plain_peak << " vs " << ckpt_peak;
}

TEST(Checkpoint, RunsTheSameNumbersAndIsPlainUnderNoGrad) {
  Tensor x = astype(Random({2, 4}, 5), DType::kF32);
  Tensor w = astype(Random({4, 4}, 6), DType::kF32);
  requires_grad_(w);
  auto body = [](const std::vector<Tensor>& in) { return std::vector{Layer(in[0], in[1])}; };
  backward(sum(checkpoint(body, {x, w})[0]));
  Tensor with = grad(w);
  zero_grad(w);
  backward(sum(body({x, w})[0]));
  auto a = with.to_vector<float>(), b = grad(w).to_vector<float>();
  for (size_t k = 0; k < a.size(); ++k) EXPECT_NEAR(a[k], b[k], 1e-5);
  {
    NoGrad no_grad;
    Tensor y = checkpoint(body, {x, w})[0];
    EXPECT_NE(y.value().node->opcode(), hlo::Opcode::kTuple);
  }
  EXPECT_THROW(checkpoint(body, {Tensor(), w}), Error);
}

}  // namespace
}  // namespace strata
