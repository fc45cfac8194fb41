// Reading and writing the Hugging Face `config.json` of a LlamaForCausalLM
// model. Keys, defaults and meanings follow transformers' LlamaConfig; keys it
// does not model (initializer_range, use_cache, pretraining_tp, ...) are
// ignored. The reader treats its input as untrusted: every defect is a
// strata::Error starting with "[config] <file>: <key>: ", saying what was
// expected and what was found.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "strata/core/dtype.h"

namespace strata::io {

// The member initializers are transformers' defaults for keys a config may
// omit. The five sizes without one are required keys.
struct LlamaConfig {
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;  // the MLP's gate/up projection width
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;  // when absent: num_attention_heads (no grouping)
  int64_t head_dim = 0;             // when absent: hidden_size / num_attention_heads
  int64_t max_position_embeddings = 2048;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  bool tie_word_embeddings = false;  // lm_head shares embed_tokens' weight
  bool attention_bias = false;       // q/k/v/o projections have biases
  bool mlp_bias = false;             // gate/up/down projections have biases
  std::string hidden_act = "silu";   // the only activation supported
  // The dtype the checkpoint's weights were saved in ("torch_dtype", or
  // "dtype" as transformers >= 4.56 writes it): f32, f16, bf16 or f64.
  DType torch_dtype = DType::kF32;
  // transformers defaults bos to 1 and eos to 2 when the key is absent; an
  // explicit null gives nullopt.
  std::optional<int64_t> bos_token_id = 1;
  std::optional<int64_t> eos_token_id = 2;
  std::optional<int64_t> pad_token_id;

  bool operator==(const LlamaConfig&) const = default;
};

// Parses and validates config.json text; `source` names it in error messages.
// Rejects, among others: a missing required key, a value of the wrong JSON
// type, non-positive sizes, heads that do not divide hidden_size (when
// head_dim is absent) or are not a multiple of num_key_value_heads, a
// model_type other than "llama" (or, without model_type, architectures that
// do not list LlamaForCausalLM), a non-null rope_scaling or a rope_parameters
// with more than rope_theta and rope_type "default" (scaling is not supported
// yet), a hidden_act other than "silu", and a torch_dtype other than float32,
// float16, bfloat16 or float64.
LlamaConfig ParseLlamaConfig(std::string_view json_text, std::string_view source = "config.json");

// Reads and parses `file`; a directory means its config.json.
LlamaConfig ReadLlamaConfig(const std::filesystem::path& file);

// The config as transformers writes it: keys sorted, two-space indent, a
// trailing newline, with model_type "llama" and architectures
// ["LlamaForCausalLM"]. ParseLlamaConfig(ToJson(c)) == c for any valid c.
// Throws strata::Error if `config` is not valid (the checks above).
std::string ToJson(const LlamaConfig& config);

// Writes ToJson(config) atomically: a temporary file in the same directory is
// written, fsynced and renamed over `file`, then the directory is fsynced. On
// failure an existing file at `file` is untouched.
void WriteLlamaConfig(const std::filesystem::path& file, const LlamaConfig& config);

}  // namespace strata::io
