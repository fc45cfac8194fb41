// The SPMD partitioner: a program whose instructions carry `sharding=`
// annotations over a device mesh becomes one program that every device runs
// with its own partition-id, on its own shard of each array, exchanging data
// through collectives (XLA's GSPMD, in the terms of mesh axes as JAX's
// NamedSharding and Shardy write them).
//
//   1. Propagation gives every instruction a sharding: the user's are kept,
//      the rest follow their operands and users (propagation.cc).
//   2. Each instruction is rewritten on shards: operands are resharded to
//      what its handler needs (reshard.cc), the op runs on the local shard,
//      and sums over sharded contracting or reduced dims are all-reduced.
//
// Dimensions that do not divide by their tile count are padded to equal
// shards; padding is masked wherever it could be read (reductions, dots).
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "strata/hlo/module.h"
#include "strata/spmd/mesh.h"

namespace strata::spmd {

// One collective the partitioner inserted, and why.
struct CollectiveRecord {
  std::string collective;  // "all-gather", "all-reduce", ...
  std::string serves;      // the original instruction it serves: "dot.12"
  std::string reason;      // "operand 1: ('x', None) -> (None, None)", "sum over 'x'"
  int64_t bytes = 0;       // bytes each device sends (a bandwidth-optimal algorithm)
  int64_t runs = 1;        // times it runs per run of the program (loop trip counts)
};

struct PartitionReport {
  std::vector<CollectiveRecord> collectives;
  // Values the partitioner could only handle by replicating a sharded array
  // whole ("involuntary full rematerialization" in XLA).
  std::vector<std::string> full_rematerializations;
  // Bytes each device sends through collectives on one run of the program:
  // a collective in a loop counts once per iteration when the loop's trip
  // count is a constant (a counted loop, as scan's), else once.
  int64_t bytes_per_device() const;
  int64_t count(std::string_view collective) const;
  // Planned peak memory of one device running the program (arguments,
  // temporaries and results), when the program was compiled (lazy::Context
  // fills it in); 0 otherwise.
  int64_t peak_bytes_per_device = 0;
  // Where each result lives, as a partition spec on the mesh ("('data',
  // None)"), one per leaf of the program's result (lazy::Context fills it
  // in with the mesh's axis names).
  std::vector<std::string> result_layouts;
  std::string ToString() const;
};

struct PartitionOptions {
  // Replicating a sharded value whole is an error naming the op, instead of
  // a line in the report.
  bool strict = false;
  // Fill PartitionedModule::propagated_text (for dumps: its device lists
  // grow with the mesh, so it is not made unless asked for).
  bool propagated_text = false;
};

struct PartitionedModule {
  std::unique_ptr<hlo::Module> module;            // num_partitions() == mesh size
  std::vector<AxisSharding> parameter_shardings;  // per entry parameter (arrays)
  std::vector<AxisSharding> result_shardings;     // per leaf of the entry root
  PartitionReport report;
  // The input program with every instruction's propagated sharding written
  // in (XLA's sharding= text): what the partitioner decided, before it rewrote.
  std::string propagated_text;
};

// The sharding of every leaf of every instruction's value, after propagation.
using ShardingMap = std::unordered_map<const hlo::Instruction*, std::vector<AxisSharding>>;

// Propagates the module's `sharding=` annotations to a fixpoint, forward and
// backward, elementwise and shape ops first, then dots and reductions; an
// annotation is never overwritten; a while's operand, result, body
// parameter, body root and condition parameter share one sharding. What
// nothing reaches is replicated. Annotations that no mesh-axis sharding
// expresses throw strata::Error naming the instruction.
ShardingMap PropagateShardings(const hlo::Module& module, const Mesh& mesh);

// Rewrites `module` into the per-device program for `mesh`. Entry parameters
// take their propagated shardings: device p is given its shard of each
// (padded to equal shard shapes), and returns its shard of each result.
PartitionedModule Partition(const hlo::Module& module, const Mesh& mesh,
                            const PartitionOptions& options = {});

}  // namespace strata::spmd
