#include "strata/nn/optim.h"

#include <cmath>

#include "strata/autograd/grad.h"
#include "strata/core/error.h"
#include "strata/lazy/ops.h"

namespace strata::nn {
namespace {

void CheckGrads(const char* name, const std::vector<Tensor*>& params,
                const std::vector<Tensor>& grads) {
  if (grads.size() != params.size())
    Fail("[{}] {} gradients for {} parameters", name, grads.size(), params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    if (!grads[i].defined() || grads[i].shape().dims() != params[i]->shape().dims()) {
      Fail("[{}] gradient {} is {}, its parameter {}", name, i,
           grads[i].defined() ? grads[i].shape().ToString() : "undefined",
           params[i]->shape().ToString());
    }
  }
}

void CheckParams(const char* name, const std::vector<Tensor*>& params) {
  if (params.empty()) Fail("[{}] got an empty parameter list (as torch refuses it)", name);
  for (size_t i = 0; i < params.size(); ++i) {
    if (!params[i] || !params[i]->defined() || !IsFloating(params[i]->dtype()))
      Fail("[{}] parameter {} must be a defined floating-point tensor", name, i);
  }
}

// A host number as a scalar parameter of the step's graph (never baked in).
Tensor Scalar(double v, DType dtype) { return scalar(v, dtype); }

// Parameters keep their requires_grad flag across updates (PyTorch updates
// them in place under no_grad).
void Assign(Tensor& p, const Tensor& value) {
  bool trainable = requires_grad(p);
  p = value;
  if (trainable) requires_grad_(p);
}

}  // namespace

SGD::SGD(std::vector<Tensor*> params, SgdOptions options)
    : params_(std::move(params)), options_(options), momentum_(params_.size()) {
  CheckParams("SGD", params_);
  if (!(options.lr >= 0) || !(options.momentum >= 0) || !(options.weight_decay >= 0) ||
      !std::isfinite(options.lr) || !std::isfinite(options.weight_decay) ||
      !std::isfinite(options.dampening))
    Fail(
        "[SGD] lr, momentum and weight_decay must be finite and non-negative, got lr {} momentum "
        "{} "
        "weight_decay {}",
        options.lr, options.momentum, options.weight_decay);
  if (options.nesterov && (options.momentum <= 0 || options.dampening != 0))
    Fail("[SGD] Nesterov momentum requires a momentum and zero dampening");
}

void SGD::step(const std::vector<Tensor>& grads) {
  CheckGrads("SGD", params_, grads);
  NoGrad no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = *params_[i];
    DType t = p.dtype();
    Tensor d = astype(grads[i], t);
    if (options_.weight_decay != 0) d = d + p * Scalar(options_.weight_decay, t);
    if (options_.momentum != 0) {
      Tensor& buf = momentum_[i];
      buf = buf.defined()
                ? buf * Scalar(options_.momentum, t) + d * Scalar(1 - options_.dampening, t)
                : d;
      d = options_.nesterov ? d + buf * Scalar(options_.momentum, t) : buf;
    }
    Assign(p, p - d * Scalar(options_.lr, t));
  }
}

AdamW::AdamW(std::vector<Tensor*> params, AdamWOptions options)
    : params_(std::move(params)), options_(options) {
  CheckParams("AdamW", params_);
  // Written so that NaN fails every test (torch: "Invalid learning rate: nan").
  if (!(options.lr >= 0) || !(options.eps >= 0) || !(options.weight_decay >= 0) ||
      !(options.beta1 >= 0 && options.beta1 < 1) || !(options.beta2 >= 0 && options.beta2 < 1) ||
      !std::isfinite(options.lr) || !std::isfinite(options.eps) ||
      !std::isfinite(options.weight_decay)) {
    Fail(
        "[AdamW] need lr, eps, weight_decay >= 0 and betas in [0, 1), got lr {} betas ({}, {}) "
        "eps {} weight_decay {}",
        options.lr, options.beta1, options.beta2, options.eps, options.weight_decay);
  }
  for (Tensor* p : params_) {
    exp_avg_.push_back(zeros(p->shape().dims(), p->dtype()));
    exp_avg_sq_.push_back(zeros(p->shape().dims(), p->dtype()));
  }
}

void AdamW::step(const std::vector<Tensor>& grads) {
  CheckGrads("AdamW", params_, grads);
  NoGrad no_grad;
  ++steps_;
  const double b1 = options_.beta1, b2 = options_.beta2;
  const double correction1 = 1 - std::pow(b1, static_cast<double>(steps_));
  const double correction2 = 1 - std::pow(b2, static_cast<double>(steps_));
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = *params_[i];
    DType t = p.dtype();
    Tensor g = astype(grads[i], t);
    Tensor decayed = p * Scalar(1 - options_.lr * options_.weight_decay, t);
    exp_avg_[i] = exp_avg_[i] * Scalar(b1, t) + g * Scalar(1 - b1, t);
    exp_avg_sq_[i] = exp_avg_sq_[i] * Scalar(b2, t) + g * g * Scalar(1 - b2, t);
    Tensor denom =
        sqrt(exp_avg_sq_[i]) * Scalar(1 / std::sqrt(correction2), t) + Scalar(options_.eps, t);
    Assign(p, decayed - exp_avg_[i] / denom * Scalar(options_.lr / correction1, t));
  }
}

Tensor clip_grad_norm(std::vector<Tensor>& grads, double max_norm) {
  if (!(max_norm > 0)) Fail("[clip_grad_norm] max_norm must be positive, got {}", max_norm);
  if (grads.empty()) return zeros({});
  for (const Tensor& g : grads) {
    if (!IsFloating(g.dtype()))
      Fail("[clip_grad_norm] gradients must be floating-point (as torch), got {}",
           g.shape().ToString());
  }
  // The norm in f32 at least (f64 when a gradient is f64).
  DType t = DType::kF32;
  for (const Tensor& g : grads) {
    if (g.dtype() == DType::kF64) t = DType::kF64;
  }
  Tensor total = zeros({}, t);
  for (const Tensor& g : grads) {
    Tensor wide = astype(g, t);
    total = total + sum(wide * wide);
  }
  Tensor norm = sqrt(total);
  Tensor coef = minimum(Scalar(max_norm, t) / (norm + Scalar(1e-6, t)), ones({}, t));
  for (Tensor& g : grads) g = g * astype(coef, g.dtype());
  return norm;
}

double warmup_cosine_lr(int64_t step, int64_t warmup, int64_t total, double peak, double min_lr) {
  if (warmup < 0 || total < warmup)
    Fail("[warmup_cosine_lr] need 0 <= warmup <= total, got {} and {}", warmup, total);
  if (step < warmup) return peak * static_cast<double>(step + 1) / static_cast<double>(warmup);
  if (step >= total || total == warmup) return min_lr;
  double progress = static_cast<double>(step - warmup) / static_cast<double>(total - warmup);
  return min_lr + 0.5 * (peak - min_lr) * (1 + std::cos(M_PI * progress));
}

}  // namespace strata::nn
