// cond and switch_case: run one of several functions, chosen by a tensor's
// value at run time, as one compiled conditional (jax.lax.cond and
// jax.lax.switch; torch.cond).
//
//   Tree out = strata::cond(
//       gt(sum(x), 0.0),
//       [&](const Tree& o) { return Tree(o.leaf() * w); },
//       [&](const Tree& o) { return Tree(-o.leaf()); }, Tree(x));
//
// Each branch runs once, when it is traced, on placeholders (no data, no
// device work); the program holds both and runs only the one chosen, so one
// compile serves every value of the predicate. Outer tensors a branch reads
// (w above) are captured: passed to the conditional, and they receive
// gradients. Every branch must return the same structure, shapes and dtypes.
// The gradient is a conditional on the same predicate whose branches are the
// forward branches' pullbacks; a pullback recomputes its branch's forward
// values (nothing is saved between the passes). An index out of range inside
// the branch that ran is an Error from the sync, as outside one.
#pragma once

#include <functional>
#include <vector>

#include "strata/lazy/tree.h"

namespace strata {

using BranchFn = std::function<Tree(const Tree& operands)>;

// true_fn(operands) where pred holds, false_fn(operands) otherwise. pred
// has one element: a bool, or a number (true when non-zero, as JAX).
Tree cond(const Tensor& pred, const BranchFn& true_fn, const BranchFn& false_fn,
          const Tree& operands = {});

// branches[index](operands), index (an integer with one element) clamped
// to [0, branches.size() - 1] as jax.lax.switch does.
Tree switch_case(const Tensor& index, const std::vector<BranchFn>& branches,
                 const Tree& operands = {});

}  // namespace strata
