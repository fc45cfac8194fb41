// Sharding plans: which mesh axes split each parameter of a model, by
// parameter-name pattern, and how a batch is split. A plan is applied once
// to a model (mark_sharding on every parameter it names); gradients and
// optimizer state then take their parameters' shardings.
//
//   auto plan = nn::LlamaShardingPlan("fsdp+tp", mesh);   // mesh axes: data, model
//   plan.Apply(model);
//   mark_sharding(ids, mesh, plan.batch);
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "strata/ir/sharding.h"
#include "strata/nn/module.h"

namespace strata::nn {

struct ShardingRule {
  std::string pattern;  // a parameter name; '*' matches any run of characters
  ir::PartitionSpec spec;
};

struct ShardingPlan {
  ir::Mesh mesh;
  std::vector<ShardingRule> rules;  // the first match wins; unmatched: replicated
  ir::PartitionSpec batch;          // for [batch, seq] token ids and labels

  // The spec the plan gives `name`, if a rule matches.
  std::optional<ir::PartitionSpec> SpecFor(const std::string& name) const;
  // Marks every parameter of `module`: by the first rule that names it, else
  // replicated on the mesh. A rule whose spec does not fit its parameter
  // (rank, unknown axis) is an Error naming both.
  void Apply(Module& module) const;
};

// Llama plans over a mesh with axes among "data" and "model":
//   "dp"      batch split on data; weights replicated
//   "fsdp"    batch and every weight split on data (weights gathered per layer,
//             gradients reduce-scattered)
//   "tp"      Megatron: q/k/v/gate/up column-parallel, o/down row-parallel on
//             model (heads split across it), embedding and lm_head split on the
//             vocabulary (a vocabulary-parallel cross-entropy)
//   "fsdp+tp" the two on a 2-D mesh: batch and weight rows on data, tp on model
// Throws strata::Error naming the plan for an unknown name or a mesh without
// the axes it needs.
ShardingPlan LlamaShardingPlan(const std::string& name, const ir::Mesh& mesh);

}  // namespace strata::nn
