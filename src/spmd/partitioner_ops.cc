// The partitioner's larger handlers: a dot's plans and partial sums,
// reductions, data movement, while loops, gather and scatter.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <functional>
#include <map>
#include <optional>

#include "partition_visitor.h"

namespace strata::spmd::partition {

// Dot: batch dims split alike on both operands and non-contracting dims
// split on their own operand give a local dot; contracting dims split alike
// give partial sums, all-reduced over their axes. Among the candidate
// contracting splits (the lhs's, the rhs's, none) the one that moves the
// fewest bytes wins.
std::vector<Visitor::DotPlan> Visitor::DotPlans(const Instruction& inst, const PValue& l,
                                                const PValue& r) {
  const AxisSharding& want = ArrayShardingOf(inst);
  const hlo::DotDims& dd = inst.dot;
  const Shape& ls = inst.operand(0)->shape();
  const Shape& rs = inst.operand(1)->shape();
  const Mesh& mesh = state_.mesh;

  // Output dims in dot order: batch, lhs free, rhs free.
  std::vector<int64_t> lhs_free, rhs_free;
  for (int64_t d = 0; d < ls.rank(); ++d)
    if (!Contains(dd.lhs_batch, d) && !Contains(dd.lhs_contracting, d)) lhs_free.push_back(d);
  for (int64_t d = 0; d < rs.rank(); ++d)
    if (!Contains(dd.rhs_batch, d) && !Contains(dd.rhs_contracting, d)) rhs_free.push_back(d);

  auto make_plan = [&](const std::vector<std::vector<int64_t>>& contracting) {
    // The result's sharding with the contracting axes removed (they hold
    // partial sums until the all-reduce).
    std::vector<int64_t> reduce_axes;
    for (const auto& axes : contracting)
      reduce_axes.insert(reduce_axes.end(), axes.begin(), axes.end());
    DotPlan p;
    p.reduce_axes = reduce_axes;
    p.result = want;
    for (auto& axes : p.result.dims) {
      for (size_t k = 0; k < axes.size(); ++k) {
        if (Contains(reduce_axes, axes[k])) {
          axes.resize(k);
          break;
        }
      }
    }
    p.lhs = AxisSharding::Replicated(ls.rank());
    p.rhs = AxisSharding::Replicated(rs.rank());
    int64_t k = 0;
    for (size_t b = 0; b < dd.lhs_batch.size(); ++b, ++k) {
      p.lhs.dims[dd.lhs_batch[b]] = p.result.dims[k];
      p.rhs.dims[dd.rhs_batch[b]] = p.result.dims[k];
    }
    for (int64_t d : lhs_free) p.lhs.dims[d] = p.result.dims[k++];
    for (int64_t d : rhs_free) p.rhs.dims[d] = p.result.dims[k++];
    for (size_t c = 0; c < dd.lhs_contracting.size(); ++c) {
      p.lhs.dims[dd.lhs_contracting[c]] = contracting[c];
      p.rhs.dims[dd.rhs_contracting[c]] = contracting[c];
    }
    Shape result_local(inst.shape().dtype(), ShardDims(mesh, p.result, inst.shape().dims()));
    int64_t group = mesh.Size(reduce_axes);
    // A reduce-scatter (when the result splits a dim over exactly these
    // axes) sends half of what an all-reduce does.
    bool scatters = false;
    for (int64_t d = 0; d < want.rank(); ++d) {
      const auto& w = want.dims[d];
      scatters = scatters ||
                 (w.size() >= reduce_axes.size() && !reduce_axes.empty() &&
                  std::equal(reduce_axes.begin(), reduce_axes.end(), w.end() - reduce_axes.size()));
    }
    p.move_bytes = local_->ReshardBytes(l, p.lhs) + local_->ReshardBytes(r, p.rhs);
    p.reduce_bytes =
        group > 1 ? (scatters ? 1 : 2) * (group - 1) * result_local.byte_size() / group : 0;
    return p;
  };
  auto contracting_of = [&](const AxisSharding& s, const std::vector<int64_t>& dims) {
    std::vector<std::vector<int64_t>> out;
    for (int64_t d : dims) out.push_back(s.dims[d]);
    return out;
  };
  std::vector<DotPlan> plans;
  for (const DotPlan& p :
       {make_plan(contracting_of(l.leaves[0], dd.lhs_contracting)),
        make_plan(contracting_of(r.leaves[0], dd.rhs_contracting)),
        make_plan(std::vector<std::vector<int64_t>>(dd.lhs_contracting.size()))}) {
    // A plan is valid when no axis splits two dims of one operand.
    bool valid = true;
    for (const AxisSharding* s : {&p.lhs, &p.rhs}) {
      std::vector<int64_t> used = s->UsedAxes();
      std::sort(used.begin(), used.end());
      valid = valid && std::adjacent_find(used.begin(), used.end()) == used.end();
    }
    if (valid) plans.push_back(p);
  }
  STRATA_CHECK(!plans.empty(), "the plan without contracting splits is always valid ({})",
               inst.name());
  return plans;
}

// The dots under the tree of single-use adds and subtracts that `dot`
// feeds, and the tree's root (the dot itself when it feeds none): the
// gradients of one input through q, k and v, or through gate and up.
std::vector<const Instruction*> Visitor::SumGroup(const Instruction& dot,
                                                  const Instruction** root_out) {
  auto sums = [](const Instruction* x) {
    return x->opcode() == Opcode::kAdd || x->opcode() == Opcode::kSubtract;
  };
  auto single_user = [&](const Instruction* x) -> const Instruction* {
    auto it = users_.find(x);
    return it != users_.end() && it->second.size() == 1 ? it->second[0] : nullptr;
  };
  const Instruction* root = &dot;
  while (const Instruction* u = single_user(root)) {
    if (!sums(u) || u->shape() != dot.shape() || root == root->parent()->root()) break;
    root = u;
  }
  if (root_out) *root_out = root;
  std::vector<const Instruction*> dots;
  std::function<void(const Instruction*)> collect = [&](const Instruction* x) {
    if (x->opcode() == Opcode::kDot) {
      dots.push_back(x);
    } else if (sums(x) && (x == root || single_user(x))) {
      collect(x->operand(0));
      collect(x->operand(1));
    }
  };
  collect(root);
  return dots;
}

// Whether the dots summed with `dot` should each leave their partial sums
// over `axes` unreduced and add them up first, for one all-reduce of the
// sum: when that moves fewer bytes than each dot on its own (each its
// cheapest plan, reduced or gathered). Decided once per sum, from the
// propagated shardings of the dots' operands; nullopt when they should not.
std::optional<std::vector<int64_t>> Visitor::SharedReduction(const Instruction& dot) {
  const Instruction* root = nullptr;
  std::vector<const Instruction*> dots = SumGroup(dot, &root);
  if (dots.size() < 2) return std::nullopt;
  if (auto it = shared_reductions_.find(root); it != shared_reductions_.end()) return it->second;
  std::optional<std::vector<int64_t>> axes;
  std::optional<AxisSharding> result;
  int64_t alone = 0, together = 0;
  bool agree = true;
  for (const Instruction* d : dots) {
    auto expected = [&](int64_t i) {
      const Instruction* o = d->operand(i);
      return PValue{nullptr, o->shape(), {ArrayShardingOf(*o)}};
    };
    std::vector<DotPlan> plans = DotPlans(*d, expected(0), expected(1));
    const DotPlan* best = nullptr;
    const DotPlan* partial = nullptr;
    for (const DotPlan& p : plans) {
      if (!best || p.move_bytes + p.reduce_bytes < best->move_bytes + best->reduce_bytes) best = &p;
      if (state_.mesh.Size(p.reduce_axes) > 1 && (!partial || p.move_bytes < partial->move_bytes))
        partial = &p;
    }
    alone += best->move_bytes + best->reduce_bytes;
    if (!partial || (axes && (*axes != partial->reduce_axes || *result != partial->result))) {
      agree = false;
      break;
    }
    axes = partial->reduce_axes;
    result = partial->result;
    together += partial->move_bytes;
    if (d == dots.back()) together += partial->reduce_bytes;  // one reduction of the sum
  }
  std::optional<std::vector<int64_t>> decision;
  if (agree && together < alone) decision = axes;
  shared_reductions_[root] = decision;
  return decision;
}

PValue Visitor::Dot(const Instruction& inst) {
  const AxisSharding& want = ArrayShardingOf(inst);
  const hlo::DotDims& dd = inst.dot;
  PValue l = Operand(inst, 0), r = Operand(inst, 1);
  const Mesh& mesh = state_.mesh;
  std::vector<DotPlan> plans = DotPlans(inst, l, r);
  std::optional<std::vector<int64_t>> shared = SharedReduction(inst);
  const DotPlan* best = nullptr;
  for (const DotPlan& p : plans) {
    if (shared && p.reduce_axes != *shared) continue;
    // A shared reduction is paid once, by the sum.
    int64_t bytes = p.move_bytes + (shared ? 0 : p.reduce_bytes);
    if (!best || bytes < best->move_bytes + (shared ? 0 : best->reduce_bytes)) best = &p;
  }
  if (!best) {  // the operands did not arrive as propagated: on its own
    shared.reset();
    for (const DotPlan& p : plans) {
      if (!best || p.move_bytes + p.reduce_bytes < best->move_bytes + best->reduce_bytes) best = &p;
    }
  }
  PValue lhs = OperandAs(inst, 0, best->lhs);
  PValue rhs = OperandAs(inst, 1, best->rhs);
  // Padding of an unevenly split contracting dim must add nothing.
  for (size_t c = 0; c < dd.lhs_contracting.size(); ++c) {
    lhs = local_->MaskPadding(lhs, dd.lhs_contracting[c], 0.0);
    rhs = local_->MaskPadding(rhs, dd.rhs_contracting[c], 0.0);
  }
  Shape local(inst.shape().dtype(), ShardDims(mesh, best->result, inst.shape().dims()));
  PValue v{Clone(inst, {lhs.local, rhs.local}, local), inst.shape(), {best->result}};
  if (shared) {
    v.partial_sum_over = best->reduce_axes;  // reduced when the sum is read (Whole)
    return v;
  }
  return local_->ReduceAndReshard(v, best->reduce_axes, Opcode::kAdd, want, inst.name(),
                                  "partial sums over a split contracting dim");
}

// Reduce: a local reduce over the shard (padding masked with the init
// value), then an all-reduce over the axes that split a reduced dim.
PValue Visitor::Reduce(const Instruction& inst) {
  int64_t n = inst.operand_count() / 2;
  std::optional<Opcode> op = n == 1 ? hlo::SimpleReducer(*inst.called.at(0)) : std::nullopt;
  const Instruction* init = inst.operand(1);
  if (!op || init->opcode() != Opcode::kConstant) return Replicated(inst);  // argmax and the like
  PValue x = Operand(inst, 0);
  AxisSharding in = x.leaves[0];
  std::vector<int64_t> reduce_axes;
  for (int64_t d : inst.dimensions)
    reduce_axes.insert(reduce_axes.end(), in.dims[d].begin(), in.dims[d].end());
  double identity = init->literal.GetAsDouble(0);
  for (int64_t d : inst.dimensions) x = local_->MaskPadding(x, d, identity);
  AxisSharding out;
  for (int64_t d = 0; d < in.rank(); ++d) {
    if (!Contains(inst.dimensions, d)) out.dims.push_back(in.dims[d]);
  }
  PValue init_value = OperandAs(inst, 1, AxisSharding::Replicated(0));
  Shape local(inst.shape().dtype(), ShardDims(state_.mesh, out, inst.shape().dims()));
  PValue v{Clone(inst, {x.local, init_value.local}, local), inst.shape(), {out}};
  return local_->ReduceAndReshard(v, reduce_axes, *op, ArrayShardingOf(inst), inst.name(),
                                  "a split reduced dim");
}

// slice, pad, reverse, concatenate, dynamic-slice, dynamic-update-slice:
// dims the op changes are taken whole; the others keep their split, and a
// dynamic slice's start on such a dim is 0 (the slice is the whole dim).
PValue Visitor::DataMovement(const Instruction& inst) {
  const AxisSharding& want = ArrayShardingOf(inst);
  const Shape& full = inst.shape();
  const Shape& in = inst.operand(0)->shape();
  AxisSharding s = want;
  for (int64_t d = 0; d < full.rank(); ++d) {
    bool changed = in.dim(d) != full.dim(d);
    if (inst.opcode() == Opcode::kReverse) changed = changed || Contains(inst.dimensions, d);
    if (inst.opcode() == Opcode::kConcatenate) changed = changed || d == inst.dimensions[0];
    if (inst.opcode() == Opcode::kDynamicUpdateSlice)
      changed = changed || inst.operand(1)->shape().dim(d) != full.dim(d);
    if (inst.opcode() == Opcode::kPad)
      changed = changed || inst.padding[d].low != 0 || inst.padding[d].high != 0 ||
                inst.padding[d].interior != 0;
    if (changed) s.dims[d].clear();
  }
  std::vector<Instruction*> operands;
  Shape local(full.dtype(), ShardDims(state_.mesh, s, full.dims()));
  switch (inst.opcode()) {
    case Opcode::kConcatenate:
      for (int64_t i = 0; i < inst.operand_count(); ++i)
        operands.push_back(OperandAs(inst, i, s).local);
      break;
    case Opcode::kPad:
      operands = {OperandAs(inst, 0, s).local,
                  OperandAs(inst, 1, AxisSharding::Replicated(0)).local};
      break;
    case Opcode::kDynamicSlice:
    case Opcode::kDynamicUpdateSlice: {
      int64_t first_index = inst.opcode() == Opcode::kDynamicSlice ? 1 : 2;
      operands.push_back(OperandAs(inst, 0, s).local);
      if (first_index == 2) operands.push_back(OperandAs(inst, 1, s).local);
      for (int64_t d = 0; d < full.rank(); ++d) {
        const Instruction* start = inst.operand(first_index + d);
        if (!s.dims[d].empty()) {  // the whole dim: start 0
          operands.push_back(local_->b.Constant(hlo::Literal::ScalarOf(start->shape().dtype(), 0)));
        } else {
          operands.push_back(OperandAs(inst, first_index + d, AxisSharding::Replicated(0)).local);
        }
      }
      break;
    }
    default:
      operands.push_back(OperandAs(inst, 0, s).local);
      break;
  }
  auto copy = std::make_unique<Instruction>(inst);
  copy->set_operands(operands);
  copy->set_shape(local);
  copy->set_name("");
  copy->sharding.clear();
  if (inst.opcode() == Opcode::kDynamicSlice) copy->dynamic_slice_sizes = local.dims();
  if (inst.opcode() == Opcode::kSlice) {
    for (int64_t d = 0; d < full.rank(); ++d) {
      if (!s.dims[d].empty()) copy->slice[d] = {0, local.dim(d), 1};
    }
  }
  PValue v{local_->b.Add(std::move(copy)), full, {s}};
  return local_->Reshard(v, want, inst.name());
}

// A counted loop's iterations: state element k starts at constant c and the
// condition is k < N (scan's loops); 1 when the loop is not of that form.
int64_t TripCount(const Instruction& loop) {
  const Instruction* root = loop.called[0]->root();
  if (root->opcode() != Opcode::kCompare || root->direction != hlo::Comparison::kLt) return 1;
  const Instruction* counter = root->operand(0);
  const Instruction* limit = root->operand(1);
  if (counter->opcode() != Opcode::kGetTupleElement ||
      counter->operand(0)->opcode() != Opcode::kParameter || limit->opcode() != Opcode::kConstant)
    return 1;
  const Instruction* init = loop.operand(0);
  if (init->opcode() != Opcode::kTuple) return 1;
  const Instruction* start = init->operand(counter->tuple_index);
  if (start->opcode() != Opcode::kConstant) return 1;
  int64_t n = static_cast<int64_t>(limit->literal.GetAsDouble(0) - start->literal.GetAsDouble(0));
  return n > 0 ? n : 1;
}

// While: the loop state keeps one sharding from entry to exit; the body and
// condition are partitioned with it, the condition's predicate replicated.
PValue Visitor::While(const Instruction& inst) {
  const std::vector<AxisSharding>& state_sharding = ShardingOf(inst);
  PValue init = local_->ReshardLeaves(Operand(inst, 0), state_sharding, inst.name());
  const hlo::Computation& condition = *inst.called[0];
  const hlo::Computation& body = *inst.called[1];
  Visitor body_visitor(state_, shardings_, layouts_);
  const int64_t outer_trips = state_.trips;
  state_.trips = outer_trips * TripCount(inst);
  auto new_body = body_visitor.Run(body, &state_sharding, &state_sharding);
  state_.trips = outer_trips;
  Visitor condition_visitor(state_, shardings_, layouts_);
  std::vector<AxisSharding> replicated_predicate = {AxisSharding::Replicated(0)};
  auto new_condition = condition_visitor.Run(condition, &replicated_predicate, &state_sharding);
  hlo::Computation* c = state_.module->AddComputation(std::move(new_condition));
  hlo::Computation* b = state_.module->AddComputation(std::move(new_body));
  Instruction* loop = local_->b.While(c, b, init.local);
  return {loop, inst.shape(), state_sharding};
}

// Gather from a table split on dims its indices address one element wide (an
// embedding with its vocabulary split; take_along_dim's pick of the label's
// log-probability from vocabulary-split logits): each device looks up the
// indices that fall in its part, zeroes the rest, and the results are summed
// over the splitting axes. The table is never gathered.
PValue Visitor::Gather(const Instruction& inst) {
  const hlo::GatherDims& g = inst.gather;
  PValue table = Operand(inst, 0);
  const Shape& ts = inst.operand(0)->shape();
  const Shape& is = inst.operand(1)->shape();
  const AxisSharding& want = ArrayShardingOf(inst);
  const Mesh& mesh = state_.mesh;
  const int64_t k_count = static_cast<int64_t>(g.start_index_map.size());
  const bool implicit = g.index_vector_dim == is.rank();
  AxisSharding table_sharding = AxisSharding::Replicated(ts.rank());
  std::vector<int64_t> split_axes;
  for (int64_t d : g.start_index_map) {
    if (Contains(g.collapsed_slice_dims, d) && g.slice_sizes[d] == 1 &&
        !table.leaves[0].dims[d].empty()) {
      table_sharding.dims[d] = table.leaves[0].dims[d];
      split_axes.insert(split_axes.end(), table_sharding.dims[d].begin(),
                        table_sharding.dims[d].end());
    }
  }
  if (!IsInteger(is.dtype()) || (implicit && k_count != 1)) return Replicated(inst);
  // Summing masked lookups moves the result (twice, as an all-reduce);
  // gathering the table moves the table. A small table is cheaper to gather.
  if (!split_axes.empty()) {
    int64_t n = mesh.Size(split_axes);
    int64_t table_bytes =
        Product(ShardDims(mesh, table.leaves[0], ts.dims())) * DTypeSize(ts.dtype());
    int64_t result_bytes = inst.shape().byte_size() / std::max<int64_t>(1, mesh.size() / n);
    if ((n - 1) * table_bytes < 2 * (n - 1) * result_bytes / n) {
      split_axes.clear();
      table_sharding = AxisSharding::Replicated(ts.rank());
    }
  }
  // Output batch dims, in order, are the indices' dims but the index vector dim.
  std::vector<int64_t> batch_out, batch_in;
  for (int64_t d = 0; d < inst.shape().rank(); ++d)
    if (!Contains(g.offset_dims, d)) batch_out.push_back(d);
  for (int64_t d = 0; d < is.rank(); ++d)
    if (d != g.index_vector_dim) batch_in.push_back(d);
  // The indices keep the result's batch split, without the splitting axes.
  AxisSharding indices_sharding = AxisSharding::Replicated(is.rank());
  AxisSharding result = AxisSharding::Replicated(inst.shape().rank());
  for (size_t k = 0; k < batch_out.size(); ++k) {
    std::vector<int64_t> axes;
    for (int64_t a : want.dims[batch_out[k]]) {
      if (Contains(split_axes, a)) break;
      axes.push_back(a);
    }
    indices_sharding.dims[batch_in[k]] = axes;
    result.dims[batch_out[k]] = axes;
  }
  table = OperandAs(inst, 0, table_sharding);
  PValue indices = OperandAs(inst, 1, indices_sharding);
  auto& b = local_->b;
  if (split_axes.empty()) {  // a whole table: each device looks up its own indices
    Shape local(inst.shape().dtype(), ShardDims(mesh, result, inst.shape().dims()));
    PValue v{Clone(inst, {table.local, indices.local}, local), inst.shape(), {result}};
    return local_->Reshard(v, want, inst.name());
  }
  const Shape& li = indices.local->shape();
  DType it = li.dtype();
  auto constant = [&](int64_t x) {
    return b.Constant(hlo::Literal::ScalarOf(it, static_cast<double>(x)));
  };
  // One component of the index vector at a time.
  std::vector<int64_t> component_dims = li.dims();
  if (!implicit) component_dims[g.index_vector_dim] = 1;
  auto fill = [&](int64_t x) { return b.Broadcast(constant(x), component_dims, {}); };
  std::vector<Instruction*> components;
  Instruction* mine = nullptr;
  for (int64_t k = 0; k < k_count; ++k) {
    Instruction* c = indices.local;
    if (!implicit) {
      std::vector<int64_t> starts(li.rank(), 0), limits = li.dims(), strides(li.rank(), 1);
      starts[g.index_vector_dim] = k;
      limits[g.index_vector_dim] = k + 1;
      c = b.Slice(c, starts, limits, strides);
    }
    int64_t d = g.start_index_map[k];
    if (!table_sharding.dims[d].empty()) {
      int64_t shard = table.local->shape().dim(d);
      // XLA clamps a start to the table; this device holds [offset, offset + shard).
      c = b.Clamp(constant(0), c, constant(ts.dim(d) - 1));
      Instruction* offset = local_->Offset(table_sharding.dims[d], shard);
      if (it != DType::kS32) offset = b.Convert(offset, it);
      c = b.Subtract(c, b.Broadcast(offset, component_dims, {}));
      Instruction* inside = b.Binary(Opcode::kAnd, b.Compare(c, fill(0), hlo::Comparison::kGe),
                                     b.Compare(c, fill(shard), hlo::Comparison::kLt));
      mine = mine ? b.Binary(Opcode::kAnd, mine, inside) : inside;
      c = b.Clamp(constant(0), c, constant(shard - 1));
    }
    components.push_back(c);
  }
  Instruction* local_indices =
      components.size() == 1 ? components[0] : b.Concatenate(components, g.index_vector_dim);
  Shape local(inst.shape().dtype(), ShardDims(mesh, result, inst.shape().dims()));
  Instruction* rows = Clone(inst, {table.local, local_indices}, local);
  // The mask over the result: the indices' batch dims (index vector dim dropped).
  std::vector<int64_t> mask_dims;
  for (int64_t d : batch_in) mask_dims.push_back(li.dim(d));
  Instruction* mask = b.Broadcast(b.Reshape(mine, mask_dims), local.dims(), batch_out);
  Instruction* zeros =
      b.Broadcast(b.Constant(hlo::Literal::ScalarOf(local.dtype(), 0)), local.dims(), {});
  PValue partial{b.Select(mask, rows, zeros), inst.shape(), {result}};
  return local_->ReduceAndReshard(partial, split_axes, Opcode::kAdd, want, inst.name(),
                                  "elements looked up in a split table");
}

// Scatter. Into a table split on the dims its indices address (an embedding's
// gradient with the vocabulary split): every device applies all updates with
// its indices shifted to its rows; updates for other rows fall out of bounds,
// which scatter skips. With the operand whole and the updates split along
// their scatter dims, a scatter-add of each device's updates into zeros is a
// partial sum: it is all-reduced (or reduce-scattered) and added once.
PValue Visitor::Scatter(const Instruction& inst) {
  if (inst.operand_count() != 3) return Replicated(inst);
  const hlo::ScatterDims& sd = inst.scatter;
  const Shape& os = inst.operand(0)->shape();
  const Shape& is = inst.operand(1)->shape();
  const Shape& us = inst.operand(2)->shape();
  const AxisSharding& want = ArrayShardingOf(inst);
  PValue operand = Operand(inst, 0);
  auto& b = local_->b;
  // The operand's split on the addressed, inserted dims (a vocabulary-split
  // table) is kept: each device applies the updates with indices shifted
  // into its rows, and scatter skips the rest as out of bounds.
  AxisSharding table = AxisSharding::Replicated(os.rank());
  bool split = false;
  if (IsInteger(is.dtype())) {
    for (int64_t d : sd.scatter_dims_to_operand_dims) {
      if (Contains(sd.inserted_window_dims, d) && !operand.leaves[0].dims[d].empty()) {
        table.dims[d] = operand.leaves[0].dims[d];
        split = true;
      }
    }
  }
  // A scatter-add also keeps the updates' split on their scatter dims (a
  // batch split) over axes the table does not use: each device adds its
  // updates into zeros, and the partial sums are reduced once.
  const hlo::Instruction* root = inst.called.at(0)->root();
  bool is_add = root->opcode() == Opcode::kAdd && root->operand_count() == 2 &&
                root->operand(0)->opcode() == Opcode::kParameter &&
                root->operand(1)->opcode() == Opcode::kParameter;
  std::vector<int64_t> table_axes = table.UsedAxes(), scatter_axes;
  AxisSharding u = AxisSharding::Replicated(us.rank());
  const PValue updates = Operand(inst, 2);
  for (int64_t d = 0; is_add && d < us.rank(); ++d) {
    const auto& axes = updates.leaves[0].dims[d];
    if (Contains(sd.update_window_dims, d) ||
        std::any_of(axes.begin(), axes.end(), [&](int64_t a) { return Contains(table_axes, a); }))
      continue;
    u.dims[d] = axes;
    scatter_axes.insert(scatter_axes.end(), axes.begin(), axes.end());
  }
  if (!split && scatter_axes.empty()) return Replicated(inst);
  // The indices follow the updates' split (the index vector dim whole).
  AxisSharding index_sharding = AxisSharding::Replicated(is.rank());
  int64_t k = 0;
  for (int64_t d = 0; d < us.rank(); ++d) {
    if (Contains(sd.update_window_dims, d)) continue;
    if (k == sd.index_vector_dim) ++k;
    if (k < is.rank()) index_sharding.dims[k] = u.dims[d];
    ++k;
  }
  PValue upd = OperandAs(inst, 2, u);
  PValue idx = OperandAs(inst, 1, index_sharding);
  // Padded update rows must add nothing.
  for (int64_t d = 0; d < us.rank(); ++d) {
    if (!u.dims[d].empty()) upd = local_->MaskPadding(upd, d, 0.0);
  }
  Shape table_local(os.dtype(), ShardDims(state_.mesh, table, os.dims()));
  Instruction* indices = idx.local;
  if (split) {
    std::vector<Instruction*> offsets;
    for (int64_t d : sd.scatter_dims_to_operand_dims) {
      Instruction* o = table.dims[d].empty() ? b.Constant(hlo::Literal::ScalarOf(DType::kS32, 0))
                                             : local_->Offset(table.dims[d], table_local.dim(d));
      offsets.push_back(b.Reshape(o, {1}));
    }
    Instruction* vec = offsets.size() == 1 ? offsets[0] : b.Concatenate(offsets, 0);
    if (is.dtype() != DType::kS32) vec = b.Convert(vec, is.dtype());
    const Shape& local_is = indices->shape();
    Instruction* shift = sd.index_vector_dim == is.rank()
                             ? b.Broadcast(b.Reshape(vec, {}), local_is.dims(), {})
                             : b.Broadcast(vec, local_is.dims(), {sd.index_vector_dim});
    indices = b.Subtract(indices, shift);
  }
  if (scatter_axes.empty()) {  // every update, into this device's rows
    PValue t = OperandAs(inst, 0, table);
    PValue v{Clone(inst, {t.local, indices, upd.local}, table_local), inst.shape(), {table}};
    return local_->Reshard(v, want, inst.name());
  }
  Instruction* zeros =
      b.Broadcast(b.Constant(hlo::Literal::ScalarOf(os.dtype(), 0)), table_local.dims(), {});
  PValue partial{Clone(inst, {zeros, indices, upd.local}, table_local), inst.shape(), {table}};
  PValue sum = local_->ReduceAndReshard(partial, scatter_axes, Opcode::kAdd, want, inst.name(),
                                        "scatter-adds of split updates");
  PValue base = local_->Reshard(operand, want, inst.name());
  return {b.Add(sum.local, base.local), inst.shape(), {want}};
}

}  // namespace strata::spmd::partition
