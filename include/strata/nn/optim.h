// Optimizers with PyTorch's update rules, gradient clipping by global norm,
// and a warm-up + cosine learning-rate schedule. Everything is lazy: a step
// rebinds the parameter slots (and the optimizer's state) to new IR, so
// forward, backward, clipping and the update trace into one graph that
// sync() runs. Learning rates and bias corrections are scalar parameters of
// that graph: changing them never recompiles.
#pragma once

#include <vector>

#include "strata/lazy/tensor.h"

namespace strata::nn {

struct SgdOptions {
  double lr = 1e-2;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;  // L2, added to the gradient (torch.optim.SGD)
  bool nesterov = false;
};

// torch.optim.SGD.
class SGD {
 public:
  SGD(std::vector<Tensor*> params, SgdOptions options);
  // One update from one gradient per parameter (in the order given).
  void step(const std::vector<Tensor>& grads);
  void set_lr(double lr) { options_.lr = lr; }
  double lr() const { return options_.lr; }

 private:
  std::vector<Tensor*> params_;
  SgdOptions options_;
  std::vector<Tensor> momentum_;  // undefined until the first step
};

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;  // decoupled (torch.optim.AdamW)
};

// torch.optim.AdamW (amsgrad off).
class AdamW {
 public:
  AdamW(std::vector<Tensor*> params, AdamWOptions options);
  void step(const std::vector<Tensor>& grads);
  void set_lr(double lr) { options_.lr = lr; }
  double lr() const { return options_.lr; }
  int64_t steps() const { return steps_; }
  // The state, for checkpoints: exp_avg and exp_avg_sq per parameter.
  std::vector<Tensor>& exp_avg() { return exp_avg_; }
  std::vector<Tensor>& exp_avg_sq() { return exp_avg_sq_; }
  void set_steps(int64_t steps) { steps_ = steps; }

 private:
  std::vector<Tensor*> params_;
  AdamWOptions options_;
  std::vector<Tensor> exp_avg_, exp_avg_sq_;
  int64_t steps_ = 0;
};

// torch.nn.utils.clip_grad_norm_: scales every gradient by
// min(1, max_norm / (total_norm + 1e-6)); returns the total (2-)norm before
// clipping, as a lazy scalar.
Tensor clip_grad_norm(std::vector<Tensor>& grads, double max_norm);

// Linear warm-up from 0 to peak over `warmup` steps, then a cosine decay to
// `min_lr` at `total` steps (constant after). `step` counts from 0.
double warmup_cosine_lr(int64_t step, int64_t warmup, int64_t total, double peak,
                        double min_lr = 0);

}  // namespace strata::nn
