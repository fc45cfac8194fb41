#include "strata/ir/sharding.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <numeric>
#include <set>

#include "strata/core/error.h"
#include "strata/core/shape.h"

namespace strata::ir {

Sharding::Sharding(Mesh mesh, PartitionSpec spec, int64_t rank)
    : mesh_(std::move(mesh)), spec_(std::move(spec)) {
  if (static_cast<int64_t>(spec_.size()) != rank) {
    Fail(
        "[sharding] partition spec has {} entries but the tensor has rank {}; give one entry per "
        "dimension (empty for replicated)",
        spec_.size(), rank);
  }
  std::set<int64_t> used;
  for (const auto& names : spec_) {
    std::vector<int64_t> dim;
    for (const std::string& name : names) {
      int64_t a = mesh_.AxisIndex(name);
      if (!used.insert(a).second) Fail("[sharding] mesh axis '{}' is used twice in the spec", name);
      dim.push_back(a);
    }
    axes_.dims.push_back(std::move(dim));
  }
  hlo_text_ = spmd::ToHloSharding(mesh_, axes_).ToText();
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
