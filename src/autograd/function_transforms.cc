// grad / value_and_grad / vjp over Trees, on top of the reverse sweep.
#include "strata/autograd/grad.h"
#include "strata/autograd/vjp_sweep.h"
#include "strata/ir/lowering.h"
#include "strata/lazy/op_builder.h"

#include <algorithm>
#include <map>
#include <unordered_map>
#include <unordered_set>

namespace strata {
namespace {

// Each leaf behind its own identity node, so leaves that share a tensor are
// still separate variables (the tuple folds away when compiled).
Tree FreshLeaves(std::string_view op, const Tree& primals) {
  for (const auto& [path, t] : primals.leaves_with_paths()) {
    if (!IsFloating(t.dtype())) {
      Fail("[{}] input{} is {}: only floating-point tensors have gradients", op, path,
           t.shape().ToString());
    }
  }
  return primals.map([](const Tensor& t) { return Tensor(Fresh(t.value())); });
}

// Checks a cotangent tree against the outputs it is for.
void CheckCotangent(const TreeSpec& out_spec, const std::vector<Tensor>& outputs,
                    const Tree& cotangent) {
  std::string diff = out_spec.FirstDifference(cotangent.spec());
  if (!diff.empty()) {
    Fail("[vjp] the cotangent must have the output's structure {}; at {}", out_spec.ToString(),
         diff);
  }
  auto cots = cotangent.leaves_with_paths();
  for (size_t i = 0; i < cots.size(); ++i) {
    if (cots[i].second.shape().dims() != outputs[i].shape().dims()) {
      Fail("[vjp] cotangent{} is {}, the output there is {}", cots[i].first,
           cots[i].second.shape().ToString(), outputs[i].shape().ToString());
    }
  }
}

ValueAuxAndGrad ValueAuxAndGradOf(const std::function<std::pair<Tensor, Tree>(const Tree&)>& f,
                                  const Tree& primals) {
  Tree x = FreshLeaves("grad", primals);
  auto [out, aux] = f(x);
  if (!out.defined() || out.numel() != 1) {
    Fail("[grad] the function must return a tensor with one element, got {}",
         out.defined() ? out.shape().ToString() : "an undefined tensor");
  }
  CheckFloatingOutput("grad", out);
  std::vector<Tensor> inputs = x.leaves();
  Tensor seed = ones(out.shape().dims(), out.dtype());
  std::vector<Tensor> grads = VjpImpl({out}, {seed}, inputs, /*fill_zeros=*/true);
  return {out, std::move(aux), primals.spec().Unflatten(std::move(grads))};
}

std::pair<Tensor, Tree> ValueAndGrad(const std::function<Tensor(const Tree&)>& f,
                                     const Tree& primals) {
  ValueAuxAndGrad r = ValueAuxAndGradOf(
      [&](const Tree& x) {
        return std::pair{f(x), Tree()};
      },
      primals);
  return {std::move(r.value), std::move(r.grad)};
}

}  // namespace

std::function<Tree(const Tree&)> grad(std::function<Tensor(const Tree&)> f) {
  return [f = std::move(f)](const Tree& x) { return ValueAndGrad(f, x).second; };
}

std::function<std::pair<Tensor, Tree>(const Tree&)> value_and_grad(
    std::function<Tensor(const Tree&)> f) {
  return [f = std::move(f)](const Tree& x) { return ValueAndGrad(f, x); };
}

std::function<ValueAuxAndGrad(const Tree&)> value_and_grad_with_aux(
    std::function<std::pair<Tensor, Tree>(const Tree&)> f) {
  return [f = std::move(f)](const Tree& x) { return ValueAuxAndGradOf(f, x); };
}

std::pair<Tree, std::function<Tree(const Tree&)>> vjp(const std::function<Tree(const Tree&)>& f,
                                                      const Tree& primals) {
  Tree x = FreshLeaves("vjp", primals);
  Tree out = f(x);
  TreeSpec out_spec = out.spec(), in_spec = primals.spec();
  std::vector<Tensor> outputs = out.leaves(), inputs = x.leaves();
  auto pullback = [=](const Tree& cotangent) {
    CheckCotangent(out_spec, outputs, cotangent);
    return in_spec.Unflatten(VjpImpl(outputs, cotangent.leaves(), inputs, /*fill_zeros=*/true));
  };
  return {out, std::function<Tree(const Tree&)>(pullback)};
}

StagedVjp vjp_with_residuals(const std::function<Tree(const Tree&)>& f, const Tree& primals) {
  Tree x = FreshLeaves("vjp", primals);
  Tree out = f(x);
  TreeSpec out_spec = out.spec(), in_spec = primals.spec();
  std::vector<Tensor> outputs = out.leaves(), inputs = x.leaves();
  // The pullback's graph, on stand-ins for the cotangents (identities the
  // rules cannot see through), replaced by the real ones when it is called.
  std::vector<Tensor> stand_ins;
  for (const Tensor& o : outputs)
    stand_ins.emplace_back(Fresh(zeros(o.shape().dims(), o.dtype()).value()));
  std::vector<ir::Value> grads;
  for (const Tensor& g : VjpImpl(outputs, stand_ins, inputs, /*fill_zeros=*/true))
    grads.push_back(g.value());

  // The forward's nodes; the residuals are its values that a node of the
  // pullback's own reads (or that a gradient is), the inputs excepted.
  std::vector<ir::Value> out_values;
  for (const Tensor& o : outputs) out_values.push_back(o.value());
  std::unordered_set<const ir::Node*> forward;
  for (const ir::Node* n : ir::BuildGraph(out_values).post_order) {
    if (!n->is_leaf()) forward.insert(n);
  }
  for (const Tensor& in : inputs) forward.erase(in.value().node.get());
  std::vector<ir::ValueKey> keys;
  std::vector<Tensor> residuals;
  auto keep = [&](const ir::Value& v) {
    if (!forward.count(v.node.get())) return;
    ir::ValueKey key{v.node.get(), v.index};
    if (std::find(keys.begin(), keys.end(), key) != keys.end()) return;
    keys.push_back(key);
    residuals.emplace_back(v);
  };
  for (const ir::Node* n : ir::BuildGraph(grads).post_order) {
    if (forward.count(n)) continue;
    for (const ir::Value& v : n->operands()) keep(v);
  }
  for (const ir::Value& g : grads) keep(g);

  // The residuals' nodes stay alive with `grads`, so their keys stay theirs.
  std::vector<Shape> residual_shapes;
  for (const Tensor& r : residuals) residual_shapes.push_back(r.shape());
  auto pullback = [=](const Tree& cotangent, const std::vector<Tensor>& given) {
    CheckCotangent(out_spec, outputs, cotangent);
    if (given.size() != keys.size()) {
      Fail("[vjp] the pullback takes the {} residuals vjp_with_residuals returned, got {}",
           keys.size(), given.size());
    }
    std::map<ir::ValueKey, ir::Value> replacements;
    std::vector<Tensor> cots = cotangent.leaves();
    for (size_t i = 0; i < cots.size(); ++i)
      replacements[{stand_ins[i].value().node.get(), 0}] = cots[i].value();
    for (size_t r = 0; r < keys.size(); ++r) {
      if (!given[r].defined() || given[r].shape() != residual_shapes[r]) {
        Fail("[vjp] residual {} must be {} as vjp_with_residuals returned it, got {}", r,
             residual_shapes[r].ToString(),
             given[r].defined() ? given[r].shape().ToString() : "an undefined tensor");
      }
      replacements[keys[r]] = given[r].value();
    }
    std::vector<Tensor> result;
    for (ir::Value& v : ir::ReplaceValues(grads, replacements)) result.emplace_back(std::move(v));
    return in_spec.Unflatten(std::move(result));
  };
  return {out, residuals, pullback};
}

}  // namespace strata
