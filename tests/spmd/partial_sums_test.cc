// Partial sums that wait: dots with a split contracting dim whose results
// are summed leave them unreduced and all-reduce the sum once (XLA's
// all-reduce reassociation, built in); values already gathered further are
// sliced rather than gathered again; a scatter-add keeps both a split table
// and split updates. Every case against one device.
#include <gtest/gtest.h>

#include "spmd_test_util.h"

namespace strata::spmd {
namespace {

using testing::ExpectClose;
using testing::RunBoth;

// x_i [8,16] split on its contracting dim, w_i [16,32] on its rows: each
// product is a partial sum over 'x'. Alone, each would be all-reduced.
constexpr const char* kRowParallelInputs = R"(
HloModule m
ENTRY main {
  x1 = f32[8,16] parameter(0), sharding={devices=[1,2]0,1}
  w1 = f32[16,32] parameter(1), sharding={devices=[2,1]0,1}
  x2 = f32[8,16] parameter(2), sharding={devices=[1,2]0,1}
  w2 = f32[16,32] parameter(3), sharding={devices=[2,1]0,1}
  x3 = f32[8,16] parameter(4), sharding={devices=[1,2]0,1}
  w3 = f32[16,32] parameter(5), sharding={devices=[2,1]0,1}
  d1 = f32[8,32] dot(x1, w1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  d2 = f32[8,32] dot(x2, w2), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  d3 = f32[8,32] dot(x3, w3), lhs_contracting_dims={1}, rhs_contracting_dims={0}
)";

TEST(SpmdPartialSums, ASumOfThreeProductsIsOneAllReduce) {
  auto run = RunBoth(std::string(kRowParallelInputs) + R"(
  s = f32[8,32] subtract(d1, d2)
  ROOT r = f32[8,32] add(s, d3), sharding={replicated}
})",
                     Mesh::Line(2));
  ExpectClose(run);
  EXPECT_EQ(run.partition.report.count("all-reduce"), 1) << run.partition.report.ToString();
  EXPECT_EQ(run.partition.report.collectives.size(), 1u) << run.partition.report.ToString();
  EXPECT_EQ(run.partition.report.bytes_per_device(), run.sent_bytes);
}

TEST(SpmdPartialSums, AWholeTermIsAddedAfterTheReduction) {
  // b is whole on every device: added to the partial sums it would count
  // twice. The sum of the products is reduced first.
  auto run = RunBoth(std::string(kRowParallelInputs) + R"(
  b = f32[8,32] parameter(6), sharding={replicated}
  s = f32[8,32] add(d1, d2)
  t = f32[8,32] add(s, b)
  ROOT r = f32[8,32] add(t, d3), sharding={replicated}
})",
                     Mesh::Line(2));
  ExpectClose(run);
  EXPECT_LE(run.partition.report.count("all-reduce"), 2) << run.partition.report.ToString();
}

TEST(SpmdPartialSums, ASumReadTwiceIsReducedOnce) {
  auto run = RunBoth(std::string(kRowParallelInputs) + R"(
  s = f32[8,32] add(d1, d2)
  e = f32[8,32] exponential(s)
  n = f32[8,32] negate(s)
  ROOT r = (f32[8,32], f32[8,32], f32[8,32]) tuple(e, n, d3), sharding={{replicated}, {replicated}, {replicated}}
})",
                     Mesh::Line(2));
  ExpectClose(run);
  // One for the sum, one for d3 on its own.
  EXPECT_EQ(run.partition.report.count("all-reduce"), 2) << run.partition.report.ToString();
  EXPECT_EQ(run.partition.report.collectives.size(), 2u) << run.partition.report.ToString();
}

TEST(SpmdPartialSums, ASumWantedSplitIsReduceScattered) {
  auto run = RunBoth(std::string(kRowParallelInputs) + R"(
  s = f32[8,32] add(d1, d2)
  ROOT r = f32[8,32] add(s, d3), sharding={devices=[2,1]0,1}
})",
                     Mesh::Line(2));
  ExpectClose(run);
  EXPECT_EQ(run.partition.report.count("reduce-scatter"), 1) << run.partition.report.ToString();
  EXPECT_EQ(run.partition.report.collectives.size(), 1u) << run.partition.report.ToString();
}

TEST(SpmdReshard, AValueGatheredFurtherIsSlicedNotGatheredAgain) {
  // p is split on both dims; c1 wants it whole (two gathers), c2 split on
  // 'a' only, which is a local slice of what c1 gathered.
  Mesh mesh({0, 1, 2, 3}, {2, 2}, {"a", "b"});
  auto run = RunBoth(R"(
HloModule m
ENTRY main {
  p = f32[8,4] parameter(0), sharding={devices=[2,2]0,1,2,3}
  c1 = f32[8,4] exponential(p), sharding={replicated}
  c2 = f32[8,4] negate(p), sharding={devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}
  ROOT t = (f32[8,4], f32[8,4]) tuple(c1, c2), sharding={{replicated}, {devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}}
})",
                     mesh);
  ExpectClose(run);
  EXPECT_EQ(run.partition.report.count("all-gather"), 2) << run.partition.report.ToString();
  EXPECT_EQ(run.partition.report.collectives.size(), 2u) << run.partition.report.ToString();
}

TEST(SpmdScatter, SplitTableAndSplitUpdatesReduceScatterOnce) {
  // An embedding's gradient under FSDP + TP: the table's rows on 'a' and
  // its features on 'b', the updates (one per token) split over 'b'. Each
  // device adds its tokens' rows that fall in its part of the vocabulary
  // into zeros; the partial sums are reduce-scattered over 'b'. The updates
  // are never gathered.
  Mesh mesh({0, 1, 2, 3}, {2, 2}, {"a", "b"});
  auto run = RunBoth(R"(
HloModule m
add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}
ENTRY main {
  table = f32[8,4] parameter(0), sharding={devices=[2,2]0,1,2,3}
  ids = s32[6] parameter(1), sharding={devices=[2,2]0,2,1,3 last_tile_dim_replicate}
  updates = f32[6,4] parameter(2), sharding={devices=[2,1,2]0,2,1,3 last_tile_dim_replicate}
  c8 = s32[] constant(8)
  eight = s32[6] broadcast(c8), dimensions={}
  a = s32[6] abs(ids)
  m = s32[6] remainder(a, eight)
  i = s32[6,1] reshape(m)
  ROOT s = f32[8,4] scatter(table, i, updates), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add, sharding={devices=[2,2]0,1,2,3}
})",
                     mesh);
  ExpectClose(run);
  const PartitionReport& r = run.partition.report;
  EXPECT_EQ(r.count("all-gather"), 0) << r.ToString();
  EXPECT_EQ(r.count("reduce-scatter"), 1) << r.ToString();
  EXPECT_EQ(r.collectives.size(), 1u) << r.ToString();
}

}  // namespace
}  // namespace strata::spmd
