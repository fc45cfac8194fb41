// The PyTorch-style API: requires_grad, backward, grad accumulation,
// zero_grad, detach, NoGrad, and a training step that is one cached graph.
#include <gtest/gtest.h>

#include "strata/autograd/grad.h"
#include "strata/lazy/context.h"
#include "strata/lazy/ops.h"

namespace strata {
namespace {

Tensor V(std::vector<float> v, std::vector<int64_t> dims) { return Tensor::FromVector(v, dims); }

TEST(Backward, AccumulatesIntoLeavesUntilZeroed) {
  Tensor w = V({1, 2, 3}, {3});
  requires_grad_(w);
  Tensor x = V({4, 5, 6}, {3});
  backward(sum(w * x));  // d/dw = x
  EXPECT_EQ(grad(w).to_vector<float>(), (std::vector<float>{4, 5, 6}));
  backward(sum(w * w));  // + 2w
  EXPECT_EQ(grad(w).to_vector<float>(), (std::vector<float>{6, 9, 12}));
  EXPECT_FALSE(grad(x).defined());  // not a leaf
  zero_grad(w);
  EXPECT_FALSE(grad(w).defined());
  EXPECT_THROW(backward(w * x), Error);  // not a scalar
  Tensor k = Tensor::FromVector<int64_t>({1}, {1});
  EXPECT_THROW(requires_grad_(k), Error);
}

TEST(Backward, DetachAndNoGradStopGradients) {
  Tensor w = V({1, 2}, {2});
  requires_grad_(w);
  // d/dw [ sum(w * detach(w)) ] = detach(w) = w, not 2w.
  backward(sum(w * detach(w)));
  EXPECT_EQ(grad(w).to_vector<float>(), (std::vector<float>{1, 2}));
  zero_grad(w);
  Tensor frozen;
  {
    NoGrad no_grad;
    frozen = w * 10.0;  // used under no_grad: no gradient through it
  }
  backward(sum(frozen * w));  // = sum(10 w * w) with the first factor frozen: d/dw = 10 w
  EXPECT_EQ(grad(w).to_vector<float>(), (std::vector<float>{10, 20}));
  // A leaf the output does not touch gets no gradient at all.
  Tensor other = V({7}, {1});
  requires_grad_(other);
  zero_grad(w);
  backward(sum(w));
  EXPECT_FALSE(grad(other).defined());
  EXPECT_EQ(grad(w).to_vector<float>(), (std::vector<float>{1, 1}));
}

TEST(Backward, TrainingStepIsOneCachedGraph) {
  // Linear regression y = 2x - 1 by gradient descent; the reference is the
  // same loop on plain floats.
  std::vector<float> xs = {0, 1, 2, 3}, ys = {-1, 1, 3, 5};
  Tensor x = V(xs, {4, 1}), y = V(ys, {4, 1});
  Tensor w = V({0.5f}, {1, 1}), b = V({0.0f}, {1});
  requires_grad_(w);
  requires_grad_(b);
  float rw = 0.5f, rb = 0.0f, lr = 0.05f;
  int64_t compiles_after_warmup = 0;
  for (int step = 0; step < 5; ++step) {
    Tensor loss = mean(pow(matmul(x, w) + b - y, 2.0));
    backward(loss);
    w.copy_(w - grad(w) * lr);
    b.copy_(b - grad(b) * lr);
    zero_grad(w);
    zero_grad(b);
    float l = loss.item<float>();
    sync();
    // Reference step on floats.
    float gw = 0, gb = 0, rl = 0;
    for (int i = 0; i < 4; ++i) {
      float e = rw * xs[i] + rb - ys[i];
      rl += e * e / 4;
      gw += 2 * e * xs[i] / 4;
      gb += 2 * e / 4;
    }
    EXPECT_NEAR(l, rl, 1e-5) << step;
    rw -= lr * gw;
    rb -= lr * gb;
    EXPECT_NEAR(w.item<float>(), rw, 1e-5) << step;
    EXPECT_NEAR(b.item<float>(), rb, 1e-5) << step;
    if (step == 1) compiles_after_warmup = lazy::Context::Get().metrics().compiles.load();
  }
  EXPECT_EQ(lazy::Context::Get().metrics().compiles.load(),
            compiles_after_warmup);  // steps 3-5: cache hits only
}

}  // namespace
}  // namespace strata
