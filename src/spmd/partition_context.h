// The partitioner's working state: the per-device module being built, and,
// per computation, the builder with the helpers every handler uses
// (resharding, partition offsets, padding masks, all-reduce).
#pragma once

#include <map>
#include <string>
#include <tuple>
#include <unordered_set>
#include <vector>

#include "strata/hlo/builder.h"
#include "strata/spmd/partitioner.h"

namespace strata::spmd {

// A value of the original program on this device: its local instruction
// (the shard), its full shape, and the sharding of each array leaf.
// `partial_sum_over`, when not empty, says the shard is one device's part of
// a sum over these mesh axes, not yet reduced (a dot with a split contracting
// dim whose sum joins others before one all-reduce).
struct PValue {
  hlo::Instruction* local = nullptr;
  Shape full;
  std::vector<AxisSharding> leaves;
  std::vector<int64_t> partial_sum_over = {};
};

struct PartitionState {
  PartitionState(const Mesh& m, const PartitionOptions& o, hlo::Module* out, PartitionReport* r)
      : mesh(m), options(o), module(out), report(r) {}
  const Mesh& mesh;
  const PartitionOptions& options;
  hlo::Module* module;
  PartitionReport* report;
  int64_t next_channel = 1;
  // Iterations of the loops around the computation being partitioned (1
  // when a trip count is unknown): a collective in a loop body counts that
  // many times in the report's bytes.
  int64_t trips = 1;
  std::map<const hlo::Computation*, hlo::Computation*> copied;
  std::map<std::pair<hlo::Opcode, DType>, hlo::Computation*> reducers;
  // The manual regions' instructions (ManualInstructions): run as written.
  std::unordered_set<const hlo::Instruction*> manual;

  // `c` (a reduce's or scatter's to_apply) copied into the new module.
  hlo::Computation* ScalarComputation(const hlo::Computation& c);
  // (a, b) -> a op b over `dtype`, for all-reduce and reduce-scatter.
  hlo::Computation* Reducer(hlo::Opcode op, DType dtype);
  // A sharded value replicated whole: a report line, or an error when strict.
  void Rematerialized(const std::string& what);
  void Record(std::string collective, std::string serves, std::string reason, int64_t bytes);
};

class Local {
 public:
  Local(PartitionState& state, const std::string& name) : state_(state), b(name + ".spmd") {}

  PValue Reshard(const PValue& v, const AxisSharding& target, const std::string& serves);
  PValue ReshardLeaves(const PValue& v, const std::vector<AxisSharding>& targets,
                       const std::string& serves);
  // Bytes a device would send to reshard `v` to `target`.
  int64_t ReshardBytes(const PValue& v, const AxisSharding& target) const;
  // s32[]: this partition's index along `axes` times `shard`.
  hlo::Instruction* Offset(const std::vector<int64_t>& axes, int64_t shard);
  // Elements of `dim` past the full size (an uneven split's padding) set to `value`.
  PValue MaskPadding(const PValue& v, int64_t dim, double value);
  // Partial results (sums, maxima, ... over `axes`) made whole and given
  // `target`: a reduce-scatter when the target splits one dim over exactly
  // those axes, else an all-reduce and a reshard.
  PValue ReduceAndReshard(const PValue& partial, const std::vector<int64_t>& axes, hlo::Opcode op,
                          const AxisSharding& target, const std::string& serves,
                          const std::string& reason);
  // The sum (or max, ...) over the devices that differ along `axes`.
  hlo::Instruction* AllReduce(hlo::Instruction* x, const std::vector<int64_t>& axes, hlo::Opcode op,
                              const std::string& serves, const std::string& reason);

 private:
  hlo::Instruction* PartitionId();  // s32[], made once per computation
  PValue ReshardUncached(const PValue& v, const AxisSharding& target, const std::string& serves);
  const PValue* GatheredFurther(const PValue& v, const AxisSharding& target) const;

  PartitionState& state_;
  hlo::Instruction* partition_id_ = nullptr;
  std::map<std::pair<std::vector<int64_t>, int64_t>, hlo::Instruction*> offsets_;
  // Reshards already made in this computation, by (local value, target):
  // a weight gathered for the forward is not gathered again for the backward.
  std::map<
      std::tuple<const hlo::Instruction*, std::vector<std::vector<int64_t>>, std::vector<int64_t>>,
      PValue>
      reshards_;

 public:
  hlo::Builder b;
};

}  // namespace strata::spmd
