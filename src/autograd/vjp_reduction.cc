// VJP rules of reductions and dots: one case per opcode, written with the lazy ops.
#include <algorithm>

#include "vjp_rules.h"

namespace strata::vjp_rules {

namespace {

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

}  // namespace

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

std::vector<Tensor> ReductionVjp(const RuleArgs& args) {
  [[maybe_unused]] const auto& [node, ops, g, out] = args;
  std::vector<Tensor> in(ops.size());
  switch (node.opcode()) {
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
        Tensor mask = astype(eq(T(ops[0]), BroadcastInDim(out, s, kept)), g.dtype());
        Tensor count = BroadcastInDim(sum(mask, reduced), s, kept);
        in = {g_back * mask / count, Tensor()};
      } else {
        Fail("[grad] no VJP for reduce with {}", hlo::OpcodeName(combiner));
      }
      break;
    }
    case Opcode::kDot: {
      const hlo::DotDims& d = node.attributes().dot;
      Tensor a = T(ops[0]), b = T(ops[1]);
      in = {DotOperandGrad(g, b, a.shape(), d.lhs_batch, d.lhs_contracting, d.rhs_batch,
                           d.rhs_contracting, true),
            DotOperandGrad(g, a, b.shape(), d.rhs_batch, d.rhs_contracting, d.lhs_batch,
                           d.lhs_contracting, false)};
      break;
    }
    default:
      STRATA_CHECK(false, "{} has no rule among the reduction VJPs", node.OpName());
  }
  return in;
}

}  // namespace strata::vjp_rules
