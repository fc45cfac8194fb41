// Resharding: moving a value from one sharding to another with the least
// communication the two allow.
//
// Per dimension, the axes both shardings split it over first (a common
// prefix) stay; the source's remaining axes are all-gathered (minor ones
// first, so each gather joins contiguous blocks); the target's remaining
// axes are then taken by a local dynamic-slice at this partition's offset,
// which costs nothing. A dimension split unevenly is gathered whole and
// trimmed to its size before it is split again, so padding never moves
// into the data. Going from replicated to split is therefore free, and from
// split to replicated is one all-gather per split dimension.
//
// Two shardings with the same tile count on every dimension (axes swapped
// between dims, one axis for another, or the same split in another device
// order) differ only in which device holds which tile: one
// collective-permute sends each tile where it is wanted. A value in a device
// order of its own is permuted into the mesh's order before anything else,
// and out of it last.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <optional>
#include <tuple>

#include "partition_context.h"
#include "strata/core/error.h"

namespace strata::spmd {

using hlo::Instruction;
using hlo::Opcode;

namespace {

struct Step {
  int64_t dim;
  std::vector<int64_t> axes;
};

struct ReshardPlan {
  std::vector<Step> gathers, slices;
};

ReshardPlan PlanReshard(const Mesh& mesh, const Shape& full, const AxisSharding& from,
                        const AxisSharding& to) {
  ReshardPlan plan;
  for (int64_t d = 0; d < full.rank(); ++d) {
    const auto& a = from.dims[d];
    const auto& b = to.dims[d];
    size_t keep = 0;
    while (keep < a.size() && keep < b.size() && a[keep] == b[keep]) ++keep;
    bool even = full.dim(d) % mesh.Size(a) == 0 && full.dim(d) % mesh.Size(b) == 0;
    if (!even && a != b) keep = 0;
    if (keep < a.size()) plan.gathers.push_back({d, {a.begin() + keep, a.end()}});
    if (keep < b.size()) plan.slices.push_back({d, {b.begin() + keep, b.end()}});
  }
  return plan;
}

std::string ShardingText(const Mesh& mesh, const AxisSharding& s) { return ToString(mesh, s); }

bool SameTileCounts(const Mesh& mesh, const AxisSharding& a, const AxisSharding& b) {
  for (int64_t d = 0; d < a.rank(); ++d) {
    if (TileCount(mesh, a, d) != TileCount(mesh, b, d)) return false;
  }
  return true;
}

// (source, target) pairs that give every device the tile it holds under `to`
// from a device holding it under `from` (the tile counts alike): a device
// that already holds its tile keeps it; the other holders of a tile are
// matched in order with the devices that want it. Sorted by source.
hlo::SourceTargetPairs PermutePairs(const Mesh& mesh, const AxisSharding& from,
                                    const AxisSharding& to) {
  const Mesh mf = LayoutMesh(mesh, from), mt = LayoutMesh(mesh, to);
  auto tile = [](const Mesh& m, const AxisSharding& s, int64_t device) {
    std::vector<int64_t> t;
    for (const auto& axes : s.dims) t.push_back(m.IndexAlong(axes, device));
    return t;
  };
  hlo::SourceTargetPairs pairs;
  std::map<std::vector<int64_t>, std::vector<int64_t>> holders, wanters;
  for (int64_t p = 0; p < mesh.size(); ++p) {
    std::vector<int64_t> held = tile(mf, from, p), wanted = tile(mt, to, p);
    if (held == wanted) {
      pairs.push_back({p, p});
    } else {
      holders[held].push_back(p);
      wanters[wanted].push_back(p);
    }
  }
  for (const auto& [t, want] : wanters) {
    const std::vector<int64_t>& have = holders[t];
    STRATA_CHECK(have.size() == want.size(), "permute: {} holders for {} wanters of a tile",
                 have.size(), want.size());
    for (size_t k = 0; k < want.size(); ++k) pairs.push_back({have[k], want[k]});
  }
  std::sort(pairs.begin(), pairs.end());
  return pairs;
}

bool MovesData(const hlo::SourceTargetPairs& pairs) {
  return std::any_of(pairs.begin(), pairs.end(), [](auto p) { return p.first != p.second; });
}

// Axes X that move from the minor end of dim i's split to the minor end of
// dim j's, everything else alike, both dims even: one all-to-all does it.
struct AxisMove {
  int64_t from_dim, to_dim;
  std::vector<int64_t> axes;
};
std::optional<AxisMove> FindAxisMove(const Mesh& mesh, const Shape& full, const AxisSharding& a,
                                     const AxisSharding& b) {
  std::optional<AxisMove> move;
  for (int64_t d = 0; d < full.rank(); ++d) {
    if (a.dims[d] == b.dims[d]) continue;
    const auto& x = a.dims[d];
    const auto& y = b.dims[d];
    if (y.size() < x.size() && std::equal(y.begin(), y.end(), x.begin())) {
      if (move && move->from_dim >= 0) return std::nullopt;
      if (!move) move = AxisMove{-1, -1, {}};
      move->from_dim = d;
      std::vector<int64_t> moved(x.begin() + y.size(), x.end());
      if (!move->axes.empty() && move->axes != moved) return std::nullopt;
      move->axes = moved;
    } else if (x.size() < y.size() && std::equal(x.begin(), x.end(), y.begin())) {
      if (move && move->to_dim >= 0) return std::nullopt;
      if (!move) move = AxisMove{-1, -1, {}};
      move->to_dim = d;
      std::vector<int64_t> moved(y.begin() + x.size(), y.end());
      if (!move->axes.empty() && move->axes != moved) return std::nullopt;
      move->axes = moved;
    } else {
      return std::nullopt;
    }
  }
  if (!move || move->from_dim < 0 || move->to_dim < 0) return std::nullopt;
  for (int64_t d : {move->from_dim, move->to_dim}) {
    if (full.dim(d) % mesh.Size(a.dims[d]) != 0 || full.dim(d) % mesh.Size(b.dims[d]) != 0)
      return std::nullopt;
  }
  return move;
}

// all-to-all over the moving axes along the dim that gains them; the blocks
// received (one per source tile of the other dim) then become that dim's
// major part: reshape, transpose, reshape.
Instruction* MoveAxes(hlo::Builder& b, Instruction* x, const AxisMove& m,
                      const std::vector<std::vector<int64_t>>& groups, int64_t channel) {
  const int64_t n = static_cast<int64_t>(groups.at(0).size());
  const int64_t i = m.from_dim, j = m.to_dim;
  std::vector<int64_t> dims = x->shape().dims();
  Instruction* y = b.AllToAll(x, j, groups, channel);
  std::vector<int64_t> split;  // dim j as [n, dims[j] / n]
  for (int64_t d = 0; d < static_cast<int64_t>(dims.size()); ++d) {
    if (d == j) {
      split.push_back(n);
      split.push_back(dims[d] / n);
    } else {
      split.push_back(dims[d]);
    }
  }
  y = b.Reshape(y, split);
  const int64_t block = j, at = i < j ? i : i + 1;  // positions in `split`
  std::vector<int64_t> order;
  for (int64_t d = 0; d < static_cast<int64_t>(split.size()); ++d) {
    if (d == block) continue;
    if (d == at) order.push_back(block);
    order.push_back(d);
  }
  y = b.Transpose(y, order);
  std::vector<int64_t> out = dims;
  out[i] *= n;
  out[j] /= n;
  return b.Reshape(y, out);
}

}  // namespace

hlo::Computation* PartitionState::ScalarComputation(const hlo::Computation& c) {
  auto it = copied.find(&c);
  if (it != copied.end()) return it->second;
  auto copy = std::make_unique<hlo::Computation>(c.name());
  std::map<const Instruction*, Instruction*> map;
  for (const auto& inst : c.instructions()) {
    std::vector<Instruction*> operands;
    for (Instruction* op : inst->operands()) operands.push_back(map.at(op));
    auto n = std::make_unique<Instruction>(*inst);
    n->set_operands(std::move(operands));
    for (hlo::Computation*& called : n->called) called = ScalarComputation(*called);
    map[inst.get()] = copy->AddInstruction(std::move(n));
  }
  copy->set_root(map.at(c.root()));
  hlo::Computation* added = module->AddComputation(std::move(copy));
  copied[&c] = added;
  return added;
}

hlo::Computation* PartitionState::Reducer(Opcode op, DType dtype) {
  auto key = std::make_pair(op, dtype);
  auto it = reducers.find(key);
  if (it != reducers.end()) return it->second;
  std::string name = fmt::format("{}.{}.spmd", hlo::OpcodeName(op), DTypeName(dtype));
  hlo::Computation* c = module->AddComputation(hlo::MakeScalarBinaryComputation(name, op, dtype));
  reducers[key] = c;
  return c;
}

void PartitionState::Rematerialized(const std::string& what) {
  if (options.strict) {
    Fail("[partition] strict: {} would be replicated whole on every device", what);
  }
  report->full_rematerializations.push_back(what);
}

void PartitionState::Record(std::string collective, std::string serves, std::string reason,
                            int64_t bytes) {
  report->collectives.push_back(
      {std::move(collective), std::move(serves), std::move(reason), bytes, trips});
}

Instruction* Local::PartitionId() {
  if (!partition_id_) partition_id_ = b.Convert(b.PartitionId(), DType::kS32);
  return partition_id_;
}

Instruction* Local::Offset(const std::vector<int64_t>& axes, int64_t shard) {
  auto key = std::make_pair(axes, shard);
  auto it = offsets_.find(key);
  if (it != offsets_.end()) return it->second;
  const Mesh& mesh = state_.mesh;
  std::vector<int32_t> table(mesh.size());
  for (int64_t p = 0; p < mesh.size(); ++p)
    table[p] = static_cast<int32_t>(mesh.IndexAlong(axes, p) * shard);
  Instruction* t = b.Constant(hlo::Literal::Vector<int32_t>(table, {mesh.size()}));
  Instruction* mine = b.Reshape(b.DynamicSlice(t, {PartitionId()}, {1}), {});
  offsets_[key] = mine;
  return mine;
}

PValue Local::MaskPadding(const PValue& v, int64_t dim, double value) {
  const AxisSharding& s = v.leaves[0];
  int64_t tiles = state_.mesh.Size(s.dims[dim]);
  int64_t size = v.full.dim(dim);
  if (size % tiles == 0) return v;
  const Shape& local = v.local->shape();
  Instruction* index = b.Iota(Shape(DType::kS32, local.dims()), dim);
  Instruction* offset = Offset(s.dims[dim], local.dim(dim));
  index = b.Add(index, b.Broadcast(offset, local.dims(), {}));
  Instruction* limit =
      b.Broadcast(b.Constant(hlo::Literal::ScalarOf(DType::kS32, size)), local.dims(), {});
  Instruction* inside = b.Compare(index, limit, hlo::Comparison::kLt);
  Instruction* fill =
      b.Broadcast(b.Constant(hlo::Literal::ScalarOf(local.dtype(), value)), local.dims(), {});
  return {b.Select(inside, v.local, fill), v.full, v.leaves};
}

Instruction* Local::AllReduce(Instruction* x, const std::vector<int64_t>& axes, Opcode op,
                              const std::string& serves, const std::string& reason) {
  const Mesh& mesh = state_.mesh;
  int64_t n = mesh.Size(axes);
  if (n == 1) return x;
  Instruction* r = b.AllReduce(x, state_.Reducer(op, x->shape().dtype()), mesh.GroupsOver(axes),
                               state_.next_channel++);
  std::vector<std::string> names;
  for (int64_t a : axes) names.push_back("'" + mesh.axis_names()[a] + "'");
  state_.Record("all-reduce", serves, fmt::format("{} over {}", reason, fmt::join(names, ",")),
                2 * (n - 1) * x->shape().byte_size() / n);
  return r;
}

PValue Local::ReduceAndReshard(const PValue& partial, const std::vector<int64_t>& axes, Opcode op,
                               const AxisSharding& target, const std::string& serves,
                               const std::string& reason) {
  const Mesh& mesh = state_.mesh;
  const AxisSharding& s = partial.leaves[0];
  int64_t n = mesh.Size(axes);
  if (n == 1) return Reshard(partial, target, serves);
  for (int64_t d = 0; d < s.rank(); ++d) {
    const auto& want = target.dims[d];
    const auto& have = s.dims[d];
    bool adds_exactly_axes = want.size() == have.size() + axes.size() &&
                             std::equal(have.begin(), have.end(), want.begin()) &&
                             std::equal(axes.begin(), axes.end(), want.begin() + have.size());
    if (!adds_exactly_axes || partial.full.dim(d) % mesh.Size(want) != 0) continue;
    Instruction* x = partial.local;
    Instruction* r = b.ReduceScatter(x, d, state_.Reducer(op, x->shape().dtype()),
                                     mesh.GroupsOver(axes), state_.next_channel++);
    std::vector<std::string> names;
    for (int64_t a : axes) names.push_back("'" + mesh.axis_names()[a] + "'");
    state_.Record(
        "reduce-scatter", serves,
        fmt::format("{} over {}, result split on dim {}", reason, fmt::join(names, ","), d),
        (n - 1) * x->shape().byte_size() / n);
    AxisSharding scattered = s;
    scattered.dims[d] = want;
    return Reshard({r, partial.full, {scattered}}, target, serves);
  }
  PValue whole = partial;
  whole.local = AllReduce(partial.local, axes, op, serves, reason);
  return Reshard(whole, target, serves);
}

// A reshard of `v` made earlier whose sharding splits each dim over a
// prefix of `target`'s axes (evenly, in the mesh's order): `target` is a
// local slice of it, free.
const PValue* Local::GatheredFurther(const PValue& v, const AxisSharding& target) const {
  if (!target.devices.empty()) return nullptr;
  const Instruction* local = v.local;
  for (auto it = reshards_.lower_bound(
           std::make_tuple(local, std::vector<std::vector<int64_t>>{}, std::vector<int64_t>{}));
       it != reshards_.end() && std::get<0>(it->first) == local; ++it) {
    const AxisSharding& have = it->second.leaves[0];
    bool prefix = have.devices.empty();
    for (int64_t d = 0; prefix && d < target.rank(); ++d) {
      const auto& a = have.dims[d];
      const auto& b = target.dims[d];
      prefix = a.size() <= b.size() && std::equal(a.begin(), a.end(), b.begin()) &&
               (a == b || v.full.dim(d) % state_.mesh.Size(b) == 0);
    }
    if (prefix) return &it->second;
  }
  return nullptr;
}

int64_t Local::ReshardBytes(const PValue& v, const AxisSharding& target) const {
  const Mesh& mesh = state_.mesh;
  const AxisSharding& from = v.leaves[0];
  if (from == target || GatheredFurther(v, target)) return 0;
  const int64_t shard_bytes =
      Product(ShardDims(mesh, from, v.full.dims())) * DTypeSize(v.full.dtype());
  if (SameTileCounts(mesh, from, target))
    return MovesData(PermutePairs(mesh, from, target)) ? shard_bytes : 0;
  if (!from.devices.empty()) {
    PValue in_order{v.local, v.full, {from.InMeshOrder()}};
    return ReshardBytes(v, from.InMeshOrder()) + ReshardBytes(in_order, target);
  }
  if (!target.devices.empty()) {
    PValue in_order{v.local, v.full, {target.InMeshOrder()}};
    return ReshardBytes(v, target.InMeshOrder()) + ReshardBytes(in_order, target);
  }
  if (std::optional<AxisMove> move = FindAxisMove(mesh, v.full, from, target)) {
    int64_t n = mesh.Size(move->axes);
    return (n - 1) * shard_bytes / n;
  }
  ReshardPlan plan = PlanReshard(mesh, v.full, from, target);
  std::vector<int64_t> local = ShardDims(mesh, from, v.full.dims());
  int64_t bytes = 0;
  for (const Step& g : plan.gathers) {
    int64_t n = mesh.Size(g.axes);
    bytes += (n - 1) * Product(local) * DTypeSize(v.full.dtype());
    local[g.dim] *= n;
  }
  return bytes;
}

PValue Local::Reshard(const PValue& v, const AxisSharding& target, const std::string& serves) {
  STRATA_CHECK(v.full.is_array(), "Reshard of a tuple value ({})", serves);
  const Mesh& mesh = state_.mesh;
  const AxisSharding& from = v.leaves[0];
  if (from == target) return v;
  CheckSharding(mesh, target, v.full.rank());
  auto key = std::make_tuple(static_cast<const Instruction*>(v.local), target.dims, target.devices);
  if (auto it = reshards_.find(key); it != reshards_.end()) return it->second;
  const PValue* further = GatheredFurther(v, target);
  PValue result =
      further ? ReshardUncached(*further, target, serves) : ReshardUncached(v, target, serves);
  reshards_.emplace(key, result);
  return result;
}

PValue Local::ReshardUncached(const PValue& v, const AxisSharding& target,
                              const std::string& serves) {
  const Mesh& mesh = state_.mesh;
  const AxisSharding& from = v.leaves[0];
  if (SameTileCounts(mesh, from, target)) {
    hlo::SourceTargetPairs pairs = PermutePairs(mesh, from, target);
    if (!MovesData(pairs)) return {v.local, v.full, {target}};
    Instruction* x = b.CollectivePermute(v.local, std::move(pairs), state_.next_channel++);
    state_.Record("collective-permute", serves,
                  fmt::format("{} -> {}", ShardingText(mesh, from), ShardingText(mesh, target)),
                  v.local->shape().byte_size());
    return {x, v.full, {target}};
  }
  if (!from.devices.empty()) return Reshard(Reshard(v, from.InMeshOrder(), serves), target, serves);
  if (!target.devices.empty())
    return Reshard(Reshard(v, target.InMeshOrder(), serves), target, serves);
  if (std::optional<AxisMove> move = FindAxisMove(mesh, v.full, from, target)) {
    int64_t n = mesh.Size(move->axes);
    int64_t bytes = (n - 1) * v.local->shape().byte_size() / n;
    Instruction* x =
        MoveAxes(b, v.local, *move, mesh.GroupsOver(move->axes), state_.next_channel++);
    state_.Record("all-to-all", serves,
                  fmt::format("{} -> {}", ShardingText(mesh, from), ShardingText(mesh, target)),
                  bytes);
    return {x, v.full, {target}};
  }
  ReshardPlan plan = PlanReshard(mesh, v.full, from, target);
  std::string reason =
      fmt::format("{} -> {}", ShardingText(mesh, from), ShardingText(mesh, target));
  // The sharding after each gather (its dim keeps the axes before the
  // gathered ones). A state another reshard of `v` already reached is
  // taken from there, and each new one is kept: a weight gathered over
  // 'data' for one use and over 'data' then 'model' for another is gathered
  // over 'data' once.
  std::vector<AxisSharding> states;
  AxisSharding state = from;
  for (const Step& g : plan.gathers) {
    state.dims[g.dim].resize(state.dims[g.dim].size() - g.axes.size());
    states.push_back(state);
  }
  auto key_of = [&](const AxisSharding& s) {
    return std::make_tuple(static_cast<const Instruction*>(v.local), s.dims, s.devices);
  };
  size_t done = 0;
  Instruction* x = v.local;
  for (size_t k = states.size(); k > 0; --k) {
    if (auto it = reshards_.find(key_of(states[k - 1])); it != reshards_.end()) {
      done = k;
      x = it->second.local;
      break;
    }
  }
  for (size_t k = done; k < plan.gathers.size(); ++k) {
    const Step& g = plan.gathers[k];
    int64_t n = mesh.Size(g.axes);
    int64_t bytes = (n - 1) * x->shape().byte_size();
    x = b.AllGather(x, g.dim, mesh.GroupsOver(g.axes), state_.next_channel++);
    state_.Record("all-gather", serves, reason, bytes);
    // Whole again: trim an uneven split's padding.
    if (from.dims[g.dim].size() == g.axes.size() && x->shape().dim(g.dim) != v.full.dim(g.dim)) {
      std::vector<int64_t> starts(v.full.rank(), 0), limits = x->shape().dims(),
                                                     strides(v.full.rank(), 1);
      limits[g.dim] = v.full.dim(g.dim);
      x = b.Slice(x, starts, limits, strides);
    }
    reshards_.emplace(key_of(states[k]), PValue{x, v.full, {states[k]}});
  }
  if (!plan.slices.empty()) {
    std::vector<int64_t> sizes = x->shape().dims();
    Instruction* zero = b.Constant(hlo::Literal::ScalarOf(DType::kS32, 0));
    std::vector<Instruction*> starts(v.full.rank(), zero);
    for (const Step& s : plan.slices) {
      int64_t tiles = mesh.Size(target.dims[s.dim]);
      int64_t shard = hlo::Sharding::ShardSize(v.full.dim(s.dim), tiles);
      int64_t needed = shard * mesh.Size(s.axes);
      if (x->shape().dim(s.dim) < needed) {  // uneven: pad to equal shards
        std::vector<hlo::PadRange> padding(v.full.rank());
        padding[s.dim].high = needed - x->shape().dim(s.dim);
        x = b.Pad(x, b.Constant(hlo::Literal::ScalarOf(x->shape().dtype(), 0)), padding);
      }
      starts[s.dim] = Offset(s.axes, shard);
      sizes[s.dim] = shard;
    }
    x = b.DynamicSlice(x, starts, sizes);
  }
  return {x, v.full, {target}};
}

PValue Local::ReshardLeaves(const PValue& v, const std::vector<AxisSharding>& targets,
                            const std::string& serves) {
  if (v.leaves == targets) return v;
  if (v.full.is_array()) return Reshard(v, targets.at(0), serves);
  // A tuple: reshard each element (recursively) and build it again.
  std::vector<Instruction*> elements;
  std::vector<AxisSharding> leaves;
  size_t k = 0;
  for (int64_t i = 0; i < v.full.tuple_size(); ++i) {
    const Shape& element = v.full.tuple_shape(i);
    size_t n = element.Leaves().size();
    PValue e{b.GetTupleElement(v.local, i), element,
             std::vector<AxisSharding>(v.leaves.begin() + k, v.leaves.begin() + k + n)};
    std::vector<AxisSharding> want(targets.begin() + k, targets.begin() + k + n);
    PValue r = ReshardLeaves(e, want, serves);
    elements.push_back(r.local);
    leaves.insert(leaves.end(), r.leaves.begin(), r.leaves.end());
    k += n;
  }
  return {b.Tuple(elements), v.full, leaves};
}

}  // namespace strata::spmd
