// grad / value_and_grad / vjp over Trees, on top of the reverse sweep.
#include "strata/autograd/grad.h"
#include "strata/autograd/vjp_sweep.h"
#include "strata/lazy/op_builder.h"

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
    return in_spec.Unflatten(VjpImpl(outputs, cotangent.leaves(), inputs, /*fill_zeros=*/true));
  };
  return {out, std::function<Tree(const Tree&)>(pullback)};
}

}  // namespace strata
