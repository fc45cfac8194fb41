// Reverse-mode differentiation over the lazy IR (first step of the autodiff
// issue): the functional core that backward() and .grad() will sit on.
#pragma once

#include <vector>

#include "strata/lazy/tensor.h"

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

}  // namespace strata
