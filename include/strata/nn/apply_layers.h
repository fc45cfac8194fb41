// apply_layers (PyTorch/XLA's scan_layers): run layers of one structure one
// after another as a single scan over their stacked parameters, so N layers
// compile as fast as one.
//
// It first proves the layers homogeneous: each layer's forward is traced on
// placeholders (cheap in C++) and the traces compared: the traced program
// (its hash), the parameter names, shapes and dtypes, the train/eval mode of
// every submodule, and the outer values each trace reads (a dropout rate is
// a scalar the trace captures). The first layer that differs is named with
// what differs; nothing silently runs with layer 0's constants.
#pragma once

#include <functional>
#include <vector>

#include "strata/nn/module.h"
#include "strata/transforms/scan.h"

namespace strata::nn {

using LayerForward = std::function<Tensor(Module& layer, const Tensor& x)>;

// forward(layer, x) must use the layer's own parameters and buffers (read
// through the module, as usual). Gradients reach each layer's parameters.
// An empty list returns `input`.
Tensor apply_layers(const std::vector<Module*>& layers, const Tensor& input,
                    const LayerForward& forward, const ScanOptions& options = {});

}  // namespace strata::nn
