// Mixed precision: a step that computes with half-precision copies of f32
// weights (as torch.autocast's bf16 does for a whole model), its gradients
// reaching the f32 weights, so the update and the optimizer's state stay f32.
#pragma once

#include <vector>

#include "strata/lazy/tensor.h"

namespace strata::nn {

// For its lifetime, each floating-point tensor `params` points at (a model's
// parameters) is replaced by its copy in `dtype`; the originals are put back
// when it ends, also by an exception. A gradient taken through a copy with
// respect to the original arrives in the original's type (a convert's
// gradient converts back). Nothing changes when `dtype` is every tensor's own.
class ComputeIn {
 public:
  ComputeIn(std::vector<Tensor*> params, DType dtype);
  ~ComputeIn();
  ComputeIn(const ComputeIn&) = delete;
  ComputeIn& operator=(const ComputeIn&) = delete;

 private:
  std::vector<Tensor*> params_;
  std::vector<Tensor> originals_;
};

}  // namespace strata::nn
