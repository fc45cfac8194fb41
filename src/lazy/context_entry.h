// What context.cc and context_sync.cc share: a compile-cache entry and the
// helpers both use. Private to src/lazy.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "strata/lazy/context.h"
#include "strata/runtime/executable.h"

namespace strata::lazy {

// A node as the "explain the miss" diagnostic compares it.
struct NodeSignature {
  std::string op, shapes, sharding;
  ir::Hash128 node_hash;
};

struct Context::Entry {
  ir::Hash128 key;
  std::unique_ptr<runtime::Executable> executable;
  std::vector<NodeSignature> signature;
  std::vector<int64_t> parameter_sequence;
  // A graph over a mesh of several devices runs partitioned.
  std::optional<ir::Mesh> mesh;
  std::vector<spmd::AxisSharding> parameter_shardings, result_shardings;
  spmd::PartitionReport report;
};

namespace context_detail {

// Part of every cache key, in memory and on disk.
inline constexpr char kVersion[] = "strata-0.1.0";

int64_t NowNs();
// What a materialized value keeps for autodiff: the graph that computed it,
// when gradients could flow through it (a floating value built outside a
// StopGradientScope).
ir::Value OriginOf(const ir::Value& value);
// A graph built from a materialized tensor's origin (a gradient taken after
// the sync) may read device data whose buffer a later sync donated.
void CheckNotOverwritten(const ir::Graph& graph);
// The spec of an axis sharding, with the mesh's axis names.
ir::PartitionSpec SpecOf(const ir::Mesh& mesh, const spmd::AxisSharding& s);

}  // namespace context_detail
}  // namespace strata::lazy
