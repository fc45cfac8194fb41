// requires_grad / backward / grad / zero_grad / detach over the functional vjp.
#include "strata/autograd/grad.h"
#include "strata/autograd/vjp_sweep.h"
#include "strata/lazy/context.h"
#include "strata/lazy/ops.h"

namespace strata {

Tensor& requires_grad_(Tensor& tensor, bool value) {
  if (value && !IsFloating(tensor.dtype())) {
    Fail("[requires_grad] only floating-point tensors can require gradients, got {}",
         tensor.shape().ToString());
  }
  tensor.impl()->requires_grad = value;
  return tensor;
}

bool requires_grad(const Tensor& tensor) {
  return tensor.defined() && tensor.impl()->requires_grad;
}

void backward(const Tensor& output) {
  if (output.numel() != 1) {
    Fail("[backward] needs a scalar output, got {}; pass a cotangent for other shapes",
         output.shape().ToString());
  }
  CheckFloatingOutput("backward", output);
  backward(output, ones(output.shape().dims(), output.dtype()));
}

void backward(const Tensor& output, const Tensor& cotangent) {
  std::vector<lazy::TensorImpl*> leaves = lazy::Context::Get().TensorsRequiringGrad();
  if (leaves.empty())
    Fail("[backward] no live tensor requires a gradient; mark leaves with requires_grad_");
  std::vector<Tensor> inputs;
  for (lazy::TensorImpl* impl : leaves) inputs.emplace_back(impl->value);
  std::vector<Tensor> grads = VjpImpl({output}, {cotangent}, inputs, /*fill_zeros=*/false);
  for (size_t i = 0; i < leaves.size(); ++i) {
    lazy::TensorImpl* impl = leaves[i];
    if (!grads[i].defined()) continue;  // the output does not depend on this leaf
    if (impl->grad) {
      *impl->grad = *impl->grad + grads[i];
    } else {
      impl->grad = std::make_unique<Tensor>(grads[i]);
    }
  }
}

Tensor grad(const Tensor& tensor) {
  if (!tensor.defined() || !tensor.impl()->grad) return Tensor();
  return *tensor.impl()->grad;
}

void zero_grad(Tensor& tensor) { tensor.impl()->grad.reset(); }

Tensor detach(const Tensor& tensor) {
  const ir::Value& v = tensor.value();
  return Tensor(ir::Value{v.node->CloneStoppingGradient(), v.index});
}

}  // namespace strata
