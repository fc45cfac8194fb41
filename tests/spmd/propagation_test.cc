// Sharding propagation on small programs, against shardings worked out by
// hand: forward, backward, user annotations kept, loops sharing one
// sharding, and the result independent of instruction order.
#include <gtest/gtest.h>

#include "strata/core/error.h"
#include "strata/hlo/text.h"
#include "strata/spmd/partitioner.h"

namespace strata::spmd {
namespace {

// The propagated sharding of instruction `name` (its first leaf) as text.
std::string ShardingOf(const hlo::Module& m, const ShardingMap& map, const Mesh& mesh,
                       const std::string& name) {
  for (const auto& c : m.computations()) {
    for (const auto& inst : c->instructions()) {
      if (inst->name() == name) return ToString(mesh, map.at(inst.get()).at(0));
    }
  }
  ADD_FAILURE() << "no instruction " << name;
  return "";
}

TEST(SpmdPropagation, ForwardThroughElementwiseBroadcastAndTranspose) {
  auto m = hlo::ParseModule(R"(HloModule m
ENTRY main {
  p = f32[8,4] parameter(0), sharding={devices=[2,1]0,1}
  e = f32[8,4] exponential(p)
  t = f32[4,8] transpose(e), dimensions={1,0}
  b = f32[4,8,3] broadcast(t), dimensions={0,1}
  ROOT r = f32[4,8,3] negate(b)
})");
  Mesh mesh = Mesh::Line(2);
  ShardingMap map = PropagateShardings(*m, mesh);
  EXPECT_EQ(ShardingOf(*m, map, mesh, "e"), "('x', None)");
  EXPECT_EQ(ShardingOf(*m, map, mesh, "t"), "(None, 'x')");
  EXPECT_EQ(ShardingOf(*m, map, mesh, "r"), "(None, 'x', None)");
}

TEST(SpmdPropagation, BackwardFromAnAnnotatedRoot) {
  auto m = hlo::ParseModule(R"(HloModule m
ENTRY main {
  p = f32[8,4] parameter(0)
  q = f32[4,8] parameter(1)
  t = f32[8,4] transpose(q), dimensions={1,0}
  a = f32[8,4] add(p, t)
  ROOT r = f32[8,4] tanh(a), sharding={devices=[1,2]0,1}
})");
  Mesh mesh = Mesh::Line(2);
  ShardingMap map = PropagateShardings(*m, mesh);
  EXPECT_EQ(ShardingOf(*m, map, mesh, "p"), "(None, 'x')");
  EXPECT_EQ(ShardingOf(*m, map, mesh, "q"), "('x', None)");
}

TEST(SpmdPropagation, UserAnnotationsAreNeverOverwritten) {
  auto m = hlo::ParseModule(R"(HloModule m
ENTRY main {
  a = f32[8,8] parameter(0), sharding={devices=[2,1]0,1}
  b = f32[8,8] parameter(1), sharding={devices=[1,2]0,1}
  s = f32[8,8] add(a, b)
  ROOT r = f32[8,8] multiply(s, b), sharding={replicated}
})");
  Mesh mesh = Mesh::Line(2);
  ShardingMap map = PropagateShardings(*m, mesh);
  EXPECT_EQ(ShardingOf(*m, map, mesh, "a"), "('x', None)");
  EXPECT_EQ(ShardingOf(*m, map, mesh, "b"), "(None, 'x')");
  EXPECT_EQ(ShardingOf(*m, map, mesh, "r"), "(None, None)");
}

TEST(SpmdPropagation, DotTakesBatchAndFreeDimsReduceDropsReducedOnes) {
  auto m = hlo::ParseModule(R"(HloModule m
add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}
ENTRY main {
  a = f32[4,8,16] parameter(0), sharding={devices=[2,1,1,2]0,1,2,3 last_tile_dim_replicate}
  w = f32[16,6] parameter(1), sharding={devices=[1,2,2]0,2,1,3 last_tile_dim_replicate}
  d = f32[4,8,6] dot(a, w), lhs_contracting_dims={2}, rhs_contracting_dims={0}
  z = f32[] constant(0)
  ROOT r = f32[4,6] reduce(d, z), dimensions={1}, to_apply=add
})");
  Mesh mesh({0, 1, 2, 3}, {2, 2}, {"x", "y"});
  ShardingMap map = PropagateShardings(*m, mesh);
  EXPECT_EQ(ShardingOf(*m, map, mesh, "a"), "('x', None, None)");
  EXPECT_EQ(ShardingOf(*m, map, mesh, "w"), "(None, 'y')");
  EXPECT_EQ(ShardingOf(*m, map, mesh, "d"), "('x', None, 'y')");
  EXPECT_EQ(ShardingOf(*m, map, mesh, "r"), "('x', 'y')");
}

TEST(SpmdPropagation, LoopStateSharesOneShardingAndThePredicateIsReplicated) {
  auto m = hlo::ParseModule(R"(HloModule m
cond {
  s = (s32[], f32[8]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(3)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  s = (s32[], f32[8]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  v = f32[8] get-tuple-element(s), index=1
  one = s32[] constant(1)
  i2 = s32[] add(i, one)
  v2 = f32[8] add(v, v)
  ROOT t = (s32[], f32[8]) tuple(i2, v2)
}
ENTRY main {
  x = f32[8] parameter(0), sharding={devices=[2]0,1}
  zero = s32[] constant(0)
  s = (s32[], f32[8]) tuple(zero, x)
  w = (s32[], f32[8]) while(s), condition=cond, body=body
  ROOT r = f32[8] get-tuple-element(w), index=1
})");
  Mesh mesh = Mesh::Line(2);
  ShardingMap map = PropagateShardings(*m, mesh);
  EXPECT_EQ(ShardingOf(*m, map, mesh, "v2"), "('x')");
  EXPECT_EQ(ShardingOf(*m, map, mesh, "v"), "('x')");
  EXPECT_EQ(ShardingOf(*m, map, mesh, "r"), "('x')");
  EXPECT_EQ(ShardingOf(*m, map, mesh, "lt"), "()");
}

TEST(SpmdPropagation, ResultDoesNotDependOnInstructionOrder) {
  // The same program with its independent instructions in two orders.
  const char* first = R"(HloModule m
ENTRY main {
  a = f32[8,4] parameter(0), sharding={devices=[2,1]0,1}
  b = f32[4,8] parameter(1)
  ea = f32[8,4] exponential(a)
  tb = f32[8,4] transpose(b), dimensions={1,0}
  s = f32[8,4] add(ea, tb)
  ROOT r = f32[4,8] transpose(s), dimensions={1,0}
})";
  const char* second = R"(HloModule m
ENTRY main {
  b = f32[4,8] parameter(1)
  tb = f32[8,4] transpose(b), dimensions={1,0}
  a = f32[8,4] parameter(0), sharding={devices=[2,1]0,1}
  ea = f32[8,4] exponential(a)
  s = f32[8,4] add(ea, tb)
  ROOT r = f32[4,8] transpose(s), dimensions={1,0}
})";
  Mesh mesh = Mesh::Line(2);
  auto m1 = hlo::ParseModule(first);
  auto m2 = hlo::ParseModule(second);
  ShardingMap s1 = PropagateShardings(*m1, mesh);
  ShardingMap s2 = PropagateShardings(*m2, mesh);
  for (const char* name : {"a", "b", "ea", "tb", "s", "r"}) {
    EXPECT_EQ(ShardingOf(*m1, s1, mesh, name), ShardingOf(*m2, s2, mesh, name)) << name;
  }
  EXPECT_EQ(ShardingOf(*m1, s1, mesh, "b"), "(None, 'x')");
}

}  // namespace
}  // namespace strata::spmd
