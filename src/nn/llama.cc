#include "strata/nn/llama.h"

#include <filesystem>

#include "strata/core/error.h"
#include "strata/io/files.h"
#include "strata/io/safetensors.h"
#include "strata/nn/apply_layers.h"

namespace strata::nn {
namespace {

// A Linear initialized as transformers does for Llama: N(0, 0.02), bias 0.
std::unique_ptr<Linear> HfLinear(int64_t in, int64_t out, bool bias, const Tensor& key,
                                 DType dtype) {
  std::vector<Tensor> keys = split_key(key, 2);
  auto linear = std::make_unique<Linear>(in, out, bias, keys[0], dtype);
  linear->weight = normal(keys[1], {out, in}, 0, 0.02, dtype);
  if (linear->bias) *linear->bias = zeros({out}, dtype);
  return linear;
}

// Defaults a config built in code may leave at 0, as config.json parsing fills them.
io::LlamaConfig Complete(io::LlamaConfig c) {
  if (c.hidden_size <= 0 || c.num_attention_heads <= 0 || c.vocab_size <= 0 ||
      c.intermediate_size <= 0 || c.num_hidden_layers < 0) {
    Fail(
        "[llama] config sizes must be positive: vocab {} hidden {} intermediate {} heads {} "
        "layers {}",
        c.vocab_size, c.hidden_size, c.intermediate_size, c.num_attention_heads,
        c.num_hidden_layers);
  }
  if (c.num_key_value_heads == 0) c.num_key_value_heads = c.num_attention_heads;
  if (c.head_dim == 0) c.head_dim = c.hidden_size / c.num_attention_heads;
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    Fail("[llama] {} attention heads are not a multiple of {} key/value heads",
         c.num_attention_heads, c.num_key_value_heads);
  }
  return c;
}

Tensor RunDecoderLayer(Module& layer, const Tensor& x, const RotaryTables& rope) {
  return static_cast<LlamaDecoderLayer&>(layer).forward(x, rope.cos, rope.sin);
}

// The decoder layers, proven homogeneous on a [1, 2, hidden] input.
std::unique_ptr<LayerStack> MakeLayers(const io::LlamaConfig& c, const Tensor& key, DType dtype) {
  std::vector<std::unique_ptr<Module>> layers;
  std::vector<Tensor> keys = split_key(key, std::max<int64_t>(c.num_hidden_layers, 1));
  for (int64_t i = 0; i < c.num_hidden_layers; ++i)
    layers.push_back(std::make_unique<LlamaDecoderLayer>(c, keys[i], dtype));
  RotaryTables rope = rotary_tables(2, c.head_dim, c.rope_theta, dtype);
  return std::make_unique<LayerStack>(
      std::move(layers), zeros({1, 2, c.hidden_size}, dtype),
      [&](Module& layer, const Tensor& x) { return RunDecoderLayer(layer, x, rope); });
}

}  // namespace

LlamaAttention::LlamaAttention(const io::LlamaConfig& config, const Tensor& key, DType dtype)
    : LlamaAttention(Complete(config), key, dtype, 0) {}

LlamaAttention::LlamaAttention(const io::LlamaConfig& c, const Tensor& key, DType dtype, int)
    : Module("LlamaAttention"),
      q_proj(register_module("q_proj", HfLinear(c.hidden_size, c.num_attention_heads * c.head_dim,
                                                c.attention_bias, split_key(key, 4)[0], dtype))),
      k_proj(register_module("k_proj", HfLinear(c.hidden_size, c.num_key_value_heads * c.head_dim,
                                                c.attention_bias, split_key(key, 4)[1], dtype))),
      v_proj(register_module("v_proj", HfLinear(c.hidden_size, c.num_key_value_heads * c.head_dim,
                                                c.attention_bias, split_key(key, 4)[2], dtype))),
      o_proj(register_module("o_proj", HfLinear(c.num_attention_heads * c.head_dim, c.hidden_size,
                                                c.attention_bias, split_key(key, 4)[3], dtype))),
      heads(c.num_attention_heads),
      kv_heads(c.num_key_value_heads),
      head_dim(c.head_dim) {}

Tensor LlamaAttention::forward(const Tensor& x, const Tensor& cos, const Tensor& sin) const {
  const int64_t b = x.dim(0), s = x.dim(1);
  // Heads first, [B, n, S, D]: the fused kernels read a head's rows
  // contiguously. (The [B, S, n, D] layout needs no transpose around them,
  // but its kernels ran 10-15 % slower than these plus the transposes:
  // bench/RESULTS.md, BM_AttentionLayouts.)
  auto split_heads = [&](const Tensor& t, int64_t n) {  // [B, S, n*D] -> [B, n, S, D]
    return permute(reshape(t, {b, s, n, head_dim}), {0, 2, 1, 3});
  };
  Tensor q = apply_rotary(split_heads(q_proj.forward(x), heads), cos, sin);
  Tensor k = apply_rotary(split_heads(k_proj.forward(x), kv_heads), cos, sin);
  Tensor v = split_heads(v_proj.forward(x), kv_heads);
  Tensor att = scaled_dot_product_attention(q, k, v, /*causal=*/true);  // [B, H, S, D]
  return o_proj.forward(reshape(permute(att, {0, 2, 1, 3}), {b, s, heads * head_dim}));
}

LlamaMLP::LlamaMLP(const io::LlamaConfig& c, const Tensor& key, DType dtype)
    : Module("LlamaMLP"),
      gate_proj(register_module("gate_proj", HfLinear(c.hidden_size, c.intermediate_size,
                                                      c.mlp_bias, split_key(key, 3)[0], dtype))),
      up_proj(register_module("up_proj", HfLinear(c.hidden_size, c.intermediate_size, c.mlp_bias,
                                                  split_key(key, 3)[1], dtype))),
      down_proj(register_module("down_proj", HfLinear(c.intermediate_size, c.hidden_size,
                                                      c.mlp_bias, split_key(key, 3)[2], dtype))) {}

Tensor LlamaMLP::forward(const Tensor& x) const {
  return down_proj.forward(silu(gate_proj.forward(x)) * up_proj.forward(x));
}

LlamaDecoderLayer::LlamaDecoderLayer(const io::LlamaConfig& config, const Tensor& key, DType dtype)
    : LlamaDecoderLayer(Complete(config), key, dtype, 0) {}

LlamaDecoderLayer::LlamaDecoderLayer(const io::LlamaConfig& c, const Tensor& key, DType dtype, int)
    : Module("LlamaDecoderLayer"),
      self_attn(register_module("self_attn",
                                std::make_unique<LlamaAttention>(c, split_key(key, 2)[0], dtype))),
      mlp(register_module("mlp", std::make_unique<LlamaMLP>(c, split_key(key, 2)[1], dtype))),
      input_layernorm(register_module(
          "input_layernorm", std::make_unique<RMSNorm>(c.hidden_size, c.rms_norm_eps, dtype))),
      post_attention_layernorm(
          register_module("post_attention_layernorm",
                          std::make_unique<RMSNorm>(c.hidden_size, c.rms_norm_eps, dtype))) {}

Tensor LlamaDecoderLayer::forward(const Tensor& x, const Tensor& cos, const Tensor& sin) const {
  Tensor h = x + self_attn.forward(input_layernorm.forward(x), cos, sin);
  return h + mlp.forward(post_attention_layernorm.forward(h));
}

LlamaModel::LlamaModel(const io::LlamaConfig& c, const Tensor& key, DType dtype)
    : Module("LlamaModel"),
      embed_tokens(register_module(
          "embed_tokens",
          std::make_unique<Embedding>(c.vocab_size, c.hidden_size, split_key(key, 3)[0], dtype))),
      layers(register_module("layers", MakeLayers(Complete(c), split_key(key, 3)[1], dtype))),
      norm(
          register_module("norm", std::make_unique<RMSNorm>(c.hidden_size, c.rms_norm_eps, dtype))),
      config(Complete(c)) {
  embed_tokens.weight = normal(split_key(key, 3)[2], {c.vocab_size, c.hidden_size}, 0, 0.02, dtype);
}

Tensor LlamaModel::forward(const Tensor& input_ids, LayerMode mode, Remat remat) const {
  if (input_ids.rank() != 2 || !IsInteger(input_ids.dtype())) {
    Fail("[llama] input_ids must be an integer [batch, seq] tensor, got {}",
         input_ids.shape().ToString());
  }
  const int64_t s = input_ids.dim(1);
  Tensor h = embed_tokens.forward(input_ids);
  RotaryTables rope = rotary_tables(s, config.head_dim, config.rope_theta, h.dtype());
  auto run = [&](Module& layer, const Tensor& x) { return RunDecoderLayer(layer, x, rope); };
  h = mode == LayerMode::kScan ? layers.forward(h, run, {.remat = remat})
                               : layers.forward_unrolled(h, run);
  return norm.forward(h);
}

LlamaForCausalLM::LlamaForCausalLM(const io::LlamaConfig& c, const Tensor& key,
                                   std::optional<DType> dtype)
    : Module("LlamaForCausalLM"),
      model(register_module("model", std::make_unique<LlamaModel>(Complete(c), split_key(key, 2)[0],
                                                                  dtype.value_or(c.torch_dtype)))),
      lm_head(nullptr) {
  if (!c.tie_word_embeddings) {
    lm_head =
        &register_module("lm_head", HfLinear(c.hidden_size, c.vocab_size, false,
                                             split_key(key, 2)[1], dtype.value_or(c.torch_dtype)));
  }
}

const Tensor& LlamaForCausalLM::lm_head_weight() const {
  return lm_head ? lm_head->weight : model.embed_tokens.weight;
}

Tensor LlamaForCausalLM::forward(const Tensor& input_ids) const {
  Tensor h = model.forward(input_ids, layer_mode, layer_remat);
  return matmul(h, transpose(lm_head_weight(), 0, 1));
}

Tensor LlamaForCausalLM::loss(const Tensor& logits, const Tensor& labels) const {
  if (labels.rank() != 2 || !IsInteger(labels.dtype()) || logits.rank() != 3 ||
      labels.dim(0) != logits.dim(0) || labels.dim(1) != logits.dim(1)) {
    Fail("[llama] labels must be an integer [batch, seq] tensor matching logits {}, got {}",
         logits.shape().ToString(), labels.shape().ToString());
  }
  const int64_t b = logits.dim(0), s = logits.dim(1), v = logits.dim(2);
  if (s < 2) Fail("[llama] the loss needs at least 2 positions, got {}", s);
  // Position t predicts label t + 1. Rather than slice off the logits'
  // last position (a copy of [b, s - 1, v], and a pad of its gradient back
  // to [b, s, v]), every position keeps its logits and the last one gets
  // the ignored label: the same mean, with no copy either way.
  Tensor predicted = reshape(logits, {b * s, v});
  Tensor target =
      reshape(concat({slice(labels, 1, 1, s), full({b, 1}, -100.0, labels.dtype())}, 1), {b * s});
  return cross_entropy(astype(predicted, DType::kF32), target, -100);
}

std::unique_ptr<LlamaForCausalLM> LoadLlama(const std::string& directory) {
  io::LlamaConfig config = io::ReadLlamaConfig(directory);
  io::ShardedCheckpoint checkpoint = io::ShardedCheckpoint::Open(directory);
  auto model = std::make_unique<LlamaForCausalLM>(config, random_key(0));
  std::map<std::string, Tensor> state;
  for (const std::string& name : checkpoint.names()) {
    // Tied checkpoints sometimes carry a copy of the embedding as lm_head.
    if (config.tie_word_embeddings && name == "lm_head.weight") continue;
    const io::TensorView& view = checkpoint.Get(name);
    state.emplace(name, Tensor::FromBytes(Shape(view.dtype, view.shape), view.data));
  }
  try {
    model->load_state_dict(state);
  } catch (const Error& e) {
    Fail("[llama] {} does not hold this model's weights: {}", checkpoint.label(), e.what());
  }
  return model;
}

void SaveLlama(LlamaForCausalLM& model, const std::string& directory) {
  io::MakeDirectories(directory, "[llama] save:");
  io::WriteLlamaConfig(std::filesystem::path(directory) / "config.json", model.model.config);
  std::vector<io::TensorData> tensors;
  std::vector<std::pair<std::string, Tensor>> state = model.state_entries();
  std::vector<Tensor*> values;
  for (auto& [name, t] : state) values.push_back(&t);
  sync(values);  // one program slices every layer out of its stack
  for (auto& [name, t] : state) tensors.push_back({name, t.dtype(), t.shape().dims(), t.bytes()});
  std::map<std::string, std::string> metadata = io::ChecksumMetadata(tensors);
  metadata["format"] = "pt";
  io::WriteSafetensors((std::filesystem::path(directory) / "model.safetensors").string(), tensors,
                       metadata);
}

}  // namespace strata::nn
