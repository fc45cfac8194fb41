// Shared between the partitioner's passes.
#pragma once

#include <optional>
#include <unordered_set>
#include <vector>

#include "strata/hlo/module.h"
#include "strata/spmd/mesh.h"

namespace strata::spmd {

// Ops that map element i of equally shaped operands to element i of the
// result (a sharding passes through them unchanged).
bool IsElementwiseOp(const hlo::Instruction& inst);

// The sharding of `out_dims` that a reshape from `in_dims` gives an array
// sharded `in`, when each sharded dim stays a contiguous, evenly split major
// part of its reshape group; nullopt otherwise.
std::optional<AxisSharding> ReshapeSharding(const Mesh& mesh, const std::vector<int64_t>& in_dims,
                                            const std::vector<int64_t>& out_dims,
                                            const AxisSharding& in);

// The instructions of the module's manual regions (jax.shard_map): each
// SPMDFullToShardShape custom-call, partition-id and replica-id, and
// everything computed from them up to the SPMDShardToFullShape that leaves
// the region. Inside, every device runs
// the ops as written on its own shard (collectives included). Errors for a
// region that reaches the result without leaving it, that nests, or whose
// values flow into a loop, a conditional or a call.
std::unordered_set<const hlo::Instruction*> ManualInstructions(const hlo::Module& module);

bool IsFullToShard(const hlo::Instruction& inst);
bool IsShardToFull(const hlo::Instruction& inst);

}  // namespace strata::spmd
