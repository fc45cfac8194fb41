// Host-side views of a sharded array: the shard each device of a mesh holds,
// and the whole array put back together from them.
#pragma once

#include <vector>

#include "strata/runtime/device.h"
#include "strata/spmd/mesh.h"

namespace strata::runtime {

// The shard of `full` partition p holds under `sharding` (p = the mesh's
// device id), on devices[p]. Shards of a dim that does not divide evenly are
// padded with zeros to one shard shape.
std::vector<Buffer> SplitIntoShards(const Buffer& full, const spmd::Mesh& mesh,
                                    const spmd::AxisSharding& sharding,
                                    const std::vector<const Device*>& devices);

// The whole array of shape `full` from one shard per partition (of the
// replicas of a tile, the lowest partition's is read), on `device`.
Buffer AssembleShards(const std::vector<Buffer>& shards, const Shape& full, const spmd::Mesh& mesh,
                      const spmd::AxisSharding& sharding, const Device* device);

}  // namespace strata::runtime
