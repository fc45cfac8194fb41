// Mesh and partition-spec validation, and the XLA sharding text they lower
// to (expected strings worked out from XLA's tile-assignment rules).
#include <gtest/gtest.h>

#include "strata/core/error.h"
#include "strata/ir/sharding.h"

namespace strata::ir {
namespace {

Mesh Mesh2x2() { return Mesh({0, 1, 2, 3}, {2, 2}, {"data", "model"}); }

TEST(Sharding, HloTextMatchesXlaTileAssignments) {
  struct Case {
    Mesh mesh;
    PartitionSpec spec;
    std::string expected;
  };
  std::vector<Case> cases = {
      {Mesh({0, 1, 2, 3}, {1, 4}, {"a", "b"}), {{"a"}, {"b"}}, "{devices=[1,4]0,1,2,3}"},
      {Mesh({0, 1, 2, 3}, {1, 4}, {"a", "b"}), {{"b"}, {"a"}}, "{devices=[4,1]0,1,2,3}"},
      {Mesh({3, 2, 1, 0}, {1, 4}, {"a", "b"}), {{"a"}, {"b"}}, "{devices=[1,4]3,2,1,0}"},
      {Mesh2x2(), {{"data"}, {"model"}}, "{devices=[2,2]0,1,2,3}"},
      {Mesh2x2(), {{"model"}, {"data"}}, "{devices=[2,2]0,2,1,3}"},
      {Mesh2x2(), {{"data"}, {}}, "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}"},
      {Mesh2x2(), {{}, {"model"}}, "{devices=[1,2,2]0,2,1,3 last_tile_dim_replicate}"},
      {Mesh2x2(), {{}, {}}, "{replicated}"},
      {Mesh2x2(), {{"data", "model"}}, "{devices=[4]0,1,2,3}"},
      {Mesh2x2(), {{"model", "data"}}, "{devices=[4]0,2,1,3}"},
      {Mesh2x2(), {{"data"}}, "{devices=[2,2]0,1,2,3 last_tile_dim_replicate}"},
      {Mesh({0, 1}, {2}, {"x"}), {{"x"}, {}}, "{devices=[2,1]0,1}"},
      {Mesh({0, 1}, {2}, {"x"}), {}, "{replicated}"},
  };
  for (const Case& c : cases) {
    Sharding s(c.mesh, c.spec, static_cast<int64_t>(c.spec.size()));
    EXPECT_EQ(s.hlo_text(), c.expected) << s.ToString();
  }
}

TEST(Sharding, HashDistinguishesSpecsAndMeshes) {
  Sharding a(Mesh2x2(), {{"data"}, {}}, 2);
  Sharding b(Mesh2x2(), {{}, {"data"}}, 2);
  Sharding c(Mesh({0, 2, 1, 3}, {2, 2}, {"data", "model"}), {{"data"}, {}}, 2);
  Sharding a2(Mesh2x2(), {{"data"}, {}}, 2);
  EXPECT_EQ(a.hash(), a2.hash());
  EXPECT_NE(a.hash(), b.hash());
  EXPECT_NE(a.hash(), c.hash());
}

TEST(Sharding, BadMeshesAndSpecsAreClearErrors) {
  auto expect_error = [](auto fn, const std::string& fragment) {
    try {
      fn();
      ADD_FAILURE() << "no error; expected one containing '" << fragment << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  expect_error([] { Mesh({0, 1, 2}, {2, 2}, {"a", "b"}); }, "do not fill a mesh of shape [2,2]");
  expect_error([] { Mesh({0, 1}, {2}, {"a", "b"}); }, "2 axis names for a mesh of rank 1");
  expect_error([] { Mesh({0, 0}, {2}, {"a"}); }, "device ids must be unique");
  expect_error([] { Mesh({0, 1, 2, 3}, {2, 2}, {"a", "a"}); }, "axis names must be unique");
  expect_error([] { Sharding(Mesh2x2(), {{"data"}}, 2); },
               "partition spec has 1 entries but the tensor has rank 2");
  expect_error(
      [] {
        Sharding(Mesh2x2(), {{"rows"}, {}}, 2);
      },
      "axis 'rows' is not in the mesh (axes: data, model)");
  expect_error(
      [] {
        Sharding(Mesh2x2(), {{"data"}, {"data"}}, 2);
      },
      "mesh axis 'data' is used twice");
}

}  // namespace
}  // namespace strata::ir
