// SPMD sharding annotations: a device Mesh with named axes and a partition
// spec per tensor dimension, as in PyTorch/XLA's mark_sharding and JAX's
// NamedSharding. Execution is single-device for now; the annotation travels
// in the IR (and its hash) and into the lowered program as XLA's
// `sharding={devices=[2,1]0,1}` attribute.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "strata/ir/hash.h"

namespace strata::ir {

class Mesh {
 public:
  // device_ids are laid out row-major over `shape`; axis names are unique.
  Mesh(std::vector<int64_t> device_ids, std::vector<int64_t> shape,
       std::vector<std::string> axis_names);
  const std::vector<int64_t>& device_ids() const { return device_ids_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  const std::vector<std::string>& axis_names() const { return axis_names_; }
  int64_t size() const { return static_cast<int64_t>(device_ids_.size()); }
  int64_t AxisIndex(const std::string& name) const;  // Error naming the axes if unknown
  std::string ToString() const;
  bool operator==(const Mesh&) const = default;

 private:
  std::vector<int64_t> device_ids_, shape_;
  std::vector<std::string> axis_names_;
};

// One entry per tensor dimension: the mesh axes it is split over (in order),
// or none for a replicated dimension.
using PartitionSpec = std::vector<std::vector<std::string>>;

class Sharding {
 public:
  // Checks the spec against the mesh and the tensor rank: spec length must
  // equal the rank, axes must exist and be used at most once.
  Sharding(Mesh mesh, PartitionSpec spec, int64_t rank);
  static Sharding Replicated(Mesh mesh, int64_t rank);

  const Mesh& mesh() const { return mesh_; }
  const PartitionSpec& spec() const { return spec_; }
  // XLA's sharding text: "{replicated}", "{devices=[2,1]0,1}",
  // "{devices=[1,2,2]0,2,1,3 last_tile_dim_replicate}".
  const std::string& hlo_text() const { return hlo_text_; }
  const Hash128& hash() const { return hash_; }
  std::string ToString() const;  // e.g. "('data', None) on mesh[data=2,model=2]"
  bool operator==(const Sharding& o) const {
    return hash_ == o.hash_ && mesh_ == o.mesh_ && spec_ == o.spec_;
  }

 private:
  Mesh mesh_;
  PartitionSpec spec_;
  std::string hlo_text_;
  Hash128 hash_;
};

}  // namespace strata::ir
