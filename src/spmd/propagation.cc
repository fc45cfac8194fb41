// Sharding propagation: user annotations spread to every instruction, to a
// fixpoint, forward (operands -> result) and backward (result -> operands).
// Elementwise and shape ops propagate first; dots, reductions and data
// movement join in a second round, so a dot takes the layout its
// neighbourhood already agreed on rather than imposing its own.
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <map>

#include "spmd_internal.h"
#include "strata/core/config.h"
#include "strata/core/error.h"
#include "strata/hlo/attention.h"
#include "strata/spmd/partitioner.h"

// The rules switch over the opcode rows' SpmdRule: a new rule without a
// case in Forward and Backward is a compile error.
#pragma GCC diagnostic error "-Wswitch"

namespace strata::spmd {

using hlo::Instruction;
using hlo::Opcode;
using hlo::SpmdRule;

bool IsElementwiseOp(const hlo::Instruction& inst) {
  switch (hlo::SpmdRuleOf(inst.opcode())) {
    case SpmdRule::kElementwise:
      return true;
    case SpmdRule::kElementwiseSameWidth:
      return DTypeSize(inst.shape().dtype()) == DTypeSize(inst.operand(0)->shape().dtype());
    default:
      return false;
  }
}

std::optional<AxisSharding> ReshapeSharding(const Mesh& mesh, const std::vector<int64_t>& in_dims,
                                            const std::vector<int64_t>& out_dims,
                                            const AxisSharding& in) {
  AxisSharding out = AxisSharding::Replicated(static_cast<int64_t>(out_dims.size()));
  size_t i = 0, j = 0;
  while (i < in_dims.size() || j < out_dims.size()) {
    if (i < in_dims.size() && in_dims[i] == 1) {
      if (!in.dims[i].empty()) return std::nullopt;
      ++i;
      continue;
    }
    if (j < out_dims.size() && out_dims[j] == 1) {
      ++j;
      continue;
    }
    if (i >= in_dims.size() || j >= out_dims.size()) return std::nullopt;
    // A group of dims with equal products: [i0, i) and [j0, j).
    size_t i0 = i, j0 = j;
    int64_t pi = in_dims[i++], pj = out_dims[j++];
    while (pi != pj) {
      if (pi < pj) {
        if (i >= in_dims.size()) return std::nullopt;
        pi *= in_dims[i++];
      } else {
        if (j >= out_dims.size()) return std::nullopt;
        pj *= out_dims[j++];
      }
    }
    for (size_t k = i0 + 1; k < i; ++k) {
      if (!in.dims[k].empty()) return std::nullopt;  // only the major dim may be split
    }
    const auto& axes = in.dims[i0];
    if (axes.empty()) continue;
    int64_t tiles = mesh.Size(axes);
    if (in_dims[i0] % tiles != 0 || out_dims[j0] % tiles != 0) return std::nullopt;
    out.dims[j0] = axes;
  }
  return out;
}

bool IsFullToShard(const hlo::Instruction& inst) {
  return inst.opcode() == Opcode::kCustomCall && inst.custom_call_target == "SPMDFullToShardShape";
}

bool IsShardToFull(const hlo::Instruction& inst) {
  return inst.opcode() == Opcode::kCustomCall && inst.custom_call_target == "SPMDShardToFullShape";
}

std::unordered_set<const Instruction*> ManualInstructions(const hlo::Module& module) {
  std::unordered_set<const Instruction*> manual;
  for (const auto& c : module.computations()) {
    for (const auto& owned : c->instructions()) {
      const Instruction& inst = *owned;
      bool reads_manual = false;
      for (const Instruction* o : inst.operands()) reads_manual = reads_manual || manual.count(o);
      if (IsShardToFull(inst)) {
        if (!reads_manual) {
          Fail(
              "[partition] {} (SPMDShardToFullShape) leaves a manual region, but its operand {} "
              "is not in one (no SPMDFullToShardShape before it)",
              inst.name(), inst.operand(0)->name());
        }
        continue;
      }
      if (IsFullToShard(inst)) {
        if (reads_manual) {
          Fail(
              "[partition] {} (SPMDFullToShardShape) starts a manual region inside another: "
              "nested manual regions are not supported",
              inst.name());
        }
        manual.insert(&inst);
        continue;
      }
      const Opcode op = inst.opcode();
      // Which partition runs: a per-device value, like a manual region's.
      if (op == Opcode::kPartitionId || op == Opcode::kReplicaId) reads_manual = true;
      if (!reads_manual) continue;
      if (op == Opcode::kWhile || op == Opcode::kConditional || op == Opcode::kCall ||
          op == Opcode::kFusion) {
        Fail(
            "[partition] {} ({}) reads a value of a manual region: manual regions that span "
            "loops, conditionals or calls are not supported",
            inst.name(), hlo::OpcodeName(op));
      }
      manual.insert(&inst);
    }
    if (c->root() && manual.count(c->root())) {
      Fail(
          "[partition] {}'s result {} is computed per device (in a manual region, or from "
          "partition-id): leave the region through SPMDShardToFullShape",
          c->name(), c->root()->name());
    }
  }
  return manual;
}

namespace {

using Leaves = std::vector<std::optional<AxisSharding>>;

class Propagation {
 public:
  Propagation(const hlo::Module& module, const Mesh& mesh) : module_(module), mesh_(mesh) {}

  ShardingMap Run() {
    manual_ = ManualInstructions(module_);
    for (const auto& c : module_.computations()) {
      for (const auto& inst : c->instructions()) {
        Seed(*inst);
        if (inst->opcode() == Opcode::kWhile) loops_.push_back(inst.get());
      }
    }
    // Callers before callees: a loop body sees its state's sharding from the
    // same round.
    std::vector<const hlo::Computation*> order;
    for (const auto& c : module_.computations()) order.insert(order.begin(), c.get());
    for (Priority level : {kShapeOps, kKnownOperands, kAll}) {
      level_ = level;
      for (int round = 0; round < 64; ++round) {
        changed_ = false;
        for (const hlo::Computation* c : order) {
          for (const auto& inst : c->instructions()) {
            Forward(*inst, level != kShapeOps);
            if (inst->opcode() == Opcode::kWhile) SyncLoops();
          }
          for (auto it = c->instructions().rbegin(); it != c->instructions().rend(); ++it)
            Backward(**it, level != kShapeOps);
        }
        SyncLoops();
        if (!changed_) break;
      }
    }
    ShardingMap result;
    for (const auto& c : module_.computations()) {
      for (const auto& inst : c->instructions()) {
        Leaves& leaves = Of(*inst);
        std::vector<Shape> shapes = inst->shape().Leaves();
        std::vector<AxisSharding> out;
        for (size_t k = 0; k < leaves.size(); ++k) {
          out.push_back(leaves[k] ? *leaves[k] : AxisSharding::Replicated(shapes[k].rank()));
        }
        if (auto it = device_orders_.find(inst.get()); it != device_orders_.end()) {
          out = it->second;
        }
        result[inst.get()] = std::move(out);
      }
    }
    return result;
  }

 private:
  Leaves& Of(const Instruction& inst) {
    auto it = map_.find(&inst);
    if (it == map_.end()) {
      it = map_.emplace(&inst, Leaves(inst.shape().Leaves().size())).first;
    }
    return it->second;
  }

  // A user annotation: fixed from the start, never overwritten.
  void Seed(const Instruction& inst) {
    if (manual_.count(&inst)) {
      // Each device's own value, whole to the ops that read it: fixed.
      Leaves& leaves = Of(inst);
      std::vector<Shape> shapes = inst.shape().Leaves();
      for (size_t k = 0; k < shapes.size(); ++k)
        leaves[k] = AxisSharding::Replicated(shapes[k].rank());
      return;
    }
    if (inst.sharding.empty()) return;
    if (inst.opcode() == Opcode::kParameter && hlo::Sharding::Parse(inst.sharding).IsManual()) {
      // Each device's own data, which a program cannot be given.
      Fail(
          "[sharding] parameter {} is {}: give it a sharding over the mesh and enter the manual "
          "region with SPMDFullToShardShape",
          inst.name(), inst.sharding);
    }
    std::vector<Shape> shapes = inst.shape().Leaves();
    const std::vector<AxisSharding>& annotated = Annotation(inst, shapes);
    Leaves& leaves = Of(inst);
    for (size_t k = 0; k < shapes.size(); ++k) leaves[k] = annotated[k].InMeshOrder();
    if (HasDeviceOrder(annotated)) device_orders_[&inst] = annotated;
  }

  // The axis sharding of each leaf `inst.sharding` gives, read once per
  // distinct text (a program repeats a few annotations hundreds of times,
  // each naming every device).
  const std::vector<AxisSharding>& Annotation(const Instruction& inst,
                                              const std::vector<Shape>& shapes) {
    std::vector<int64_t> ranks;
    for (const Shape& shape : shapes) ranks.push_back(shape.rank());
    auto key = std::make_pair(inst.sharding, ranks);
    if (auto it = annotations_.find(key); it != annotations_.end()) return it->second;
    hlo::Sharding s = hlo::Sharding::Parse(inst.sharding);
    std::vector<hlo::Sharding> parts =
        s.IsTuple() ? s.tuple_elements() : std::vector<hlo::Sharding>(shapes.size(), s);
    if (parts.size() != shapes.size()) {
      Fail("[sharding] {} has {} sharding(s) for {} array(s) of {}", inst.name(), parts.size(),
           shapes.size(), inst.shape().ToString());
    }
    std::vector<AxisSharding> leaves;
    for (size_t k = 0; k < shapes.size(); ++k) {
      if (parts[k].IsManual()) {
        // Outside a region (a constant the region reads) a value computed
        // from whole values is the same on every device (Seed rejects a
        // manual parameter).
        leaves.push_back(AxisSharding::Replicated(ranks[k]));
        continue;
      }
      if (parts[k].IsMaximal()) {
        leaves.push_back(AxisSharding::Replicated(ranks[k]));  // computed everywhere alike
        continue;
      }
      std::optional<AxisSharding> a = FromHloSharding(mesh_, parts[k], ranks[k]);
      if (!a) {
        Fail("[sharding] {}: {} is not a sharding over {} for {}", inst.name(), parts[k].ToText(),
             mesh_.ToString(), shapes[k].ToString());
      }
      leaves.push_back(*a);
    }
    return annotations_.emplace(std::move(key), std::move(leaves)).first->second;
  }

  void Set(const Instruction& inst, size_t leaf, const std::optional<AxisSharding>& s) {
    if (!s) return;
    Leaves& leaves = Of(inst);
    if (leaves[leaf]) return;
    std::vector<Shape> shapes = inst.shape().Leaves();
    if (s->rank() != shapes[leaf].rank()) return;
    // Never tile a dimension into more pieces than it has elements.
    for (int64_t d = 0; d < s->rank(); ++d) {
      if (shapes[leaf].dim(d) < TileCount(mesh_, *s, d)) return;
    }
    leaves[leaf] = s;
    changed_ = true;
    if (trace_) {  // STRATA_SPMD_TRACE=1: which rule decided each sharding
      fmt::print(stderr, "[spmd] level {} {} {} leaf {} = {} (by {})\n", static_cast<int>(level_),
                 current_ ? current_->name() : "?", inst.name(), leaf, ToString(mesh_, *s),
                 forward_ ? "forward" : "backward");
    }
  }
  void SetArray(const Instruction& inst, const std::optional<AxisSharding>& s) {
    if (inst.shape().is_array()) Set(inst, 0, s);
  }
  std::optional<AxisSharding> ArrayOf(const Instruction& inst) {
    if (!inst.shape().is_array()) return std::nullopt;
    return Of(inst)[0];
  }

  // The rules of the first round: those that only relabel dims.
  static bool IsShapeOp(Opcode op) {
    switch (hlo::SpmdRuleOf(op)) {
      case SpmdRule::kElementwise:
      case SpmdRule::kElementwiseSameWidth:
      case SpmdRule::kBroadcast:
      case SpmdRule::kReshape:
      case SpmdRule::kTranspose:
      case SpmdRule::kTuple:
      case SpmdRule::kGetTupleElement:
      case SpmdRule::kPassThrough:
        return true;
      default:
        return false;
    }
  }

  // Dims of an operand whose size the op keeps (slice, pad, ...): sharding
  // passes through them; the others are unsharded.
  static std::optional<AxisSharding> KeepUnchangedDims(const Shape& from, const Shape& to,
                                                       const std::optional<AxisSharding>& s) {
    if (!s || from.rank() != to.rank()) return std::nullopt;
    AxisSharding out = *s;
    for (int64_t d = 0; d < to.rank(); ++d) {
      if (from.dim(d) != to.dim(d)) out.dims[d].clear();
    }
    return out;
  }

  // Drops any later use of an axis already used (a dot's output can take
  // the same axis from both operands only once).
  static AxisSharding DropRepeatedAxes(AxisSharding s) {
    std::vector<int64_t> seen;
    for (auto& axes : s.dims) {
      std::vector<int64_t> kept;
      for (int64_t a : axes) {
        if (std::find(seen.begin(), seen.end(), a) != seen.end()) break;
        seen.push_back(a);
        kept.push_back(a);
      }
      axes = kept;
    }
    return s;
  }

  static bool IsAttention(const Instruction& inst) {
    return inst.opcode() == Opcode::kCustomCall && hlo::IsAttentionTarget(inst.custom_call_target);
  }
  // Fused attention is batch- and head-parallel: a split of the batch and
  // heads dims of `s` (a rank-4 array's: q, o or dq) carries over to its
  // arrays of rank 4 (heads at dim 1 or 2 by the layout) or 3 (the
  // log-sum-exp, [B, H, S]); sequence and head dims stay whole.
  static std::optional<AxisSharding> AttentionSplit(const Instruction& inst,
                                                    const std::optional<AxisSharding>& s,
                                                    int64_t rank) {
    if (!s || s->rank() != 4) return std::nullopt;
    const hlo::AttentionConfig config = hlo::ParseAttentionConfig(inst.backend_config);
    AxisSharding out = AxisSharding::Replicated(rank);
    out.dims[0] = s->dims[0];
    out.dims[config.heads_dim(rank)] = s->dims[config.heads_dim(4)];
    return out;
  }

  bool Known(const Instruction& inst) {
    const Leaves& leaves = Of(inst);
    return std::all_of(leaves.begin(), leaves.end(), [](const auto& s) { return s.has_value(); });
  }

  // Forward rules only set `inst`, backward rules only its operands: once
  // those are all known, a rule has nothing left to decide.
  // Long by design: one case per SPMD rule of the opcode table (hlo::SpmdRule,
  // -Wswitch an error), as Backward below; split, the rules would scatter.
  void Forward(const Instruction& inst, bool all_ops) {
    if (Known(inst)) return;
    current_ = &inst;
    forward_ = true;
    Opcode op = inst.opcode();
    if (!all_ops && !IsShapeOp(op)) return;
    if (IsElementwiseOp(inst)) {
      // A split operand decides; "replicated" only when every operand says
      // so (a broadcast weight must not pin an activation's layout).
      std::optional<AxisSharding> replicated;
      bool all_known = true;
      for (const Instruction* o : inst.operands()) {
        if (!o->shape().is_array() || o->shape().dims() != inst.shape().dims()) continue;
        auto s = ArrayOf(*o);
        if (!s) {
          all_known = false;
        } else if (!s->IsReplicated()) {
          SetArray(inst, s);
          return;
        } else {
          replicated = s;
        }
      }
      if (replicated && (all_known || level_ == kAll)) SetArray(inst, replicated);
      return;
    }
    if (IsAttention(inst)) {  // from q: o and lse, or dq, dk and dv
      auto from = ArrayOf(*inst.operand(0));
      const std::vector<Shape> leaves = inst.shape().Leaves();
      for (size_t k = 0; k < leaves.size(); ++k)
        Set(inst, k, AttentionSplit(inst, from, leaves[k].rank()));
      return;
    }
    switch (hlo::SpmdRuleOf(op)) {
      case SpmdRule::kBroadcast: {
        auto s = ArrayOf(*inst.operand(0));
        if (!s) return;
        AxisSharding out = AxisSharding::Replicated(inst.shape().rank());
        for (size_t i = 0; i < inst.dimensions.size(); ++i)
          out.dims[inst.dimensions[i]] = s->dims[i];
        // A replicated value broadcast to new dims says nothing about them.
        if (out.IsReplicated() &&
            static_cast<int64_t>(inst.dimensions.size()) < inst.shape().rank() && level_ != kAll)
          return;
        SetArray(inst, out);
        return;
      }
      case SpmdRule::kTranspose: {
        auto s = ArrayOf(*inst.operand(0));
        if (!s) return;
        AxisSharding out = AxisSharding::Replicated(inst.shape().rank());
        for (size_t i = 0; i < inst.dimensions.size(); ++i)
          out.dims[i] = s->dims[inst.dimensions[i]];
        SetArray(inst, out);
        return;
      }
      case SpmdRule::kReshape: {
        auto s = ArrayOf(*inst.operand(0));
        if (s)
          SetArray(inst, ReshapeSharding(mesh_, inst.operand(0)->shape().dims(),
                                         inst.shape().dims(), *s));
        return;
      }
      case SpmdRule::kTuple: {
        size_t k = 0;
        for (const Instruction* o : inst.operands()) {
          for (const auto& leaf : Of(*o)) Set(inst, k++, leaf);
        }
        return;
      }
      case SpmdRule::kGetTupleElement: {
        size_t first = LeafOffset(inst.operand(0)->shape(), inst.tuple_index);
        Leaves& from = Of(*inst.operand(0));
        for (size_t k = 0; k < Of(inst).size(); ++k) Set(inst, k, from[first + k]);
        return;
      }
      case SpmdRule::kPassThrough: {
        Leaves& from = Of(*inst.operand(0));
        for (size_t k = 0; k < from.size(); ++k) Set(inst, k, from[k]);
        return;
      }
      case SpmdRule::kReduce: {
        int64_t n = inst.operand_count() / 2;
        for (int64_t i = 0; i < n; ++i) {
          auto s = ArrayOf(*inst.operand(i));
          if (!s) continue;
          bool reduced_split = false;  // partial results: as for a dot
          for (int64_t d : inst.dimensions) reduced_split = reduced_split || !s->dims[d].empty();
          if (reduced_split && level_ != kAll) continue;
          AxisSharding out;
          for (int64_t d = 0; d < s->rank(); ++d) {
            if (std::find(inst.dimensions.begin(), inst.dimensions.end(), d) ==
                inst.dimensions.end())
              out.dims.push_back(s->dims[d]);
          }
          if (inst.shape().is_array()) {
            Set(inst, 0, out);
          } else {
            for (int64_t k = 0; k < n; ++k) Set(inst, k, out);
          }
        }
        return;
      }
      case SpmdRule::kDot: {
        auto l = ArrayOf(*inst.operand(0));
        auto r = ArrayOf(*inst.operand(1));
        if (!l && !r) return;
        if ((!l || !r) && level_ != kAll) return;
        const hlo::DotDims& dd = inst.dot;
        AxisSharding out;
        const Shape& ls = inst.operand(0)->shape();
        const Shape& rs = inst.operand(1)->shape();
        auto axes_of = [](const std::optional<AxisSharding>& s, int64_t d) {
          return s ? s->dims[d] : std::vector<int64_t>{};
        };
        for (size_t b = 0; b < dd.lhs_batch.size(); ++b) {
          auto a = axes_of(l, dd.lhs_batch[b]);
          out.dims.push_back(a.empty() ? axes_of(r, dd.rhs_batch[b]) : a);
        }
        for (int64_t d = 0; d < ls.rank(); ++d) {
          if (!Contains(dd.lhs_batch, d) && !Contains(dd.lhs_contracting, d))
            out.dims.push_back(axes_of(l, d));
        }
        for (int64_t d = 0; d < rs.rank(); ++d) {
          if (!Contains(dd.rhs_batch, d) && !Contains(dd.rhs_contracting, d))
            out.dims.push_back(axes_of(r, d));
        }
        // Axes that split a contracting dim make partial sums, reduced
        // afterwards: the result's layout is better decided by its users
        // (a gradient reduce-scattered into its weight's split), so it is
        // only taken from here when nothing else decided it.
        bool contracting_split = false;
        for (size_t c = 0; c < dd.lhs_contracting.size(); ++c) {
          contracting_split = contracting_split || !axes_of(l, dd.lhs_contracting[c]).empty() ||
                              !axes_of(r, dd.rhs_contracting[c]).empty();
        }
        if (contracting_split && level_ != kAll) return;
        SetArray(inst, DropRepeatedAxes(out));
        return;
      }
      case SpmdRule::kKeepDims: {
        auto s = ArrayOf(*inst.operand(0));
        if (!s && op == Opcode::kDynamicUpdateSlice) {  // a loop's output stack follows its rows
          SetArray(inst, KeepUnchangedDims(inst.operand(1)->shape(), inst.shape(),
                                           ArrayOf(*inst.operand(1))));
          return;
        }
        if (op == Opcode::kReverse && s) {
          for (int64_t d : inst.dimensions) s->dims[d].clear();
        }
        SetArray(inst, KeepUnchangedDims(inst.operand(0)->shape(), inst.shape(), s));
        return;
      }
      case SpmdRule::kConcatenate: {
        for (const Instruction* o : inst.operands()) {
          auto s = ArrayOf(*o);
          if (s) {
            s->dims[inst.dimensions[0]].clear();
            SetArray(inst, s);
          }
        }
        return;
      }
      case SpmdRule::kGather: {
        // Batch dims follow the indices (an embedding lookup keeps its tokens'
        // sharding); offset dims are taken whole.
        auto s = ArrayOf(*inst.operand(1));
        if (!s) return;
        const hlo::GatherDims& g = inst.gather;
        AxisSharding out = AxisSharding::Replicated(inst.shape().rank());
        int64_t index_dim = 0;
        for (int64_t d = 0; d < inst.shape().rank(); ++d) {
          if (Contains(g.offset_dims, d)) continue;
          if (index_dim == g.index_vector_dim) ++index_dim;
          if (index_dim < s->rank()) out.dims[d] = s->dims[index_dim];
          ++index_dim;
        }
        SetArray(inst, out);
        return;
      }
      case SpmdRule::kElementwise:  // above
      case SpmdRule::kElementwiseSameWidth:
      case SpmdRule::kCustomCall:
      case SpmdRule::kNone:
        return;
    }
  }

  // Long by design: one case per SPMD rule, as Forward.
  void Backward(const Instruction& inst, bool all_ops) {
    if (std::all_of(inst.operands().begin(), inst.operands().end(),
                    [&](const Instruction* o) { return Known(*o); }))
      return;
    current_ = &inst;
    forward_ = false;
    Opcode op = inst.opcode();
    if (!all_ops && !IsShapeOp(op)) return;
    if (IsElementwiseOp(inst)) {
      auto s = ArrayOf(inst);
      if (s && s->IsReplicated() && level_ != kAll) return;
      for (const Instruction* o : inst.operands()) {
        if (o->shape().is_array() && o->shape().dims() == inst.shape().dims()) SetArray(*o, s);
      }
      return;
    }
    if (IsAttention(inst)) {  // from o (or dq): every operand
      auto from = Of(inst)[0];
      const size_t plain = hlo::AttentionOperandCount(inst.custom_call_target);
      for (size_t i = 0; i < inst.operand_count(); ++i) {
        const Instruction* o = inst.operand(i);
        if (i == plain) {  // the mask [B or 1, H or 1, S, S] in every layout; 1 is not split
          std::optional<AxisSharding> split;
          if (from && from->rank() == 4) {
            const hlo::AttentionConfig config = hlo::ParseAttentionConfig(inst.backend_config);
            split = AxisSharding::Replicated(4);
            if (o->shape().dim(0) != 1) split->dims[0] = from->dims[0];
            if (o->shape().dim(1) != 1) split->dims[1] = from->dims[config.heads_dim(4)];
          }
          SetArray(*o, split);
          continue;
        }
        SetArray(*o, AttentionSplit(inst, from, o->shape().rank()));
      }
      return;
    }
    switch (hlo::SpmdRuleOf(op)) {
      case SpmdRule::kBroadcast: {
        auto s = ArrayOf(inst);
        if (!s) return;
        AxisSharding in;
        for (int64_t d : inst.dimensions) in.dims.push_back(s->dims[d]);
        SetArray(*inst.operand(0), in);
        return;
      }
      case SpmdRule::kTranspose: {
        auto s = ArrayOf(inst);
        if (!s) return;
        AxisSharding in = AxisSharding::Replicated(inst.shape().rank());
        for (size_t i = 0; i < inst.dimensions.size(); ++i)
          in.dims[inst.dimensions[i]] = s->dims[i];
        SetArray(*inst.operand(0), in);
        return;
      }
      case SpmdRule::kReshape: {
        auto s = ArrayOf(inst);
        if (s) {
          SetArray(*inst.operand(0), ReshapeSharding(mesh_, inst.shape().dims(),
                                                     inst.operand(0)->shape().dims(), *s));
        }
        return;
      }
      case SpmdRule::kTuple: {
        Leaves& from = Of(inst);
        size_t k = 0;
        for (const Instruction* o : inst.operands()) {
          for (size_t j = 0; j < Of(*o).size(); ++j) Set(*o, j, from[k++]);
        }
        return;
      }
      case SpmdRule::kGetTupleElement: {
        size_t first = LeafOffset(inst.operand(0)->shape(), inst.tuple_index);
        Leaves& from = Of(inst);
        for (size_t k = 0; k < from.size(); ++k) Set(*inst.operand(0), first + k, from[k]);
        return;
      }
      case SpmdRule::kPassThrough: {
        Leaves& from = Of(inst);
        for (size_t k = 0; k < from.size(); ++k) Set(*inst.operand(0), k, from[k]);
        return;
      }
      case SpmdRule::kReduce: {
        int64_t n = inst.operand_count() / 2;
        auto s = inst.shape().is_array() ? Of(inst)[0] : Of(inst)[0];
        if (!s) return;
        for (int64_t i = 0; i < n; ++i) {
          const Shape& in = inst.operand(i)->shape();
          AxisSharding out = AxisSharding::Replicated(in.rank());
          int64_t k = 0;
          for (int64_t d = 0; d < in.rank(); ++d) {
            if (!Contains(inst.dimensions, d)) out.dims[d] = s->dims[k++];
          }
          // A replicated sum says nothing about its input (a split input
          // sums partially and all-reduces): leave the input to its producers.
          if (out.IsReplicated()) continue;
          SetArray(*inst.operand(i), out);
        }
        return;
      }
      case SpmdRule::kDot: {
        auto s = ArrayOf(inst);
        if (!s) return;
        const hlo::DotDims& dd = inst.dot;
        const Shape& ls = inst.operand(0)->shape();
        const Shape& rs = inst.operand(1)->shape();
        AxisSharding l = AxisSharding::Replicated(ls.rank()),
                     r = AxisSharding::Replicated(rs.rank());
        int64_t k = 0;
        for (size_t b = 0; b < dd.lhs_batch.size(); ++b, ++k) {
          l.dims[dd.lhs_batch[b]] = s->dims[k];
          r.dims[dd.rhs_batch[b]] = s->dims[k];
        }
        // Axes already splitting a contracting dim of a known operand make
        // partial sums that are reduce-scattered into the result's split: a
        // free dim must not take them (an FSDP weight gradient would
        // otherwise split its activation's feature dim on the batch axis).
        auto lo = ArrayOf(*inst.operand(0));
        auto ro = ArrayOf(*inst.operand(1));
        // Only the larger operand's split counts: the smaller one (a weight
        // beside an activation) is cheaper to gather than to sum partially.
        const bool lhs_larger = ls.num_elements() >= rs.num_elements();
        const bool rhs_larger = rs.num_elements() >= ls.num_elements();
        std::vector<int64_t> partial;
        for (size_t c = 0; c < dd.lhs_contracting.size(); ++c) {
          if (lo && lhs_larger) {
            const auto& a = lo->dims[dd.lhs_contracting[c]];
            partial.insert(partial.end(), a.begin(), a.end());
          }
          if (ro && rhs_larger) {
            const auto& a = ro->dims[dd.rhs_contracting[c]];
            partial.insert(partial.end(), a.begin(), a.end());
          }
        }
        auto free_axes = [&](const std::vector<int64_t>& axes) {
          std::vector<int64_t> kept;
          for (int64_t a : axes) {
            if (Contains(partial, a)) break;
            kept.push_back(a);
          }
          return kept;
        };
        for (int64_t d = 0; d < ls.rank(); ++d) {
          if (!Contains(dd.lhs_batch, d) && !Contains(dd.lhs_contracting, d))
            l.dims[d] = free_axes(s->dims[k++]);
        }
        for (int64_t d = 0; d < rs.rank(); ++d) {
          if (!Contains(dd.rhs_batch, d) && !Contains(dd.rhs_contracting, d))
            r.dims[d] = free_axes(s->dims[k++]);
        }
        // A contracting dim takes the other operand's split (the partial sums
        // are then reduced once, instead of both operands being gathered).
        auto used = [](const AxisSharding& a, int64_t axis) {
          for (const auto& d : a.dims)
            if (std::find(d.begin(), d.end(), axis) != d.end()) return true;
          return false;
        };
        for (size_t c = 0; c < dd.lhs_contracting.size(); ++c) {
          int64_t lc = dd.lhs_contracting[c], rc = dd.rhs_contracting[c];
          if (ro && !ro->dims[rc].empty() && l.dims[lc].empty()) {
            bool ok = true;
            for (int64_t a : ro->dims[rc]) ok = ok && !used(l, a);
            if (ok) l.dims[lc] = ro->dims[rc];
          }
          if (lo && !lo->dims[lc].empty() && r.dims[rc].empty()) {
            bool ok = true;
            for (int64_t a : lo->dims[lc]) ok = ok && !used(r, a);
            if (ok) r.dims[rc] = lo->dims[lc];
          }
        }
        // Before the last round, an operand is only given a sharding once the
        // other operand's is known: until then the partial-sum axes are not.
        // A replicated operand sharding is never pushed from here (a product
        // of split operands can be summed instead).
        if (!l.IsReplicated() && (ro || level_ == kAll)) SetArray(*inst.operand(0), l);
        if (!r.IsReplicated() && (lo || level_ == kAll)) SetArray(*inst.operand(1), r);
        return;
      }
      case SpmdRule::kKeepDims: {
        auto s = ArrayOf(inst);
        if (op == Opcode::kReverse && s) {  // a reversed dim is whole, as forward
          for (int64_t d : inst.dimensions) s->dims[d].clear();
        }
        SetArray(*inst.operand(0), KeepUnchangedDims(inst.shape(), inst.operand(0)->shape(), s));
        if (op == Opcode::kDynamicUpdateSlice) {
          SetArray(*inst.operand(1),
                   KeepUnchangedDims(inst.shape(), inst.operand(1)->shape(), ArrayOf(inst)));
        }
        return;
      }
      case SpmdRule::kConcatenate: {
        auto s = ArrayOf(inst);
        if (!s) return;
        s->dims[inst.dimensions[0]].clear();
        for (const Instruction* o : inst.operands()) SetArray(*o, s);
        return;
      }
      case SpmdRule::kElementwise:  // above
      case SpmdRule::kElementwiseSameWidth:
      case SpmdRule::kGather:
      case SpmdRule::kCustomCall:
      case SpmdRule::kNone:
        return;
    }
  }

  // A while's operand, result, body parameter, body root and condition
  // parameter are one value: they share each leaf's sharding.
  void SyncLoops() {
    for (const Instruction* inst : loops_) {
      const hlo::Computation* condition = inst->called[0];
      const hlo::Computation* body = inst->called[1];
      std::vector<const Instruction*> members = {inst, inst->operand(0), body->parameter(0),
                                                 body->root(), condition->parameter(0)};
      size_t n = Of(*inst).size();
      for (size_t k = 0; k < n; ++k) {
        std::optional<AxisSharding> s;
        for (const Instruction* m : members) {
          if (!s) s = Of(*m)[k];
        }
        for (const Instruction* m : members) Set(*m, k, s);
      }
    }
  }

  static bool Contains(const std::vector<int64_t>& v, int64_t x) {
    return std::find(v.begin(), v.end(), x) != v.end();
  }
  static size_t LeafOffset(const Shape& tuple, int64_t index) {
    size_t offset = 0;
    for (int64_t i = 0; i < index; ++i) offset += tuple.tuple_shape(i).Leaves().size();
    return offset;
  }

  // Elementwise and shape ops first; then every op but a dot that knows only
  // one operand (a weight's split must not decide an activation's layout
  // before the batch split reaches it); then everything.
  enum Priority { kShapeOps, kKnownOperands, kAll };

  const hlo::Module& module_;
  const Mesh& mesh_;
  std::unordered_map<const Instruction*, Leaves> map_;
  // Annotations in a device order of their own: they propagate as the same
  // split in the mesh's order, and the instruction keeps its order (the
  // partitioner permutes into and out of it).
  std::unordered_map<const Instruction*, std::vector<AxisSharding>> device_orders_;
  std::map<std::pair<std::string, std::vector<int64_t>>, std::vector<AxisSharding>> annotations_;
  std::vector<const Instruction*> loops_;  // every while, in every computation
  std::unordered_set<const Instruction*> manual_;
  bool changed_ = false;
  Priority level_ = kShapeOps;
  const bool trace_ = GetConfig().spmd_trace;
  const Instruction* current_ = nullptr;  // the instruction whose rule runs
  bool forward_ = true;
};

}  // namespace

ShardingMap PropagateShardings(const hlo::Module& module, const Mesh& mesh) {
  return Propagation(module, mesh).Run();
}

}  // namespace strata::spmd
