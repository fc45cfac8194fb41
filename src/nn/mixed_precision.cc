#include "strata/nn/mixed_precision.h"

#include "strata/lazy/ops.h"

namespace strata::nn {

ComputeIn::ComputeIn(std::vector<Tensor*> params, DType dtype) : params_(std::move(params)) {
  originals_.reserve(params_.size());
  for (Tensor* p : params_) {
    originals_.push_back(*p);
    if (IsFloating(p->dtype()) && p->dtype() != dtype) *p = astype(*p, dtype);
  }
}

ComputeIn::~ComputeIn() {
  for (size_t i = 0; i < originals_.size(); ++i) *params_[i] = originals_[i];
}

}  // namespace strata::nn
