// strata.nn.LlamaForCausalLM (the C++ model, nn/llama.h) and safetensors
// files from Python. The model's parameters are the C++ model's own tensor
// slots: an optimizer given model.parameters() updates the model.
#include <pybind11/stl.h>

#include "bindings.h"
#include "strata/io/llama_config.h"
#include "strata/nn/llama.h"
#include "strata/nn/tensor_files.h"

namespace strata::python {

namespace {

using nn::LlamaForCausalLM;

// Named tensor slots as (name, tensor) pairs whose Python tensors alias the
// slots (they keep the model alive).
py::list Slots(py::object model, const std::vector<std::pair<std::string, Tensor*>>& slots) {
  py::list out;
  for (const auto& [name, tensor] : slots) {
    out.append(
        py::make_tuple(name, py::cast(tensor, py::return_value_policy::reference_internal, model)));
  }
  return out;
}

std::map<std::string, Tensor> TensorDict(py::dict state, const char* what) {
  std::map<std::string, Tensor> out;
  for (auto [key, value] : state) {
    if (!py::isinstance<py::str>(key))
      throw py::type_error(std::string(what) + ": keys must be strings");
    out.emplace(key.cast<std::string>(), ToTensor(value));
  }
  return out;
}

py::dict ToDict(const std::map<std::string, Tensor>& tensors) {
  py::dict out;
  for (const auto& [name, t] : tensors) out[py::str(name)] = t;
  return out;
}

nn::LayerMode LayerModeArg(const std::string& mode) {
  if (mode == "scan") return nn::LayerMode::kScan;
  if (mode == "unrolled") return nn::LayerMode::kUnrolled;
  Fail("[llama] layer_mode must be 'scan' or 'unrolled', got '{}'", mode);
}

}  // namespace

void BindLlama(py::module_& m) {
  m.def(
      "load_safetensors", [](const std::string& path) { return ToDict(load_safetensors(path)); },
      py::arg("path"),
      "Every tensor of a safetensors file or sharded checkpoint, in its own dtype "
      "(safetensors.torch.load_file).");
  m.def(
      "save_safetensors",
      [](const std::string& path, py::dict tensors, std::map<std::string, std::string> metadata) {
        std::map<std::string, Tensor> t = TensorDict(tensors, "save_safetensors");
        py::gil_scoped_release release;
        save_safetensors(path, t, metadata);
      },
      py::arg("path"), py::arg("tensors"),
      py::arg("metadata") = std::map<std::string, std::string>{});

  py::module_ nn_module = m.def_submodule("nn", "the C++ modules strata.nn re-exports");
  py::class_<LlamaForCausalLM>(nn_module, "LlamaForCausalLM",
                               "Hugging Face's LlamaForCausalLM: the same names, shapes and math.")
      .def(py::init([](py::object config, py::object key, py::object dtype) {
             std::string json =
                 py::isinstance<py::str>(config)
                     ? config.cast<std::string>()
                     : py::module_::import("json").attr("dumps")(config).cast<std::string>();
             io::LlamaConfig c = io::ParseLlamaConfig(json, "config");
             Tensor k = key.is_none() ? random_key(0) : key.cast<Tensor>();
             std::optional<DType> d =
                 dtype.is_none() ? std::nullopt : std::optional(DTypeArg(dtype));
             return std::make_unique<LlamaForCausalLM>(c, k, d);
           }),
           py::arg("config"), py::arg("key") = py::none(), py::arg("dtype") = py::none(),
           "A new model from a config (a dict or config.json text), initialized as "
           "transformers does (N(0, 0.02) from `key`).")
      .def_static(
          "from_pretrained", [](const std::string& dir) { return nn::LoadLlama(dir); },
          py::arg("directory"),
          "Loads a Hugging Face directory: config.json and model.safetensors (or its "
          "shards with model.safetensors.index.json).")
      .def(
          "save_pretrained",
          [](LlamaForCausalLM& model, const std::string& dir) {
            py::gil_scoped_release release;
            nn::SaveLlama(model, dir);
          },
          py::arg("directory"))
      .def("forward", &LlamaForCausalLM::forward, py::arg("input_ids"),
           "input_ids [B, S] (integers) -> logits [B, S, vocab].")
      .def("__call__", &LlamaForCausalLM::forward, py::arg("input_ids"))
      .def(
          "loss",
          [](const LlamaForCausalLM& model, const Tensor& logits, py::handle labels) {
            return model.loss(logits, ToTensor(labels));
          },
          py::arg("logits"), py::arg("labels"),
          "Hugging Face's loss for labels=...: position s predicts labels[s + 1]; -100 is ignored.")
      .def(
          "named_parameters",
          [](py::object self) {
            return Slots(self, self.cast<LlamaForCausalLM&>().named_parameters());
          },
          "(name, tensor) pairs; the decoder layers' parameters are stacked [layers, ...] "
          "under 'model.layers.*.'.")
      .def("parameters",
           [](py::object self) {
             py::list out;
             for (py::handle pair : Slots(self, self.cast<LlamaForCausalLM&>().named_parameters()))
               out.append(pair[py::int_(1)]);
             return out;
           })
      .def(
          "state_dict", [](LlamaForCausalLM& model) { return ToDict(model.state_dict()); },
          "Tensors by Hugging Face name, one entry per layer "
          "('model.layers.3.mlp.up_proj.weight').")
      .def(
          "load_state_dict",
          [](LlamaForCausalLM& model, py::dict state, bool strict) {
            model.load_state_dict(TensorDict(state, "load_state_dict"), strict);
          },
          py::arg("state"), py::arg("strict") = true)
      .def(
          "train",
          [](py::object self, bool on) {
            self.cast<LlamaForCausalLM&>().train(on);
            return self;
          },
          py::arg("mode") = true)
      .def("eval",
           [](py::object self) {
             self.cast<LlamaForCausalLM&>().eval();
             return self;
           })
      .def_property_readonly("training", &LlamaForCausalLM::is_training)
      .def_property_readonly(
          "config",
          [](const LlamaForCausalLM& model) {
            return py::module_::import("json").attr("loads")(io::ToJson(model.model.config));
          })
      .def_property(
          "layer_mode",
          [](const LlamaForCausalLM& model) {
            return model.layer_mode == nn::LayerMode::kScan ? "scan" : "unrolled";
          },
          [](LlamaForCausalLM& model, const std::string& mode) {
            model.layer_mode = LayerModeArg(mode);
          })
      .def_property(
          "layer_remat",
          [](const LlamaForCausalLM& model) { return RematString(model.layer_remat); },
          [](LlamaForCausalLM& model, const std::string& r) { model.layer_remat = RematArg(r); });
}

}  // namespace strata::python
