// The reverse sweep under vjp(), backward(), the gradient rules of
// checkpointed regions and scan's backward loop (the transforms layer).
// Users call autograd/grad.h instead.
#pragma once

#include <string_view>
#include <vector>

#include "strata/ir/node.h"
#include "strata/lazy/tensor.h"

namespace strata {

// d(sum_i <outputs[i], cotangents[i]>)/d(inputs). An input nothing reaches
// gets zeros when `fill_zeros`, else an undefined Tensor.
std::vector<Tensor> VjpImpl(const std::vector<Tensor>& outputs,
                            const std::vector<Tensor>& cotangents,
                            const std::vector<Tensor>& inputs, bool fill_zeros);

// An Error unless `output` (what grad / backward seed with ones) is
// floating: an integer output would give zero gradients, silently.
void CheckFloatingOutput(std::string_view op, const Tensor& output);

// Where an opcode's reverse-mode rule lives: its row's vjp column
// (hlo::VjpRuleOf).
using hlo::VjpRule;

// Values that carry gradients: floating-point arrays.
inline bool Differentiable(const Shape& s) { return s.is_array() && IsFloating(s.dtype()); }

// `v` behind an identity node of its own: a separate variable for a VJP
// (differentiating with respect to it does not reach through to what `v`
// is computed from). The identity folds away when compiled.
inline ir::Value Fresh(const ir::Value& v) {
  return ir::Value{ir::Node::MakeOp(hlo::Opcode::kTuple, {v}), 0};
}

}  // namespace strata
