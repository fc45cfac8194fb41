// The partitioner on HLO text: each program runs whole on one device and
// partitioned on 2 or 4 in-process devices; the numbers must agree, and the
// collectives inserted are counted against what the sharding calls for.
#include <gtest/gtest.h>

#include "spmd_test_util.h"
#include "strata/core/error.h"

namespace strata::spmd {
namespace {

using testing::ExpectClose;
using testing::RunBoth;

Mesh Mesh2x2() { return Mesh({0, 1, 2, 3}, {2, 2}, {"x", "y"}); }

TEST(SpmdReshard, TiledToReplicatedIsOneAllGather) {
  auto run = RunBoth(R"(
HloModule m
ENTRY main {
  p = f32[8,4] parameter(0), sharding={devices=[2,1]0,1}
  ROOT c = f32[8,4] copy(p), sharding={replicated}
})",
                     Mesh::Line(2));
  ExpectClose(run);
  EXPECT_EQ(run.partition.report.count("all-gather"), 1);
  EXPECT_EQ(run.partition.report.collectives.size(), 1u);
}

TEST(SpmdReshard, ReplicatedToTiledMovesNothing) {
  auto run = RunBoth(R"(
HloModule m
ENTRY main {
  p = f32[8,4] parameter(0), sharding={replicated}
  ROOT c = f32[8,4] copy(p), sharding={devices=[1,2]0,1}
})",
                     Mesh::Line(2));
  ExpectClose(run);
  EXPECT_TRUE(run.partition.report.collectives.empty()) << run.partition.report.ToString();
}

TEST(SpmdReshard, UnevenDimsArePaddedThenTrimmed) {
  // 7 rows over 2 devices: shards of 4, the last padded.
  auto run = RunBoth(R"(
HloModule m
ENTRY main {
  p = f32[7,31] parameter(0), sharding={devices=[2,1]0,1}
  e = f32[7,31] exponential(p)
  ROOT c = f32[7,31] copy(e), sharding={devices=[1,2]0,1}
})",
                     Mesh::Line(2));
  ExpectClose(run);
}

TEST(SpmdReshard, TwoDimensionalMesh) {
  auto run = RunBoth(R"(
HloModule m
ENTRY main {
  p = f32[8,6] parameter(0), sharding={devices=[2,2]0,1,2,3}
  n = f32[8,6] negate(p)
  ROOT c = f32[8,6] copy(n), sharding={devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}
})",
                     Mesh2x2());
  ExpectClose(run);
  // Only the 'y' split of dim 1 goes: one all-gather over 'y'.
  EXPECT_EQ(run.partition.report.count("all-gather"), 1) << run.partition.report.ToString();
}

TEST(SpmdElementwise, MismatchedOperandShardings) {
  // torch_xla#5264 computed A - B wrong when the operands were split differently.
  auto run = RunBoth(R"(
HloModule m
ENTRY main {
  a = f32[8,8] parameter(0), sharding={devices=[2,1]0,1}
  b = f32[8,8] parameter(1), sharding={devices=[1,2]0,1}
  ROOT d = f32[8,8] subtract(a, b)
})",
                     Mesh::Line(2));
  ExpectClose(run);
}

TEST(SpmdDot, BatchParallelNeedsNoCollective) {
  auto run = RunBoth(R"(
HloModule m
ENTRY main {
  a = f32[4,8,16] parameter(0), sharding={devices=[2,1,1]0,1}
  b = f32[4,16,8] parameter(1), sharding={devices=[2,1,1]0,1}
  ROOT d = f32[4,8,8] dot(a, b), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}
})",
                     Mesh::Line(2));
  ExpectClose(run);
  EXPECT_TRUE(run.partition.report.collectives.empty()) << run.partition.report.ToString();
}

TEST(SpmdDot, ColumnParallelNeedsNoCollective) {
  auto run = RunBoth(R"(
HloModule m
ENTRY main {
  x = f32[8,16] parameter(0), sharding={replicated}
  w = f32[16,32] parameter(1), sharding={devices=[1,2]0,1}
  ROOT y = f32[8,32] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
})",
                     Mesh::Line(2));
  ExpectClose(run);
  EXPECT_TRUE(run.partition.report.collectives.empty()) << run.partition.report.ToString();
  EXPECT_EQ(run.partition.result_shardings[0], (AxisSharding{{{}, {0}}}));
}

TEST(SpmdDot, RowParallelIsOneAllReduce) {
  auto run = RunBoth(R"(
HloModule m
ENTRY main {
  x = f32[8,16] parameter(0), sharding={devices=[1,2]0,1}
  w = f32[16,32] parameter(1), sharding={devices=[2,1]0,1}
  ROOT y = f32[8,32] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}, sharding={replicated}
})",
                     Mesh::Line(2));
  ExpectClose(run);
  EXPECT_EQ(run.partition.report.count("all-reduce"), 1) << run.partition.report.ToString();
  EXPECT_EQ(run.partition.report.collectives.size(), 1u) << run.partition.report.ToString();
  EXPECT_EQ(run.partition.report.bytes_per_device(), run.sent_bytes);
}

TEST(SpmdDot, ContractingSplitWithSplitResultIsOneReduceScatter) {
  // The FSDP weight gradient: x^T dy over a batch split on 'x', the result
  // wanted split like the weight.
  auto run = RunBoth(R"(
HloModule m
ENTRY main {
  x = f32[64,16] parameter(0), sharding={devices=[2,1]0,1}
  dy = f32[64,32] parameter(1), sharding={devices=[2,1]0,1}
  ROOT g = f32[16,32] dot(x, dy), lhs_contracting_dims={0}, rhs_contracting_dims={0}, sharding={devices=[2,1]0,1}
})",
                     Mesh::Line(2));
  ExpectClose(run);
  EXPECT_EQ(run.partition.report.count("reduce-scatter"), 1) << run.partition.report.ToString();
  EXPECT_EQ(run.partition.report.collectives.size(), 1u) << run.partition.report.ToString();
  EXPECT_EQ(run.partition.report.bytes_per_device(), run.sent_bytes);
}

TEST(SpmdDot, ConflictGathersTheSmallerOperand) {
  // Both operands split on their contracting-free dims the same axis: the
  // result can't be split twice on 'x'; the small weight is gathered.
  auto run = RunBoth(R"(
HloModule m
ENTRY main {
  x = f32[64,16] parameter(0), sharding={devices=[2,1]0,1}
  w = f32[16,8] parameter(1), sharding={devices=[1,2]0,1}
  ROOT y = f32[64,8] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}, sharding={devices=[2,1]0,1}
})",
                     Mesh::Line(2));
  ExpectClose(run);
  ASSERT_EQ(run.partition.report.collectives.size(), 1u) << run.partition.report.ToString();
  EXPECT_EQ(run.partition.report.collectives[0].collective, "all-gather");
  EXPECT_EQ(run.partition.report.collectives[0].serves, "y operand 1")
      << run.partition.report.ToString();
}

TEST(SpmdDot, UnevenContractingDimIsMasked) {
  auto run = RunBoth(R"(
HloModule m
ENTRY main {
  x = f32[4,7] parameter(0), sharding={devices=[1,2]0,1}
  w = f32[7,3] parameter(1), sharding={devices=[2,1]0,1}
  ROOT y = f32[4,3] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}, sharding={replicated}
})",
                     Mesh::Line(2));
  ExpectClose(run);
}

TEST(SpmdReduce, MaxOverUnevenSplitDimIgnoresPadding) {
  // All values negative: a zero of the padding must never win.
  auto run = RunBoth(R"(
HloModule m
max {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}
ENTRY main {
  p = f32[7,5] parameter(0), sharding={devices=[2,1]0,1}
  e = f32[7,5] exponential(p)
  n = f32[7,5] negate(e)
  init = f32[] constant(-inf)
  ROOT r = f32[5] reduce(n, init), dimensions={0}, to_apply=max
})",
                     Mesh::Line(2));
  ExpectClose(run);
  EXPECT_EQ(run.partition.report.count("all-reduce"), 1) << run.partition.report.ToString();
}

TEST(SpmdReduce, SumOnFourDevices) {
  auto run = RunBoth(R"(
HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY main {
  p = f32[10,6] parameter(0), sharding={devices=[2,2]0,1,2,3}
  zero = f32[] constant(0)
  ROOT r = f32[6] reduce(p, zero), dimensions={0}, to_apply=add
})",
                     Mesh2x2());
  ExpectClose(run);
}

TEST(SpmdReshape, SplitAndMergeKeepTheMajorSplit) {
  // [B,S,H*D] -> [B,S,H,D] with H split (heads on the model axis) and back.
  auto run = RunBoth(R"(
HloModule m
ENTRY main {
  p = f32[2,3,8] parameter(0), sharding={devices=[1,1,2]0,1}
  r = f32[2,3,4,2] reshape(p)
  e = f32[2,3,4,2] exponential(r)
  ROOT back = f32[2,3,8] reshape(e)
})",
                     Mesh::Line(2));
  ExpectClose(run);
  EXPECT_TRUE(run.partition.report.collectives.empty()) << run.partition.report.ToString();
  EXPECT_EQ(run.partition.result_shardings[0], (AxisSharding{{{}, {}, {0}}}));
}

TEST(SpmdReshape, MinorSplitIsRegatheredOnTheMajorDim) {
  // [4,6] split on dim 1 -> [24] split: dim 1 is not the major part of the
  // merged dim, so the operand is resplit on dim 0 first (one all-to-all).
  auto run = RunBoth(R"(
HloModule m
ENTRY main {
  p = f32[4,6] parameter(0), sharding={devices=[1,2]0,1}
  ROOT r = f32[24] reshape(p), sharding={devices=[2]0,1}
})",
                     Mesh::Line(2));
  ExpectClose(run);
  EXPECT_EQ(run.partition.report.count("all-to-all"), 1) << run.partition.report.ToString();
  EXPECT_EQ(run.partition.report.collectives.size(), 1u) << run.partition.report.ToString();
  EXPECT_TRUE(run.partition.report.full_rematerializations.empty());
}

TEST(SpmdGather, VocabularySplitEmbeddingNeverGathersTheTable) {
  auto run = RunBoth(R"(
HloModule m
ENTRY main {
  table = f32[11,4] parameter(0), sharding={devices=[2,1]0,1}
  ids = s32[6] parameter(1), sharding={replicated}
  c11 = s32[] constant(11)
  eleven = s32[6] broadcast(c11), dimensions={}
  a = s32[6] abs(ids)
  m = s32[6] remainder(a, eleven)
  i = s32[6,1] reshape(m)
  ROOT g = f32[6,4] gather(table, i), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,4}
})",
                     Mesh::Line(2));
  ExpectClose(run);
  EXPECT_EQ(run.partition.report.count("all-gather"), 0) << run.partition.report.ToString();
  EXPECT_EQ(run.partition.report.count("all-reduce"), 1) << run.partition.report.ToString();
}

TEST(SpmdShapes, BroadcastTransposeIotaConcatenateSlicePad) {
  auto run = RunBoth(R"(
HloModule m
ENTRY main {
  p = f32[8,6] parameter(0), sharding={devices=[2,1]0,1}
  t = f32[6,8] transpose(p), dimensions={1,0}
  i = f32[6,8] iota(), iota_dimension=1
  a = f32[6,8] add(t, i)
  b = f32[6,8,3] broadcast(a), dimensions={0,1}
  s = f32[6,4,3] slice(b), slice={[0:6], [2:6], [0:3]}
  c = f32[6,12,3] concatenate(s, b), dimensions={1}
  zero = f32[] constant(0)
  ROOT q = f32[6,14,3] pad(c, zero), padding=0_0x1_1x0_0
})",
                     Mesh::Line(2));
  ExpectClose(run);
}

TEST(SpmdLoop, ShardedCumsumScan) {
  // torch_xla's test_scan_spmd: a carry split 4 ways, xs and ys split on
  // their second dim; the loop runs on shards; the predicate is replicated.
  auto run = RunBoth(R"(
HloModule m
cond {
  s = (s32[], f32[8], f32[5,8], f32[5,8]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(5)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  s = (s32[], f32[8], f32[5,8], f32[5,8]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  carry = f32[8] get-tuple-element(s), index=1
  xs = f32[5,8] get-tuple-element(s), index=2
  ys = f32[5,8] get-tuple-element(s), index=3
  zero = s32[] constant(0)
  x = f32[1,8] dynamic-slice(xs, i, zero), dynamic_slice_sizes={1,8}
  xr = f32[8] reshape(x)
  next = f32[8] add(carry, xr)
  nr = f32[1,8] reshape(next)
  ys2 = f32[5,8] dynamic-update-slice(ys, nr, i, zero)
  one = s32[] constant(1)
  i2 = s32[] add(i, one)
  ROOT t = (s32[], f32[8], f32[5,8], f32[5,8]) tuple(i2, next, xs, ys2)
}
ENTRY main {
  init = f32[8] parameter(0), sharding={devices=[4]0,1,2,3}
  xs = f32[5,8] parameter(1), sharding={devices=[1,4]0,1,2,3}
  zero = s32[] constant(0)
  z = f32[] constant(0)
  ys = f32[5,8] broadcast(z), dimensions={}
  s = (s32[], f32[8], f32[5,8], f32[5,8]) tuple(zero, init, xs, ys)
  w = (s32[], f32[8], f32[5,8], f32[5,8]) while(s), condition=cond, body=body
  c = f32[8] get-tuple-element(w), index=1
  y = f32[5,8] get-tuple-element(w), index=3
  ROOT r = (f32[8], f32[5,8]) tuple(c, y)
})",
                     Mesh::Line(4));
  ExpectClose(run);
  EXPECT_TRUE(run.partition.report.collectives.empty()) << run.partition.report.ToString();
  EXPECT_EQ(run.partition.result_shardings[1], (AxisSharding{{{}, {0}}}));
}

TEST(SpmdLoop, CollectivesInALoopCountEveryIteration) {
  // A row-parallel product in a 5-step loop: one all-reduce per iteration,
  // and the report's bytes are what the communicator counts running it.
  auto run = RunBoth(R"(
HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
cond {
  s = (s32[], f32[4,8], f32[8,8]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(5)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  s = (s32[], f32[4,8], f32[8,8]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  h = f32[4,8] get-tuple-element(s), index=1
  w = f32[8,8] get-tuple-element(s), index=2
  d = f32[4,8] dot(h, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}, sharding={replicated}
  t = f32[4,8] tanh(d)
  one = s32[] constant(1)
  i2 = s32[] add(i, one)
  ROOT r = (s32[], f32[4,8], f32[8,8]) tuple(i2, t, w)
}
ENTRY main {
  h0 = f32[4,8] parameter(0), sharding={devices=[1,2]0,1}
  w = f32[8,8] parameter(1), sharding={devices=[2,1]0,1}
  zero = s32[] constant(0)
  s = (s32[], f32[4,8], f32[8,8]) tuple(zero, h0, w)
  l = (s32[], f32[4,8], f32[8,8]) while(s), condition=cond, body=body
  ROOT out = f32[4,8] get-tuple-element(l), index=1
})",
                     Mesh::Line(2));
  ExpectClose(run);
  int64_t loop_all_reduces = 0;
  for (const CollectiveRecord& r : run.partition.report.collectives)
    loop_all_reduces += r.collective == "all-reduce" && r.runs == 5;
  EXPECT_EQ(loop_all_reduces, 1) << run.partition.report.ToString();
  EXPECT_EQ(run.partition.report.bytes_per_device(), run.sent_bytes)
      << run.partition.report.ToString();
}

TEST(SpmdGather, EmbeddingWithTokensSplit) {
  auto run = RunBoth(R"(
HloModule m
ENTRY main {
  table = f32[10,4] parameter(0), sharding={replicated}
  ids = s32[6] parameter(1), sharding={devices=[2]0,1}
  c5 = s32[] constant(5)
  five = s32[6] broadcast(c5), dimensions={}
  a = s32[6] abs(ids)
  m = s32[6] remainder(a, five)
  i = s32[6,1] reshape(m)
  ROOT g = f32[6,4] gather(table, i), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,4}
})",
                     Mesh::Line(2));
  ExpectClose(run);
}

TEST(SpmdStrict, ReplicatingASplitValueIsAnErrorNamingTheOp) {
  // A variadic reduce (argmax) has no sharded handler: its split operand
  // would be gathered whole.
  const char* text = R"(
HloModule m
argmax {
  a = f32[] parameter(0)
  ai = s32[] parameter(1)
  b = f32[] parameter(2)
  bi = s32[] parameter(3)
  gt = pred[] compare(a, b), direction=GE
  v = f32[] select(gt, a, b)
  i = s32[] select(gt, ai, bi)
  ROOT t = (f32[], s32[]) tuple(v, i)
}
ENTRY main {
  p = f32[8,4] parameter(0), sharding={devices=[2,1]0,1}
  idx = s32[8,4] iota(), iota_dimension=0
  ninf = f32[] constant(-inf)
  zero = s32[] constant(0)
  ROOT r = (f32[4], s32[4]) reduce(p, idx, ninf, zero), dimensions={0}, to_apply=argmax
})";
  auto module = hlo::ParseModule(text);
  EXPECT_FALSE(Partition(*module, Mesh::Line(2)).report.full_rematerializations.empty());
  auto run = RunBoth(text, Mesh::Line(2));
  ExpectClose(run);
  PartitionOptions strict;
  strict.strict = true;
  try {
    Partition(*module, Mesh::Line(2), strict);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("r (reduce)"), std::string::npos) << e.what();
  }
}

TEST(SpmdErrors, ShardingNotOverTheMesh) {
  const char* text = R"(
HloModule m
ENTRY main {
  p = f32[4,6] parameter(0), sharding={devices=[3,1]0,1,2}
  ROOT r = f32[4,6] negate(p)
})";
  EXPECT_THROW(Partition(*hlo::ParseModule(text), Mesh::Line(2)), Error);
}

TEST(SpmdProgram, CompileTimeDoesNotDependOnTheDeviceCount) {
  // One program for every device: the same instruction count on 2 and 8.
  const char* text = R"(
HloModule m
ENTRY main {
  x = f32[64,16] parameter(0), sharding={devices=[1,2]0,1}
  w = f32[16,32] parameter(1), sharding={devices=[2,1]0,1}
  ROOT y = f32[64,32] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}, sharding={replicated}
})";
  auto two = Partition(*hlo::ParseModule(text), Mesh::Line(2));
  std::string eight_text = text;
  eight_text.replace(eight_text.find("{devices=[1,2]0,1}"), 18, "{devices=[1,8]<=[8]}");
  eight_text.replace(eight_text.find("{devices=[2,1]0,1}"), 18, "{devices=[8,1]<=[8]}");
  auto eight = Partition(*hlo::ParseModule(eight_text), Mesh::Line(8));
  EXPECT_EQ(two.module->entry()->instruction_count(), eight.module->entry()->instruction_count());
  EXPECT_EQ(eight.module->num_partitions(), 8);
}

}  // namespace
}  // namespace strata::spmd
