// cond and switch_case: trace every branch once on the same placeholders,
// capture what the branches read from outside as extra operands (shared by
// all branches), and build one conditional node (lowered to HLO's
// conditional). Its gradient is another conditional, on the same selector,
// over the branches' pullbacks.
#include "strata/transforms/cond.h"

#include <fmt/format.h>

#include <string>
#include <unordered_set>

#include "strata/autograd/vjp_sweep.h"
#include "strata/lazy/context.h"
#include "strata/lazy/ops.h"
#include "trace.h"

namespace strata {
namespace {

// Branch k of a conditional node (its operands after the selector are
// `values`) pulled back: the gradients, for operands `inputs` (positions
// after the selector), of the branch's outputs `outputs` given `cots`.
std::vector<Tensor> BranchPullback(const ir::Branches& branches, size_t k,
                                   const std::vector<ir::Value>& values,
                                   const std::vector<int64_t>& outputs,
                                   const std::vector<int64_t>& inputs,
                                   const std::vector<Tensor>& cots) {
  std::vector<ir::Value> roots = trace::Instantiate(branches.roots[k], values);
  std::vector<Tensor> outs, ins;
  for (int64_t o : outputs) outs.emplace_back(roots[o]);
  for (int64_t i : inputs) ins.emplace_back(values[i]);
  return VjpImpl(outs, cots, ins, /*fill_zeros=*/true);
}

Tree Conditional(const Tensor& selector, const std::vector<BranchFn>& fns,
                 const std::vector<std::string>& names, const Tree& operands);

// Reverse mode through a conditional node: a conditional on the same
// selector whose branch k returns branch k's pullback, zeros for the
// operands that branch does not read.
class CondGradient final : public ir::GradientRule {
 public:
  explicit CondGradient(std::vector<std::string> names) : names_(std::move(names)) {}

  std::vector<ir::Value> Vjp(const ir::NodePtr& node, const std::vector<ir::Value>& cotangents,
                             const std::vector<bool>& needed) const override {
    const ir::Branches& branches = *node->branches();
    const auto& ops = node->operands();
    const int64_t p = static_cast<int64_t>(ops.size()) - 1;
    std::vector<ir::Value> result(ops.size());
    std::vector<int64_t> inputs, outputs;  // differentiable operands; outputs with cotangents
    for (int64_t i = 0; i < p; ++i) {
      if (needed[i + 1] && Differentiable(ops[i + 1].shape())) inputs.push_back(i);
    }
    for (int64_t k = 0; k < node->num_outputs(); ++k) {
      if (cotangents[k] && Differentiable(node->shape(k))) outputs.push_back(k);
    }
    if (inputs.empty() || outputs.empty()) return result;
    Tree::List args;
    for (int64_t i = 0; i < p; ++i) args.push_back(Tensor(ops[i + 1]));
    for (int64_t o : outputs) args.push_back(Tensor(cotangents[o]));
    std::vector<BranchFn> pullbacks;
    for (size_t k = 0; k < branches.roots.size(); ++k) {
      pullbacks.push_back([&, k](const Tree& t) {
        std::vector<ir::Value> values;
        for (int64_t i = 0; i < p; ++i) values.push_back(t[i].leaf().value());
        std::vector<Tensor> cots;
        for (size_t n = 0; n < outputs.size(); ++n) cots.push_back(t[p + n].leaf());
        Tree::List grads;
        for (Tensor& g : BranchPullback(branches, k, values, outputs, inputs, cots))
          grads.push_back(std::move(g));
        return Tree(std::move(grads));
      });
    }
    std::vector<std::string> names;
    for (const std::string& n : names_) names.push_back("the pullback of " + n);
    Tree grads = Conditional(Tensor(ops[0]), pullbacks, names, Tree(std::move(args)));
    for (size_t n = 0; n < inputs.size(); ++n) result[inputs[n] + 1] = grads[n].leaf().value();
    return result;
  }

 private:
  std::vector<std::string> names_;
};

// The answer of an index check that found nothing: {-1, 0}.
Tensor NoIndexError() { return stack({full({}, -1, DType::kS64), zeros({}, DType::kS64)}); }

// fns[selector](operands): selector is a pred scalar (two branches, true
// first) or an s32 scalar in range.
Tree Conditional(const Tensor& selector, const std::vector<BranchFn>& fns,
                 const std::vector<std::string>& names, const Tree& operands) {
  const auto leaves = operands.leaves_with_paths();
  const int64_t p = static_cast<int64_t>(leaves.size());
  const size_t n = fns.size();
  trace::Level depth;
  const int32_t level = depth.level();
  std::vector<ir::NodePtr> placeholders;
  std::vector<Tensor> inputs;
  for (int64_t i = 0; i < p; ++i) {
    placeholders.push_back(ir::Node::MakePlaceholder(leaves[i].second.shape(), i, level));
    inputs.emplace_back(ir::Value{placeholders.back(), 0});
  }
  const Tree in = operands.spec().Unflatten(std::move(inputs));
  std::vector<Tree> outs;
  for (size_t k = 0; k < n; ++k) {
    auto before = lazy::Context::Get().LiveValues();
    if (!fns[k]) Fail("[cond] {} is empty: pass a callable operands -> outputs", names[k]);
    Tree out = fns[k](in);
    std::unordered_set<lazy::TensorImpl*> allowed;
    trace::AddImpls(in, allowed);
    trace::AddImpls(out, allowed);
    trace::CheckLeaks(before, level, allowed, "[cond] " + names[k],
                      "Return them from the branch instead");
    outs.push_back(std::move(out));
  }
  for (size_t k = 1; k < n; ++k) {
    std::string diff = outs[0].spec().FirstDifference(outs[k].spec());
    if (!diff.empty()) {
      Fail("[cond] {} returned {} but {} returned {}: they differ at {}", names[0],
           outs[0].spec().ToString(), names[k], outs[k].spec().ToString(), diff);
    }
    auto first = outs[0].leaves_with_paths();
    auto other = outs[k].leaves_with_paths();
    for (size_t j = 0; j < first.size(); ++j) {
      if (first[j].second.shape() != other[j].second.shape()) {
        Fail(
            "[cond] {} returned {} at output{} but {} returned {}: every branch must return "
            "the same shapes and dtypes",
            names[0], first[j].second.shape().ToString(), first[j].first, names[k],
            other[j].second.shape().ToString());
      }
    }
  }
  const size_t m = outs[0].leaves().size();
  if (m == 0) return outs[0];  // nothing to compute

  // Each branch's roots: its outputs, then the answer of every branch's
  // index checks (its own, {-1, 0} for the others'), so that whichever
  // branch ran, the node's extra outputs hold the checks.
  std::vector<std::vector<ir::IndexCheck>> checks(n);
  size_t num_checks = 0;
  for (size_t k = 0; k < n; ++k) {
    std::vector<ir::Value> roots;
    for (const Tensor& t : outs[k].leaves()) roots.push_back(t.value());
    checks[k] = trace::BodyIndexChecks(roots, level);
    num_checks += checks[k].size();
  }
  std::vector<ir::Value> all;
  for (size_t k = 0; k < n; ++k) {
    for (const Tensor& t : outs[k].leaves()) all.push_back(t.value());
    for (size_t j = 0; j < n; ++j) {
      for (const ir::IndexCheck& check : checks[j])
        all.push_back(j == k ? check.value : NoIndexError().value());
    }
  }
  // Extracted together, the branches share one capture of each outer value.
  trace::Body body = trace::Extract(all, level, p);
  auto branches = std::make_shared<ir::Branches>();
  const size_t per_branch = m + num_checks;
  for (size_t k = 0; k < n; ++k) {
    branches->roots.emplace_back(body.roots.begin() + static_cast<int64_t>(k * per_branch),
                                 body.roots.begin() + static_cast<int64_t>((k + 1) * per_branch));
  }
  branches->placeholders = std::move(placeholders);
  branches->placeholders.insert(branches->placeholders.end(), body.invariants.begin(),
                                body.invariants.end());
  std::vector<ir::Value> node_operands{selector.value()};
  for (const auto& [path, t] : leaves) node_operands.push_back(t.value());
  node_operands.insert(node_operands.end(), body.captured.begin(), body.captured.end());
  ir::NodePtr node = ir::Node::MakeConditional(std::move(node_operands), std::move(branches));
  if (!node->stops_gradient()) node = node->WithGradientRule(std::make_shared<CondGradient>(names));

  // Every output carries every check, each on an identity of its own (a
  // node holds one check), so whichever output a program computes, the
  // branch's indices are checked.
  std::vector<std::shared_ptr<const ir::IndexCheck>> node_checks;
  int64_t position = static_cast<int64_t>(m);
  for (size_t k = 0; k < n; ++k) {
    for (const ir::IndexCheck& check : checks[k]) {
      node_checks.push_back(std::make_shared<const ir::IndexCheck>(ir::IndexCheck{
          .value = ir::Value{node, position++},
          .op = fmt::format("{} in {}", check.op, names[k]),
          .range = check.range,
          .index_shape = check.index_shape,
          .divisor = check.divisor,
      }));
    }
  }
  std::vector<Tensor> results;
  for (size_t j = 0; j < m; ++j) {
    ir::Value v{node, static_cast<int64_t>(j)};
    for (const auto& check : node_checks)
      v = ir::Value{ir::Node::MakeOp(hlo::Opcode::kTuple, {v})->WithIndexCheck(check), 0};
    results.emplace_back(v);
  }
  return outs[0].spec().Unflatten(std::move(results));
}

// A selector's single element as a scalar, or an Error naming `what`.
Tensor OneElement(const Tensor& t, const char* what) {
  if (t.shape().num_elements() != 1) {
    Fail("[cond] {} must have exactly one element, got {}", what, t.shape().ToString());
  }
  return t.rank() == 0 ? t : reshape(t, {});
}

}  // namespace

Tree cond(const Tensor& pred, const BranchFn& true_fn, const BranchFn& false_fn,
          const Tree& operands) {
  if (!pred.defined()) Fail("[cond] pred is an undefined tensor");
  Tensor p = OneElement(pred, "pred");
  if (p.dtype() != DType::kPred) {
    if (!IsInteger(p.dtype()) && !IsFloating(p.dtype())) {
      Fail("[cond] pred must be a bool or a number, got {}", p.shape().ToString());
    }
    p = ne(p, zeros({}, p.dtype()));
  }
  return Conditional(p, {true_fn, false_fn}, {"true_fn", "false_fn"}, operands);
}

Tree switch_case(const Tensor& index, const std::vector<BranchFn>& branches, const Tree& operands) {
  if (branches.empty()) Fail("[cond] switch_case needs at least one branch");
  if (!index.defined()) Fail("[cond] switch_case's index is an undefined tensor");
  Tensor i = OneElement(index, "switch_case's index");
  if (!IsInteger(i.dtype())) {
    Fail("[cond] switch_case's index must be an integer, got {}", i.shape().ToString());
  }
  if (branches.size() == 1) return branches[0](operands);
  const auto last = static_cast<int64_t>(branches.size() - 1);
  // Clamped in the index's own dtype first: a uint64 beyond int64's range
  // (2^64 - 1) would turn negative as int64 and pick branch 0, not the last.
  if (IsUnsignedInteger(i.dtype())) i = minimum(i, integer_scalar(last, i.dtype()));
  i = astype(i, DType::kS64);
  i = minimum(maximum(i, zeros({}, DType::kS64)), integer_scalar(last, DType::kS64));
  std::vector<std::string> names;
  for (size_t k = 0; k < branches.size(); ++k) names.push_back(fmt::format("branches[{}]", k));
  return Conditional(astype(i, DType::kS32), branches, names, operands);
}

}  // namespace strata
