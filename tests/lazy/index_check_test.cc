// Checked indexing: an index out of range is an Error from the sync that
// runs the op, naming the op, the index, the range and where it sits (as
// PyTorch raises), never the clamped row read silently; in-range indices
// give the values a plain loop gives; with checks off the ops clamp (XLA's
// gather semantics) and the programs carry no check.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "error_of.h"
#include "strata/autograd/grad.h"
#include "strata/core/error.h"
#include "strata/ir/lowering.h"
#include "strata/lazy/context.h"
#include "strata/lazy/ops.h"
#include "strata/nn/functional.h"
#include "strata/nn/layers.h"

namespace strata {
namespace {

using ::testing::HasSubstr;

using strata::test::ErrorOf;

// Index checks off for a scope (they are on by default).
class ChecksOff {
 public:
  ChecksOff() { lazy::Context::Get().set_index_checks(false); }
  ~ChecksOff() { lazy::Context::Get().set_index_checks(true); }
};

std::vector<float> Iota(int64_t n) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(i + 1);
  return v;
}

TEST(IndexChecks, InRangeIndicesReadTheRowsAPlainLoopReads) {
  const std::vector<float> x = Iota(12);  // [4, 3]
  Tensor t = Tensor::FromVector(x, {4, 3});
  const std::vector<int64_t> ids = {3, 0, 0, 2};
  std::vector<float> want;
  for (int64_t i : ids)
    for (int64_t j = 0; j < 3; ++j) want.push_back(x[i * 3 + j]);
  EXPECT_EQ(index_select(t, 0, Tensor::FromVector(ids, {4})).to_vector<float>(), want);
}

TEST(IndexChecks, IndexSelectPastTheEndOrNegativeIsAnErrorNamingIt) {
  Tensor t = Tensor::FromVector(Iota(12), {4, 3});
  std::string e = ErrorOf([&] {
    index_select(t, 0, Tensor::FromVector<int64_t>({1, 4, 2}, {3})).to_vector<float>();
  });
  EXPECT_THAT(e, HasSubstr("[index_select] index 4 is out of range [0, 4) (dimension 0 of "
                           "f32[4,3]), at [1] of the index s64[3]"));
  e = ErrorOf([&] {
    index_select(t, 1, Tensor::FromVector<int32_t>({0, -1}, {2})).to_vector<float>();
  });
  EXPECT_THAT(e, HasSubstr("[index_select] index -1 is out of range [0, 3) (dimension 1 of "
                           "f32[4,3]), at [1] of the index s32[2]"));
}

TEST(IndexChecks, TheFirstBadIndexIsNamedEvenWhenOnlyADownstreamValueIsRead) {
  // An embedding whose ids hold 300 and 999 (a vocabulary of 256): reading
  // only the sum of its rows still runs the check, and names the first.
  nn::Embedding embedding(256, 8, random_key(3));
  Tensor ids = Tensor::FromVector<int64_t>({5, 17, 300, 2, 999, 4}, {2, 3});
  Tensor total = sum(embedding.forward(ids));
  const std::string e = ErrorOf([&] { total.item<float>(); });
  EXPECT_THAT(e, HasSubstr("[index_select] index 300 is out of range [0, 256) (dimension 0 of "
                           "f32[256,8]), at [2] of the index s64[6]"));
}

TEST(IndexChecks, TakeAlongDimAndOneHot) {
  Tensor t = Tensor::FromVector(Iota(6), {2, 3});
  std::string e = ErrorOf([&] {
    take_along_dim(t, Tensor::FromVector<int64_t>({0, 2, 1, 3}, {2, 2}), 1).to_vector<float>();
  });
  EXPECT_THAT(e, HasSubstr("[take_along_dim] index 3 is out of range [0, 3) (dimension 1 of "
                           "f32[2,3]), at [1, 1] of the index s64[2,2]"));
  e = ErrorOf([&] { one_hot(Tensor::FromVector<int64_t>({1, 5, 0}, {3}), 5).to_vector<float>(); });
  EXPECT_THAT(e, HasSubstr("[one_hot] index 5 is out of range [0, 5) (5 classes), at [1]"));
  // In range: one row of zeros and a one per index.
  std::vector<float> got = one_hot(Tensor::FromVector<int64_t>({1, 4}, {2}), 5).to_vector<float>();
  EXPECT_EQ(got, (std::vector<float>{0, 1, 0, 0, 0, 0, 0, 0, 0, 1}));
}

TEST(IndexChecks, CrossEntropyLabelsMayBeTheIgnoreIndexButNotOutOfRange) {
  // Logits [3, 4]; labels 2, ignored, 0: the mean of the two kept rows'
  // -log_softmax, worked out with plain loops.
  const std::vector<float> logits = {0.5f, -1.0f, 2.0f, 0.0f, 1.0f,  1.0f,
                                     1.0f, 1.0f,  3.0f, 0.0f, -2.0f, 1.0f};
  auto nll = [&](int64_t row, int64_t label) {
    double m = -1e30, z = 0;
    for (int64_t j = 0; j < 4; ++j) m = std::max<double>(m, logits[row * 4 + j]);
    for (int64_t j = 0; j < 4; ++j) z += std::exp(logits[row * 4 + j] - m);
    return -(logits[row * 4 + label] - m - std::log(z));
  };
  Tensor lg = Tensor::FromVector(logits, {3, 4});
  const float loss =
      nn::cross_entropy(lg, Tensor::FromVector<int64_t>({2, -100, 0}, {3})).item<float>();
  EXPECT_NEAR(loss, (nll(0, 2) + nll(2, 0)) / 2, 1e-6);
  const std::string e = ErrorOf([&] {
    nn::cross_entropy(lg, Tensor::FromVector<int64_t>({2, -100, 4}, {3})).item<float>();
  });
  EXPECT_THAT(e, HasSubstr("[cross_entropy] index 4 is out of range [0, 4) (the 4 classes of "
                           "logits f32[3,4]), at [2] of the index s64[3]"));
  EXPECT_THAT(e, ::testing::Not(HasSubstr("take_along_dim")));
}

TEST(IndexChecks, AGradientAloneStillChecksTheIndices) {
  // The gradient of sum(index_select(w, ids)) does not need the forward
  // result, only the ids: its graph carries the check all the same.
  Tensor w = Tensor::FromVector(Iota(12), {4, 3});
  Tensor bad = Tensor::FromVector<int64_t>({0, 4}, {2});
  Tensor grad = gradients(sum(index_select(w, 0, bad)), {w})[0];
  EXPECT_THAT(ErrorOf([&] { grad.to_vector<float>(); }),
              HasSubstr("[index_select] index 4 is out of range [0, 4)"));
  // In range: one per selection, summed into the rows selected.
  Tensor good = Tensor::FromVector<int64_t>({3, 0, 3}, {3});
  EXPECT_EQ(gradients(sum(index_select(w, 0, good)), {w})[0].to_vector<float>(),
            (std::vector<float>{1, 1, 1, 0, 0, 0, 0, 0, 0, 2, 2, 2}));
}

TEST(IndexChecks, TheFailedSyncKeepsItsResults) {
  // The sync that found the bad index still rebinds what it computed (its
  // inputs may have been donated): the clamped rows, readable afterwards.
  Tensor t = Tensor::FromVector(Iota(12), {4, 3});
  Tensor y = index_select(t, 0, Tensor::FromVector<int64_t>({7}, {1}));
  EXPECT_THROW(y.sync(), Error);
  EXPECT_TRUE(y.is_materialized());
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{10, 11, 12}));
}

TEST(IndexChecks, OffTheOpsClampAndTheProgramsCarryNoCheck) {
  ChecksOff off;
  Tensor t = Tensor::FromVector(Iota(12), {4, 3});
  EXPECT_EQ(index_select(t, 0, Tensor::FromVector<int64_t>({9, -3}, {2})).to_vector<float>(),
            (std::vector<float>{10, 11, 12, 1, 2, 3}));
  Tensor unchecked = index_select(t, 0, Tensor::FromVector<int64_t>({1}, {1}));
  EXPECT_TRUE(ir::BuildGraph({unchecked.value()}, true).checks.empty());
}

TEST(IndexChecks, OnTheProgramComputesTheCheckAsOneMoreResult) {
  Tensor t = Tensor::FromVector(Iota(12), {4, 3});
  Tensor checked = index_select(t, 0, Tensor::FromVector<int64_t>({1}, {1}));
  ir::Graph graph = ir::BuildGraph({checked.value()}, true);
  ASSERT_EQ(graph.checks.size(), 1u);
  EXPECT_EQ(graph.checks_from, 1u);
  EXPECT_EQ(graph.roots.size(), 2u);
  EXPECT_TRUE(ir::BuildGraph({checked.value()}).checks.empty());
}

TEST(IndexChecks, ANewBatchOfIdsReusesTheCompiledCheckedProgram) {
  nn::Embedding embedding(16, 4, random_key(1));
  auto& metrics = lazy::Context::Get().metrics();
  auto run = [&](std::vector<int64_t> ids) {
    return sum(embedding.forward(Tensor::FromVector(ids, {2, 2}))).item<float>();
  };
  run({1, 2, 3, 4});
  const int64_t compiles = metrics.compiles.load();
  run({5, 6, 7, 8});
  EXPECT_EQ(metrics.compiles.load(), compiles);
  EXPECT_THAT(ErrorOf([&] { run({5, 6, 16, 8}); }), HasSubstr("index 16 is out of range"));
  EXPECT_EQ(metrics.compiles.load(), compiles);
}

TEST(IndexChecks, ShardedIdsOnAMeshAreCheckedToo) {
  // The ids split over 2 in-process devices: the check reduces across them.
  nn::Embedding embedding(32, 4, random_key(2));
  Tensor ids = Tensor::FromVector<int64_t>({1, 2, 3, 4, 5, 6, 40, 8}, {4, 2});
  mark_sharding(ids, ir::Mesh::Line(2, "data"), {{"data"}, {}});
  const std::string e = ErrorOf([&] { sum(embedding.forward(ids)).item<float>(); });
  EXPECT_THAT(e, HasSubstr("[index_select] index 40 is out of range [0, 32)"));
  EXPECT_THAT(e, HasSubstr("at [6] of the index s64[8]"));
  Tensor good = Tensor::FromVector<int64_t>({1, 2, 3, 4, 5, 6, 7, 8}, {4, 2});
  mark_sharding(good, ir::Mesh::Line(2, "data"), {{"data"}, {}});
  EXPECT_EQ(ErrorOf([&] { sum(embedding.forward(good)).item<float>(); }), "");
}

}  // namespace
}  // namespace strata
