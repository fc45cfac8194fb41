// End-to-end training of a two-layer MLP: it learns XOR, it fits a small
// regression step for step like a hand-written double-precision reference,
// and after warm-up each training step is one cache hit and no compile.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "strata/autograd/grad.h"
#include "strata/lazy/context.h"
#include "strata/lazy/ops.h"
#include "strata/nn/functional.h"

namespace strata {
namespace {

// Host weights of in -> hidden (tanh) -> 1, row-major as the tensors hold them.
struct MlpWeights {
  int64_t in = 0, hidden = 0;
  std::vector<float> w1, b1, w2, b2;  // [in, hidden], [hidden], [hidden, 1], [1]
};

// Initialized from the test's own generator so strata and the reference start
// from the same numbers (and not from strata's random ops).
MlpWeights InitWeights(int64_t in, int64_t hidden, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  MlpWeights w{in, hidden, {}, {}, {}, {0.0f}};
  for (int64_t i = 0; i < in * hidden; ++i) w.w1.push_back(normal(rng));
  for (int64_t j = 0; j < hidden; ++j) w.b1.push_back(0.5f * normal(rng));
  for (int64_t j = 0; j < hidden; ++j)
    w.w2.push_back(normal(rng) / std::sqrt(static_cast<float>(hidden)));
  return w;
}

struct Mlp {
  explicit Mlp(const MlpWeights& w)
      : w1(Tensor::FromVector(w.w1, {w.in, w.hidden})),
        b1(Tensor::FromVector(w.b1, {w.hidden})),
        w2(Tensor::FromVector(w.w2, {w.hidden, 1})),
        b2(Tensor::FromVector(w.b2, {1})) {}
  // Pre-activation output [N, 1].
  Tensor Forward(const Tensor& x) const { return matmul(tanh(matmul(x, w1) + b1), w2) + b2; }
  // One gradient-descent step with the functional API; returns the loss
  // before the update, still lazy (the caller syncs once for everything).
  Tensor Step(const Tensor& x, const Tensor& y, double lr) {
    Tensor loss = nn::mse_loss(Forward(x), y);
    std::vector<Tensor> g = gradients(loss, {w1, b1, w2, b2});
    w1 = w1 - lr * g[0];
    b1 = b1 - lr * g[1];
    w2 = w2 - lr * g[2];
    b2 = b2 - lr * g[3];
    return loss;
  }
  Tensor w1, b1, w2, b2;
};

// The same MLP, MSE loss, backprop and SGD in plain double loops: an
// independent check of the forward pass, every VJP on the path and the update.
struct ReferenceMlp {
  explicit ReferenceMlp(const MlpWeights& w)
      : in(w.in),
        hidden(w.hidden),
        w1(w.w1.begin(), w.w1.end()),
        b1(w.b1.begin(), w.b1.end()),
        w2(w.w2.begin(), w.w2.end()),
        b2(w.b2[0]) {}

  // x is [N, in] row-major, y is [N]; returns the loss before the update.
  double Step(const std::vector<double>& x, const std::vector<double>& y, double lr) {
    const int64_t n_rows = static_cast<int64_t>(y.size());
    std::vector<double> gw1(in * hidden, 0.0), gb1(hidden, 0.0), gw2(hidden, 0.0), h(hidden);
    double gb2 = 0.0, loss = 0.0;
    for (int64_t n = 0; n < n_rows; ++n) {
      double out = b2;
      for (int64_t j = 0; j < hidden; ++j) {
        double z = b1[j];
        for (int64_t i = 0; i < in; ++i) z += x[n * in + i] * w1[i * hidden + j];
        h[j] = std::tanh(z);
        out += h[j] * w2[j];
      }
      const double e = out - y[n];
      loss += e * e / n_rows;
      const double d_out = 2.0 * e / n_rows;  // d loss / d out
      gb2 += d_out;
      for (int64_t j = 0; j < hidden; ++j) {
        gw2[j] += d_out * h[j];
        const double d_z = d_out * w2[j] * (1.0 - h[j] * h[j]);  // through tanh
        gb1[j] += d_z;
        for (int64_t i = 0; i < in; ++i) gw1[i * hidden + j] += d_z * x[n * in + i];
      }
    }
    for (int64_t k = 0; k < in * hidden; ++k) w1[k] -= lr * gw1[k];
    for (int64_t j = 0; j < hidden; ++j) {
      b1[j] -= lr * gb1[j];
      w2[j] -= lr * gw2[j];
    }
    b2 -= lr * gb2;
    return loss;
  }

  int64_t in, hidden;
  std::vector<double> w1, b1, w2;
  double b2;
};

// y = sin(2x) on evenly spaced points in [-1, 1].
struct SineData {
  explicit SineData(int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      xs.push_back(-1.0 + 2.0 * static_cast<double>(i) / static_cast<double>(n - 1));
      ys.push_back(std::sin(2.0 * xs.back()));
    }
  }
  Tensor X() const {
    return Tensor::FromVector(std::vector<float>(xs.begin(), xs.end()), {N(), 1});
  }
  Tensor Y() const {
    return Tensor::FromVector(std::vector<float>(ys.begin(), ys.end()), {N(), 1});
  }
  int64_t N() const { return static_cast<int64_t>(xs.size()); }
  std::vector<double> xs, ys;
};

struct Counts {
  int64_t graphs, compiles, hits, misses, executions;
};

Counts Snapshot() {
  const lazy::Metrics& m = lazy::Context::Get().metrics();
  return {m.graphs_traced.load(), m.compiles.load(), m.cache_hits.load(), m.cache_misses.load(),
          m.executions.load()};
}

Counts Delta(const Counts& after, const Counts& before) {
  return {after.graphs - before.graphs, after.compiles - before.compiles, after.hits - before.hits,
          after.misses - before.misses, after.executions - before.executions};
}

TEST(MlpTraining, LearnsXor) {
  // 2 -> 8 (tanh) -> 1, sigmoid + binary cross-entropy built from ops, trained
  // through the PyTorch-style API (requires_grad_, backward, grad, zero_grad).
  const std::vector<float> xs = {0, 0, 0, 1, 1, 0, 1, 1}, ys = {0, 1, 1, 0};
  Tensor x = Tensor::FromVector(xs, {4, 2}), y = Tensor::FromVector(ys, {4, 1});
  Mlp mlp(InitWeights(/*in=*/2, /*hidden=*/8, /*seed=*/5));
  for (Tensor* p : {&mlp.w1, &mlp.b1, &mlp.w2, &mlp.b2}) requires_grad_(*p);
  const double lr = 1.0;
  const int kSteps = 300;
  float first_loss = 0, last_loss = 0;
  for (int step = 0; step < kSteps; ++step) {
    Tensor p = sigmoid(mlp.Forward(x));
    Tensor loss = -mean(y * log(p) + (1.0 - y) * log(1.0 - p));
    backward(loss);
    // copy_ keeps each parameter the same leaf (assignment would make a new,
    // non-requires-grad tensor).
    for (Tensor* w : {&mlp.w1, &mlp.b1, &mlp.w2, &mlp.b2}) {
      w->copy_(*w - grad(*w) * lr);
      zero_grad(*w);
    }
    sync();
    last_loss = loss.item<float>();
    ASSERT_TRUE(std::isfinite(last_loss)) << "step " << step;
    if (step == 0) first_loss = last_loss;
  }
  std::vector<float> predictions = sigmoid(mlp.Forward(x)).to_vector<float>();
  ASSERT_EQ(predictions.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(predictions[i] > 0.5f, ys[i] > 0.5f)
        << "XOR(" << xs[2 * i] << ", " << xs[2 * i + 1] << ") predicted " << predictions[i];
  }
  EXPECT_GT(first_loss, 0.5f);  // ~log 2 at the start: the model really had to learn
  EXPECT_LT(last_loss, 0.05f) << "started at " << first_loss;
}

TEST(MlpTraining, RegressionMatchesHandWrittenReference) {
  // 1 -> 16 (tanh) -> 1 fitting sin(2x) by gradient descent on the MSE, with
  // gradients(); the loss must track a double-precision reference every step.
  SineData data(32);
  Tensor x = data.X(), y = data.Y();
  const MlpWeights init = InitWeights(/*in=*/1, /*hidden=*/16, /*seed=*/7);
  Mlp mlp(init);
  ReferenceMlp reference(init);
  const double lr = 0.1;
  const int kSteps = 200;
  double first_loss = 0, last_loss = 0;
  for (int step = 0; step < kSteps; ++step) {
    Tensor loss = mlp.Step(x, y, lr);
    sync();
    const double got = loss.item<float>();
    const double want = reference.Step(data.xs, data.ys, lr);
    // A wrong VJP, update or learning rate moves the loss far more than f32 rounding does.
    ASSERT_NEAR(got, want, 1e-4 * want) << "step " << step;
    if (step == 0) first_loss = got;
    last_loss = got;
  }
  EXPECT_LT(last_loss, 0.1 * first_loss) << "from " << first_loss << " to " << last_loss;
  // The trained weights agree too, not just the loss they give.
  std::vector<float> w1 = mlp.w1.to_vector<float>(), w2 = mlp.w2.to_vector<float>();
  for (int64_t j = 0; j < init.hidden; ++j) {
    EXPECT_NEAR(w1[j], reference.w1[j], 1e-3 * std::max(1.0, std::abs(reference.w1[j]))) << j;
    EXPECT_NEAR(w2[j], reference.w2[j], 1e-3 * std::max(1.0, std::abs(reference.w2[j]))) << j;
  }
  EXPECT_NEAR(mlp.b2.item<float>(), reference.b2, 1e-3);
}

TEST(MlpTraining, StepAfterWarmupIsOneCacheHitAndNoCompiles) {
  // Forward, gradients, update and sync of a whole step are one graph; the
  // learning rate changes every step and, being a scalar parameter, must not
  // recompile. Reading the loss after sync must not run anything either.
  SineData data(32);
  Tensor x = data.X(), y = data.Y();
  Mlp mlp(InitWeights(/*in=*/1, /*hidden=*/16, /*seed=*/11));
  const int kWarmup = 2, kSteps = 12;
  const int64_t cached_before = lazy::Context::Get().cache_size();
  int64_t cached_after_warmup = 0;
  for (int step = 0; step < kSteps; ++step) {
    const Counts before = Snapshot();
    Tensor loss = mlp.Step(x, y, /*lr=*/0.1 / (1.0 + 0.1 * step));
    sync();
    const float l = loss.item<float>();
    const Counts d = Delta(Snapshot(), before);
    EXPECT_TRUE(std::isfinite(l)) << "step " << step;
    // Even in warm-up a step is a single graph (hit or miss).
    EXPECT_EQ(d.graphs, 1) << "step " << step;
    EXPECT_EQ(d.executions, 1) << "step " << step;
    EXPECT_EQ(d.hits + d.misses, 1) << "step " << step;
    if (step + 1 == kWarmup) cached_after_warmup = lazy::Context::Get().cache_size();
    if (step < kWarmup) continue;
    EXPECT_EQ(d.compiles, 0) << "step " << step << ": "
                             << lazy::Context::Get().last_miss_explanation();
    EXPECT_EQ(d.misses, 0) << "step " << step;
    EXPECT_EQ(d.hits, 1) << "step " << step;
  }
  EXPECT_LE(cached_after_warmup - cached_before, kWarmup);
  EXPECT_EQ(lazy::Context::Get().cache_size(), cached_after_warmup);  // nothing new after warm-up
}

TEST(MlpTraining, BackwardApiStepAfterWarmupIsOneCacheHitAndNoCompiles) {
  // The same through backward(): grads live on the leaves between backward and
  // zero_grad, and copy_ rebinds the leaves, yet a step is still one cached graph.
  const std::vector<float> xs = {0, 0, 0, 1, 1, 0, 1, 1}, ys = {0, 1, 1, 0};
  Tensor x = Tensor::FromVector(xs, {4, 2}), y = Tensor::FromVector(ys, {4, 1});
  Mlp mlp(InitWeights(/*in=*/2, /*hidden=*/8, /*seed=*/13));
  for (Tensor* p : {&mlp.w1, &mlp.b1, &mlp.w2, &mlp.b2}) requires_grad_(*p);
  const int kWarmup = 2, kSteps = 12;
  for (int step = 0; step < kSteps; ++step) {
    const Counts before = Snapshot();
    Tensor loss = nn::mse_loss(sigmoid(mlp.Forward(x)), y);
    backward(loss);
    for (Tensor* w : {&mlp.w1, &mlp.b1, &mlp.w2, &mlp.b2}) {
      w->copy_(*w - grad(*w) * (0.5 + 0.01 * step));
      zero_grad(*w);
    }
    sync();
    const float l = loss.item<float>();
    const Counts d = Delta(Snapshot(), before);
    EXPECT_TRUE(std::isfinite(l)) << "step " << step;
    EXPECT_EQ(d.graphs, 1) << "step " << step;
    EXPECT_EQ(d.executions, 1) << "step " << step;
    if (step < kWarmup) continue;
    EXPECT_EQ(d.compiles, 0) << "step " << step << ": "
                             << lazy::Context::Get().last_miss_explanation();
    EXPECT_EQ(d.misses, 0) << "step " << step;
    EXPECT_EQ(d.hits, 1) << "step " << step;
  }
}

}  // namespace
}  // namespace strata
