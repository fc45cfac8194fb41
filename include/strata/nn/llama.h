// Llama (Hugging Face's LlamaForCausalLM): the same parameter names, shapes
// and math, so a Hugging Face checkpoint directory (config.json + safetensors,
// sharded or not) loads and gives its logits.
//
// Initialization follows transformers' LlamaPreTrainedModel: every Linear and
// the embedding ~ N(0, 0.02), biases 0, norms 1 (random bits from a key).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "strata/io/llama_config.h"
#include "strata/nn/apply_layers.h"
#include "strata/nn/layers.h"
#include "strata/transforms/scan.h"

namespace strata::nn {

class LlamaAttention : public Module {
 public:
  LlamaAttention(const io::LlamaConfig& config, const Tensor& key, DType dtype);
  // x [B, S, hidden]; cos/sin [S, head_dim] (rotary tables).
  Tensor forward(const Tensor& x, const Tensor& cos, const Tensor& sin) const;
  Linear &q_proj, &k_proj, &v_proj, &o_proj;
  int64_t heads, kv_heads, head_dim;

 private:
  LlamaAttention(const io::LlamaConfig& complete, const Tensor& key, DType dtype, int);
};

class LlamaMLP : public Module {
 public:
  LlamaMLP(const io::LlamaConfig& config, const Tensor& key, DType dtype);
  Tensor forward(const Tensor& x) const;  // down(silu(gate(x)) * up(x))
  Linear &gate_proj, &up_proj, &down_proj;
};

class LlamaDecoderLayer : public Module {
 public:
  LlamaDecoderLayer(const io::LlamaConfig& config, const Tensor& key, DType dtype);
  Tensor forward(const Tensor& x, const Tensor& cos, const Tensor& sin) const;
  LlamaAttention& self_attn;
  LlamaMLP& mlp;
  RMSNorm &input_layernorm, &post_attention_layernorm;

 private:
  LlamaDecoderLayer(const io::LlamaConfig& complete, const Tensor& key, DType dtype, int);
};

// How the decoder layers run: one scan over their stacked weights
// (apply_layers; compiles as fast for 64 layers as for 1) or unrolled.
enum class LayerMode { kScan, kUnrolled };

// The decoder layers are a LayerStack: their parameters are stored stacked,
// named "model.layers.*.self_attn.q_proj.weight" [num_layers, ...] in
// named_parameters(), and "model.layers.3.self_attn.q_proj.weight" in
// state_dict() and checkpoints, as Hugging Face names them.

class LlamaModel : public Module {
 public:
  LlamaModel(const io::LlamaConfig& config, const Tensor& key, DType dtype);
  // Final hidden states. With kScan, `remat` is what the backward pass of
  // the layer loop keeps of the forward (scan's Remat).
  Tensor forward(const Tensor& input_ids, LayerMode mode, Remat remat = Remat::kSaveCarries) const;
  Embedding& embed_tokens;
  LayerStack& layers;
  RMSNorm& norm;
  io::LlamaConfig config;
};

class LlamaForCausalLM : public Module {
 public:
  // dtype: the parameters' dtype (default: the config's torch_dtype).
  LlamaForCausalLM(const io::LlamaConfig& config, const Tensor& key,
                   std::optional<DType> dtype = std::nullopt);
  // input_ids: integer [B, S] -> logits [B, S, vocab].
  Tensor forward(const Tensor& input_ids) const;
  // Hugging Face's loss for labels=...: position s predicts labels[s + 1]
  // (labels are shifted inside), mean cross-entropy over positions whose
  // label is not -100.
  Tensor loss(const Tensor& logits, const Tensor& labels) const;
  // lm_head's weight (embed_tokens' when tie_word_embeddings).
  const Tensor& lm_head_weight() const;

  LlamaModel& model;
  Linear* lm_head;  // null when tied
  LayerMode layer_mode = LayerMode::kScan;
  // What backward keeps of the scanned layers: each layer's input only
  // (kSaveCarries, least memory), or also its matrix products (kSaveDots:
  // no GEMM runs twice).
  Remat layer_remat = Remat::kSaveCarries;
};

// A Hugging Face model directory: config.json, then model.safetensors or
// model.safetensors.index.json with its shards. Every parameter must be in
// the checkpoint with its shape (dtypes are converted to the config's); an
// error names what is missing, unexpected or mismatched.
std::unique_ptr<LlamaForCausalLM> LoadLlama(const std::string& directory);
// Writes config.json and model.safetensors (atomically) into `directory`.
void SaveLlama(LlamaForCausalLM& model, const std::string& directory);

}  // namespace strata::nn
