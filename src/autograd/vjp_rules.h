// The per-opcode VJP rules, one file per op family (vjp_elementwise.cc,
// vjp_movement.cc, vjp_reduction.cc, vjp_indexing.cc), and the helpers they
// share. Rule (vjp.cc) picks the family from the opcode row's vjp column.
#pragma once

#include <vector>

#include "strata/autograd/vjp_sweep.h"
#include "strata/core/error.h"
#include "strata/hlo/convolution.h"
#include "strata/lazy/op_builder.h"
#include "strata/lazy/ops.h"

namespace strata::vjp_rules {

using hlo::Opcode;

inline Tensor T(const ir::Value& v) { return Tensor(v); }

// x broadcast to `shape`, operand dim i landing on result dim mapping[i].
inline Tensor BroadcastInDim(const Tensor& x, const Shape& shape, std::vector<int64_t> mapping) {
  hlo::Attributes a;
  a.dimensions = std::move(mapping);
  return T(lazy::Op(Opcode::kBroadcast, {x.value()}, std::move(a), shape.WithDType(x.dtype())));
}

inline Tensor Zeros(const Shape& s) { return zeros(s.dims(), s.dtype()); }

// One single-output node's rule inputs: the node, its operands, the
// cotangent of its output and the output itself. A rule opens with
// `const auto& [node, ops, g, out] = args;`.
struct RuleArgs {
  const ir::Node& node;
  const std::vector<ir::Value>& ops;
  const Tensor& g;
  Tensor out;
};

// Each returns one cotangent per operand (undefined: none).
std::vector<Tensor> ElementwiseVjp(const RuleArgs& args);
std::vector<Tensor> DataMovementVjp(const RuleArgs& args);
std::vector<Tensor> ReductionVjp(const RuleArgs& args);
std::vector<Tensor> IndexingVjp(const RuleArgs& args);
std::vector<Tensor> ConvolutionVjp(const RuleArgs& args);   // vjp_convolution.cc
std::vector<Tensor> ReduceWindowVjp(const RuleArgs& args);  // vjp_pooling.cc
// sort (vjp_sort.cc): through the permutation the sort carries.
std::vector<Tensor> SortRule(const ir::NodePtr& owner, const std::vector<Tensor>& g);
// topk: the values' cotangent scattered to the positions it returns.
std::vector<Tensor> TopKRule(const ir::NodePtr& owner, const std::vector<Tensor>& g);
// Variadic reduce as argmax/argmin build it (two outputs).
std::vector<Tensor> VariadicReduceRule(const ir::NodePtr& owner, const std::vector<Tensor>& g);

}  // namespace strata::vjp_rules
