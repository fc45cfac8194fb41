#include "strata/nn/layers.h"

#include <cmath>

#include "strata/core/error.h"
#include "strata/nn/functional.h"

namespace strata::nn {
namespace {

void CheckKey(const char* layer, const Tensor& key) {
  if (!key.defined() || key.dtype() != DType::kU64 || key.shape().dims() != std::vector<int64_t>{2})
    Fail("[{}] needs a random key (u64[2], from random_key or split_key)", layer);
}

}  // namespace

Linear::Linear(int64_t in_features, int64_t out_features, bool has_bias, const Tensor& key,
               DType dtype)
    : Module("Linear"),
      weight((CheckKey("Linear", key),
              register_parameter(
                  "weight", uniform(split_key(key, 2)[0], {out_features, in_features},
                                    -1.0 / std::sqrt(static_cast<double>(in_features)),
                                    1.0 / std::sqrt(static_cast<double>(in_features)), dtype)))),
      bias(nullptr) {
  if (in_features <= 0 || out_features <= 0)
    Fail("[Linear] sizes must be positive, got in {} out {}", in_features, out_features);
  if (has_bias) {
    double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
    bias = &register_parameter("bias",
                               uniform(split_key(key, 2)[1], {out_features}, -bound, bound, dtype));
  }
}

Tensor Linear::forward(const Tensor& x) const {
  return bias ? linear(x, weight, *bias) : linear(x, weight);
}

Embedding::Embedding(int64_t num, int64_t dim, const Tensor& key, DType dtype)
    : Module("Embedding"),
      weight((CheckKey("Embedding", key),
              register_parameter("weight", normal(key, {num, dim}, 0, 1, dtype)))) {}

Tensor Embedding::forward(const Tensor& ids) const {
  if (!IsInteger(ids.dtype()))
    Fail("[Embedding] ids must be integers, got {}", ids.shape().ToString());
  std::vector<int64_t> dims = ids.shape().dims();
  dims.push_back(weight.dim(1));
  return reshape(index_select(weight, 0, reshape(ids, {-1})), dims);
}

RMSNorm::RMSNorm(int64_t dim, double eps_, DType dtype)
    : Module("RMSNorm"), weight(register_parameter("weight", ones({dim}, dtype))), eps(eps_) {}

Tensor RMSNorm::forward(const Tensor& x) const { return rms_norm(x, weight, eps); }

LayerNorm::LayerNorm(int64_t dim, double eps_, DType dtype)
    : Module("LayerNorm"),
      weight(register_parameter("weight", ones({dim}, dtype))),
      bias(register_parameter("bias", zeros({dim}, dtype))),
      eps(eps_) {}

Tensor LayerNorm::forward(const Tensor& x) const { return layer_norm(x, weight, bias, eps); }

Dropout::Dropout(double p_) : Module("Dropout"), p(p_) {
  if (!(p >= 0 && p <= 1)) Fail("[Dropout] p must be in [0, 1], got {}", p);
}

Tensor Dropout::forward(const Tensor& x, const Tensor& key) const {
  return dropout(x, p, key, is_training());
}

}  // namespace strata::nn
