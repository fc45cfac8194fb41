// SPMD sharding annotations: a device Mesh with named axes and a partition
// spec per tensor dimension, as in PyTorch/XLA's mark_sharding and JAX's
// NamedSharding. The annotation travels in the IR (and its hash) and into the
// lowered program as XLA's `sharding={devices=[2,1]0,1}` attribute, where the
// partitioner (spmd/) reads it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "strata/ir/hash.h"
#include "strata/spmd/mesh.h"

namespace strata::ir {

// The device mesh is the partitioner's (spmd/mesh.h).
using Mesh = spmd::Mesh;

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
  // The spec as mesh axis indices, the partitioner's form.
  const spmd::AxisSharding& axes() const { return axes_; }
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
  spmd::AxisSharding axes_;
  std::string hlo_text_;
  Hash128 hash_;
};

}  // namespace strata::ir
