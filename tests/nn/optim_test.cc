// Optimizers against PyTorch's update formulas written out with doubles.
#include "strata/nn/optim.h"

#include <gtest/gtest.h>

#include <cmath>

#include "strata/autograd/grad.h"
#include "strata/lazy/context.h"
#include "strata/lazy/ops.h"

namespace strata::nn {
namespace {

using Vec = std::vector<double>;

// Known numbers: parameters and three steps of gradients.
const Vec kP0 = {0.5, -1.25, 2.0};
const std::vector<Vec> kGrads = {{0.1, -0.2, 0.3}, {-0.4, 0.5, 0.05}, {0.25, 0.0, -0.6}};

Tensor T(const Vec& v) { return Tensor::FromVector(v, {static_cast<int64_t>(v.size())}); }

void ExpectNear(const Tensor& t, const Vec& want) {
  Vec got = t.to_vector<double>();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12) << i;
}

// torch.optim.SGD.step, element by element.
Vec ReferenceSgd(const SgdOptions& o) {
  Vec p = kP0, buf;
  for (const Vec& g : kGrads) {
    Vec d(p.size());
    for (size_t i = 0; i < p.size(); ++i) d[i] = g[i] + o.weight_decay * p[i];
    if (o.momentum != 0) {
      if (buf.empty()) {
        buf = d;
      } else {
        for (size_t i = 0; i < p.size(); ++i)
          buf[i] = o.momentum * buf[i] + (1 - o.dampening) * d[i];
      }
      for (size_t i = 0; i < p.size(); ++i) d[i] = o.nesterov ? d[i] + o.momentum * buf[i] : buf[i];
    }
    for (size_t i = 0; i < p.size(); ++i) p[i] -= o.lr * d[i];
  }
  return p;
}

TEST(Optim, SgdMatchesPyTorchsUpdate) {
  std::vector<SgdOptions> cases = {
      {.lr = 0.1},
      {.lr = 0.1, .momentum = 0.9},
      {.lr = 0.05, .momentum = 0.8, .dampening = 0.1, .weight_decay = 0.01},
      {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.1, .nesterov = true},
  };
  for (const SgdOptions& o : cases) {
    SCOPED_TRACE(::testing::Message() << "momentum " << o.momentum << " nesterov " << o.nesterov);
    Tensor p = T(kP0);
    SGD sgd({&p}, o);
    for (const Vec& g : kGrads) {
      sgd.step({T(g)});
      p.sync();
    }
    ExpectNear(p, ReferenceSgd(o));
  }
  Tensor p = T(kP0);
  EXPECT_THROW(SGD({&p}, {.lr = 0.1, .nesterov = true}), Error);  // needs momentum
  SGD sgd({&p}, {.lr = 0.1});
  EXPECT_THROW(sgd.step({T({1, 2})}), Error);  // wrong shape
}

// torch.optim.AdamW.step (amsgrad off), element by element.
Vec ReferenceAdamW(const AdamWOptions& o) {
  Vec p = kP0, m(3, 0), v(3, 0);
  int t = 0;
  for (const Vec& g : kGrads) {
    ++t;
    for (size_t i = 0; i < p.size(); ++i) {
      p[i] *= 1 - o.lr * o.weight_decay;
      m[i] = o.beta1 * m[i] + (1 - o.beta1) * g[i];
      v[i] = o.beta2 * v[i] + (1 - o.beta2) * g[i] * g[i];
      double step_size = o.lr / (1 - std::pow(o.beta1, t));
      double denom = std::sqrt(v[i]) / std::sqrt(1 - std::pow(o.beta2, t)) + o.eps;
      p[i] -= step_size * m[i] / denom;
    }
  }
  return p;
}

TEST(Optim, AdamWMatchesPyTorchsUpdate) {
  for (AdamWOptions o :
       {AdamWOptions{},
        AdamWOptions{.lr = 0.1, .beta1 = 0.8, .beta2 = 0.95, .eps = 1e-6, .weight_decay = 0.1}}) {
    Tensor p = T(kP0);
    AdamW adam({&p}, o);
    for (const Vec& g : kGrads) {
      adam.step({T(g)});
      p.sync();
    }
    EXPECT_EQ(adam.steps(), 3);
    ExpectNear(p, ReferenceAdamW(o));
  }
}

TEST(Optim, ClipGradNormAndSchedule) {
  std::vector<Tensor> grads = {T({3, 0}), T({0, 4})};  // global norm 5
  Tensor norm = clip_grad_norm(grads, 1.0);
  EXPECT_NEAR(norm.item<double>(), 5.0, 1e-12);
  double c = 1.0 / (5.0 + 1e-6);
  ExpectNear(grads[0], {3 * c, 0});
  ExpectNear(grads[1], {0, 4 * c});
  std::vector<Tensor> small = {T({0.3, 0.4})};  // norm 0.5 < 1: unchanged
  clip_grad_norm(small, 1.0);
  ExpectNear(small[0], {0.3, 0.4});
  // Warm-up over 4 steps to 1.0, cosine to 0.1 at step 12.
  EXPECT_DOUBLE_EQ(warmup_cosine_lr(0, 4, 12, 1.0, 0.1), 0.25);
  EXPECT_DOUBLE_EQ(warmup_cosine_lr(3, 4, 12, 1.0, 0.1), 1.0);
  EXPECT_DOUBLE_EQ(warmup_cosine_lr(4, 4, 12, 1.0, 0.1), 1.0);
  EXPECT_NEAR(warmup_cosine_lr(8, 4, 12, 1.0, 0.1), 0.55, 1e-12);  // halfway: cos = 0
  EXPECT_DOUBLE_EQ(warmup_cosine_lr(12, 4, 12, 1.0, 0.1), 0.1);
  EXPECT_DOUBLE_EQ(warmup_cosine_lr(50, 4, 12, 1.0, 0.1), 0.1);
}

TEST(Optim, TrainingStepWithChangingRateNeverRecompiles) {
  // Least squares y = 2x + 1 with AdamW and a schedule: forward, backward,
  // clipping and the update are one graph, a cache hit every step.
  Tensor x = Tensor::FromVector<float>({-1, 0, 1, 2}, {4, 1});
  Tensor y = x * 2.0 + 1.0;
  Tensor w = zeros({1, 1}), b = zeros({1});
  AdamW adam({&w, &b}, {.lr = 0.1, .weight_decay = 0});
  auto& metrics = lazy::Context::Get().metrics();
  float first = 0, last = 0;
  for (int step = 0; step < 60; ++step) {
    adam.set_lr(warmup_cosine_lr(step, 5, 60, 0.2, 0.01));
    Tensor pred = matmul(x, w) + b;
    Tensor loss = mean((pred - y) * (pred - y));
    std::vector<Tensor> grads = gradients(loss, {w, b});
    clip_grad_norm(grads, 10.0);
    adam.step(grads);
    int64_t compiles = metrics.compiles.load(), hits = metrics.cache_hits.load();
    std::vector<Tensor*> all = {&w, &b, &loss};
    for (Tensor& t : adam.exp_avg()) all.push_back(&t);
    for (Tensor& t : adam.exp_avg_sq()) all.push_back(&t);
    sync(all);
    if (step >= 2) {
      EXPECT_EQ(metrics.compiles.load(), compiles) << step;
      EXPECT_EQ(metrics.cache_hits.load(), hits + 1) << step;
    }
    (step == 0 ? first : last) = loss.item<float>();
  }
  EXPECT_LT(last, first * 0.01) << first << " -> " << last;
}

}  // namespace
}  // namespace strata::nn
