// VJP rules of indexing (gather, scatter, dynamic slices): one case per opcode, written with the
// lazy ops.
#include <algorithm>

#include "vjp_rules.h"

namespace strata::vjp_rules {

namespace {

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

}  // namespace

std::vector<Tensor> IndexingVjp(const RuleArgs& args) {
  [[maybe_unused]] const auto& [node, ops, g, out] = args;
  std::vector<Tensor> in(ops.size());
  switch (node.opcode()) {
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
      // Half-precision cotangents are summed in f32 and rounded once: added
      // into a bf16 buffer one by one, a row many positions read (a frequent
      // token's embedding) would lose the small terms to the large sum.
      const DType sum_type =
          IsFloating(g.dtype()) && DTypeSize(g.dtype()) == 2 ? DType::kF32 : g.dtype();
      const Tensor updates = astype(g, sum_type);
      a.called = {ir::ScalarCombiner(Opcode::kAdd, sum_type)};
      Tensor sum = T(lazy::Op(
          Opcode::kScatter,
          {Zeros(ops[0].shape().WithDType(sum_type)).value(), clamped.value(), updates.value()},
          std::move(a)));
      in = {astype(sum, g.dtype()), Tensor()};
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
    default:
      STRATA_CHECK(false, "{} has no rule among the indexing VJPs", node.OpName());
  }
  return in;
}

}  // namespace strata::vjp_rules
