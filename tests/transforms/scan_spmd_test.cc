// scan over a mesh: a loop over stacked, sharded weights runs partitioned,
// its gradient equals the unsharded loop's, and no device ever holds the
// whole stack (PyTorch/XLA #8883: the backward loop all-reduced each layer's
// gradient into an unsharded [layers, ...] stack and ran out of memory).
#include <gtest/gtest.h>

#include <cmath>

#include "strata/autograd/grad.h"
#include "strata/lazy/context.h"
#include "strata/lazy/ops.h"
#include "strata/spmd/partitioner.h"
#include "strata/transforms/scan.h"

namespace strata {
namespace {

constexpr int64_t kLayers = 4, kBatch = 4, kHidden = 8;

struct Result {
  std::vector<float> loss, grad, grad_h0;
  std::unique_ptr<lazy::LoweringContext> lowering;
};

Result RunLoop(const ir::Mesh* mesh) {
  Tensor w = normal(1, {kLayers, kHidden, kHidden}, 0, 0.4);
  Tensor h0 = normal(2, {kBatch, kHidden});
  w.sync();
  h0.sync();
  if (mesh) {
    mark_sharding(w, *mesh, {{}, {"data"}, {}});  // FSDP: each layer's rows split
    mark_sharding(h0, *mesh, {{"data"}, {}});     // the batch split
  }
  auto [h, ys] = scan(
      [](const Tree& carry, const Tree& layer) {
        Tensor next = tanh(matmul(carry.leaf(), layer.leaf()));
        return std::pair{Tree(next), Tree(sum(next * next))};
      },
      Tree(h0), Tree(w));
  Tensor loss = mean(h.leaf() * h.leaf()) + sum(ys.leaf());
  std::vector<Tensor> g = gradients(loss, {w, h0});
  Result r;
  r.lowering = std::make_unique<lazy::LoweringContext>(std::vector<Tensor>{loss, g[0], g[1]});
  r.loss = loss.to_vector<float>();
  r.grad = g[0].to_vector<float>();
  r.grad_h0 = g[1].to_vector<float>();
  return r;
}

void ExpectNear(const std::vector<float>& a, const std::vector<float>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-5) << "element " << i;
}

TEST(ScanSpmd, ShardedStackedWeightsGiveTheUnshardedGradients) {
  ir::Mesh mesh({0, 1}, {2}, {"data"});
  Result whole = RunLoop(nullptr);
  Result split = RunLoop(&mesh);
  ExpectNear(split.loss, whole.loss);
  ExpectNear(split.grad, whole.grad);
  ExpectNear(split.grad_h0, whole.grad_h0);
}

TEST(ScanSpmd, NoDeviceHoldsTheWholeStackOrItsGradient) {
  ir::Mesh mesh({0, 1}, {2}, {"data"});
  Result split = RunLoop(&mesh);
  spmd::PartitionedModule p = spmd::Partition(split.lowering->module(), mesh);
  const int64_t stack_bytes = kLayers * kHidden * kHidden * 4;
  int64_t largest = 0;
  std::string where;
  for (const auto& c : p.module->computations()) {
    for (const auto& inst : c->instructions()) {
      for (const Shape& s : inst->shape().Leaves()) {
        if (s.byte_size() > largest) {
          largest = s.byte_size();
          where = c->name() + ": " + inst->name() + " " + s.ToString();
        }
      }
    }
  }
  EXPECT_LT(largest, stack_bytes) << "largest value on a device: " << where << "\n"
                                  << p.report.ToString();
  // The stack's gradient leaves the loop split like the weights, and each
  // layer's gradient (a sum over the split batch) is reduce-scattered into it.
  EXPECT_GE(p.report.count("reduce-scatter"), 1) << p.report.ToString();
  for (const spmd::CollectiveRecord& r : p.report.collectives) {
    EXPECT_FALSE(r.collective == "all-gather" &&
                 r.reason.find("(None, 'data', None) -> (None, None, None)") != std::string::npos)
        << "the stack was gathered whole for " << r.serves;
  }
}

}  // namespace
}  // namespace strata
