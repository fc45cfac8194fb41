// The reverse sweep shared by vjp(), backward() and the gradient rules of
// checkpointed regions.
#pragma once

#include <vector>

#include "strata/lazy/tensor.h"

namespace strata {

// d(sum_i <outputs[i], cotangents[i]>)/d(inputs). An input nothing reaches
// gets zeros when `fill_zeros`, else an undefined Tensor.
std::vector<Tensor> VjpImpl(const std::vector<Tensor>& outputs,
                            const std::vector<Tensor>& cotangents,
                            const std::vector<Tensor>& inputs, bool fill_zeros);

}  // namespace strata
