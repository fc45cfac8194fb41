// Lazy tensors over a mesh: a graph whose tensors are marked with shardings
// over several devices syncs as the partitioned program, its results stay
// sharded (one shard per device), and the numbers equal a plain loop.
#include <gtest/gtest.h>

#include <cmath>

#include "strata/autograd/grad.h"
#include "strata/core/error.h"
#include "strata/lazy/context.h"
#include "strata/lazy/ops.h"

namespace strata {
namespace {

std::vector<float> Values(int64_t n, float scale) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>((i * 37) % 23 - 11) / 11.0f;
  return v;
}

// c[m,n] = sum_k a[m,k] b[k,n], by loops.
std::vector<float> MatMul(const std::vector<float>& a, const std::vector<float>& b, int64_t m,
                          int64_t k, int64_t n) {
  std::vector<float> c(m * n, 0.0f);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t p = 0; p < k; ++p) c[i * n + j] += a[i * k + p] * b[p * n + j];
  return c;
}

void ExpectNear(const std::vector<float>& a, const std::vector<float>& b, float tol = 1e-5f) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], tol) << "element " << i;
}

TEST(SpmdSync, DataParallelMatmulMatchesALoopAndStaysSharded) {
  ir::Mesh mesh({0, 1}, {2}, {"data"});
  auto xv = Values(8 * 16, 1.0f), wv = Values(16 * 4, 0.5f);
  Tensor x = Tensor::FromVector<float>(xv, {8, 16});
  Tensor w = Tensor::FromVector<float>(wv, {16, 4});
  mark_sharding(x, mesh, {{"data"}, {}});
  Tensor y = maximum(matmul(x, w), zeros({8, 4}));
  y.sync();
  const ir::Node::ShardedData* data = y.value().node->sharded_data();
  ASSERT_NE(data, nullptr);
  ASSERT_EQ(data->shards.size(), 2u);
  EXPECT_EQ(data->shards[0].shape(), Shape(DType::kF32, {4, 4}));  // half the rows each
  std::vector<float> expected = MatMul(xv, wv, 8, 16, 4);
  for (float& v : expected) v = std::max(v, 0.0f);
  ExpectNear(y.to_vector<float>(), expected);
}

TEST(SpmdSync, MegatronMlpOnATwoByTwoMesh) {
  // Column-parallel w1 on 'model', row-parallel w2, batch on 'data'.
  ir::Mesh mesh({0, 1, 2, 3}, {2, 2}, {"data", "model"});
  auto xv = Values(4 * 8, 1.0f), w1v = Values(8 * 6, 0.3f), w2v = Values(6 * 8, 0.7f);
  Tensor x = Tensor::FromVector<float>(xv, {4, 8});
  Tensor w1 = Tensor::FromVector<float>(w1v, {8, 6});
  Tensor w2 = Tensor::FromVector<float>(w2v, {6, 8});
  mark_sharding(x, mesh, {{"data"}, {}});
  mark_sharding(w1, mesh, {{}, {"model"}});
  mark_sharding(w2, mesh, {{"model"}, {}});
  Tensor y = matmul(tanh(matmul(x, w1)), w2);
  std::vector<float> h = MatMul(xv, w1v, 4, 8, 6);
  for (float& v : h) v = std::tanh(v);
  ExpectNear(y.to_vector<float>(), MatMul(h, w2v, 4, 6, 8));
}

TEST(SpmdSync, GradientsMatchTheUnshardedProgram) {
  ir::Mesh mesh({0, 1}, {2}, {"data"});
  auto xv = Values(6 * 5, 1.0f), wv = Values(5 * 3, 0.4f);
  auto loss_and_grad = [&](bool sharded) {
    Tensor x = Tensor::FromVector<float>(xv, {6, 5});
    Tensor w = Tensor::FromVector<float>(wv, {5, 3});
    if (sharded) {
      mark_sharding(x, mesh, {{"data"}, {}});  // 6 rows: 3 each
      mark_sharding(w, mesh, {{"data"}, {}});  // 5 rows: uneven, padded
    }
    Tensor y = matmul(x, w);
    Tensor loss = mean(y * y);
    std::vector<Tensor> g = gradients(loss, {w, x});
    return std::vector<std::vector<float>>{loss.to_vector<float>(), g[0].to_vector<float>(),
                                           g[1].to_vector<float>()};
  };
  auto whole = loss_and_grad(false);
  auto split = loss_and_grad(true);
  for (size_t i = 0; i < whole.size(); ++i) ExpectNear(split[i], whole[i]);
}

TEST(SpmdSync, ShardingIsPartOfTheCacheKey) {
  ir::Mesh mesh({0, 1}, {2}, {"data"});
  auto& context = lazy::Context::Get();
  auto run = [&](ir::PartitionSpec spec) {
    Tensor x = Tensor::FromVector<float>(Values(8 * 4, 1.0f), {8, 4});
    mark_sharding(x, mesh, spec);
    Tensor y = exp(x) * 2.0;
    return y.to_vector<float>();
  };
  run({{"data"}, {}});
  int64_t compiles = context.metrics().compiles;
  auto again = run({{"data"}, {}});
  EXPECT_EQ(context.metrics().compiles, compiles);  // same sharding: a cache hit
  auto other = run({{}, {"data"}});
  EXPECT_EQ(context.metrics().compiles, compiles + 1);  // a new sharding: a new program
  ExpectNear(again, other);
}

TEST(SpmdSync, ShardedResultsFeedTheNextGraphWithoutMovingData) {
  ir::Mesh mesh({0, 1}, {2}, {"data"});
  auto xv = Values(8 * 4, 1.0f);
  Tensor x = Tensor::FromVector<float>(xv, {8, 4});
  mark_sharding(x, mesh, {{"data"}, {}});
  Tensor y = x * 3.0;
  y.sync();
  auto& metrics = lazy::Context::Get().metrics();
  int64_t to_device = metrics.bytes_to_device;
  int64_t collective = metrics.bytes_collective;
  Tensor z = y + 1.0;
  z.sync();
  // y's shards went in as they were; the scalar 1.0 is the only upload.
  EXPECT_LE(metrics.bytes_to_device - to_device, 8);
  EXPECT_EQ(metrics.bytes_collective, collective);
  std::vector<float> expected(xv.size());
  for (size_t i = 0; i < xv.size(); ++i) expected[i] = 3.0f * xv[i] + 1.0f;
  ExpectNear(z.to_vector<float>(), expected);
}

TEST(SpmdSync, TheCostIsKnownBeforeRunningAndIsWhatTheRunSends) {
  ir::Mesh mesh({0, 1}, {2}, {"model"});
  auto xv = Values(4 * 8, 1.0f), wv = Values(8 * 6, 0.5f);
  Tensor x = Tensor::FromVector<float>(xv, {4, 8});
  Tensor w = Tensor::FromVector<float>(wv, {8, 6});
  mark_sharding(x, mesh, {{}, {"model"}});  // row-parallel: partial sums, one all-reduce
  mark_sharding(w, mesh, {{"model"}, {}});
  Tensor y = matmul(x, w);
  mark_sharding(y, mesh, {{}, {}});
  auto& context = lazy::Context::Get();
  std::optional<spmd::PartitionReport> report = context.PartitionReportOf({y});
  ASSERT_TRUE(report.has_value());
  EXPECT_EQ(report->count("all-reduce"), 1) << report->ToString();
  // 2(n-1)/n of the [4,6] f32 result: 96 bytes.
  EXPECT_EQ(report->bytes_per_device(), 96) << report->ToString();
  EXPECT_GT(report->peak_bytes_per_device, 0);
  int64_t compiles = context.metrics().compiles;
  int64_t sent = context.metrics().bytes_collective;
  y.sync();
  EXPECT_EQ(context.metrics().compiles, compiles);  // the report compiled it
  EXPECT_EQ(context.metrics().bytes_collective - sent, report->bytes_per_device());
  ExpectNear(y.to_vector<float>(), MatMul(xv, wv, 4, 8, 6));
}

TEST(SpmdSync, TwoMeshesInOneGraphIsAnError) {
  Tensor a = Tensor::FromVector<float>(Values(4, 1.0f), {4});
  Tensor b = Tensor::FromVector<float>(Values(4, 1.0f), {4});
  mark_sharding(a, ir::Mesh({0, 1}, {2}, {"x"}), {{"x"}});
  mark_sharding(b, ir::Mesh({0, 1}, {2}, {"y"}), {{"y"}});
  Tensor c = a + b;
  try {
    c.sync();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("two meshes"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace strata
