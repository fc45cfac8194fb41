// Partitioning a module over a mesh: the visitor (partition_visitor.h) makes
// each instruction of the original program a few instructions of the
// per-device program, in the same order.
#include "strata/spmd/partitioner.h"

#include <fmt/format.h>

#include <fmt/ranges.h>
#include <algorithm>
#include <functional>

#include <map>
#include <optional>

#include "partition_visitor.h"
#include "strata/core/error.h"
#include "strata/hlo/attention.h"
#include "strata/hlo/builder.h"
#include "strata/hlo/expand.h"
#include "strata/hlo/shape_inference.h"
#include "strata/hlo/text.h"

namespace strata::spmd {

using hlo::Instruction;
using hlo::Opcode;

int64_t PartitionReport::bytes_per_device() const {
  int64_t total = 0;
  for (const CollectiveRecord& r : collectives) total += r.bytes * r.runs;
  return total;
}

int64_t PartitionReport::count(std::string_view collective) const {
  int64_t n = 0;
  for (const CollectiveRecord& r : collectives) n += r.collective == collective;
  return n;
}

std::string PartitionReport::ToString() const {
  std::string out = fmt::format("{} collective(s), {} bytes sent per device\n", collectives.size(),
                                bytes_per_device());
  for (const CollectiveRecord& r : collectives) {
    out += fmt::format("  {:<18} {:>12} B{}  for {}: {}\n", r.collective, r.bytes,
                       r.runs > 1 ? fmt::format(" x {}", r.runs) : "", r.serves, r.reason);
  }
  for (const std::string& s : full_rematerializations) out += "  replicated whole: " + s + "\n";
  if (peak_bytes_per_device > 0) {
    out += fmt::format("planned peak memory per device: {} bytes\n", peak_bytes_per_device);
  }
  for (size_t i = 0; i < result_layouts.size(); ++i) {
    out += fmt::format("result {}: {}\n", i, result_layouts[i]);
  }
  return out;
}

using partition::Visitor;

PartitionedModule Partition(const hlo::Module& given, const Mesh& mesh,
                            const PartitionOptions& options) {
  // XLA's ops strata runs as others are partitioned as those others.
  std::unique_ptr<hlo::Module> expanded;
  if (hlo::HasOpsToExpand(given)) {
    expanded = given.Clone();
    hlo::ExpandXlaOps(*expanded);
  }
  const hlo::Module& module = expanded ? *expanded : given;
  for (int64_t i = 0; i < mesh.size(); ++i) {
    if (std::find(mesh.device_ids().begin(), mesh.device_ids().end(), i) ==
        mesh.device_ids().end()) {
      Fail("[partition] the mesh's device ids must be 0..{} (partition p runs on device p), got {}",
           mesh.size() - 1, DimsToString(mesh.device_ids()));
    }
  }
  const ShardingMap layouts = PropagateShardings(module, mesh);
  ShardingMap shardings = layouts;  // the same splits, in the mesh's device order
  for (auto& [inst, leaves] : shardings) {
    for (AxisSharding& s : leaves) s = s.InMeshOrder();
  }
  PartitionedModule result;
  if (options.propagated_text) {
    auto annotated = module.Clone();
    for (size_t c = 0; c < module.computations().size(); ++c) {
      const auto& from = module.computations()[c]->instructions();
      const auto& to = annotated->computations()[c]->instructions();
      for (size_t i = 0; i < from.size(); ++i) {
        const auto& leaves = layouts.at(from[i].get());
        std::vector<hlo::Sharding> parts;
        for (const AxisSharding& a : leaves) parts.push_back(ToHloSharding(mesh, a));
        to[i]->sharding =
            (from[i]->shape().is_array() ? parts.at(0) : hlo::Sharding::Tuple(parts)).ToText();
      }
    }
    result.propagated_text = hlo::ToText(*annotated);
  }
  result.module = std::make_unique<hlo::Module>(module.name() + ".spmd");
  result.module->set_num_partitions(mesh.size());
  PartitionState state(mesh, options, result.module.get(), &result.report);
  state.manual = ManualInstructions(module);
  Visitor visitor(state, shardings, layouts);
  const hlo::Computation& entry = *module.entry();
  std::vector<AxisSharding> root = layouts.at(entry.root());
  auto computation = visitor.Run(entry, &root);
  result.module->AddEntryComputation(std::move(computation));
  for (const Instruction* p : entry.parameters()) {
    const auto& leaves = layouts.at(p);
    result.parameter_shardings.insert(result.parameter_shardings.end(), leaves.begin(),
                                      leaves.end());
  }
  result.result_shardings = visitor.root_leaves();
  return result;
}

}  // namespace strata::spmd
