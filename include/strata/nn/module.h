// Modules: named parameters, buffers and submodules (PyTorch's nn.Module).
// Names are dotted paths ("layers.3.self_attn.q_proj.weight"), in the order
// things were registered, as Hugging Face state dicts name them.
//
// Stacked tensors: a LayerStack (apply_layers.h) stores the same parameter of
// its N layers as one [N, ...] tensor whose name has "*" for the layer index
// ("layers.*.mlp.up_proj.weight"). named_parameters() lists that tensor (what
// optimizers and gradients see); state_dict() and load_state_dict() name each
// layer's slice ("layers.0.mlp.up_proj.weight", ...), as checkpoints do.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "strata/lazy/tensor.h"

namespace strata::nn {

class Module {
 public:
  explicit Module(std::string type_name) : type_name_(std::move(type_name)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  const std::string& type_name() const { return type_name_; }

  // Every parameter / buffer of this module and its submodules, depth first
  // in registration order, with dotted names. The pointers stay valid for
  // the module's life: assign through them to update a parameter.
  std::vector<std::pair<std::string, Tensor*>> named_parameters();
  std::vector<std::pair<std::string, Tensor*>> named_buffers();
  std::vector<std::pair<std::string, Module*>> named_modules();  // "" is this module
  std::vector<Tensor*> parameters();
  // A parameter or buffer by dotted name; Error if there is none.
  Tensor& tensor(const std::string& name);

  // Training mode, recursively (dropout reads it).
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // Parameters and buffers by dotted name, stacked ones one entry per layer.
  std::map<std::string, Tensor> state_dict();
  // The same entries in registration order (layers in order within a stack).
  std::vector<std::pair<std::string, Tensor>> state_entries();
  // Copies values in by name. Strict: every name must match both ways.
  // Shapes must match; dtypes are converted to the parameter's; a stacked
  // tensor takes its layers' entries. Errors name the missing, unexpected or
  // mismatched entries; on error nothing changed.
  void load_state_dict(const std::map<std::string, Tensor>& state, bool strict = true);

 protected:
  Tensor& register_parameter(std::string name, Tensor value);
  Tensor& register_buffer(std::string name, Tensor value);
  // A stacked tensor under a dotted path starting "*." (LayerStack).
  Tensor& register_stacked(std::string path, Tensor value, bool buffer);
  template <typename M>
  M& register_module(std::string name, std::unique_ptr<M> module) {
    M& ref = *module;
    AddModule(std::move(name), std::move(module));
    return ref;
  }
  // Hook for modules whose behaviour depends on the mode.
  virtual void OnTrain(bool /*on*/) {}

 private:
  void AddModule(std::string name, std::unique_ptr<Module> module);
  void CheckName(const std::string& name) const;
  template <typename Visit>
  void Walk(const std::string& prefix, const Visit& visit);

  std::string type_name_;
  bool training_ = true;
  std::vector<std::pair<std::string, std::unique_ptr<Tensor>>> parameters_, buffers_;
  std::vector<std::pair<std::string, std::unique_ptr<Module>>> children_;
};

// Per-tensor values named like named_parameters() (gradients, optimizer
// moments) in state-dict form: a stacked name's [N, ...] value becomes N
// entries, one per layer, in order; other entries pass through.
std::vector<std::pair<std::string, Tensor>> unstack_entries(
    const std::vector<std::pair<std::string, Tensor>>& entries);

// Runs f with some of the module's parameters and buffers replaced by the
// given tensors (torch.func.functional_call), restoring them afterwards,
// also when f throws. Unknown names and other dims are errors; another element
// type is not (bf16 copies of f32 weights).
void functional_call(Module& module, const std::map<std::string, Tensor>& replacements,
                     const std::function<void()>& f);

}  // namespace strata::nn
