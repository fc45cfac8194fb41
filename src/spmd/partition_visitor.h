// The partitioner's visitor (partitioner.cc runs it; partitioner_ops.cc
// holds its larger handlers: dots, reductions, data movement, loops, gather
// and scatter). Private to src/spmd.
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include "partition_context.h"
#include "spmd_internal.h"
#include "strata/core/error.h"
#include "strata/hlo/attention.h"
#include "strata/hlo/builder.h"
#include "strata/hlo/shape_inference.h"
#include "strata/hlo/text.h"

namespace strata::spmd::partition {

using hlo::Instruction;
using hlo::Opcode;

inline bool Contains(const std::vector<int64_t>& v, int64_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// Rewrites one computation; while bodies and conditions recurse.
//
// Handlers work in the mesh's device order (`shardings`); an instruction
// annotated with a device order of its own (`layouts`) is permuted into it
// after its handler, and out of it again for its users.
class Visitor {
 public:
  Visitor(PartitionState& state, const ShardingMap& shardings, const ShardingMap& layouts)
      : state_(state), shardings_(shardings), layouts_(layouts) {}

  // `parameter_shardings` overrides the propagated sharding of parameter 0's
  // leaves (a loop body's state). Returns the new computation; `root` is
  // resharded to `root_sharding` when given.
  std::unique_ptr<hlo::Computation> Run(
      const hlo::Computation& c, const std::vector<AxisSharding>* root_sharding,
      const std::vector<AxisSharding>* parameter_sharding = nullptr) {
    parameter_sharding_ = parameter_sharding;
    Local local(state_, c.name());
    local_ = &local;
    for (const auto& inst : c.instructions()) {
      for (const Instruction* o : inst->operands()) users_[o].push_back(inst.get());
    }
    for (const auto& inst : c.instructions()) {
      values_[inst.get()] = Visit(*inst);
      const std::vector<AxisSharding>& layout = layouts_.at(inst.get());
      if (HasDeviceOrder(layout)) {
        values_[inst.get()] = local.ReshardLeaves(Whole(*inst), layout, inst->name());
      }
    }
    PValue root = Whole(*c.root());
    if (root_sharding) root = local.ReshardLeaves(root, *root_sharding, c.root()->name());
    root_leaves_ = root.leaves;
    return local.b.Build(root.local);
  }

  const std::vector<AxisSharding>& root_leaves() const { return root_leaves_; }

 private:
  const std::vector<AxisSharding>& ShardingOf(const Instruction& inst) {
    return shardings_.at(&inst);
  }
  const AxisSharding& ArrayShardingOf(const Instruction& inst) { return ShardingOf(inst).at(0); }
  // `inst`'s value with any pending partial sum reduced (into its propagated
  // sharding: a reduce-scatter when that splits over the summed axes); the
  // reduced value replaces the pending one for every later user.
  const PValue& Whole(const Instruction& inst) {
    PValue& v = values_.at(&inst);
    if (!v.partial_sum_over.empty()) {
      std::vector<int64_t> axes = std::move(v.partial_sum_over);
      v.partial_sum_over.clear();
      v = local_->ReduceAndReshard(v, axes, Opcode::kAdd, ArrayShardingOf(inst), inst.name(),
                                   "partial sums over a split contracting dim");
    }
    return v;
  }

  // Operand i in the mesh's device order.
  PValue Operand(const Instruction& inst, int64_t i) {
    const PValue& v = Whole(*inst.operand(i));
    if (!HasDeviceOrder(v.leaves)) return v;
    std::vector<AxisSharding> in_order;
    for (const AxisSharding& s : v.leaves) in_order.push_back(s.InMeshOrder());
    return local_->ReshardLeaves(v, in_order, fmt::format("{} operand {}", inst.name(), i));
  }

  // The operand resharded to `target`, with its reshard recorded for `inst`.
  PValue OperandAs(const Instruction& inst, int64_t i, const AxisSharding& target) {
    return local_->Reshard(Operand(inst, i), target, fmt::format("{} operand {}", inst.name(), i));
  }

  // A copy of `inst` over local operands, with `shape` (the local one).
  Instruction* Clone(const Instruction& inst, std::vector<Instruction*> operands, Shape shape) {
    auto copy = std::make_unique<Instruction>(inst);
    copy->set_operands(std::move(operands));
    copy->set_shape(std::move(shape));
    copy->set_name("");
    copy->sharding.clear();
    for (hlo::Computation*& called : copy->called) called = state_.ScalarComputation(*called);
    return local_->b.Add(std::move(copy));
  }

  PValue Visit(const Instruction& inst) {
    if (inst.opcode() == Opcode::kCustomCall) {
      if (hlo::IsAttentionTarget(inst.custom_call_target)) return Attention(inst);
      return ManualBoundary(inst);
    }
    if (hlo::IsCollective(inst.opcode()) && state_.manual.count(&inst)) return AsWritten(inst);
    if (IsElementwiseOp(inst)) return Elementwise(inst);
    switch (inst.opcode()) {
      case Opcode::kParameter:
        return Parameter(inst);
      case Opcode::kConstant:
        return Constant(inst);
      case Opcode::kIota:
        return Iota(inst);
      case Opcode::kBroadcast:
        return Broadcast(inst);
      case Opcode::kTranspose:
        return Transpose(inst);
      case Opcode::kReshape:
        return Reshape(inst);
      case Opcode::kDot:
        return Dot(inst);
      case Opcode::kReduce:
        return Reduce(inst);
      case Opcode::kSlice:
      case Opcode::kPad:
      case Opcode::kReverse:
      case Opcode::kConcatenate:
      case Opcode::kDynamicSlice:
      case Opcode::kDynamicUpdateSlice:
        return DataMovement(inst);
      case Opcode::kTuple:
        return Tuple(inst);
      case Opcode::kGetTupleElement:
        return GetTupleElement(inst);
      case Opcode::kOptimizationBarrier:
        return Barrier(inst);
      case Opcode::kWhile:
        return While(inst);
      case Opcode::kGather:
        return Gather(inst);
      case Opcode::kScatter:
        return Scatter(inst);
      default:
        break;
    }
    if (hlo::IsCollective(inst.opcode())) {
      Fail(
          "[partition] {} ({}) is already a per-device collective; the partitioner takes a "
          "program written for one device",
          hlo::OpcodeName(inst.opcode()), inst.name());
    }
    if (inst.opcode() == Opcode::kCall || inst.opcode() == Opcode::kFusion) {
      Fail("[partition] {} ({}): inline calls and fusions before partitioning",
           hlo::OpcodeName(inst.opcode()), inst.name());
    }
    return Replicated(inst);
  }

  // Fused attention (hlo/attention.h) runs batch- and head-parallel: each
  // device attends its own batch rows and heads over whole sequences. The
  // split is the result's (o, or dq) on those two dims: the batch split
  // where B divides evenly, the head split where both H and KV do (query
  // head h reads kv head h / (H / KV), which must be on the same device).
  PValue Attention(const Instruction& inst) {
    const hlo::AttentionConfig config = hlo::ParseAttentionConfig(inst.backend_config);
    const int64_t heads = config.heads_dim(4);
    const Shape& q = inst.operand(0)->shape();
    const int64_t kv_heads = inst.operand(1)->shape().dim(heads);
    const AxisSharding& result = ShardingOf(inst).at(0);
    AxisSharding s = AxisSharding::Replicated(4);
    s.dims[0] = result.dims[0];
    s.dims[heads] = result.dims[heads];
    if (q.dim(0) % TileCount(state_.mesh, s, 0) != 0) s.dims[0].clear();
    const int64_t head_tiles = TileCount(state_.mesh, s, heads);
    if (q.dim(heads) % head_tiles != 0 || kv_heads % head_tiles != 0) s.dims[heads].clear();
    AxisSharding rows = AxisSharding::Replicated(3);  // the log-sum-exp, [B, H, S]
    rows.dims[0] = s.dims[0];
    rows.dims[1] = s.dims[heads];
    // The mask, [B or 1, H or 1, S, S] in every layout: split with the batch
    // and the heads where it has them, whole over a dim of 1.
    const int64_t mask_at =
        static_cast<int64_t>(hlo::AttentionOperandCount(inst.custom_call_target));
    AxisSharding mask = AxisSharding::Replicated(4);
    if (inst.operand_count() > mask_at) {
      const Shape& m = inst.operand(mask_at)->shape();
      if (m.dim(0) != 1) mask.dims[0] = s.dims[0];
      if (m.dim(1) != 1) mask.dims[1] = s.dims[heads];
    }
    std::vector<Instruction*> operands;
    for (int64_t i = 0; i < inst.operand_count(); ++i) {
      const Shape& shape = inst.operand(i)->shape();
      operands.push_back(OperandAs(inst, i,
                                   i == mask_at        ? mask
                                   : shape.rank() == 3 ? rows
                                                       : s)
                             .local);
    }
    std::vector<AxisSharding> leaves;
    std::vector<Shape> local;
    for (const Shape& leaf : inst.shape().Leaves()) {
      leaves.push_back(leaf.rank() == 3 ? rows : s);
      local.push_back(LocalShape(leaf, leaves.back()));
    }
    PValue v{Clone(inst, operands, Shape::Tuple(std::move(local))), inst.shape(), leaves};
    return local_->ReshardLeaves(v, ShardingOf(inst), inst.name());
  }

  // A manual region's boundary. Entering it, each device's shard of the
  // operand (split as its sharding says) becomes that device's own value,
  // whole to the ops of the region; leaving it, each device's value becomes
  // its shard of the result, split as the result's sharding says.
  PValue ManualBoundary(const Instruction& inst) {
    PValue x = Operand(inst, 0);
    const Shape& full = inst.operand(0)->shape();
    const Shape& local = x.local->shape();
    if (IsFullToShard(inst)) {
      if (local != inst.shape() || TilesUnevenly(full, x.leaves.at(0))) {
        Fail(
            "[partition] {} (SPMDFullToShardShape) gives {} per device, but its operand {} {} "
            "split as {} is {} per device",
            inst.name(), inst.shape().ToString(), inst.operand(0)->name(), full.ToString(),
            ToString(state_.mesh, x.leaves.at(0)), local.ToString());
      }
      return {x.local, inst.shape(), {AxisSharding::Replicated(inst.shape().rank())}};
    }
    const AxisSharding& target = ArrayShardingOf(inst);
    Shape shard = LocalShape(inst.shape(), target);
    if (shard != local || TilesUnevenly(inst.shape(), target)) {
      Fail(
          "[partition] {} (SPMDShardToFullShape) makes {} split as {} from {} per device; that "
          "split needs {} per device",
          inst.name(), inst.shape().ToString(), ToString(state_.mesh, target), local.ToString(),
          shard.ToString());
    }
    return {x.local, inst.shape(), {target}};
  }

  bool TilesUnevenly(const Shape& full, const AxisSharding& s) {
    for (int64_t d = 0; d < full.rank(); ++d) {
      if (full.dim(d) % TileCount(state_.mesh, s, d) != 0) return true;
    }
    return false;
  }

  // A collective of a manual region: already per device, run as written
  // (its replica groups name partitions), on a channel of its own.
  PValue AsWritten(const Instruction& inst) {
    std::vector<Instruction*> operands;
    for (int64_t i = 0; i < inst.operand_count(); ++i) operands.push_back(Operand(inst, i).local);
    Instruction* copy = Clone(inst, std::move(operands), inst.shape());
    if (copy->channel_id != 0) copy->channel_id = state_.next_channel++;
    std::vector<AxisSharding> whole;
    for (const Shape& s : inst.shape().Leaves())
      whole.push_back(AxisSharding::Replicated(s.rank()));
    return {copy, inst.shape(), whole};
  }

  // Any op on whole arrays: operands replicated, the op run whole, the result
  // sliced to its sharding. Correct for every op; reported when it gathers.
  PValue Replicated(const Instruction& inst) {
    std::vector<Instruction*> operands;
    for (int64_t i = 0; i < inst.operand_count(); ++i) {
      PValue v = Operand(inst, i);
      std::vector<AxisSharding> replicated;
      for (const Shape& s : v.full.Leaves())
        replicated.push_back(AxisSharding::Replicated(s.rank()));
      if (v.leaves != replicated) {
        state_.Rematerialized(fmt::format("{} ({}) operand {}: {} has no sharded handler",
                                          inst.name(), hlo::OpcodeName(inst.opcode()), i,
                                          hlo::OpcodeName(inst.opcode())));
      }
      operands.push_back(local_->ReshardLeaves(v, replicated, inst.name()).local);
    }
    Instruction* whole = Clone(inst, operands, inst.shape());
    std::vector<AxisSharding> replicated;
    for (const Shape& s : inst.shape().Leaves())
      replicated.push_back(AxisSharding::Replicated(s.rank()));
    PValue v{whole, inst.shape(), replicated};
    return local_->ReshardLeaves(v, ShardingOf(inst), inst.name());
  }

  PValue Parameter(const Instruction& inst) {
    const auto& leaves = parameter_sharding_ ? *parameter_sharding_ : layouts_.at(&inst);
    std::vector<Shape> shapes = inst.shape().Leaves();
    std::vector<Shape> local_shapes;
    for (size_t k = 0; k < shapes.size(); ++k)
      local_shapes.push_back(LocalShape(shapes[k], leaves[k]));
    Shape local =
        inst.shape().is_array() ? local_shapes[0] : RebuildTuple(inst.shape(), local_shapes);
    Instruction* p = local_->b.Parameter(inst.parameter_number, local, inst.name());
    return {p, inst.shape(), leaves};
  }

  Shape LocalShape(const Shape& full, const AxisSharding& s) {
    return Shape(full.dtype(), ShardDims(state_.mesh, s, full.dims()));
  }
  static Shape RebuildTuple(const Shape& like, const std::vector<Shape>& leaves) {
    size_t k = 0;
    std::function<Shape(const Shape&)> build = [&](const Shape& s) -> Shape {
      if (s.is_array()) return leaves[k++];
      std::vector<Shape> elements;
      for (const Shape& e : s.tuple_shapes()) elements.push_back(build(e));
      return Shape::Tuple(std::move(elements));
    };
    return build(like);
  }

  PValue Constant(const Instruction& inst) {
    Instruction* whole = Clone(inst, {}, inst.shape());
    PValue v{whole, inst.shape(), {AxisSharding::Replicated(inst.shape().rank())}};
    return local_->Reshard(v, ArrayShardingOf(inst), inst.name());
  }

  // iota along a sharded dim: the local iota plus this shard's offset.
  PValue Iota(const Instruction& inst) {
    const AxisSharding& s = ArrayShardingOf(inst);
    Shape local = LocalShape(inst.shape(), s);
    Instruction* x = Clone(inst, {}, local);
    int64_t d = inst.dimensions.at(0);
    if (!s.dims[d].empty()) {
      Instruction* offset = local_->Offset(s.dims[d], local.dim(d));  // s32[]
      Instruction* typed = offset;
      if (local.dtype() != DType::kS32) typed = local_->b.Convert(offset, local.dtype());
      x = local_->b.Add(x, local_->b.Broadcast(typed, local.dims(), {}));
    }
    return {x, inst.shape(), {s}};
  }

  // add / subtract of two partial sums over the same axes, split alike: a
  // partial sum too, reduced later once for both.
  std::optional<PValue> AddPartialSums(const Instruction& inst) {
    if (inst.opcode() != Opcode::kAdd && inst.opcode() != Opcode::kSubtract) return std::nullopt;
    const PValue& a = values_.at(inst.operand(0));
    const PValue& b = values_.at(inst.operand(1));
    if (a.partial_sum_over.empty() || a.partial_sum_over != b.partial_sum_over ||
        a.leaves != b.leaves || a.full != b.full) {
      return std::nullopt;
    }
    Instruction* sum = Clone(inst, {a.local, b.local}, a.local->shape());
    return PValue{sum, inst.shape(), a.leaves, a.partial_sum_over};
  }

  PValue Elementwise(const Instruction& inst) {
    if (std::optional<PValue> partial = AddPartialSums(inst)) return *partial;
    const AxisSharding& s = ArrayShardingOf(inst);
    Shape local = LocalShape(inst.shape(), s);
    std::vector<Instruction*> operands;
    for (int64_t i = 0; i < inst.operand_count(); ++i) {
      const Shape& os = inst.operand(i)->shape();
      // clamp's scalar bounds are read whole.
      AxisSharding target =
          os.rank() == inst.shape().rank() ? s : AxisSharding::Replicated(os.rank());
      operands.push_back(OperandAs(inst, i, target).local);
    }
    return {Clone(inst, operands, local.WithDType(inst.shape().dtype())), inst.shape(), {s}};
  }

  PValue Broadcast(const Instruction& inst) {
    const AxisSharding& s = ArrayShardingOf(inst);
    AxisSharding in;
    for (int64_t d : inst.dimensions) in.dims.push_back(s.dims[d]);
    PValue x = OperandAs(inst, 0, in);
    Shape local = LocalShape(inst.shape(), s);
    return {Clone(inst, {x.local}, local), inst.shape(), {s}};
  }

  PValue Transpose(const Instruction& inst) {
    const AxisSharding& s = ArrayShardingOf(inst);
    AxisSharding in = AxisSharding::Replicated(inst.shape().rank());
    for (size_t i = 0; i < inst.dimensions.size(); ++i) in.dims[inst.dimensions[i]] = s.dims[i];
    PValue x = OperandAs(inst, 0, in);
    return {Clone(inst, {x.local}, LocalShape(inst.shape(), s)), inst.shape(), {s}};
  }

  // A local reshape when the operand's sharding maps onto the result's
  // (each sharded dim an evenly split major part of its group); otherwise the
  // operand is gathered first.
  PValue Reshape(const Instruction& inst) {
    const AxisSharding& want = ArrayShardingOf(inst);
    const Shape& in_shape = inst.operand(0)->shape();
    PValue x = Operand(inst, 0);
    const AxisSharding& have = x.leaves[0];
    // Try the operand's own sharding, then the one the result's sharding implies.
    for (const std::optional<AxisSharding>& in :
         {std::optional<AxisSharding>(have),
          ReshapeSharding(state_.mesh, inst.shape().dims(), in_shape.dims(), want)}) {
      if (!in) continue;
      auto out = ReshapeSharding(state_.mesh, in_shape.dims(), inst.shape().dims(), *in);
      if (!out) continue;
      PValue operand = local_->Reshard(x, *in, fmt::format("{} operand 0", inst.name()));
      PValue v{Clone(inst, {operand.local}, LocalShape(inst.shape(), *out)), inst.shape(), {*out}};
      return local_->Reshard(v, want, inst.name());
    }
    if (!have.IsReplicated()) {
      state_.Rematerialized(
          fmt::format("{} (reshape {} -> {}): no sharding of the operand maps "
                      "onto the result",
                      inst.name(), in_shape.ToString(), inst.shape().ToString()));
    }
    PValue whole = OperandAs(inst, 0, AxisSharding::Replicated(in_shape.rank()));
    PValue v{Clone(inst, {whole.local}, inst.shape()),
             inst.shape(),
             {AxisSharding::Replicated(inst.shape().rank())}};
    return local_->Reshard(v, want, inst.name());
  }

  struct DotPlan {
    AxisSharding lhs, rhs, result;  // result: before the reduction
    std::vector<int64_t> reduce_axes;
    int64_t move_bytes = 0;    // resharding the operands
    int64_t reduce_bytes = 0;  // the all-reduce (or reduce-scatter) of the partial sums
  };
  // Every valid plan for a dot over operands sharded as `l` and `r`.
  std::vector<DotPlan> DotPlans(const Instruction& inst, const PValue& l, const PValue& r);
  std::vector<const Instruction*> SumGroup(const Instruction& dot, const Instruction** root);
  std::optional<std::vector<int64_t>> SharedReduction(const Instruction& dot);
  PValue Dot(const Instruction& inst);
  PValue Reduce(const Instruction& inst);
  PValue DataMovement(const Instruction& inst);
  PValue While(const Instruction& inst);
  PValue Gather(const Instruction& inst);
  PValue Scatter(const Instruction& inst);

  PValue Tuple(const Instruction& inst) {
    std::vector<Instruction*> elements;
    std::vector<AxisSharding> leaves;
    for (int64_t i = 0; i < inst.operand_count(); ++i) {
      PValue v = Operand(inst, i);
      elements.push_back(v.local);
      leaves.insert(leaves.end(), v.leaves.begin(), v.leaves.end());
    }
    PValue v{local_->b.Tuple(elements), inst.shape(), leaves};
    return local_->ReshardLeaves(v, ShardingOf(inst), inst.name());
  }

  PValue GetTupleElement(const Instruction& inst) {
    PValue t = Operand(inst, 0);
    size_t first = 0;
    for (int64_t i = 0; i < inst.tuple_index; ++i)
      first += inst.operand(0)->shape().tuple_shape(i).Leaves().size();
    size_t n = inst.shape().Leaves().size();
    std::vector<AxisSharding> leaves(t.leaves.begin() + first, t.leaves.begin() + first + n);
    PValue v{local_->b.GetTupleElement(t.local, inst.tuple_index), inst.shape(), leaves};
    return local_->ReshardLeaves(v, ShardingOf(inst), inst.name());
  }

  PValue Barrier(const Instruction& inst) {
    PValue x = local_->ReshardLeaves(Operand(inst, 0), ShardingOf(inst), inst.name());
    return {local_->b.OptimizationBarrier(x.local), inst.shape(), x.leaves};
  }

  PartitionState& state_;
  const ShardingMap& shardings_;
  const ShardingMap& layouts_;
  Local* local_ = nullptr;
  const std::vector<AxisSharding>* parameter_sharding_ = nullptr;
  std::unordered_map<const Instruction*, PValue> values_;
  std::unordered_map<const Instruction*, std::vector<const Instruction*>> users_;
  // Per sum of dots (its root add): the axes its dots leave unreduced.
  std::unordered_map<const Instruction*, std::optional<std::vector<int64_t>>> shared_reductions_;
  std::vector<AxisSharding> root_leaves_;
};

}  // namespace strata::spmd::partition
