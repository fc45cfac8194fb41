// `strata lm`: a Hugging Face Llama directory in, logits (and the loss and
// every parameter's gradient) out, as safetensors.
#include <fmt/core.h>

#include "commands.h"
#include "strata/autograd/grad.h"
#include "strata/core/error.h"
#include "strata/io/safetensors.h"
#include "strata/lazy/context.h"
#include "strata/nn/llama.h"

namespace strata::tools {
namespace {

Tensor ReadIds(const std::string& path, const std::string& name) {
  io::SafetensorsFile file = io::SafetensorsFile::Open(path);
  if (!file.contains(name)) {
    std::string present;
    for (const std::string& n : file.names()) present += (present.empty() ? "" : ", ") + n;
    Fail("[lm] {} has no tensor named '{}' (it has: {})", path, name,
         present.empty() ? "none" : present);
  }
  const io::TensorView& v = file.Get(name);
  if (v.dtype != DType::kS64 || v.shape.size() != 2) {
    Fail("[lm] '{}' in {} must be I64 [batch, seq], found {}", name, path,
         Shape(v.dtype, v.shape).ToString());
  }
  return Tensor::FromBytes(Shape(v.dtype, v.shape), v.data);
}

}  // namespace

int RunLm(const LmOptions& options) {
  if (options.grads && options.labels.empty())
    Fail("[lm] --grads needs --labels (gradients are of the loss)");
  auto model = nn::LoadLlama(options.model);
  model->layer_mode =
      options.layers == "unrolled" ? nn::LayerMode::kUnrolled : nn::LayerMode::kScan;
  Tensor ids = ReadIds(options.tokens, "input_ids");
  const io::LlamaConfig& config = model->model.config;
  for (int64_t id : ids.to_vector<int64_t>()) {
    if (id < 0 || id >= config.vocab_size)
      Fail("[lm] token id {} is outside the vocabulary [0, {})", id, config.vocab_size);
  }
  std::vector<std::pair<std::string, Tensor>> results;
  Tensor logits = model->forward(ids);
  results.emplace_back("logits", logits);
  if (!options.labels.empty()) {
    Tensor labels = ReadIds(options.labels, "labels");
    if (labels.shape() != ids.shape()) {
      Fail("[lm] labels {} must have the shape of input_ids {}", labels.shape().ToString(),
           ids.shape().ToString());
    }
    Tensor loss = model->loss(logits, labels);
    results.emplace_back("loss", loss);
    if (options.grads) {
      auto named = model->named_parameters();
      std::vector<Tensor> params;
      for (auto& [name, t] : named) params.push_back(*t);
      std::vector<Tensor> grads = gradients(loss, params);
      std::vector<std::pair<std::string, Tensor>> by_name;
      for (size_t i = 0; i < named.size(); ++i) by_name.emplace_back(named[i].first, grads[i]);
      // Named as the checkpoint names its tensors: one gradient per layer.
      for (auto& [name, g] : nn::unstack_entries(by_name)) results.emplace_back("grad." + name, g);
    }
  }
  std::vector<Tensor*> all;
  for (auto& [name, t] : results) all.push_back(&t);
  sync(all);  // one program for everything
  std::vector<io::TensorData> out;
  for (auto& [name, t] : results) out.push_back({name, t.dtype(), t.shape().dims(), t.bytes()});
  io::WriteSafetensors(options.output, out);
  if (!options.quiet) {
    fmt::print("wrote {} tensors to {} (logits {}", out.size(), options.output,
               logits.shape().ToString());
    if (results.size() > 1) fmt::print(", loss {:.6f}", results[1].second.item<float>());
    fmt::print(")\n");
  }
  return 0;
}

}  // namespace strata::tools
