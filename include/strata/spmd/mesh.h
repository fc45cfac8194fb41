// A device mesh with named axes, and shardings over it: each array dimension
// split over an ordered list of mesh axes (JAX's NamedSharding, PyTorch/XLA's
// partition spec). The partitioner works in these terms; XLA's tile-assignment
// text (`{devices=[2,1,2]0,2,1,3 last_tile_dim_replicate}`) is how they are
// written into programs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "strata/hlo/sharding.h"

namespace strata::spmd {

class Mesh {
 public:
  // device_ids are laid out row-major over `shape`; axis names are unique.
  Mesh(std::vector<int64_t> device_ids, std::vector<int64_t> shape,
       std::vector<std::string> axis_names);
  // A 1-D mesh of devices 0..n-1 with one axis `name`.
  static Mesh Line(int64_t n, std::string name = "x");
  const std::vector<int64_t>& device_ids() const { return device_ids_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  const std::vector<std::string>& axis_names() const { return axis_names_; }
  int64_t size() const { return static_cast<int64_t>(device_ids_.size()); }
  int64_t rank() const { return static_cast<int64_t>(shape_.size()); }
  int64_t AxisIndex(const std::string& name) const;  // Error naming the axes if unknown
  int64_t AxisSize(int64_t axis) const { return shape_[axis]; }
  // Product of the sizes of `axes`.
  int64_t Size(const std::vector<int64_t>& axes) const;
  // The mesh coordinates of device `id`; Error if it is not in the mesh.
  std::vector<int64_t> Coordinates(int64_t id) const;
  // Mixed-radix index of `id` over `axes` (major first): which of Size(axes)
  // tiles it holds when a dimension is split over them.
  int64_t IndexAlong(const std::vector<int64_t>& axes, int64_t id) const;
  // Groups of devices that differ only in their coordinates on `axes`: each
  // group ordered by IndexAlong(axes), groups by their first device's
  // position. What a collective over those axes exchanges.
  std::vector<std::vector<int64_t>> GroupsOver(const std::vector<int64_t>& axes) const;
  std::string ToString() const;  // "mesh[data=2,model=2]"
  bool operator==(const Mesh&) const = default;

 private:
  std::vector<int64_t> device_ids_, shape_;
  std::vector<std::string> axis_names_;
  std::vector<int64_t> position_;  // by device id: its row-major position, -1 if absent
};

// For each array dimension, the mesh axes (indices) it is split over, major
// first. Axes no dimension uses replicate the array.
//
// `devices`, when not empty, lays the tiles over the mesh's devices in
// another order: the sharding is `dims` over the mesh with these device ids
// (row-major over its shape). It is what a tile assignment that permutes
// devices across axes (`{devices=[2]1,0}` on a mesh of 0,1) reads as; only a
// collective-permute moves a value between two orders. Empty means the
// mesh's own order, and a sharding in the mesh's order always has it empty.
struct AxisSharding {
  std::vector<std::vector<int64_t>> dims;
  std::vector<int64_t> devices = {};

  static AxisSharding Replicated(int64_t rank) { return {std::vector<std::vector<int64_t>>(rank)}; }
  int64_t rank() const { return static_cast<int64_t>(dims.size()); }
  bool IsReplicated() const;
  // Every axis the sharding uses.
  std::vector<int64_t> UsedAxes() const;
  // The same split in the mesh's own device order.
  AxisSharding InMeshOrder() const { return {dims, {}}; }
  bool operator==(const AxisSharding&) const = default;
};

// The mesh whose device order `sharding` lays its tiles over: `mesh` itself
// unless the sharding has an order of its own.
Mesh LayoutMesh(const Mesh& mesh, const AxisSharding& sharding);
// Whether any of `leaves` has a device order of its own.
bool HasDeviceOrder(const std::vector<AxisSharding>& leaves);

// Checks that `sharding` fits `mesh` and an array of `rank`: known axes, each
// used once, a device order (if any) that permutes the mesh's devices.
// Throws strata::Error.
void CheckSharding(const Mesh& mesh, const AxisSharding& sharding, int64_t rank);
// Tiles along `dim`.
int64_t TileCount(const Mesh& mesh, const AxisSharding& sharding, int64_t dim);
// The shard shape of `full` (dims ceil-divided: uneven shards are padded).
std::vector<int64_t> ShardDims(const Mesh& mesh, const AxisSharding& sharding,
                               const std::vector<int64_t>& full);
// XLA's tile assignment for `sharding` over `mesh`.
hlo::Sharding ToHloSharding(const Mesh& mesh, const AxisSharding& sharding);
// The axis sharding whose tile assignment is `sharding`, if one exists over
// `mesh`: in the mesh's order when one is, else with a device order of its
// own (a tile assignment that permutes devices across axes). None when the
// tile counts fit no assignment of mesh axes.
std::optional<AxisSharding> FromHloSharding(const Mesh& mesh, const hlo::Sharding& sharding,
                                            int64_t rank);
// "('data', None)" style, with axis names; a device order is appended
// ("('x',) on devices [1,0]").
std::string ToString(const Mesh& mesh, const AxisSharding& sharding);

}  // namespace strata::spmd
