// The VJP of sort: every operand is permuted by one permutation along the
// sort dimension, so a sorted operand's cotangent goes back through it,
// each element to the position it came from.
#include "vjp_rules.h"

namespace strata::vjp_rules {

std::vector<Tensor> SortRule(const ir::NodePtr& owner, const std::vector<Tensor>& g) {
  const ir::Node& node = *owner;
  const auto& ops = node.operands();
  std::vector<Tensor> in(ops.size());
  bool wanted = false;
  for (size_t k = 0; k < ops.size(); ++k)
    wanted = wanted || (g[k].defined() && Differentiable(ops[k].shape()));
  if (!wanted) return in;
  // The permutation is the sorted output of an iota along the dimension
  // (strata's sort, argsort and topk sort one with their keys).
  const int64_t d = node.attributes().dimensions.at(0);
  int64_t permutation = -1;
  for (size_t k = 0; k < ops.size(); ++k) {
    const ir::Node& op = *ops[k].node;
    if (!op.is_leaf() && op.opcode() == Opcode::kIota && IsInteger(ops[k].shape().dtype()) &&
        op.attributes().dimensions == std::vector<int64_t>{d}) {
      permutation = static_cast<int64_t>(k);
    }
  }
  if (permutation < 0) {
    Fail(
        "[grad] differentiating a sort needs its permutation: sort an integer iota along "
        "dimension {} with the operands (strata's sort, argsort and topk do)",
        d);
  }
  const ir::Value perm{owner, permutation};
  for (size_t k = 0; k < ops.size(); ++k) {
    if (!g[k].defined() || !Differentiable(ops[k].shape())) continue;
    in[k] = T(lazy::ScatterAddAlongDim(Zeros(ops[k].shape()).value(), d, perm, g[k].value()));
  }
  return in;
}

std::vector<Tensor> TopKRule(const ir::NodePtr& owner, const std::vector<Tensor>& g) {
  const ir::Node& node = *owner;
  const ir::Value& x = node.operands()[0];
  if (!g[0].defined() || !Differentiable(x.shape())) return {Tensor()};
  const int64_t last = x.shape().rank() - 1;
  return {T(
      lazy::ScatterAddAlongDim(Zeros(x.shape()).value(), last, ir::Value{owner, 1}, g[0].value()))};
}

}  // namespace strata::vjp_rules
