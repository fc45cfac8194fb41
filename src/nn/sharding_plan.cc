#include "strata/nn/sharding_plan.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "strata/core/error.h"

namespace strata::nn {
namespace {

// '*' matches any run of characters (dots included).
bool Matches(std::string_view pattern, std::string_view name) {
  size_t star = pattern.find('*');
  if (star == std::string_view::npos) return pattern == name;
  if (name.substr(0, star) != pattern.substr(0, star)) return false;
  std::string_view rest = pattern.substr(star + 1);
  for (size_t i = star; i <= name.size(); ++i) {
    if (Matches(rest, name.substr(i))) return true;
  }
  return false;
}

bool HasAxis(const ir::Mesh& mesh, const std::string& axis) {
  return std::find(mesh.axis_names().begin(), mesh.axis_names().end(), axis) !=
         mesh.axis_names().end();
}

}  // namespace

std::optional<ir::PartitionSpec> ShardingPlan::SpecFor(const std::string& name) const {
  for (const ShardingRule& r : rules) {
    if (Matches(r.pattern, name)) return r.spec;
  }
  return std::nullopt;
}

void ShardingPlan::Apply(Module& module) const {
  for (auto& [name, tensor] : module.named_parameters()) {
    // Unmatched parameters are replicated on the mesh, not left to
    // propagation: every step then compiles to the same program.
    std::optional<ir::PartitionSpec> spec = SpecFor(name);
    if (!spec) spec = ir::PartitionSpec(tensor->rank());
    try {
      mark_sharding(*tensor, mesh, *spec);
    } catch (const Error& e) {
      Fail("[sharding plan] parameter {} {}: {}", name, tensor->shape().ToString(), e.what());
    }
  }
}

ShardingPlan LlamaShardingPlan(const std::string& name, const ir::Mesh& mesh) {
  bool data = HasAxis(mesh, "data"), model = HasAxis(mesh, "model");
  auto need = [&](bool ok, const char* axes) {
    if (!ok) {
      Fail("[sharding plan] '{}' needs a mesh with {} axes, got {}", name, axes, mesh.ToString());
    }
  };
  using Spec = ir::PartitionSpec;
  const std::vector<std::string> D = {"data"}, M = {"model"}, none = {};
  ShardingPlan plan{mesh, {}, {}};
  // Linear weights are [out, in]; the decoder layers' are stacked: [L, out, in].
  const std::vector<std::string> column = {"*q_proj.weight", "*k_proj.weight", "*v_proj.weight",
                                           "*gate_proj.weight", "*up_proj.weight"};
  const std::vector<std::string> row = {"*o_proj.weight", "*down_proj.weight"};
  if (name == "dp") {
    need(data, "a 'data'");
    plan.batch = Spec{D, none};
  } else if (name == "fsdp") {
    need(data, "a 'data'");
    plan.batch = Spec{D, none};
    for (const auto& p : column) plan.rules.push_back({p, Spec{none, D, none}});
    for (const auto& p : row) plan.rules.push_back({p, Spec{none, D, none}});
    plan.rules.push_back({"*embed_tokens.weight", Spec{D, none}});
    plan.rules.push_back({"lm_head.weight", Spec{D, none}});
  } else if (name == "tp") {
    need(model, "a 'model'");
    plan.batch = data ? Spec{D, none} : Spec{none, none};
    for (const auto& p : column) plan.rules.push_back({p, Spec{none, M, none}});
    for (const auto& p : row) plan.rules.push_back({p, Spec{none, none, M}});
    plan.rules.push_back({"*embed_tokens.weight", Spec{M, none}});
    plan.rules.push_back({"lm_head.weight", Spec{M, none}});
  } else if (name == "fsdp+tp") {
    need(data && model, "'data' and 'model'");
    plan.batch = Spec{D, none};
    for (const auto& p : column) plan.rules.push_back({p, Spec{none, M, D}});
    for (const auto& p : row) plan.rules.push_back({p, Spec{none, D, M}});
    plan.rules.push_back({"*embed_tokens.weight", Spec{M, D}});
    plan.rules.push_back({"lm_head.weight", Spec{M, D}});
  } else {
    Fail("[sharding plan] unknown Llama plan '{}' (dp, fsdp, tp, fsdp+tp)", name);
  }
  return plan;
}

}  // namespace strata::nn
