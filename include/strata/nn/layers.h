// Basic layers with PyTorch's parameter names, math and default
// initialization (from an explicit random key).
#pragma once

#include "strata/nn/functional.h"
#include "strata/nn/module.h"

namespace strata::nn {

// y = x W^T + b; weight [out, in], bias [out]; both U(-1/sqrt(in), 1/sqrt(in))
// as torch.nn.Linear's default.
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias, const Tensor& key,
         DType dtype = DType::kF32);
  Tensor forward(const Tensor& x) const;
  Tensor& weight;
  Tensor* bias;  // null without bias
};

// Rows of weight [num, dim] ~ N(0, 1), as torch.nn.Embedding.
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t dim, const Tensor& key, DType dtype = DType::kF32);
  Tensor forward(const Tensor& ids) const;
  Tensor& weight;
};

// Hugging Face LlamaRMSNorm: weight ones [dim].
class RMSNorm : public Module {
 public:
  RMSNorm(int64_t dim, double eps, DType dtype = DType::kF32);
  Tensor forward(const Tensor& x) const;
  Tensor& weight;
  double eps;
};

// torch.nn.LayerNorm over the last dim: weight ones, bias zeros.
class LayerNorm : public Module {
 public:
  LayerNorm(int64_t dim, double eps = 1e-5, DType dtype = DType::kF32);
  Tensor forward(const Tensor& x) const;
  Tensor& weight;
  Tensor& bias;
  double eps;
};

// Inverted dropout in training mode, identity in eval mode. The random bits
// come from the key passed to forward.
class Dropout : public Module {
 public:
  explicit Dropout(double p);
  Tensor forward(const Tensor& x, const Tensor& key) const;
  double p;
};

}  // namespace strata::nn
