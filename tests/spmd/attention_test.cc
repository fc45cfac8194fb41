// Fused attention partitioned: batch- and head-parallel splits run with no
// collective; splits it cannot keep (a sequence dim, heads that do not divide
// with their kv heads) are resharded first. Each program is checked against
// the same program run whole on one device.
#include <gtest/gtest.h>

#include <fmt/core.h>

#include "spmd_test_util.h"

namespace strata::spmd {
namespace {

using testing::ExpectClose;
using testing::RunBoth;

// Attention over q [2,4,16,8] and k, v [2,KV,16,8] and its gradient given do,
// with the shardings given for q (and do), k and v.
std::string Program(int64_t kv, const std::string& q_sharding, const std::string& kv_sharding) {
  return fmt::format(R"(
HloModule m
ENTRY main {{
  q = f32[2,4,16,8] parameter(0), sharding={0}
  k = f32[2,{2},16,8] parameter(1), sharding={1}
  v = f32[2,{2},16,8] parameter(2), sharding={1}
  do = f32[2,4,16,8] parameter(3), sharding={0}
  a = (f32[2,4,16,8], f32[2,4,16]) custom-call(q, k, v), custom_call_target="strata.attention", backend_config="causal=1;scale=0.35355339059327373"
  o = f32[2,4,16,8] get-tuple-element(a), index=0
  lse = f32[2,4,16] get-tuple-element(a), index=1
  g = (f32[2,4,16,8], f32[2,{2},16,8], f32[2,{2},16,8]) custom-call(q, k, v, o, lse, do), custom_call_target="strata.attention_grad", backend_config="causal=1;scale=0.35355339059327373"
  dq = f32[2,4,16,8] get-tuple-element(g), index=0
  dk = f32[2,{2},16,8] get-tuple-element(g), index=1
  dv = f32[2,{2},16,8] get-tuple-element(g), index=2
  ROOT r = (f32[2,4,16,8], f32[2,4,16], f32[2,4,16,8], f32[2,{2},16,8], f32[2,{2},16,8]) tuple(o, lse, dq, dk, dv)
}}
)",
                     q_sharding, kv_sharding, kv);
}

TEST(SpmdAttention, HeadParallelNeedsNoCollective) {
  auto run = RunBoth(Program(2, "{devices=[1,2,1,1]0,1}", "{devices=[1,2,1,1]0,1}"), Mesh::Line(2));
  ExpectClose(run);
  EXPECT_TRUE(run.partition.report.collectives.empty()) << run.partition.report.ToString();
}

TEST(SpmdAttention, BatchAndHeadsOverATwoByTwoMeshNeedNoCollective) {
  const std::string split = "{devices=[2,2,1,1]0,1,2,3}";
  auto run = RunBoth(Program(2, split, split), Mesh({0, 1, 2, 3}, {2, 2}, {"x", "y"}));
  ExpectClose(run);
  EXPECT_TRUE(run.partition.report.collectives.empty()) << run.partition.report.ToString();
}

// The same attention with positions before heads: q [2,16,4,8], k and v
// [2,16,KV,8] (layout=bshd), the lse still [B, H, S].
std::string PositionsFirst(int64_t kv, const std::string& q_sharding,
                           const std::string& kv_sharding) {
  return fmt::format(R"(
HloModule m
ENTRY main {{
  q = f32[2,16,4,8] parameter(0), sharding={0}
  k = f32[2,16,{2},8] parameter(1), sharding={1}
  v = f32[2,16,{2},8] parameter(2), sharding={1}
  do = f32[2,16,4,8] parameter(3), sharding={0}
  a = (f32[2,16,4,8], f32[2,4,16]) custom-call(q, k, v), custom_call_target="strata.attention", backend_config="causal=1;scale=0.35355339059327373;layout=bshd"
  o = f32[2,16,4,8] get-tuple-element(a), index=0
  lse = f32[2,4,16] get-tuple-element(a), index=1
  g = (f32[2,16,4,8], f32[2,16,{2},8], f32[2,16,{2},8]) custom-call(q, k, v, o, lse, do), custom_call_target="strata.attention_grad", backend_config="causal=1;scale=0.35355339059327373;layout=bshd"
  dq = f32[2,16,4,8] get-tuple-element(g), index=0
  dk = f32[2,16,{2},8] get-tuple-element(g), index=1
  dv = f32[2,16,{2},8] get-tuple-element(g), index=2
  ROOT r = (f32[2,16,4,8], f32[2,4,16], f32[2,16,4,8], f32[2,16,{2},8], f32[2,16,{2},8]) tuple(o, lse, dq, dk, dv)
}}
)",
                     q_sharding, kv_sharding, kv);
}

TEST(SpmdAttention, PositionsFirstLayoutSplitsHeadsAtDimTwo) {
  const std::string split = "{devices=[2,1,2,1]0,1,2,3}";
  auto run = RunBoth(PositionsFirst(2, split, split), Mesh({0, 1, 2, 3}, {2, 2}, {"x", "y"}));
  ExpectClose(run);
  EXPECT_TRUE(run.partition.report.collectives.empty()) << run.partition.report.ToString();
  // Heads split on the q side only: propagation carries it to k and v
  // (dim 2 there too), so still no collective.
  auto from_q = RunBoth(PositionsFirst(2, "{devices=[1,1,2,1]0,1}", "{replicated}"), Mesh::Line(2));
  ExpectClose(from_q);
  // A split sequence (dim 1 here) is resharded first.
  auto seq =
      RunBoth(PositionsFirst(2, "{devices=[1,2,1,1]0,1}", "{devices=[1,2,1,1]0,1}"), Mesh::Line(2));
  ExpectClose(seq);
  EXPECT_GT(seq.partition.report.collectives.size(), 0u);
}

TEST(SpmdAttention, SplitsItCannotKeepAreReshardedFirst) {
  // One kv head for four query heads: the head split cannot hold k and v.
  ExpectClose(RunBoth(Program(1, "{devices=[1,2,1,1]0,1}", "{replicated}"), Mesh::Line(2)));
  // A split sequence: each query needs every key.
  auto run = RunBoth(Program(2, "{devices=[1,1,2,1]0,1}", "{devices=[1,1,2,1]0,1}"), Mesh::Line(2));
  ExpectClose(run);
  EXPECT_GT(run.partition.report.collectives.size(), 0u);
}

// A mask with q split over batch and heads: Hugging Face's [B, 1, S, S]
// follows the batch split and stays whole over its single head, a
// [1, H, S, S] the other way round; read where it lies, no collective.
TEST(SpmdAttention, AMaskSplitsWhereItHasTheDimAndNotWhereItIsOne) {
  for (const std::string mask_shape : {"f32[2,1,16,16]", "f32[1,4,16,16]", "f32[2,4,16,16]"}) {
    SCOPED_TRACE(mask_shape);
    std::string text = Program(2, "{devices=[2,2,1,1]0,1,2,3}", "{devices=[2,2,1,1]0,1,2,3}");
    for (const std::string call : {"custom-call(q, k, v)", "custom-call(q, k, v, o, lse, do)"}) {
      const size_t at = text.find(call);
      ASSERT_NE(at, std::string::npos) << call;
      text.replace(at, call.size(), call.substr(0, call.size() - 1) + ", m)");
    }
    const std::string param = "  do = f32[2,4,16,8] parameter(3)";
    text.replace(text.find(param), param.size(),
                 "  m = " + mask_shape + " parameter(4), sharding={replicated}\n" + param);
    auto run = RunBoth(text, Mesh({0, 1, 2, 3}, {2, 2}, {"x", "y"}));
    ExpectClose(run);
    EXPECT_TRUE(run.partition.report.collectives.empty()) << run.partition.report.ToString();
  }
}

}  // namespace
}  // namespace strata::spmd
