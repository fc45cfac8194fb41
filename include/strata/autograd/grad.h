// Reverse-mode differentiation over the lazy IR (first step of the autodiff
// issue): the functional core that backward() and .grad() will sit on.
#pragma once

#include <functional>
#include <vector>

#include "strata/lazy/tensor.h"
#include "strata/lazy/tree.h"

namespace strata {

// d(output)/d(inputs) for a scalar `output`, as lazy tensors (nothing runs
// until they are materialized). Each input is identified by its current IR
// value; an input the output does not depend on gets zeros. Integer and
// boolean values carry no gradient. A primitive without a VJP rule on the
// path throws strata::Error naming it.
std::vector<Tensor> gradients(const Tensor& output, const std::vector<Tensor>& inputs);

// The same with an explicit cotangent for `output` (any shape).
std::vector<Tensor> vjp(const Tensor& output, const Tensor& cotangent,
                        const std::vector<Tensor>& inputs);
// Several outputs, one cotangent each: d(sum_i <outputs[i], cotangents[i]>)/d(inputs).
std::vector<Tensor> vjp(const std::vector<Tensor>& outputs, const std::vector<Tensor>& cotangents,
                        const std::vector<Tensor>& inputs);

// JAX-style transforms over Trees. Each input leaf is its own variable, even
// when two leaves hold the same tensor. grad(f) for f returning a scalar:
// x -> df/dx shaped like x.
std::function<Tree(const Tree&)> grad(std::function<Tensor(const Tree&)> f);
std::function<std::pair<Tensor, Tree>(const Tree&)> value_and_grad(
    std::function<Tensor(const Tree&)> f);
// value_and_grad(f, has_aux=True): f returns (scalar, aux); aux (a batch's
// accuracy, the logits, ...) is returned as computed and gets no gradient.
struct ValueAuxAndGrad {
  Tensor value;
  Tree aux;
  Tree grad;  // shaped like the input
};
std::function<ValueAuxAndGrad(const Tree&)> value_and_grad_with_aux(
    std::function<std::pair<Tensor, Tree>(const Tree&)> f);
// (f(primals), pullback): pullback maps a cotangent tree shaped like f's
// output to gradients shaped like `primals`.
std::pair<Tree, std::function<Tree(const Tree&)>> vjp(const std::function<Tree(const Tree&)>& f,
                                                      const Tree& primals);

// vjp split the way AOTAutograd splits a joint graph: the pullback's graph
// is built now, and `residuals` are the forward values it reads (a loop's
// carry history, its saved residuals, intermediates a rule keeps), the inputs
// excepted. Sync them with `out`, pass them back to `pullback`, and it reads
// their data instead of computing the forward again; passed back unsynced,
// they are the same lazy values and the pullback is plain vjp's. (Tensors
// are values: the pullback reads the residuals it is given, not its own
// copies.)
struct StagedVjp {
  Tree out;
  std::vector<Tensor> residuals;
  std::function<Tree(const Tree& cotangent, const std::vector<Tensor>& residuals)> pullback;
};
StagedVjp vjp_with_residuals(const std::function<Tree(const Tree&)>& f, const Tree& primals);

// Activation checkpointing (torch.utils.checkpoint, jax.checkpoint): returns
// fn(inputs), but backward does not keep fn's intermediates; it recomputes
// fn's forward from the inputs once the outputs' cotangents exist (behind an
// opt-barrier, so the compiler cannot merge the recomputation back into the
// forward). Gradients reach the inputs and every outer tensor fn reads.
std::vector<Tensor> checkpoint(
    const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& fn,
    const std::vector<Tensor>& inputs);

// The PyTorch-style API over vjp. A tensor marked requires_grad is a leaf:
// backward() adds d(output)/d(its current value) into its grad (lazily; sync
// materializes grads with everything else).
Tensor& requires_grad_(Tensor& tensor, bool value = true);
bool requires_grad(const Tensor& tensor);
void backward(const Tensor& output);  // scalar output
void backward(const Tensor& output, const Tensor& cotangent);
// The accumulated gradient, or an undefined Tensor when there is none.
Tensor grad(const Tensor& tensor);
void zero_grad(Tensor& tensor);
// The same value with gradients stopped.
Tensor detach(const Tensor& tensor);

// Ops built while a NoGrad is alive carry no gradient.
class NoGrad {
 public:
  NoGrad() = default;

 private:
  ir::StopGradientScope scope_;
};

}  // namespace strata
