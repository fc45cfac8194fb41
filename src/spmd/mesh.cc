#include "strata/spmd/mesh.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include "strata/core/error.h"
#include "strata/core/shape.h"

namespace strata::spmd {

Mesh::Mesh(std::vector<int64_t> device_ids, std::vector<int64_t> shape,
           std::vector<std::string> axis_names)
    : device_ids_(std::move(device_ids)),
      shape_(std::move(shape)),
      axis_names_(std::move(axis_names)) {
  if (axis_names_.size() != shape_.size()) {
    Fail("[mesh] {} axis names for a mesh of rank {} (shape {})", axis_names_.size(), shape_.size(),
         DimsToString(shape_));
  }
  std::set<std::string> names(axis_names_.begin(), axis_names_.end());
  if (names.size() != axis_names_.size())
    Fail("[mesh] axis names must be unique, got {}", fmt::join(axis_names_, ", "));
  for (int64_t d : shape_) {
    if (d < 1) Fail("[mesh] mesh dimensions must be positive, got {}", DimsToString(shape_));
  }
  if (Product(shape_) != static_cast<int64_t>(device_ids_.size())) {
    Fail("[mesh] {} device ids do not fill a mesh of shape {} ({} devices)", device_ids_.size(),
         DimsToString(shape_), Product(shape_));
  }
  std::set<int64_t> ids(device_ids_.begin(), device_ids_.end());
  if (ids.size() != device_ids_.size())
    Fail("[mesh] device ids must be unique, got {}", DimsToString(device_ids_));
  for (int64_t id : device_ids_) {
    if (id < 0) Fail("[mesh] device ids must be non-negative, got {}", id);
  }
  int64_t largest = device_ids_.empty() ? -1 : *ids.rbegin();
  position_.assign(largest + 1, -1);
  for (size_t i = 0; i < device_ids_.size(); ++i) position_[device_ids_[i]] = i;
}

Mesh Mesh::Line(int64_t n, std::string name) {
  std::vector<int64_t> ids(n);
  for (int64_t i = 0; i < n; ++i) ids[i] = i;
  return Mesh(std::move(ids), {n}, {std::move(name)});
}

int64_t Mesh::AxisIndex(const std::string& name) const {
  auto it = std::find(axis_names_.begin(), axis_names_.end(), name);
  if (it == axis_names_.end()) {
    Fail("[sharding] axis '{}' is not in the mesh (axes: {})", name, fmt::join(axis_names_, ", "));
  }
  return it - axis_names_.begin();
}

int64_t Mesh::Size(const std::vector<int64_t>& axes) const {
  int64_t n = 1;
  for (int64_t a : axes) n *= shape_.at(a);
  return n;
}

std::vector<int64_t> Mesh::Coordinates(int64_t id) const {
  if (id < 0 || id >= static_cast<int64_t>(position_.size()) || position_[id] < 0)
    Fail("[mesh] device {} is not in {}", id, ToString());
  int64_t position = position_[id];
  std::vector<int64_t> coords(shape_.size());
  for (int64_t k = rank() - 1; k >= 0; --k) {
    coords[k] = position % shape_[k];
    position /= shape_[k];
  }
  return coords;
}

int64_t Mesh::IndexAlong(const std::vector<int64_t>& axes, int64_t id) const {
  std::vector<int64_t> coords = Coordinates(id);
  int64_t index = 0;
  for (int64_t a : axes) index = index * shape_[a] + coords[a];
  return index;
}

std::vector<std::vector<int64_t>> Mesh::GroupsOver(const std::vector<int64_t>& axes) const {
  std::vector<std::vector<int64_t>> groups;
  std::map<std::vector<int64_t>, size_t> group_of;  // coordinates off `axes` -> group
  for (int64_t id : device_ids_) {
    std::vector<int64_t> coords = Coordinates(id);
    int64_t index = 0;
    for (int64_t a : axes) {
      index = index * shape_[a] + coords[a];
      coords[a] = 0;
    }
    auto [it, added] = group_of.emplace(coords, groups.size());
    if (added) groups.push_back(std::vector<int64_t>(Size(axes), -1));
    groups[it->second][index] = id;
  }
  return groups;
}

std::string Mesh::ToString() const {
  std::vector<std::string> axes;
  for (size_t i = 0; i < shape_.size(); ++i)
    axes.push_back(fmt::format("{}={}", axis_names_[i], shape_[i]));
  return fmt::format("mesh[{}]", fmt::join(axes, ","));
}

bool AxisSharding::IsReplicated() const {
  for (const auto& axes : dims) {
    if (!axes.empty()) return false;
  }
  return true;
}

std::vector<int64_t> AxisSharding::UsedAxes() const {
  std::vector<int64_t> used;
  for (const auto& axes : dims) used.insert(used.end(), axes.begin(), axes.end());
  return used;
}

Mesh LayoutMesh(const Mesh& mesh, const AxisSharding& sharding) {
  if (sharding.devices.empty()) return mesh;
  return Mesh(sharding.devices, mesh.shape(), mesh.axis_names());
}

bool HasDeviceOrder(const std::vector<AxisSharding>& leaves) {
  return std::any_of(leaves.begin(), leaves.end(),
                     [](const AxisSharding& s) { return !s.devices.empty(); });
}

void CheckSharding(const Mesh& mesh, const AxisSharding& sharding, int64_t rank) {
  if (!sharding.devices.empty()) {
    std::vector<int64_t> a = sharding.devices, b = mesh.device_ids();
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    if (a != b) {
      Fail("[sharding] device order {} is not a permutation of {}'s devices {}",
           DimsToString(sharding.devices), mesh.ToString(), DimsToString(mesh.device_ids()));
    }
  }
  if (sharding.rank() != rank) {
    Fail("[sharding] {} dimension entries for an array of rank {}", sharding.rank(), rank);
  }
  std::set<int64_t> used;
  for (int64_t a : sharding.UsedAxes()) {
    if (a < 0 || a >= mesh.rank()) Fail("[sharding] axis {} is not in {}", a, mesh.ToString());
    if (!used.insert(a).second) {
      Fail("[sharding] mesh axis '{}' is used twice", mesh.axis_names()[a]);
    }
  }
}

int64_t TileCount(const Mesh& mesh, const AxisSharding& sharding, int64_t dim) {
  return mesh.Size(sharding.dims[dim]);
}

std::vector<int64_t> ShardDims(const Mesh& mesh, const AxisSharding& sharding,
                               const std::vector<int64_t>& full) {
  std::vector<int64_t> dims = full;
  for (size_t d = 0; d < dims.size(); ++d) {
    dims[d] = hlo::Sharding::ShardSize(full[d], TileCount(mesh, sharding, d));
  }
  return dims;
}

hlo::Sharding ToHloSharding(const Mesh& mesh_in, const AxisSharding& sharding) {
  const Mesh mesh = LayoutMesh(mesh_in, sharding);
  std::vector<int64_t> tiles, order;
  for (const auto& axes : sharding.dims) {
    tiles.push_back(mesh.Size(axes));
    order.insert(order.end(), axes.begin(), axes.end());
  }
  if (Product(tiles) == 1) return hlo::Sharding::Replicated();
  std::vector<int64_t> unused;
  for (int64_t a = 0; a < mesh.rank(); ++a) {
    if (std::find(order.begin(), order.end(), a) == order.end()) unused.push_back(a);
  }
  int64_t replicated = mesh.Size(unused);
  order.insert(order.end(), unused.begin(), unused.end());
  // Devices in the order of the mesh transposed to `order`.
  std::vector<int64_t> permuted, idx(order.size(), 0), devices;
  for (int64_t a : order) permuted.push_back(mesh.shape()[a]);
  auto strides = RowMajorStrides(mesh.shape());
  for (int64_t n = 0; n < mesh.size(); ++n) {
    int64_t offset = 0;
    for (size_t k = 0; k < order.size(); ++k) offset += idx[k] * strides[order[k]];
    devices.push_back(mesh.device_ids()[offset]);
    for (int64_t k = static_cast<int64_t>(idx.size()) - 1; k >= 0; --k) {
      if (++idx[k] < permuted[k]) break;
      idx[k] = 0;
    }
  }
  if (replicated > 1) {
    tiles.push_back(replicated);
    return hlo::Sharding::Tiled(tiles, devices, {hlo::SubgroupType::kReplicated});
  }
  return hlo::Sharding::Tiled(tiles, devices);
}

std::optional<AxisSharding> FromHloSharding(const Mesh& mesh, const hlo::Sharding& sharding,
                                            int64_t rank) {
  if (sharding.IsReplicated()) return AxisSharding::Replicated(rank);
  if (!sharding.IsTiled() || sharding.data_rank() != rank) return std::nullopt;
  for (hlo::SubgroupType t : sharding.subgroup_types()) {
    if (t != hlo::SubgroupType::kReplicated) return std::nullopt;
  }
  if (sharding.device_count() != mesh.size()) return std::nullopt;
  // The mesh with each device's position as its id: the tile assignment of
  // an axis sharding over it says which mesh position holds each tile.
  std::vector<int64_t> positions(mesh.size());
  for (int64_t i = 0; i < mesh.size(); ++i) positions[i] = i;
  const Mesh by_position(positions, mesh.shape(), mesh.axis_names());
  // Try every assignment of ordered axis lists to dims whose sizes match the
  // tile counts (meshes have a handful of axes): first one in the mesh's own
  // device order, else the first whose tiles fit, with the order they imply.
  AxisSharding candidate = AxisSharding::Replicated(rank);
  std::vector<bool> used(mesh.rank(), false);
  std::optional<AxisSharding> found, reordered;
  std::function<void(int64_t, int64_t)> assign = [&](int64_t dim, int64_t remaining) {
    if (found) return;
    if (dim == rank) {
      if (ToHloSharding(mesh, candidate) == sharding) {
        found = candidate;
      } else if (!reordered) {
        hlo::Sharding layout = ToHloSharding(by_position, candidate);
        if (layout.tile_dims() != sharding.tile_dims()) return;
        std::vector<int64_t> order(mesh.size());
        for (int64_t k = 0; k < mesh.size(); ++k)
          order[layout.devices()[k]] = sharding.devices()[k];
        reordered = AxisSharding{candidate.dims, order};
      }
      return;
    }
    if (remaining == 1) {
      int64_t next = dim + 1 < rank ? sharding.TileCount(dim + 1) : 1;
      assign(dim + 1, next);
      return;
    }
    for (int64_t a = 0; a < mesh.rank(); ++a) {
      if (used[a] || remaining % mesh.shape()[a] != 0 || mesh.shape()[a] == 1) continue;
      used[a] = true;
      candidate.dims[dim].push_back(a);
      assign(dim, remaining / mesh.shape()[a]);
      candidate.dims[dim].pop_back();
      used[a] = false;
    }
  };
  assign(0, rank > 0 ? sharding.TileCount(0) : 1);
  return found ? found : reordered;
}

std::string ToString(const Mesh& mesh, const AxisSharding& sharding) {
  std::vector<std::string> dims;
  for (const auto& axes : sharding.dims) {
    std::vector<std::string> names;
    for (int64_t a : axes) names.push_back("'" + mesh.axis_names()[a] + "'");
    if (names.empty()) {
      dims.push_back("None");
    } else if (names.size() == 1) {
      dims.push_back(names[0]);
    } else {
      dims.push_back(fmt::format("({})", fmt::join(names, ",")));
    }
  }
  std::string text = fmt::format("({})", fmt::join(dims, ", "));
  if (!sharding.devices.empty()) text += " on devices " + DimsToString(sharding.devices);
  return text;
}

}  // namespace strata::spmd
