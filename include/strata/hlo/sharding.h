// HloSharding in structured form: how an array (or each leaf of a tuple) is
// laid out over devices. Parses and prints XLA's `sharding=` text exactly:
//
//   {replicated}  {manual}  {maximal device=3}
//   {devices=[2,1]0,1}                                 tiles, then devices row-major
//   {devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}   trailing dim: replicas of a tile
//   {devices=[2,2,2]<=[8] last_tile_dims={manual, replicated}}
//   {devices=[4,2]<=[2,4]T(1,0)}                       iota(8) reshaped, transposed
//   {{replicated}, {maximal device=0}}                 one entry per leaf of a tuple
//
// A tiled sharding's tile assignment has one dim per array dim, then zero or
// more subgroup dims: devices that differ only along a replicated subgroup dim
// hold the same tile; along a manual one, the program is partitioned by hand.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace strata::hlo {

enum class SubgroupType { kReplicated, kManual };

class Sharding {
 public:
  enum class Kind { kReplicated, kMaximal, kManual, kTiled, kTuple };

  // Constructors check their arguments as Parse does and throw strata::Error.
  static Sharding Replicated();
  static Sharding Maximal(int64_t device);
  static Sharding Manual();
  // `last_tile_dims` are the types of the trailing subgroup dims of `tile_dims`.
  static Sharding Tiled(std::vector<int64_t> tile_dims, std::vector<int64_t> devices,
                        std::vector<SubgroupType> last_tile_dims = {});
  // Devices iota(product(reshape_dims)) reshaped to `reshape_dims`, permuted
  // by `transpose` (empty: none) and flattened; prints in this `<=` form.
  static Sharding TiledIota(std::vector<int64_t> tile_dims, std::vector<int64_t> reshape_dims,
                            std::vector<int64_t> transpose = {},
                            std::vector<SubgroupType> last_tile_dims = {});
  // One sharding per leaf of a tuple shape (Shape::Leaves order), as XLA
  // writes it; elements are not tuples themselves.
  static Sharding Tuple(std::vector<Sharding> elements);

  // Reads XLA's text, braces included; whitespace between tokens is allowed
  // and `metadata={...}` is dropped. Malformed text throws strata::Error
  // naming the column.
  static Sharding Parse(std::string_view text);
  // Canonical text: Parse(ToText()) == *this, and the text of a canonical
  // input comes back unchanged. An iota device list stays in `<=` form (an
  // identity transpose is not written); an explicit list stays explicit.
  std::string ToText() const;

  Kind kind() const { return kind_; }
  // Every device holds the whole array: {replicated}, or tiled with one tile
  // per array dim and no manual subgroup. For a tuple: every element is.
  bool IsReplicated() const;
  bool IsMaximal() const;  // for a tuple: every element is
  bool IsManual() const;   // for a tuple: every element is
  bool IsTiled() const { return kind_ == Kind::kTiled; }
  bool IsTuple() const { return kind_ == Kind::kTuple; }

  int64_t maximal_device() const;                       // maximal only
  const std::vector<Sharding>& tuple_elements() const;  // tuple only

  // Tile assignment of a tiled sharding (empty for the other kinds).
  // All tile-assignment dims, subgroup dims included.
  const std::vector<int64_t>& tile_dims() const { return tile_dims_; }
  // Flattened row-major over tile_dims(), iota expanded.
  const std::vector<int64_t>& devices() const { return devices_; }
  // Types of the trailing subgroup dims; `last_tile_dim_replicate` is {kReplicated}.
  const std::vector<SubgroupType>& subgroup_types() const { return subgroup_types_; }

  // The queries below need a tiled sharding unless said otherwise, and throw
  // strata::Error on another kind or on an out-of-range argument.
  int64_t data_rank() const;  // tile dims minus subgroup dims: the array's rank
  // Tiles along array dim `data_dim`; 1 for replicated, maximal and manual.
  int64_t TileCount(int64_t data_dim) const;
  // Devices holding each tile: product of the replicated subgroup dims.
  int64_t replication() const;
  // Devices named: devices().size() when tiled, 1 when maximal.
  int64_t device_count() const;
  // Index along every tile-assignment dim (subgroup dims included) of `device`.
  std::vector<int64_t> TileIndexOf(int64_t device) const;
  // Shard length of a dim of `dim_size` split into `tiles`: ceil(dim_size /
  // tiles). The shard at tile index t starts at t * ShardSize (the last may be
  // short or empty: the partitioner pads it).
  static int64_t ShardSize(int64_t dim_size, int64_t tiles);
  // Groups of devices whose tiles differ only along array dims `dims` (a set):
  // what an all-gather or all-reduce over those dims exchanges. Each group is
  // in row-major tile-index order over `dims`; groups are in the order of
  // their first device in devices().
  std::vector<std::vector<int64_t>> GroupsAlong(const std::vector<int64_t>& dims) const;

  // Compares meaning: an iota list equals the same list written out.
  bool operator==(const Sharding& other) const;
  bool operator!=(const Sharding& other) const { return !(*this == other); }

 private:
  explicit Sharding(Kind kind) : kind_(kind) {}
  static Sharding MakeTiled(std::vector<int64_t> tile_dims, std::vector<int64_t> devices,
                            std::vector<SubgroupType> last_tile_dims,
                            std::vector<int64_t> iota_reshape_dims,
                            std::vector<int64_t> iota_transpose);
  void RequireTiled(std::string_view query) const;

  Kind kind_;
  int64_t maximal_device_ = -1;
  std::vector<int64_t> tile_dims_, devices_;
  std::vector<SubgroupType> subgroup_types_;
  // How devices_ was written: empty reshape dims for an explicit list.
  std::vector<int64_t> iota_reshape_dims_, iota_transpose_;
  std::vector<Sharding> tuple_elements_;
};

}  // namespace strata::hlo
