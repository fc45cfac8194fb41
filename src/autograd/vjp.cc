// The VJP sweep: topological order from the output, one rule per primitive,
// cotangents accumulated by add. Rules are written with the lazy ops, so the
// gradient graph is ordinary lazy IR (it hashes, caches and fuses like any).
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "strata/autograd/grad.h"
#include "strata/autograd/vjp_sweep.h"
#include "strata/ir/lowering.h"
#include "strata/lazy/op_builder.h"

namespace strata {
namespace {

using hlo::Opcode;
using Key = std::pair<const ir::Node*, int64_t>;

Tensor T(const ir::Value& v) { return Tensor(v); }

// x broadcast to `shape`, operand dim i landing on result dim mapping[i].
Tensor BroadcastInDim(const Tensor& x, const Shape& shape, std::vector<int64_t> mapping) {
  hlo::Attributes a;
  a.dimensions = std::move(mapping);
  return T(lazy::Op(Opcode::kBroadcast, {x.value()}, std::move(a), shape.WithDType(x.dtype())));
}

Tensor Zeros(const Shape& s) { return zeros(s.dims(), s.dtype()); }

// A cotangent placed in a window of zeros along one dimension: what slice's
// rule gives. {dim, offset} when `g` is such a pad, else nothing.
std::optional<std::pair<int64_t, int64_t>> ZeroPadWindow(const Tensor& g) {
  const ir::Node& n = *g.value().node;
  if (n.kind() != ir::NodeKind::kOp || n.opcode() != Opcode::kPad) return std::nullopt;
  const ir::Node& value = *n.operands()[1].node;
  bool zero = value.kind() == ir::NodeKind::kScalar
                  ? value.scalar().GetAsDouble(0) == 0
                  : value.kind() == ir::NodeKind::kOp && value.opcode() == Opcode::kConstant &&
                        value.attributes().literal.GetAsDouble(0) == 0;
  if (!zero) return std::nullopt;
  std::optional<std::pair<int64_t, int64_t>> window;
  const auto& padding = n.attributes().padding;
  for (int64_t d = 0; d < static_cast<int64_t>(padding.size()); ++d) {
    const hlo::PadRange& p = padding[d];
    if (p.interior != 0 || p.low < 0 || p.high < 0) return std::nullopt;
    if (p.low == 0 && p.high == 0) continue;
    if (window) return std::nullopt;  // padded along two dimensions
    window = std::pair{d, p.low};
  }
  return window;
}

// The sum of one value's cotangent contributions. Pads of disjoint windows
// along one dimension (the rules of slice, split, unstack) are joined into a
// single concatenate instead of N full-size adds: the gradient of N layers
// read as slices of one stacked tensor costs one copy of the stack, not N.
// The nodes under `roots`, operands before users, where a node for which
// `through` gives a value has that value as its one operand.
template <typename Through>
std::vector<const ir::Node*> PostOrderThroughOrigins(const std::vector<ir::Value>& roots,
                                                     const Through& through) {
  std::vector<const ir::Node*> order;
  std::unordered_set<const ir::Node*> visited;
  std::vector<std::pair<const ir::Node*, size_t>> stack;
  auto edges = [&](const ir::Node* n) -> size_t { return through(n) ? 1 : n->operands().size(); };
  auto edge = [&](const ir::Node* n, size_t i) {
    const ir::Value* origin = through(n);
    return origin ? origin->node.get() : n->operands()[i].node.get();
  };
  for (const ir::Value& root : roots) {
    if (!visited.insert(root.node.get()).second) continue;
    stack.push_back({root.node.get(), 0});
    while (!stack.empty()) {
      auto& [node, next] = stack.back();
      if (next < edges(node)) {
        const ir::Node* op = edge(node, next++);
        if (visited.insert(op).second) stack.push_back({op, 0});
      } else {
        order.push_back(node);
        stack.pop_back();
      }
    }
  }
  return order;
}

Tensor SumContributions(std::vector<Tensor> parts) {
  if (parts.size() == 1) return parts[0];
  const Shape shape = parts[0].shape();
  struct Window {
    int64_t offset;
    Tensor pad;  // the contribution: `piece` placed at `offset` in zeros
    Tensor piece;
  };
  std::map<int64_t, std::vector<Window>> windows;  // by padded dim
  std::vector<Tensor> rest;
  for (Tensor& g : parts) {
    auto w = ZeroPadWindow(g);
    if (!w) {
      rest.push_back(std::move(g));
      continue;
    }
    Tensor piece = T(g.value().node->operands()[0]);
    windows[w->first].push_back({w->second, std::move(g), std::move(piece)});
  }
  for (auto& [dim, ws] : windows) {
    std::sort(ws.begin(), ws.end(),
              [](const auto& a, const auto& b) { return a.offset < b.offset; });
    bool disjoint = ws.size() > 1;
    for (size_t i = 1; i < ws.size() && disjoint; ++i)
      disjoint = ws[i - 1].offset + ws[i - 1].piece.dim(dim) <= ws[i].offset;
    if (!disjoint) {  // overlapping (or alone): add the pads as they are
      for (Window& w : ws) rest.push_back(std::move(w.pad));
      continue;
    }
    std::vector<Tensor> row;
    int64_t at = 0;
    auto gap = [&](int64_t size) {
      if (size == 0) return;
      std::vector<int64_t> dims = shape.dims();
      dims[dim] = size;
      row.push_back(zeros(dims, shape.dtype()));
    };
    for (Window& w : ws) {
      gap(w.offset - at);
      at = w.offset + w.piece.dim(dim);
      row.push_back(std::move(w.piece));
    }
    gap(shape.dim(dim) - at);
    rest.push_back(concat(row, dim));
  }
  Tensor total = rest[0];
  for (size_t i = 1; i < rest.size(); ++i) total = total + rest[i];
  return total;
}

// Sums g (shaped like a broadcast's output) back to the broadcast operand.
Tensor UnBroadcast(const Tensor& g, const Shape& operand, const std::vector<int64_t>& mapping) {
  std::vector<int64_t> summed;
  for (int64_t d = 0; d < g.rank(); ++d) {
    if (std::find(mapping.begin(), mapping.end(), d) == mapping.end()) summed.push_back(d);
  }
  Tensor r = summed.empty() ? g : sum(g, summed);
  std::vector<int64_t> sorted = mapping;
  std::sort(sorted.begin(), sorted.end());
  if (sorted != mapping) {  // result dims follow sorted mapping; put them in operand order
    std::vector<int64_t> perm;
    for (int64_t m : mapping)
      perm.push_back(std::find(sorted.begin(), sorted.end(), m) - sorted.begin());
    r = permute(r, perm);
  }
  return reshape(r, operand.dims());
}

// Gradient of a dot with respect to one side: dot the cotangent with the
// other operand over the other side's free dims, then permute into place.
Tensor DotOperandGrad(const Tensor& g, const Tensor& other, const Shape& self,
                      const std::vector<int64_t>& self_batch,
                      const std::vector<int64_t>& self_contracting,
                      const std::vector<int64_t>& other_batch,
                      const std::vector<int64_t>& other_contracting, bool self_is_lhs) {
  int64_t nb = static_cast<int64_t>(self_batch.size());
  std::vector<int64_t> self_free, other_free;
  for (int64_t d = 0; d < self.rank(); ++d) {
    if (std::find(self_batch.begin(), self_batch.end(), d) == self_batch.end() &&
        std::find(self_contracting.begin(), self_contracting.end(), d) == self_contracting.end()) {
      self_free.push_back(d);
    }
  }
  for (int64_t d = 0; d < other.rank(); ++d) {
    if (std::find(other_batch.begin(), other_batch.end(), d) == other_batch.end() &&
        std::find(other_contracting.begin(), other_contracting.end(), d) ==
            other_contracting.end()) {
      other_free.push_back(d);
    }
  }
  // Positions of the other side's free dims in the output: after batch and
  // the lhs free dims.
  int64_t lhs_free_count = self_is_lhs ? static_cast<int64_t>(self_free.size())
                                       : static_cast<int64_t>(other_free.size());
  hlo::DotDims dims;
  for (int64_t i = 0; i < nb; ++i) {
    dims.lhs_batch.push_back(i);
    dims.rhs_batch.push_back(other_batch[i]);
  }
  for (size_t j = 0; j < other_free.size(); ++j) {
    dims.lhs_contracting.push_back(self_is_lhs ? nb + lhs_free_count + static_cast<int64_t>(j)
                                               : nb + static_cast<int64_t>(j));
    dims.rhs_contracting.push_back(other_free[j]);
  }
  hlo::Attributes a;
  a.dot = dims;
  Tensor r = T(lazy::Op(Opcode::kDot, {g.value(), other.value()}, std::move(a)));
  // r dims: batch, self free (in order), other's remaining dims = other
  // contracting dims in ascending order, each paired with a self contracting dim.
  std::vector<int64_t> other_rest;
  for (int64_t d = 0; d < other.rank(); ++d) {
    if (std::find(other_batch.begin(), other_batch.end(), d) == other_batch.end() &&
        std::find(other_free.begin(), other_free.end(), d) == other_free.end()) {
      other_rest.push_back(d);
    }
  }
  std::vector<int64_t> source(self.rank());  // self dim -> r dim
  for (int64_t i = 0; i < nb; ++i) source[self_batch[i]] = i;
  for (size_t j = 0; j < self_free.size(); ++j) source[self_free[j]] = nb + static_cast<int64_t>(j);
  for (size_t k = 0; k < other_rest.size(); ++k) {
    auto it = std::find(other_contracting.begin(), other_contracting.end(), other_rest[k]);
    int64_t pair = self_contracting[it - other_contracting.begin()];
    source[pair] = nb + static_cast<int64_t>(self_free.size() + k);
  }
  return permute(r, source);
}

// Operands [first, end) of a dynamic-slice family op: its start indices.
std::vector<Tensor> Starts(const std::vector<ir::Value>& ops, size_t first) {
  std::vector<Tensor> starts;
  for (size_t i = first; i < ops.size(); ++i) starts.push_back(T(ops[i]));
  return starts;
}

// Index vectors of a gather/scatter (`indices`, vector along `ivd`; ivd ==
// rank means one implicit component): component k may start operand dim
// map[k] anywhere in [0, dim - window].
// IndexBounds gives those bounds, broadcastable against the indices.
Tensor IndexBounds(const Tensor& indices, const Shape& operand, const std::vector<int64_t>& map,
                   const std::vector<int64_t>& window, int64_t ivd) {
  std::vector<int64_t> bounds;
  for (int64_t d : map) bounds.push_back(std::max<int64_t>(operand.dim(d) - window[d], 0));
  Tensor b =
      astype(Tensor::FromVector(bounds, {static_cast<int64_t>(bounds.size())}), indices.dtype());
  if (ivd == indices.rank()) return reshape(b, {});
  std::vector<int64_t> dims(indices.rank(), 1);
  dims[ivd] = static_cast<int64_t>(bounds.size());
  return reshape(b, dims);
}

Tensor ClampIndices(const Tensor& indices, const Tensor& bounds) {
  return minimum(maximum(indices, zeros({}, indices.dtype())), bounds);
}

// Whether each index vector is entirely in range, shaped like the indices'
// batch dims (all dims but ivd).
Tensor IndicesInRange(const Tensor& indices, const Tensor& bounds, int64_t ivd) {
  Tensor ok = logical_and(ge(indices, zeros({}, indices.dtype())), le(indices, bounds));
  if (ivd == indices.rank()) return ok;
  return eq(min(astype(ok, DType::kS32), {ivd}), ones({}, DType::kS32));
}

// The gather reading, for each update element of a scatter, the operand
// element it was combined into (the scatter's index mapping, transposed).
Tensor GatherScattered(const Tensor& from, const ir::Value& indices, const Shape& updates,
                       const hlo::ScatterDims& sd) {
  hlo::GatherDims gd;
  gd.offset_dims = sd.update_window_dims;
  gd.collapsed_slice_dims = sd.inserted_window_dims;
  gd.start_index_map = sd.scatter_dims_to_operand_dims;
  gd.index_vector_dim = sd.index_vector_dim;
  // Window sizes: 1 on inserted dims, else the update's window extent.
  gd.slice_sizes.assign(from.rank(), 1);
  size_t w = 0;
  for (int64_t d = 0; d < from.rank(); ++d) {
    if (std::find(sd.inserted_window_dims.begin(), sd.inserted_window_dims.end(), d) !=
        sd.inserted_window_dims.end())
      continue;
    gd.slice_sizes[d] = updates.dim(sd.update_window_dims[w++]);
  }
  hlo::Attributes a;
  a.gather = std::move(gd);
  return T(lazy::Op(Opcode::kGather, {from.value(), indices}, std::move(a)));
}

// Variadic reduce as argmax/argmin build it: (values, indices) -> (the
// extreme value, its index). The value's cotangent goes to the one element
// whose value and index both equal the result; indices carry none.
std::vector<Tensor> VariadicReduceRule(const ir::NodePtr& owner, const std::vector<Tensor>& g) {
  const ir::Node& node = *owner;
  const auto& ops = node.operands();
  std::vector<Tensor> in(ops.size());
  bool value_grad = g[0].defined() && Differentiable(ops[0].shape());
  for (size_t k = 1; k < g.size(); ++k) {
    if (g[k].defined() && Differentiable(ops[k].shape()))
      Fail("[grad] no VJP for variadic reduce output {} of {}", k, node.OpName());
  }
  if (!value_grad) return in;
  if (ops.size() != 4 || !IsInteger(ops[1].shape().dtype()))
    Fail("[grad] no VJP for variadic reduce {}", node.OpName());
  const Shape& s = ops[0].shape();
  const auto& reduced = node.attributes().dimensions;
  std::vector<int64_t> kept;
  for (int64_t d = 0; d < s.rank(); ++d) {
    if (std::find(reduced.begin(), reduced.end(), d) == reduced.end()) kept.push_back(d);
  }
  Tensor chosen =
      logical_and(eq(T(ops[0]), BroadcastInDim(T(ir::Value{owner, 0}), s, kept)),
                  eq(T(ops[1]), BroadcastInDim(T(ir::Value{owner, 1}), ops[1].shape(), kept)));
  in[0] = where(chosen, BroadcastInDim(g[0], s, kept), Zeros(s));
  return in;
}

// Cotangents for each operand of `node` given the output cotangents (an
// entry is undefined when that output got none).
std::vector<Tensor> Rule(const ir::NodePtr& owner, const std::vector<Tensor>& out_grads) {
  const ir::Node& node = *owner;
  const auto& ops = node.operands();
  std::vector<Tensor> in(ops.size());
  if (const ir::GradientRule* rule = node.gradient_rule()) {
    std::vector<ir::Value> cotangents;
    for (const Tensor& g : out_grads) cotangents.push_back(g.defined() ? g.value() : ir::Value{});
    std::vector<ir::Value> grads = rule->Vjp(owner, cotangents);
    STRATA_CHECK(grads.size() == ops.size(), "gradient rule returned {} values for {} operands",
                 grads.size(), ops.size());
    for (size_t i = 0; i < grads.size(); ++i) {
      if (grads[i]) in[i] = T(grads[i]);
    }
    return in;
  }
  if (node.opcode() == Opcode::kTuple || node.opcode() == Opcode::kOptimizationBarrier) {
    return out_grads;  // identities, output k is operand k
  }
  if (node.opcode() == Opcode::kReduce && node.num_outputs() > 1) {
    return VariadicReduceRule(owner, out_grads);
  }
  if (node.num_outputs() != 1) {
    for (const Tensor& g : out_grads) {
      if (g.defined()) Fail("[grad] no VJP for multi-output {}", node.OpName());
    }
    return in;
  }
  const Tensor& g = out_grads[0];
  Tensor out = T(ir::Value{owner, 0});
  auto operand = [&](size_t i) { return T(ops[i]); };
  switch (node.opcode()) {
    case Opcode::kAdd:
      in = {g, g};
      break;
    case Opcode::kSubtract:
      in = {g, -g};
      break;
    case Opcode::kMultiply:
      in = {g * operand(1), g * operand(0)};
      break;
    case Opcode::kDivide: {
      Tensor b = operand(1);
      in = {g / b, -(g * operand(0)) / (b * b)};
      break;
    }
    case Opcode::kNegate:
      in = {-g};
      break;
    case Opcode::kExp:
      in = {g * exp(operand(0))};
      break;
    case Opcode::kExpm1:
      in = {g * exp(operand(0))};
      break;
    case Opcode::kLog:
      in = {g / operand(0)};
      break;
    case Opcode::kLog1p:
      in = {g / (operand(0) + 1.0)};
      break;
    case Opcode::kTanh: {
      Tensor t = tanh(operand(0));
      in = {g * (1.0 - t * t)};
      break;
    }
    case Opcode::kLogistic: {
      Tensor s = sigmoid(operand(0));
      in = {g * s * (1.0 - s)};
      break;
    }
    case Opcode::kSqrt:
      in = {g * 0.5 / sqrt(operand(0))};
      break;
    case Opcode::kRsqrt:
      in = {g * -0.5 * rsqrt(operand(0)) / operand(0)};
      break;
    case Opcode::kSin:
      in = {g * cos(operand(0))};
      break;
    case Opcode::kCos:
      in = {-(g * sin(operand(0)))};
      break;
    case Opcode::kErf: {
      Tensor x = operand(0);
      in = {g * (2.0 / std::sqrt(M_PI)) * exp(-(x * x))};
      break;
    }
    case Opcode::kAbs:
      in = {g * sign(operand(0))};
      break;
    case Opcode::kSign:
    case Opcode::kFloor:
    case Opcode::kCeil:
    case Opcode::kRoundNearestEven:
      in = {Zeros(ops[0].shape())};
      break;
    case Opcode::kMaximum:
    case Opcode::kMinimum: {
      // Ties send the gradient to the first operand.
      Tensor a = operand(0), b = operand(1);
      Tensor first = node.opcode() == Opcode::kMaximum ? ge(a, b) : le(a, b);
      Tensor zero = Zeros(g.shape());
      in = {where(first, g, zero), where(first, zero, g)};
      break;
    }
    case Opcode::kPower: {
      // d/db is p * log(a), taken as 0 where a == 0 and b >= 0 (0^b is
      // constant there; torch does the same).
      Tensor a = operand(0), b = operand(1), p = pow(a, b);
      Tensor zero = Zeros(g.shape());
      Tensor flat = logical_and(eq(a, zero), ge(b, zero));
      in = {g * b * pow(a, b - 1.0), where(flat, zero, g * p * log(where(flat, zero + 1.0, a)))};
      break;
    }
    case Opcode::kConvert:
      if (Differentiable(ops[0].shape())) in = {astype(g, ops[0].shape().dtype())};
      break;
    case Opcode::kBroadcast:
      in = {UnBroadcast(g, ops[0].shape(), node.attributes().dimensions)};
      break;
    case Opcode::kReshape:
      in = {reshape(g, ops[0].shape().dims())};
      break;
    case Opcode::kCopy:
      in = {g};
      break;
    case Opcode::kTranspose: {
      const auto& perm = node.attributes().dimensions;
      std::vector<int64_t> inverse(perm.size());
      for (size_t i = 0; i < perm.size(); ++i) inverse[perm[i]] = static_cast<int64_t>(i);
      in = {permute(g, inverse)};
      break;
    }
    case Opcode::kReverse: {
      hlo::Attributes a;
      a.dimensions = node.attributes().dimensions;
      in = {T(lazy::Op(Opcode::kReverse, {g.value()}, std::move(a)))};
      break;
    }
    case Opcode::kSelect: {
      Tensor zero = Zeros(g.shape());
      in = {Tensor(), where(operand(0), g, zero), where(operand(0), zero, g)};
      break;
    }
    case Opcode::kSlice: {
      const Shape& s = ops[0].shape();
      std::vector<hlo::PadRange> padding;
      for (int64_t d = 0; d < s.rank(); ++d) {
        const hlo::SliceRange& r = node.attributes().slice[d];
        int64_t n = g.shape().dim(d);
        int64_t end = n == 0 ? r.start : r.start + (n - 1) * r.stride + 1;
        padding.push_back({r.start, s.dim(d) - end, n == 0 ? 0 : r.stride - 1});
      }
      hlo::Attributes a;
      a.padding = std::move(padding);
      in = {T(lazy::Op(Opcode::kPad, {g.value(), Zeros(Shape::Scalar(g.dtype())).value()},
                       std::move(a)))};
      break;
    }
    case Opcode::kConcatenate: {
      int64_t dim = node.attributes().dimensions[0], offset = 0;
      for (size_t i = 0; i < ops.size(); ++i) {
        int64_t size = ops[i].shape().dim(dim);
        in[i] = slice(g, dim, offset, offset + size);
        offset += size;
      }
      break;
    }
    case Opcode::kReduce: {
      const Shape& s = ops[0].shape();
      const auto& reduced = node.attributes().dimensions;
      std::vector<int64_t> kept;
      for (int64_t d = 0; d < s.rank(); ++d) {
        if (std::find(reduced.begin(), reduced.end(), d) == reduced.end()) kept.push_back(d);
      }
      Opcode combiner = node.attributes().called[0]->root()->opcode();
      Tensor g_back = BroadcastInDim(g, s, kept);
      if (combiner == Opcode::kAdd) {
        in = {g_back, Tensor()};
      } else if (combiner == Opcode::kMaximum || combiner == Opcode::kMinimum) {
        // Ties share the gradient equally.
        Tensor mask = astype(eq(operand(0), BroadcastInDim(out, s, kept)), g.dtype());
        Tensor count = BroadcastInDim(sum(mask, reduced), s, kept);
        in = {g_back * mask / count, Tensor()};
      } else {
        Fail("[grad] no VJP for reduce with {}", hlo::OpcodeName(combiner));
      }
      break;
    }
    case Opcode::kDot: {
      const hlo::DotDims& d = node.attributes().dot;
      Tensor a = operand(0), b = operand(1);
      in = {DotOperandGrad(g, b, a.shape(), d.lhs_batch, d.lhs_contracting, d.rhs_batch,
                           d.rhs_contracting, true),
            DotOperandGrad(g, a, b.shape(), d.rhs_batch, d.rhs_contracting, d.lhs_batch,
                           d.lhs_contracting, false)};
      break;
    }
    case Opcode::kGather: {
      // The forward clamps each start into range; the scatter that carries
      // the gradient back would drop out-of-range ones, so clamp them first.
      const hlo::GatherDims& gd = node.attributes().gather;
      Tensor indices = T(ops[1]);
      Tensor clamped =
          ClampIndices(indices, IndexBounds(indices, ops[0].shape(), gd.start_index_map,
                                            gd.slice_sizes, gd.index_vector_dim));
      hlo::Attributes a;
      a.scatter.update_window_dims = gd.offset_dims;
      a.scatter.inserted_window_dims = gd.collapsed_slice_dims;
      a.scatter.scatter_dims_to_operand_dims = gd.start_index_map;
      a.scatter.index_vector_dim = gd.index_vector_dim;
      a.called = {ir::ScalarCombiner(Opcode::kAdd, g.dtype())};
      in = {T(lazy::Op(Opcode::kScatter,
                       {Zeros(ops[0].shape()).value(), clamped.value(), g.value()}, std::move(a))),
            Tensor()};
      break;
    }
    case Opcode::kClamp: {  // clamp(low, x, high)
      Tensor low = operand(0), x = operand(1), high = operand(2);
      Tensor zero = Zeros(g.shape());
      Tensor below = lt(x, low), above = gt(x, high);
      Tensor low_g = where(below, g, zero), high_g = where(above, g, zero);
      in = {ops[0].shape().rank() == 0 ? sum(low_g) : low_g,
            where(logical_or(below, above), zero, g),
            ops[2].shape().rank() == 0 ? sum(high_g) : high_g};
      break;
    }
    case Opcode::kRemainder: {  // a - b * trunc(a / b), as HLO (C fmod)
      Tensor q = operand(0) / operand(1);
      Tensor trunc = where(ge(q, Zeros(q.shape())), floor(q), ceil(q));
      in = {g, -(g * trunc)};
      break;
    }
    case Opcode::kAtan2: {  // atan2(a, b)
      Tensor a = operand(0), b = operand(1), r2 = a * a + b * b;
      in = {g * b / r2, -(g * a) / r2};
      break;
    }
    case Opcode::kPad: {
      // The operand's elements sit at low + i * (interior + 1).
      const Shape& s = ops[0].shape();
      std::vector<hlo::SliceRange> ranges;
      for (int64_t d = 0; d < s.rank(); ++d) {
        const hlo::PadRange& p = node.attributes().padding[d];
        if (p.low < 0 || p.high < 0) Fail("[grad] no VJP for pad with negative padding");
        int64_t step = p.interior + 1;
        ranges.push_back({p.low, p.low + (s.dim(d) - 1) * step + 1, step});
        if (s.dim(d) == 0) ranges.back() = {p.low, p.low, 1};
      }
      hlo::Attributes a;
      a.slice = std::move(ranges);
      Tensor inner = T(lazy::Op(Opcode::kSlice, {g.value()}, std::move(a)));
      in = {inner, sum(g) - sum(inner)};
      break;
    }
    case Opcode::kDynamicSlice: {
      std::vector<Tensor> starts = Starts(ops, 1);
      in[0] = dynamic_update_slice(Zeros(ops[0].shape()), g, starts);
      break;
    }
    case Opcode::kDynamicUpdateSlice: {
      std::vector<Tensor> starts = Starts(ops, 2);
      const Shape& u = ops[1].shape();
      in[0] = dynamic_update_slice(g, Zeros(u), starts);
      in[1] = dynamic_slice(g, starts, u.dims());
      break;
    }
    case Opcode::kScatter: {
      if (ops.size() != 3) Fail("[grad] no VJP for variadic scatter");
      const hlo::ScatterDims& sd = node.attributes().scatter;
      const hlo::Computation* combiner = node.attributes().called[0];
      const hlo::Instruction* root = combiner->root();
      // Updates whose index is out of range were dropped: no gradient.
      const Shape& us = ops[2].shape();
      std::vector<int64_t> window(ops[0].shape().rank(), 1), batch_dims;
      size_t w = 0;
      for (int64_t d = 0; d < ops[0].shape().rank(); ++d) {
        if (std::find(sd.inserted_window_dims.begin(), sd.inserted_window_dims.end(), d) ==
            sd.inserted_window_dims.end())
          window[d] = us.dim(sd.update_window_dims[w++]);
      }
      for (int64_t d = 0; d < us.rank(); ++d) {
        if (std::find(sd.update_window_dims.begin(), sd.update_window_dims.end(), d) ==
            sd.update_window_dims.end())
          batch_dims.push_back(d);
      }
      Tensor indices = T(ops[1]);
      Tensor in_range =
          IndicesInRange(indices,
                         IndexBounds(indices, ops[0].shape(), sd.scatter_dims_to_operand_dims,
                                     window, sd.index_vector_dim),
                         sd.index_vector_dim);
      Tensor kept = BroadcastInDim(in_range, us.WithDType(DType::kPred), batch_dims);
      auto update_grad = [&] { return where(kept, GatherScattered(g, ops[1], us, sd), Zeros(us)); };
      if (root->opcode() == Opcode::kAdd) {
        in = {g, Tensor(), update_grad()};
      } else if (root->opcode() == Opcode::kParameter && root->parameter_number == 1) {
        // Overwrite: written positions take their gradient from the update
        // (the last write wins, as the runtime applies updates in order).
        hlo::Attributes a = node.attributes();
        Tensor cleared = T(lazy::Op(
            Opcode::kScatter, {g.value(), ops[1], Zeros(ops[2].shape()).value()}, std::move(a)));
        in = {cleared, Tensor(), update_grad()};
      } else {
        Fail("[grad] no VJP for scatter combining with {}", combiner->name());
      }
      break;
    }
    case Opcode::kCompare:
    case Opcode::kIota:
    case Opcode::kConstant:
    case Opcode::kNot:
    case Opcode::kAnd:
    case Opcode::kOr:
    case Opcode::kXor:
    case Opcode::kIsFinite:
    case Opcode::kRngBitGenerator:
      break;  // no gradient flows here
    default:
      Fail("[grad] no VJP rule for {} yet", node.OpName());
  }
  return in;
}

}  // namespace

std::vector<Tensor> VjpImpl(const std::vector<Tensor>& outputs,
                            const std::vector<Tensor>& cotangents,
                            const std::vector<Tensor>& inputs, bool fill_zeros) {
  STRATA_CHECK(outputs.size() == cotangents.size(), "{} outputs, {} cotangents", outputs.size(),
               cotangents.size());
  std::vector<ir::Value> roots;
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (cotangents[i].shape().dims() != outputs[i].shape().dims()) {
      Fail("[grad] cotangent {} does not match output {}", cotangents[i].shape().ToString(),
           outputs[i].shape().ToString());
    }
    roots.push_back(outputs[i].value());
  }
  // An input is identified by its current value and, when that value is
  // materialized data, by the value it was computed from (a graph built
  // before the input's sync reads that one).
  std::map<Key, size_t> input_index;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const ir::Value& v = inputs[i].value();
    input_index[{v.node.get(), v.index}] = i;
    if (const ir::Value& origin = v.node->origin())
      input_index[{origin.node.get(), origin.index}] = i;
  }
  auto is_input = [&](const ir::Node* n) { return input_index.count({n, 0}) > 0; };
  // Materialized data that kept its origin stands for that value: the
  // sweep passes its cotangent on, as through an identity.
  auto through = [&](const ir::Node* n) -> const ir::Value* {
    return n->kind() == ir::NodeKind::kDeviceData && n->origin() && !is_input(n) ? &n->origin()
                                                                                 : nullptr;
  };
  std::vector<const ir::Node*> post_order = PostOrderThroughOrigins(roots, through);
  // Nodes on a path to some input: only their cotangents are needed.
  std::unordered_set<const ir::Node*> relevant;
  for (const ir::Node* n : post_order) {
    bool r = false;
    for (int64_t k = 0; k < n->num_outputs() && !r; ++k) r = input_index.count({n, k}) > 0;
    if (const ir::Value* origin = through(n)) {
      r = r || relevant.count(origin->node.get());
    } else if (!n->stops_gradient()) {
      for (const ir::Value& v : n->operands()) r = r || relevant.count(v.node.get());
    }
    if (r) relevant.insert(n);
  }
  // Owning pointers to every node (the graph itself holds raw ones).
  std::unordered_map<const ir::Node*, ir::NodePtr> owners;
  for (const ir::Value& root : roots) owners.emplace(root.node.get(), root.node);
  for (const ir::Node* n : post_order) {
    for (const ir::Value& v : n->operands()) owners.emplace(v.node.get(), v.node);
    if (const ir::Value* origin = through(n)) owners.emplace(origin->node.get(), origin->node);
  }
  std::map<Key, std::vector<Tensor>> grads;  // contributions, summed when read
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!Differentiable(outputs[i].shape())) continue;
    grads[{roots[i].node.get(), roots[i].index}].push_back(
        astype(cotangents[i], outputs[i].dtype()));
  }
  for (auto it = post_order.rbegin(); it != post_order.rend(); ++it) {
    const ir::Node* n = *it;
    if (!relevant.count(n)) continue;
    if (const ir::Value* origin = through(n)) {
      auto g = grads.find({n, 0});
      if (g != grads.end()) {
        std::vector<Tensor> passed = std::move(g->second);
        grads.erase(g);
        auto& into = grads[{origin->node.get(), origin->index}];
        into.insert(into.end(), passed.begin(), passed.end());
      }
      continue;
    }
    if (n->is_leaf() || n->stops_gradient()) continue;
    std::vector<Tensor> out_grads(n->num_outputs());
    bool any = false;
    for (int64_t k = 0; k < n->num_outputs(); ++k) {
      auto g = grads.find({n, k});
      if (g != grads.end()) {
        g->second = {SumContributions(std::move(g->second))};  // an input may read it later
        out_grads[k] = g->second[0];
        any = true;
      }
    }
    if (!any) continue;
    std::vector<Tensor> in_grads = Rule(owners.at(n), out_grads);
    // An op that checks its indices (checked indexing) passes the check to
    // the gradients it produces: a graph of the backward pass alone still
    // finds an index out of range.
    if (const ir::IndexCheck* check = n->index_check()) {
      auto shared = std::make_shared<const ir::IndexCheck>(*check);
      for (Tensor& g : in_grads) {
        if (g.defined() && g.value().node->placeholder_level() == 0)
          g = T(ir::Value{g.value().node->WithIndexCheck(shared), g.value().index});
      }
    }
    for (size_t i = 0; i < n->operands().size(); ++i) {
      const ir::Value& v = n->operands()[i];
      if (!in_grads[i].defined() || !relevant.count(v.node.get()) || !Differentiable(v.shape()))
        continue;
      grads[{v.node.get(), v.index}].push_back(in_grads[i]);
    }
  }
  std::vector<Tensor> result;
  for (const Tensor& x : inputs) {
    std::vector<Tensor> contributions;
    for (const ir::Value* v : {&x.value(), &x.value().node->origin()}) {
      if (!*v) continue;
      auto g = grads.find({v->node.get(), v->index});
      if (g != grads.end())
        contributions.insert(contributions.end(), g->second.begin(), g->second.end());
    }
    Tensor grad = !contributions.empty() ? SumContributions(contributions)
                  : fill_zeros           ? Zeros(x.shape())
                                         : Tensor();
    // A gradient is laid out like its primal (JAX's cotangent rule): the
    // partitioner then reduce-scatters a sharded weight's gradient instead
    // of all-reducing it whole, inside scan's backward loop too.
    const std::optional<ir::Sharding>& sharding =
        x.sharding() ? x.sharding() : x.value().node->sharding();
    if (grad.defined() && sharding && !grad.value().node->sharding()) {
      ir::NodePtr one =
          grad.value().node->num_outputs() == 1 && grad.value().node->kind() == ir::NodeKind::kOp
              ? grad.value().node
              : ir::Node::MakeOp(hlo::Opcode::kCopy, {grad.value()});
      grad = T(ir::Value{one->CloneWithSharding(sharding), 0});
    }
    result.push_back(grad);
  }
  return result;
}

namespace {

// Asking for the gradient of an integer or boolean tensor is an error
// (reaching one on the way is not: it simply carries none).
void CheckInputs(std::string_view op, const std::vector<Tensor>& inputs) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) Fail("[{}] input {} is an undefined tensor", op, i);
    if (!IsFloating(inputs[i].dtype())) {
      Fail("[{}] input {} is {}: only floating-point tensors have gradients", op, i,
           inputs[i].shape().ToString());
    }
  }
}

}  // namespace

std::vector<Tensor> vjp(const Tensor& output, const Tensor& cotangent,
                        const std::vector<Tensor>& inputs) {
  CheckInputs("vjp", inputs);
  return VjpImpl({output}, {cotangent}, inputs, true);
}

std::vector<Tensor> vjp(const std::vector<Tensor>& outputs, const std::vector<Tensor>& cotangents,
                        const std::vector<Tensor>& inputs) {
  if (outputs.size() != cotangents.size()) {
    Fail("[vjp] {} outputs but {} cotangents", outputs.size(), cotangents.size());
  }
  CheckInputs("vjp", inputs);
  return VjpImpl(outputs, cotangents, inputs, true);
}

std::vector<Tensor> gradients(const Tensor& output, const std::vector<Tensor>& inputs) {
  if (output.numel() != 1) {
    Fail("[grad] gradients needs a scalar output, got {}; pass a cotangent to vjp instead",
         output.shape().ToString());
  }
  CheckInputs("gradients", inputs);
  return VjpImpl(
      {output},
      {ones(output.shape().dims(), IsFloating(output.dtype()) ? output.dtype() : DType::kF32)},
      inputs, true);
}

}  // namespace strata
