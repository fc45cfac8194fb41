#include "strata/runtime/sharded_buffer.h"

#include <cstring>

#include "strata/core/error.h"

namespace strata::runtime {
namespace {

// Copies the part of `full` that partition p's shard covers, in either
// direction: into the shard (to_shard) or back into the whole array.
void CopyShard(uint8_t* full, uint8_t* shard, const Shape& full_shape,
               const std::vector<int64_t>& shard_dims, const std::vector<int64_t>& offsets,
               bool to_shard) {
  const int64_t rank = full_shape.rank();
  std::vector<int64_t> extent(rank);
  for (int64_t d = 0; d < rank; ++d) {
    extent[d] = std::max<int64_t>(0, std::min(shard_dims[d], full_shape.dim(d) - offsets[d]));
  }
  const std::vector<int64_t> origin(rank, 0);
  const int64_t element = DTypeSize(full_shape.dtype());
  if (to_shard) {
    CopyBox(full, full_shape.dims(), offsets, shard, shard_dims, origin, extent, element);
  } else {
    CopyBox(shard, shard_dims, origin, full, full_shape.dims(), offsets, extent, element);
  }
}

}  // namespace

std::vector<int64_t> ShardOffsets(const spmd::Mesh& mesh_in, const spmd::AxisSharding& sharding,
                                  const std::vector<int64_t>& full, int64_t partition) {
  const spmd::Mesh mesh = spmd::LayoutMesh(mesh_in, sharding);
  const std::vector<int64_t> shard_dims = spmd::ShardDims(mesh_in, sharding, full);
  std::vector<int64_t> offsets(full.size());
  for (size_t d = 0; d < full.size(); ++d)
    offsets[d] = mesh.IndexAlong(sharding.dims[d], partition) * shard_dims[d];
  return offsets;
}

void CopyBox(const uint8_t* src, const std::vector<int64_t>& src_dims,
             const std::vector<int64_t>& src_start, uint8_t* dst,
             const std::vector<int64_t>& dst_dims, const std::vector<int64_t>& dst_start,
             const std::vector<int64_t>& extent, int64_t element) {
  const int64_t rank = static_cast<int64_t>(extent.size());
  for (int64_t e : extent) {
    if (e <= 0) return;
  }
  if (rank == 0) {
    std::memcpy(dst, src, element);
    return;
  }
  std::vector<int64_t> src_strides(rank, 1), dst_strides(rank, 1);
  for (int64_t d = rank - 2; d >= 0; --d) {
    src_strides[d] = src_strides[d + 1] * src_dims[d + 1];
    dst_strides[d] = dst_strides[d + 1] * dst_dims[d + 1];
  }
  std::vector<int64_t> idx(rank, 0);
  const int64_t run = extent[rank - 1] * element;
  while (true) {
    int64_t s = 0, t = 0;
    for (int64_t d = 0; d < rank; ++d) {
      s += (idx[d] + src_start[d]) * src_strides[d];
      t += (idx[d] + dst_start[d]) * dst_strides[d];
    }
    std::memcpy(dst + t * element, src + s * element, run);
    int64_t d = rank - 2;
    for (; d >= 0; --d) {
      if (++idx[d] < extent[d]) break;
      idx[d] = 0;
    }
    if (d < 0) break;
  }
}

std::vector<Buffer> SplitIntoShards(const Buffer& full, const spmd::Mesh& mesh,
                                    const spmd::AxisSharding& sharding,
                                    const std::vector<const Device*>& devices) {
  spmd::CheckSharding(mesh, sharding, full.shape().rank());
  if (static_cast<int64_t>(devices.size()) != mesh.size()) {
    Fail("[shard] {} devices for {}", devices.size(), mesh.ToString());
  }
  std::vector<int64_t> shard_dims = spmd::ShardDims(mesh, sharding, full.shape().dims());
  Shape shard_shape(full.shape().dtype(), shard_dims);
  std::vector<Buffer> shards;
  for (int64_t p = 0; p < mesh.size(); ++p) {
    Buffer b = Buffer::Allocate(shard_shape, devices[p]);
    if (b.size_bytes() > 0) std::memset(b.data(), 0, b.size_bytes());
    CopyShard(full.data(), b.data(), full.shape(), shard_dims,
              ShardOffsets(mesh, sharding, full.shape().dims(), p), true);
    shards.push_back(std::move(b));
  }
  return shards;
}

Buffer AssembleShards(const std::vector<Buffer>& shards, const Shape& full, const spmd::Mesh& mesh,
                      const spmd::AxisSharding& sharding, const Device* device) {
  spmd::CheckSharding(mesh, sharding, full.rank());
  std::vector<int64_t> shard_dims = spmd::ShardDims(mesh, sharding, full.dims());
  Shape shard_shape(full.dtype(), shard_dims);
  if (static_cast<int64_t>(shards.size()) != mesh.size()) {
    Fail("[shard] {} shards for {}", shards.size(), mesh.ToString());
  }
  Buffer out = Buffer::Allocate(full, device);
  // Partitions visited from the last, so the lowest one's copy of a tile is what stays.
  for (int64_t p = mesh.size() - 1; p >= 0; --p) {
    if (shards[p].shape() != shard_shape) {
      Fail("[shard] partition {} holds {}, expected {}", p, shards[p].shape().ToString(),
           shard_shape.ToString());
    }
    CopyShard(out.data(), shards[p].data(), full, shard_dims,
              ShardOffsets(mesh, sharding, full.dims(), p), false);
  }
  return out;
}

}  // namespace strata::runtime
