// Manual regions (jax.shard_map) in HLO text: SPMDFullToShardShape hands each
// device its shard, the region's ops (collectives included) run as written
// on it, SPMDShardToFullShape makes the shards one array again. Each program
// is checked against the same computation written for one device.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "error_of.h"
#include "spmd_test_util.h"
#include "strata/compiler/compile.h"
#include "strata/core/error.h"

namespace strata::spmd {
namespace {

using strata::test::ErrorOf;
using testing::ExpectClose;
using ::testing::HasSubstr;
using testing::RunBoth;

// What JAX emits for shard_map(lambda s: s * s + psum(sum(s, 0)), in_specs=P('x'),
// out_specs=P('x')) on an [8, 4] array over 2 devices.
const char* kSquarePlusColumnSums = R"(
HloModule shard_map, num_partitions=2, entry_computation_layout={(f32[8,4]{1,0})->f32[8,4]{1,0}}

%region_add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %add = f32[] add(f32[] %a, f32[] %b)
}

ENTRY %main.10 (Arg_0.1: f32[8,4]) -> f32[8,4] {
  %Arg_0.1 = f32[8,4]{1,0} parameter(0), sharding={devices=[2,1]0,1}
  %custom-call.2 = f32[8,4]{1,0} custom-call(f32[8,4]{1,0} %Arg_0.1), custom_call_target="Sharding", sharding={devices=[2,1]0,1}, backend_config=""
  %custom-call.3 = f32[4,4]{1,0} custom-call(f32[8,4]{1,0} %custom-call.2), custom_call_target="SPMDFullToShardShape", sharding={manual}, backend_config=""
  %multiply.4 = f32[4,4]{1,0} multiply(f32[4,4]{1,0} %custom-call.3, f32[4,4]{1,0} %custom-call.3), sharding={manual}
  %constant.5 = f32[] constant(0), sharding={manual}
  %reduce.6 = f32[4]{0} reduce(f32[4,4]{1,0} %custom-call.3, f32[] %constant.5), dimensions={0}, to_apply=%region_add, sharding={manual}
  %all-reduce.7 = f32[4]{0} all-reduce(f32[4]{0} %reduce.6), channel_id=1, replica_groups={{0,1}}, use_global_device_ids=true, to_apply=%region_add, sharding={manual}
  %broadcast.8 = f32[4,4]{1,0} broadcast(f32[4]{0} %all-reduce.7), dimensions={1}, sharding={manual}
  %add.9 = f32[4,4]{1,0} add(f32[4,4]{1,0} %multiply.4, f32[4,4]{1,0} %broadcast.8), sharding={manual}
  %custom-call.10 = f32[4,4]{1,0} custom-call(f32[4,4]{1,0} %add.9), custom_call_target="Sharding", sharding={manual}, backend_config=""
  ROOT %custom-call.11 = f32[8,4]{1,0} custom-call(f32[4,4]{1,0} %custom-call.10), custom_call_target="SPMDShardToFullShape", sharding={devices=[2,1]0,1}, backend_config=""
})";

// The same on one device: x * x + the column sums of all of x.
const char* kSquarePlusColumnSumsWhole = R"(
HloModule whole
add_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY main {
  x = f32[8,4] parameter(0)
  sq = f32[8,4] multiply(x, x)
  zero = f32[] constant(0)
  sums = f32[4] reduce(x, zero), dimensions={0}, to_apply=add_f32
  b = f32[8,4] broadcast(sums), dimensions={1}
  ROOT r = f32[8,4] add(sq, b)
})";

TEST(SpmdManual, ShardMapWithAPsumMatchesTheWholeProgram) {
  auto run = RunBoth(kSquarePlusColumnSums, Mesh::Line(2), {}, kSquarePlusColumnSumsWhole);
  ExpectClose(run);
  // The psum is the program's own all-reduce; the partitioner adds nothing.
  EXPECT_TRUE(run.partition.report.collectives.empty()) << run.partition.report.ToString();
  EXPECT_TRUE(run.partition.report.full_rematerializations.empty())
      << run.partition.report.ToString();
  // No device holds more than its half.
  EXPECT_LE(run.largest_shard_bytes, 4 * 4 * 4);
}

// Each device's shard, reversed along the split dim and scaled by its
// partition id + 1: a region that depends on which device runs it.
TEST(SpmdManual, RegionsSeeTheirOwnShardAndPartitionOverFourDevices) {
  const char* manual = R"(
HloModule m, num_partitions=4
ENTRY main {
  x = f32[8,6] parameter(0), sharding={devices=[4,1]0,1,2,3}
  s = f32[2,6] custom-call(x), custom_call_target="SPMDFullToShardShape", sharding={manual}
  r = f32[2,6] reverse(s), dimensions={0}
  pid = u32[] partition-id()
  one = u32[] constant(1)
  k = u32[] add(pid, one)
  kf = f32[] convert(k)
  kb = f32[2,6] broadcast(kf), dimensions={}
  y = f32[2,6] multiply(r, kb)
  ROOT out = f32[8,6] custom-call(y), custom_call_target="SPMDShardToFullShape", sharding={devices=[4,1]0,1,2,3}
})";
  // Rows 2p and 2p + 1 swap, times p + 1.
  const char* whole = R"(
HloModule whole
ENTRY main {
  x = f32[8,6] parameter(0)
  blocks = f32[4,2,6] reshape(x)
  r = f32[4,2,6] reverse(blocks), dimensions={1}
  i = f32[4,2,6] iota(), iota_dimension=0
  one = f32[] constant(1)
  ones = f32[4,2,6] broadcast(one), dimensions={}
  k = f32[4,2,6] add(i, ones)
  y = f32[4,2,6] multiply(r, k)
  ROOT out = f32[8,6] reshape(y)
})";
  auto run = RunBoth(manual, Mesh::Line(4), {}, whole);
  ExpectClose(run);
}

// The region's output feeds ordinary sharded ops, whose sharding the
// partitioner chooses as usual.
TEST(SpmdManual, TheResultFeedsPartitionedOps) {
  const char* manual = R"(
HloModule m
ENTRY main {
  x = f32[8,4] parameter(0), sharding={devices=[2,1]0,1}
  w = f32[4,3] parameter(1), sharding={replicated}
  s = f32[4,4] custom-call(x), custom_call_target="SPMDFullToShardShape", sharding={manual}
  t = f32[4,4] tanh(s)
  full = f32[8,4] custom-call(t), custom_call_target="SPMDShardToFullShape", sharding={devices=[2,1]0,1}
  ROOT y = f32[8,3] dot(full, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
})";
  const char* whole = R"(
HloModule whole
ENTRY main {
  x = f32[8,4] parameter(0)
  w = f32[4,3] parameter(1)
  t = f32[8,4] tanh(x)
  ROOT y = f32[8,3] dot(t, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
})";
  auto run = RunBoth(manual, Mesh::Line(2), {}, whole);
  ExpectClose(run);
}

std::string PartitionError(const std::string& text, const Mesh& mesh) {
  return ErrorOf([&] { Partition(*hlo::ParseModule(text), mesh); });
}

TEST(SpmdManual, MalformedRegionsAreErrorsNamingTheInstruction) {
  const Mesh mesh = Mesh::Line(2);
  // The declared shard shape is not what the split gives.
  EXPECT_THAT(PartitionError(R"(
HloModule m
ENTRY main {
  x = f32[8,4] parameter(0), sharding={devices=[2,1]0,1}
  s = f32[8,2] custom-call(x), custom_call_target="SPMDFullToShardShape", sharding={manual}
  ROOT out = f32[8,4] custom-call(s), custom_call_target="SPMDShardToFullShape", sharding={devices=[1,2]0,1}
})",
                             mesh),
              AllOf(HasSubstr("s (SPMDFullToShardShape) gives f32[8,2] per device"),
                    HasSubstr("is f32[4,4] per device")));
  // A region whose value reaches the result without leaving it.
  EXPECT_THAT(PartitionError(R"(
HloModule m
ENTRY main {
  x = f32[8,4] parameter(0), sharding={devices=[2,1]0,1}
  s = f32[4,4] custom-call(x), custom_call_target="SPMDFullToShardShape", sharding={manual}
  ROOT t = f32[4,4] tanh(s)
})",
                             mesh),
              HasSubstr("result t is computed per device"));
  // Leaving a region never entered.
  EXPECT_THAT(PartitionError(R"(
HloModule m
ENTRY main {
  x = f32[4,4] parameter(0)
  ROOT out = f32[8,4] custom-call(x), custom_call_target="SPMDShardToFullShape", sharding={devices=[2,1]0,1}
})",
                             mesh),
              HasSubstr("out (SPMDShardToFullShape) leaves a manual region, but its operand x"));
  // A split that leaves padding.
  EXPECT_THAT(PartitionError(R"(
HloModule m
ENTRY main {
  x = f32[7,4] parameter(0), sharding={devices=[2,1]0,1}
  s = f32[4,4] custom-call(x), custom_call_target="SPMDFullToShardShape", sharding={manual}
  ROOT out = f32[7,4] custom-call(s), custom_call_target="SPMDShardToFullShape", sharding={devices=[2,1]0,1}
})",
                             mesh),
              HasSubstr("(SPMDFullToShardShape) gives f32[4,4] per device"));
  // A parameter can't be given per-device data.
  EXPECT_THAT(PartitionError(R"(
HloModule m
ENTRY main {
  x = f32[4,4] parameter(0), sharding={manual}
  ROOT out = f32[8,4] custom-call(x), custom_call_target="SPMDShardToFullShape", sharding={devices=[2,1]0,1}
})",
                             mesh),
              HasSubstr("leaves a manual region, but its operand x"));
  EXPECT_THAT(PartitionError(R"(
HloModule m
ENTRY main {
  x = f32[4,4] parameter(0), sharding={manual}
  ROOT t = f32[4,4] tanh(x)
})",
                             mesh),
              HasSubstr("parameter x is {manual}"));
}

// Run whole on one device (not partitioned), a boundary that changes the
// shape is an Error at compile; one that keeps it is the identity.
TEST(SpmdManual, UnpartitionedBoundariesThatChangeTheShapeAreErrors) {
  runtime::Client client(1, 1);
  compiler::CompileOptions compile;
  compile.client = &client;
  auto module = hlo::ParseModule(kSquarePlusColumnSums);
  EXPECT_THAT(ErrorOf([&] { compiler::Compile(*module, compile); }),
              HasSubstr("custom-call SPMDFullToShardShape (custom-call.3) turns f32[8,4] into "
                        "f32[4,4]: a manual region runs only in a program partitioned"));
}

}  // namespace
}  // namespace strata::spmd
