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
#include <memory>
#include <string>
#include <utility>
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

// N layers of one structure stored stacked: each parameter and buffer of
// the layers is one [N, ...] tensor named "*.<layer-relative name>"
// ("layers.*.mlp.up_proj.weight" in a model), as Flax's nn.scan and MaxText
// keep scanned layers. apply_layers over a list must trace every layer (to
// prove it homogeneous), stack every parameter and slice every gradient, on
// every step; a LayerStack proves homogeneity once, when it is built, so a
// step traces one layer, stacks nothing and differentiates one tensor per
// name: compile time and the optimizer's work do not grow with N.
// state_dict() names each layer ("layers.3.mlp.up_proj.weight"), so
// checkpoints keep the per-layer layout (module.h).
class LayerStack : public Module {
 public:
  // Takes the layers (possibly none). They are proven homogeneous as
  // apply_layers does, by tracing `forward` on `example` (any input the
  // layers accept); the errors are apply_layers'. Layer 0's module is kept
  // as the template each layer's slices run through; modes follow the stack.
  LayerStack(std::vector<std::unique_ptr<Module>> layers, const Tensor& example,
             const LayerForward& forward);

  int64_t size() const { return size_; }
  // The layers in order as one scan over the stacked tensors: `forward` is
  // traced once, whatever N. An empty stack returns x.
  Tensor forward(const Tensor& x, const LayerForward& forward, const ScanOptions& options = {});
  // The same, unrolled: layer i runs on the i-th slices (the gradients of
  // the slices join into one tensor per name).
  Tensor forward_unrolled(const Tensor& x, const LayerForward& forward);
  // Layer i's tensors by layer-relative name (slices of the stacks).
  std::map<std::string, Tensor> layer_tensors(int64_t i);

 protected:
  void OnTrain(bool on) override;

 private:
  std::unique_ptr<Module> template_;
  std::vector<std::pair<std::string, Tensor*>> stacked_;  // layer-relative name, [N, ...]
  int64_t size_ = 0;
};

}  // namespace strata::nn
