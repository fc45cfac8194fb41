// VJP rules of data movement (broadcast, reshape, transpose, reverse, slice, concatenate, pad,
// copy): one case per opcode, written with the lazy ops.
#include <algorithm>

#include "vjp_rules.h"

namespace strata::vjp_rules {

namespace {

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

}  // namespace

std::vector<Tensor> DataMovementVjp(const RuleArgs& args) {
  [[maybe_unused]] const auto& [node, ops, g, out] = args;
  std::vector<Tensor> in(ops.size());
  switch (node.opcode()) {
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
    case Opcode::kPad: {
      const Shape& s = ops[0].shape();
      const auto& padding = node.attributes().padding;
      const bool trims = std::any_of(padding.begin(), padding.end(), [](const hlo::PadRange& p) {
        return p.low < 0 || p.high < 0;
      });
      if (trims) {
        // Without interior padding a pad is a shift (negative sides trim):
        // the cotangent shifts back, the trimmed elements getting zeros.
        hlo::Attributes a;
        for (const hlo::PadRange& p : padding) {
          if (p.interior != 0) Fail("[grad] no VJP for pad with negative and interior padding");
          a.padding.push_back({-p.low, -p.high, 0});
        }
        Tensor back = T(
            lazy::Op(Opcode::kPad, {g.value(), lazy::ScalarValue(0, g.dtype(), {})}, std::move(a)));
        // The fill's cotangent: every element of g the operand's did not land on.
        Tensor kept = T(lazy::Op(Opcode::kPad, {back.value(), lazy::ScalarValue(0, g.dtype(), {})},
                                 node.attributes()));
        in = {back, sum(g) - sum(kept)};
        break;
      }
      // The operand's elements sit at low + i * (interior + 1).
      std::vector<hlo::SliceRange> ranges;
      for (int64_t d = 0; d < s.rank(); ++d) {
        const hlo::PadRange& p = padding[d];
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
    default:
      STRATA_CHECK(false, "{} has no rule among the movement VJPs", node.OpName());
  }
  return in;
}

}  // namespace strata::vjp_rules
