#include "strata/ir/sharding.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <numeric>
#include <set>

#include "strata/core/error.h"
#include "strata/core/shape.h"

namespace strata::ir {

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
}

int64_t Mesh::AxisIndex(const std::string& name) const {
  auto it = std::find(axis_names_.begin(), axis_names_.end(), name);
  if (it == axis_names_.end()) {
    Fail("[sharding] axis '{}' is not in the mesh (axes: {})", name, fmt::join(axis_names_, ", "));
  }
  return it - axis_names_.begin();
}

std::string Mesh::ToString() const {
  std::vector<std::string> axes;
  for (size_t i = 0; i < shape_.size(); ++i)
    axes.push_back(fmt::format("{}={}", axis_names_[i], shape_[i]));
  return fmt::format("mesh[{}]", fmt::join(axes, ","));
}

Sharding::Sharding(Mesh mesh, PartitionSpec spec, int64_t rank)
    : mesh_(std::move(mesh)), spec_(std::move(spec)) {
  if (static_cast<int64_t>(spec_.size()) != rank) {
    Fail(
        "[sharding] partition spec has {} entries but the tensor has rank {}; give one entry per "
        "dimension (empty for replicated)",
        spec_.size(), rank);
  }
  // Tile counts per tensor dim and the order in which mesh axes are used.
  std::vector<int64_t> tiles, axis_order;
  std::set<int64_t> used;
  for (const auto& axes : spec_) {
    int64_t count = 1;
    for (const std::string& name : axes) {
      int64_t a = mesh_.AxisIndex(name);
      if (!used.insert(a).second) Fail("[sharding] mesh axis '{}' is used twice in the spec", name);
      axis_order.push_back(a);
      count *= mesh_.shape()[a];
    }
    tiles.push_back(count);
  }
  int64_t replicated = 1;
  for (int64_t a = 0; a < static_cast<int64_t>(mesh_.shape().size()); ++a) {
    if (!used.count(a)) {
      axis_order.push_back(a);
      replicated *= mesh_.shape()[a];
    }
  }
  if (Product(tiles) == 1) {
    hlo_text_ = "{replicated}";
  } else {
    // Devices in the order of the mesh transposed to axis_order.
    const auto& shape = mesh_.shape();
    auto strides = RowMajorStrides(shape);
    std::vector<int64_t> permuted_dims;
    for (int64_t a : axis_order) permuted_dims.push_back(shape[a]);
    std::vector<int64_t> devices, idx(axis_order.size(), 0);
    for (int64_t n = 0; n < mesh_.size(); ++n) {
      int64_t offset = 0;
      for (size_t k = 0; k < axis_order.size(); ++k) offset += idx[k] * strides[axis_order[k]];
      devices.push_back(mesh_.device_ids()[offset]);
      for (int64_t k = static_cast<int64_t>(idx.size()) - 1; k >= 0; --k) {
        if (++idx[k] < permuted_dims[k]) break;
        idx[k] = 0;
      }
    }
    std::vector<int64_t> tile_dims = tiles;
    if (replicated > 1) tile_dims.push_back(replicated);
    hlo_text_ =
        fmt::format("{{devices=[{}]{}{}}}", fmt::join(tile_dims, ","), fmt::join(devices, ","),
                    replicated > 1 ? " last_tile_dim_replicate" : "");
  }
  HashBuilder h;
  h.AddString(hlo_text_);
  h.AddSpan(std::span<const int64_t>(mesh_.device_ids()))
      .AddSpan(std::span<const int64_t>(mesh_.shape()));
  for (const auto& axes : spec_) {
    h.Add<uint64_t>(axes.size());
    for (const std::string& a : axes) h.AddString(a);
  }
  hash_ = h.Finish();
}

Sharding Sharding::Replicated(Mesh mesh, int64_t rank) {
  return Sharding(std::move(mesh), PartitionSpec(rank), rank);
}

std::string Sharding::ToString() const {
  std::vector<std::string> dims;
  for (const auto& axes : spec_) {
    if (axes.empty()) {
      dims.push_back("None");
    } else if (axes.size() == 1) {
      dims.push_back("'" + axes[0] + "'");
    } else {
      dims.push_back(fmt::format("({})", fmt::join(axes, ",")));
    }
  }
  return fmt::format("({}) on {}", fmt::join(dims, ", "), mesh_.ToString());
}

}  // namespace strata::ir
