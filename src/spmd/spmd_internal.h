// Shared between the partitioner's passes.
#pragma once

#include <optional>
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

}  // namespace strata::spmd
