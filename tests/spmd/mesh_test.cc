// Mesh-axis shardings and XLA's tile assignments: the vectors torch_xla's
// partition-spec logic produces (worked out in shared/reference), both ways.
#include <gtest/gtest.h>

#include "strata/core/error.h"
#include "strata/spmd/mesh.h"

namespace strata::spmd {
namespace {

struct Vector {
  Mesh mesh;
  AxisSharding axes;
  const char* text;
};

TEST(SpmdMesh, AxisShardingsAndTileAssignmentsAgree) {
  Mesh line4({0, 1, 2, 3}, {4}, {"model"});
  Mesh m2x2({0, 1, 2, 3}, {2, 2}, {"a", "b"});
  Mesh m2x4({0, 1, 2, 3, 4, 5, 6, 7}, {2, 4}, {"fsdp", "tensor"});
  Mesh reversed({3, 2, 1, 0}, {1, 4}, {"a", "b"});
  std::vector<Vector> vectors = {
      {line4, {{{0}}}, "{devices=[4]0,1,2,3}"},
      {line4, {{{}, {0}}}, "{devices=[1,4]0,1,2,3}"},
      {m2x2, {{{0}, {1}}}, "{devices=[2,2]0,1,2,3}"},
      {m2x2, {{{1}, {0}}}, "{devices=[2,2]0,2,1,3}"},
      {m2x2, {{{0}, {}}}, "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}"},
      {m2x2, {{{}, {1}}}, "{devices=[1,2,2]0,2,1,3 last_tile_dim_replicate}"},
      {m2x2, {{{}, {}}}, "{replicated}"},
      {m2x2, {{{0, 1}}}, "{devices=[4]0,1,2,3}"},
      {m2x2, {{{1, 0}}}, "{devices=[4]0,2,1,3}"},
      {m2x4, {{{1}, {0}}}, "{devices=[4,2]0,4,1,5,2,6,3,7}"},
      {m2x4, {{{0}, {}, {1}}}, "{devices=[2,1,4]0,1,2,3,4,5,6,7}"},
      {reversed, {{{0}, {1}}}, "{devices=[1,4]3,2,1,0}"},
  };
  for (const Vector& v : vectors) {
    SCOPED_TRACE(v.text);
    EXPECT_EQ(ToHloSharding(v.mesh, v.axes).ToText(), v.text);
    std::optional<AxisSharding> back =
        FromHloSharding(v.mesh, hlo::Sharding::Parse(v.text), v.axes.rank());
    ASSERT_TRUE(back.has_value());
    EXPECT_EQ(ToHloSharding(v.mesh, *back).ToText(), v.text);  // size-1 axes may be dropped
  }
}

TEST(SpmdMesh, APermutedTileAssignmentKeepsItsDeviceOrder) {
  Mesh m2x2({0, 1, 2, 3}, {2, 2}, {"a", "b"});
  // No assignment of axes gives 0,3,1,2: the split over (a, b) with devices
  // 0,3,1,2 at the mesh's positions (worked out by hand: tile k on device k's entry).
  auto s = FromHloSharding(m2x2, hlo::Sharding::Parse("{devices=[4]0,3,1,2}"), 1);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(*s, (AxisSharding{{{0, 1}}, {0, 3, 1, 2}}));
  EXPECT_EQ(ToHloSharding(m2x2, *s).ToText(), "{devices=[4]0,3,1,2}");
  EXPECT_EQ(ToString(m2x2, *s), "(('a','b')) on devices [0,3,1,2]");
  // Replicated over 'b' with the two halves on devices 3,2 and 1,0.
  auto r = FromHloSharding(
      m2x2, hlo::Sharding::Parse("{devices=[2,2]3,2,1,0 last_tile_dim_replicate}"), 1);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(ToHloSharding(m2x2, *r).ToText(), "{devices=[2,2]3,2,1,0 last_tile_dim_replicate}");
  EXPECT_EQ(LayoutMesh(m2x2, *r).IndexAlong(r->dims[0], 3), 0);  // device 3 holds the first half
  EXPECT_EQ(LayoutMesh(m2x2, *r).IndexAlong(r->dims[0], 0), 1);
  // The mesh's own order is never written as an order.
  auto plain = FromHloSharding(m2x2, hlo::Sharding::Parse("{devices=[4]0,2,1,3}"), 1);
  ASSERT_TRUE(plain.has_value());
  EXPECT_TRUE(plain->devices.empty());
  EXPECT_THROW(CheckSharding(m2x2, AxisSharding{{{0}}, {0, 1, 2, 2}}, 1), Error);
}

TEST(SpmdMesh, ATileAssignmentNoAxesGiveHasNone) {
  Mesh line4 = Mesh::Line(4);  // one axis of 4 cannot split two dims in two
  EXPECT_FALSE(FromHloSharding(line4, hlo::Sharding::Parse("{devices=[2,2]0,1,2,3}"), 2));
  Mesh m2x2({0, 1, 2, 3}, {2, 2}, {"a", "b"});
  EXPECT_FALSE(FromHloSharding(m2x2, hlo::Sharding::Parse("{manual}"), 1));
}

TEST(SpmdMesh, GroupsOverAxesAndIndices) {
  Mesh m({0, 1, 2, 3, 4, 5}, {2, 3}, {"x", "y"});
  // Over 'y': devices sharing an x coordinate, in y order.
  EXPECT_EQ(m.GroupsOver({1}), (std::vector<std::vector<int64_t>>{{0, 1, 2}, {3, 4, 5}}));
  EXPECT_EQ(m.GroupsOver({0}), (std::vector<std::vector<int64_t>>{{0, 3}, {1, 4}, {2, 5}}));
  // Over both, y major: index = y * 2 + x.
  EXPECT_EQ(m.GroupsOver({1, 0}), (std::vector<std::vector<int64_t>>{{0, 3, 1, 4, 2, 5}}));
  EXPECT_EQ(m.IndexAlong({1, 0}, 4), 3);  // device 4 = (x 1, y 1): 1 * 2 + 1
  EXPECT_THROW(m.Coordinates(9), Error);
}

TEST(SpmdMesh, ShardDimsRoundUp) {
  Mesh m = Mesh::Line(4);
  EXPECT_EQ(ShardDims(m, AxisSharding{{{0}, {}}}, {10, 3}), (std::vector<int64_t>{3, 3}));
  EXPECT_THROW(CheckSharding(m, AxisSharding{{{0}, {0}}}, 2), Error);  // an axis used twice
  EXPECT_THROW(CheckSharding(m, AxisSharding{{{0}}}, 2), Error);       // wrong rank
}

}  // namespace
}  // namespace strata::spmd
