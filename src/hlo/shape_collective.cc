// Shape rules of the SPMD collectives.
#include <fmt/ranges.h>

#include <algorithm>
#include <set>

#include "shape_rules.h"

namespace strata::hlo::shape_rules {
namespace {

// replica_groups: equal-sized groups of distinct non-negative partition ids.
// Returns the group size, or 0 for the empty list (one group of all).
int64_t CheckReplicaGroups(const View& inst) {
  const ReplicaGroups& groups = inst.attrs.replica_groups;
  // Ids seen, by id (a bitmap: this runs for every collective in every pass).
  std::vector<bool> seen;
  for (const auto& g : groups) {
    if (g.empty()) Reject(inst, "replica_groups has an empty group");
    if (g.size() != groups[0].size()) {
      Reject(inst, "replica groups must have one size, got {} and {}", groups[0].size(), g.size());
    }
    for (int64_t id : g) {
      if (id < 0) Reject(inst, "replica_groups has a negative id {}", id);
      if (id >= static_cast<int64_t>(seen.size())) {
        if (id > (int64_t{1} << 24)) Reject(inst, "replica_groups id {} is out of range", id);
        seen.resize(std::max<size_t>(2 * seen.size(), id + 1), false);
      }
      if (seen[id]) Reject(inst, "id {} appears twice in replica_groups", id);
      seen[id] = true;
    }
  }
  return groups.empty() ? 0 : static_cast<int64_t>(groups[0].size());
}

// (T[], T[]) -> T[] for an all-reduce or reduce-scatter's to_apply.
void CheckCollectiveReducer(const View& inst, DType dtype) {
  if (inst.attrs.called.size() != 1) Reject(inst, "expected one to_apply computation");
  Shape scalar = Shape::Scalar(dtype);
  CheckCalledSignature(inst, *inst.attrs.called[0], {scalar, scalar}, "to_apply");
  if (inst.attrs.called[0]->root()->shape() != scalar) {
    Reject(inst, "to_apply {} must return {}", inst.attrs.called[0]->name(), scalar.ToString());
  }
}

// The one dimension an all-gather, reduce-scatter or all-to-all splits or joins.
int64_t CollectiveDimension(const View& inst, const Shape& x) {
  if (inst.attrs.dimensions.size() != 1) {
    Reject(inst, "expected dimensions={{d}} with one dimension, got {} (strata has no tuple form)",
           inst.attrs.dimensions.size());
  }
  CheckDimensions(inst, inst.attrs.dimensions, x.rank(), "dimension");
  return inst.attrs.dimensions[0];
}

Shape InferCollective(const View& inst);

// An asynchronous collective's -start seen as the synchronous op it starts.
View Synchronous(const View& start, Opcode op, const Shape& declared) {
  return View{op, start.operands, start.attrs, declared};
}

Shape InferCollective(const View& inst) {
  switch (inst.op) {
    case Opcode::kPartitionId:
    case Opcode::kReplicaId:
      ExpectOperands(inst, 0);
      return Shape::Scalar(DType::kU32);
    case Opcode::kAllReduce: {
      if (inst.operand_count() < 1) Reject(inst, "expected at least one operand");
      CheckReplicaGroups(inst);
      std::vector<Shape> results;
      for (int64_t i = 0; i < inst.operand_count(); ++i) {
        const Shape& x = ArrayOperand(inst, i);
        if (x.dtype() != inst.operand_shape(0).dtype()) {
          Reject(inst, "operands must share one element type (one to_apply)");
        }
        results.push_back(x);
      }
      CheckCollectiveReducer(inst, results[0].dtype());
      return results.size() == 1 ? results[0] : Shape::Tuple(std::move(results));
    }
    case Opcode::kAllGather:
    case Opcode::kReduceScatter: {
      ExpectOperands(inst, 1);
      const Shape& x = ArrayOperand(inst, 0);
      int64_t d = CollectiveDimension(inst, x);
      int64_t n = CheckReplicaGroups(inst);
      bool gather = inst.op == Opcode::kAllGather;
      if (!gather) CheckCollectiveReducer(inst, x.dtype());
      std::vector<int64_t> dims = x.dims();
      if (n == 0) {  // one group of all partitions: the declared shape says how many
        const Shape& y = inst.declared;
        bool fits = y.is_array() && y.dtype() == x.dtype() && y.rank() == x.rank();
        for (int64_t k = 0; fits && k < x.rank(); ++k) {
          int64_t big = gather ? y.dim(k) : x.dim(k), small = gather ? x.dim(k) : y.dim(k);
          fits = k == d ? small > 0 && big % small == 0 : big == small;
        }
        if (!fits) {
          Reject(inst,
                 "without replica_groups the result shape must say the group size; {} does not fit",
                 y.ToString());
        }
        return y;
      }
      if (gather) {
        dims[d] *= n;
      } else {
        if (dims[d] % n != 0) {
          Reject(inst, "dimension {} of size {} does not split into {} blocks", d, dims[d], n);
        }
        dims[d] /= n;
      }
      return Shape(x.dtype(), dims);
    }
    case Opcode::kAllToAll: {
      ExpectOperands(inst, 1);
      const Shape& x = ArrayOperand(inst, 0);
      int64_t d = CollectiveDimension(inst, x);
      int64_t n = CheckReplicaGroups(inst);
      if (n > 0 && x.dim(d) % n != 0) {
        Reject(inst, "dimension {} of size {} does not split into {} blocks", d, x.dim(d), n);
      }
      return x;
    }
    case Opcode::kCollectivePermute: {
      ExpectOperands(inst, 1);
      const Shape& x = ArrayOperand(inst, 0);
      std::set<int64_t> sources, targets;
      for (auto [source, target] : inst.attrs.source_target_pairs) {
        if (source < 0 || target < 0) Reject(inst, "negative id in source_target_pairs");
        if (!sources.insert(source).second) Reject(inst, "source {} appears twice", source);
        if (!targets.insert(target).second) Reject(inst, "target {} appears twice", target);
      }
      return x;
    }
    case Opcode::kAllReduceStart:
      return InferCollective(Synchronous(inst, Opcode::kAllReduce, inst.declared));
    case Opcode::kAllGatherStart: {
      // (operand, gathered): the gathered shape as all-gather infers it.
      const Shape& y = inst.declared.is_tuple() && inst.declared.tuple_size() == 2
                           ? inst.declared.tuple_shape(1)
                           : inst.declared;
      Shape gathered = InferCollective(Synchronous(inst, Opcode::kAllGather, y));
      return Shape::Tuple({inst.operand_shape(0), gathered});
    }
    case Opcode::kCollectivePermuteStart: {
      // (operand, result, u32[] contexts): XLA writes two or four elements.
      Shape x = InferCollective(Synchronous(inst, Opcode::kCollectivePermute, inst.declared));
      const Shape context = Shape::Scalar(DType::kU32);
      if (inst.declared.is_tuple() && inst.declared.tuple_size() == 2) {
        return Shape::Tuple({x, x});
      }
      return Shape::Tuple({x, x, context, context});
    }
    case Opcode::kAllReduceDone:
      ExpectOperands(inst, 1);
      return inst.operand_shape(0);
    case Opcode::kAllGatherDone:
    case Opcode::kCollectivePermuteDone: {
      ExpectOperands(inst, 1);
      const Shape& started = inst.operand_shape(0);
      if (!started.is_tuple() || started.tuple_size() < 2 || !started.tuple_shape(1).is_array()) {
        Reject(inst, "expects its -start's tuple (operand, result, ...), got {}",
               started.ToString());
      }
      return started.tuple_shape(1);
    }
    default:
      Reject(inst, "not a collective");
  }
}

}  // namespace

Shape CollectiveShape(const View& inst) {
  [[maybe_unused]] const Shape& declared = inst.declared;
  switch (inst.op) {
    default:
      return InferCollective(inst);
  }
}

}  // namespace strata::hlo::shape_rules
