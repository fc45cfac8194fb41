// Collectives and partition-id in the program IR: XLA's text forms, shape
// rules and the verifier's checks against the module's partition count.
#include <gtest/gtest.h>

#include "strata/core/error.h"
#include "strata/hlo/text.h"
#include "strata/hlo/verifier.h"

namespace strata::hlo {
namespace {

std::string Program(const std::string& body, int partitions = 4) {
  return "HloModule m, num_partitions=" + std::to_string(partitions) + R"(
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY main {
  x = f32[4,6] parameter(0)
)" + body +
         "\n}\n";
}

std::string ErrorOf(const std::string& text) {
  try {
    auto m = ParseModule(text);
    Verify(*m);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Collectives, ReadsXlaTextAndPrintsItBack) {
  // As XLA's SPMD partitioner writes them.
  std::string text = Program(
      R"(  ar = f32[4,6] all-reduce(x), channel_id=1, replica_groups={{0,1},{2,3}}, use_global_device_ids=true, to_apply=add
  ag = f32[16,6] all-gather(ar), channel_id=2, replica_groups={{0,1,2,3}}, dimensions={0}, use_global_device_ids=true
  rs = f32[16,3] reduce-scatter(ag), channel_id=3, replica_groups={{0,2},{1,3}}, dimensions={1}, use_global_device_ids=true, to_apply=add
  aa = f32[16,3] all-to-all(rs), replica_groups={{0,1},{2,3}}, dimensions={0}
  cp = f32[16,3] collective-permute(aa), channel_id=4, source_target_pairs={{0,1},{1,0}}
  id = u32[] partition-id()
  ROOT t = (f32[16,3], u32[]) tuple(cp, id))");
  auto m = ParseModule(text);
  EXPECT_EQ(m->num_partitions(), 4);
  std::string printed = ToText(*m);
  EXPECT_EQ(ToText(*ParseModule(printed)), printed);
  EXPECT_NE(printed.find("HloModule m, num_partitions=4"), std::string::npos) << printed;
  EXPECT_NE(printed.find("replica_groups={{0,2},{1,3}}, dimensions={1}"), std::string::npos);
  EXPECT_NE(printed.find("source_target_pairs={{0,1},{1,0}}"), std::string::npos);
}

TEST(Collectives, IotaReplicaGroups) {
  // [2,2]<=[2,2]T(1,0): ids 0..3 as a 2x2 transposed: groups {0,2},{1,3}.
  auto m = ParseModule(Program(
      R"(  ROOT ar = f32[4,6] all-reduce(x), replica_groups=[2,2]<=[2,2]T(1,0), to_apply=add)"));
  EXPECT_EQ(m->entry()->root()->replica_groups, (ReplicaGroups{{0, 2}, {1, 3}}));
  auto plain = ParseModule(
      Program(R"(  ROOT ar = f32[4,6] all-reduce(x), replica_groups=[1,4]<=[4], to_apply=add)"));
  EXPECT_EQ(plain->entry()->root()->replica_groups, (ReplicaGroups{{0, 1, 2, 3}}));
}

TEST(Collectives, GatherWithoutGroupsTakesTheDeclaredShape) {
  auto m = ParseModule(
      Program(R"(  ROOT ag = f32[16,6] all-gather(x), replica_groups={}, dimensions={0})"));
  EXPECT_NO_THROW(Verify(*m));
  // 3 partitions cannot gather 4 rows into 16.
  EXPECT_NE(
      ErrorOf(
          Program(R"(  ROOT ag = f32[16,6] all-gather(x), replica_groups={}, dimensions={0})", 3))
          .find("group of all 3 partitions"),
      std::string::npos);
}

TEST(Collectives, ShapeRulesAndGroupsAreChecked) {
  struct Case {
    const char* body;
    const char* expected;
  } cases[] = {
      {"  ROOT ag = f32[8,6] all-gather(x), replica_groups={{0,1,2,3}}, dimensions={0}",
       "declares shape f32[8,6] but its operands give f32[16,6]"},
      {"  ROOT rs = f32[1,6] reduce-scatter(x), replica_groups={{0,1,2}}, dimensions={0}, "
       "to_apply=add",
       "does not split into 3 blocks"},
      {"  ROOT rs = f32[2,6] reduce-scatter(x), replica_groups={{0,1,2},{3}}, dimensions={0}, "
       "to_apply=add",
       "replica groups must have one size"},
      {"  ROOT ar = f32[4,6] all-reduce(x), replica_groups={{0,1},{1,2}}, to_apply=add",
       "id 1 appears twice"},
      {"  ROOT ar = f32[4,6] all-reduce(x), replica_groups={{0,1},{2,7}}, to_apply=add",
       "partition 7 is out of range"},
      {"  ROOT ar = f32[4,6] all-reduce(x), replica_groups={{0,1}}, to_apply=add",
       "cover 2 of the module's 4 partitions"},
      {"  ROOT aa = f32[4,6] all-to-all(x), replica_groups={{0,1,2,3}}, dimensions={1}",
       "does not split into 4 blocks"},
      {"  ROOT cp = f32[4,6] collective-permute(x), source_target_pairs={{0,1},{2,1}}",
       "target 1 appears twice"},
      {"  ROOT ag = f32[4,6] all-gather(x), replica_groups={{0,1,2,3}}, dimensions={0,1}",
       "one dimension"},
      {"  ROOT p = u32[] partition-id(x)", "expected 0 operand(s)"},
      {"  ROOT ar = f32[4,6] all-reduce(x), replica_groups=[2,2]<=[4]T(1,0), to_apply=add",
       "not a permutation"},
      {"  ROOT cp = f32[4,6] collective-permute(x), source_target_pairs={{0,1,2}}",
       "a source-target pair has two ids"},
  };
  for (const Case& c : cases) {
    std::string error = ErrorOf(Program(c.body));
    EXPECT_NE(error.find(c.expected), std::string::npos) << c.body << "\n  gave: " << error;
  }
}

TEST(Collectives, ShardingTextIsCheckedAndCanonical) {
  std::string text = Program(R"(  ROOT y = f32[4,6] copy(x), sharding={devices=[2,2]<=[4]})");
  auto m = ParseModule(text);
  EXPECT_EQ(m->entry()->root()->sharding, "{devices=[2,2]<=[4]}");
  std::string bad = Program(R"(  ROOT y = f32[4,6] copy(x), sharding={devices=[2,2]0,1,2})");
  std::string error = ErrorOf(bad);
  EXPECT_NE(error.find("line 9"), std::string::npos) << error;
  EXPECT_NE(error.find("[sharding]"), std::string::npos) << error;
}

}  // namespace
}  // namespace strata::hlo
