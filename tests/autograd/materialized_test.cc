// Gradients through values that were already materialized (item, to_vector,
// sync): the computed data keeps the graph it came from, as PyTorch keeps
// the autograd graph after .item(). Each expected gradient is worked out by
// hand; each case gave zeros before the data kept its origin.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "strata/autograd/grad.h"
#include "strata/lazy/context.h"
#include "strata/lazy/ops.h"

namespace strata {
namespace {

using ::testing::HasSubstr;

Tensor V(std::vector<float> v, std::vector<int64_t> dims) { return Tensor::FromVector(v, dims); }

std::vector<float> Values(const Tensor& t) { return t.to_vector<float>(); }

TEST(Materialized, AnOutputReadBeforeBackwardStillDifferentiates) {
  Tensor x = V({1, 2, 3}, {3});
  Tensor loss = sum(x * x);
  EXPECT_EQ(loss.item<float>(), 14.0f);  // PyTorch's print(loss.item()); loss.backward()
  EXPECT_EQ(Values(gradients(loss, {x})[0]), (std::vector<float>{2, 4, 6}));
  Tensor w = V({1, -2}, {2});
  requires_grad_(w);
  Tensor l2 = sum(w * w * w);
  l2.sync();
  backward(l2);  // d/dw w^3 = 3 w^2
  EXPECT_EQ(Values(grad(w)), (std::vector<float>{3, 12}));
}

TEST(Materialized, AnIntermediateReadOnTheWayKeepsItsPath) {
  Tensor table = V({0.5f, -1, 2}, {3});
  Tensor hidden = exp(table);
  std::vector<float> h = Values(hidden);  // materializes `hidden`
  Tensor loss = sum(hidden * hidden);     // built over the computed data
  std::vector<float> expect;
  for (float v : h) expect.push_back(2 * v * v);  // d/dt e^{2t} = 2 e^{2t}
  std::vector<float> got = Values(gradients(loss, {table})[0]);
  ASSERT_EQ(got.size(), expect.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expect[i], 1e-5f * expect[i]) << i;
}

TEST(Materialized, AnInputSyncedAfterItWasUsedIsStillTheSameInput) {
  Tensor a = V({1, 2}, {2});
  Tensor x = a * 3.0;       // a computed input
  Tensor y = sum(x * x);    // built before x is materialized
  x.sync();                 // x's value is now data
  Tensor z = sum(x * 5.0);  // built after
  EXPECT_EQ(Values(gradients(y, {x})[0]), (std::vector<float>{6, 12}));  // 2x
  EXPECT_EQ(Values(gradients(y + z, {x})[0]), (std::vector<float>{11, 17}));
  EXPECT_EQ(Values(gradients(y + z, {a})[0]), (std::vector<float>{33, 51}));  // 3 (2x + 5)
}

TEST(Materialized, AChainOfSyncsDifferentiatesEndToEnd) {
  // h_{k+1} = 0.5 h_k + w, materialized every step: dh_n/dw = sum_k 0.5^k.
  Tensor w = V({2}, {1});
  Tensor h = V({1}, {1});
  const int steps = 20;
  for (int k = 0; k < steps; ++k) {
    h = h * 0.5 + w;
    h.sync();
  }
  double expect = 0;
  for (int k = 0; k < steps; ++k) expect += std::pow(0.5, k);
  EXPECT_NEAR(Values(gradients(sum(h), {w})[0])[0], expect, 1e-5);
}

TEST(Materialized, DetachedAndNoGradDataAreConstants) {
  Tensor x = V({1, 2}, {2});
  Tensor d = detach(x * x);
  d.sync();
  Tensor frozen;
  {
    NoGrad no_grad;
    frozen = x * 4.0;
  }
  frozen.sync();
  Tensor loss = sum(d * x) + sum(frozen * x);  // d/dx = d + frozen = x^2 + 4x
  EXPECT_EQ(Values(gradients(loss, {x})[0]), (std::vector<float>{5, 12}));
  // Integer results carry no graph either.
  Tensor i = argmax(x, 0);
  i.sync();
  EXPECT_FALSE(i.value().node->origin());
}

TEST(Materialized, DroppingALongChainDoesNotRecurse) {
  // Each sync's data holds the graph before it; destroying a chain this
  // long recursively would overflow the stack.
  Tensor w = V({1}, {1});
  Tensor h = V({0}, {1});
  for (int k = 0; k < 300000; ++k) h = h + w;  // one lazy chain, never run
  h = Tensor();
  SUCCEED();
}

TEST(Materialized, AGradientThatReadsAnOverwrittenBufferIsAnError) {
  lazy::Context::Get().set_buffer_donation(true);
  lazy::Context::Get().ResetMetrics();
  Tensor a = V({1, 2}, {2});
  Tensor x = a * 1.0;
  x.sync();           // x: data computed from a
  Tensor y = sin(x);  // y's gradient needs x's values (cos x)
  x = x * 2.0;        // x is updated in the same sync that reads y ...
  std::vector<Tensor*> both = {&x, &y};
  sync(both);  // ... so x's old buffer holds 2x now
  lazy::Context::Get().set_buffer_donation(false);
  EXPECT_GT(lazy::Context::Get().metrics().bytes_donated.load(), 0);
  Tensor g = gradients(sum(y), {a})[0];
  try {
    g.sync();
    FAIL() << "expected an error, got " << ::testing::PrintToString(Values(g));
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("reused for its results")) << e.what();
  }
}

}  // namespace
}  // namespace strata
