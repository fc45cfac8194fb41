// Host-side views of a sharded array: the shard each device of a mesh holds,
// and the whole array put back together from them.
#pragma once

#include <vector>

#include "strata/runtime/device.h"
#include "strata/spmd/mesh.h"

namespace strata::runtime {

// Where partition p's shard starts in the whole array (element offsets per
// dim; a padded shard may reach past the end, or start there).
std::vector<int64_t> ShardOffsets(const spmd::Mesh& mesh, const spmd::AxisSharding& sharding,
                                  const std::vector<int64_t>& full, int64_t partition);

// Copies the box of `extent` elements per dim at `src_start` in a row-major
// array of `src_dims` to `dst_start` in one of `dst_dims`; elements are
// `element` bytes. The box must lie inside both.
void CopyBox(const uint8_t* src, const std::vector<int64_t>& src_dims,
             const std::vector<int64_t>& src_start, uint8_t* dst,
             const std::vector<int64_t>& dst_dims, const std::vector<int64_t>& dst_start,
             const std::vector<int64_t>& extent, int64_t element);

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
