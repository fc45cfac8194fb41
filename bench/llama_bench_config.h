// The Llama bench configuration shared by llama_bench and train_step_bench
// (the peers, bench/llama_torch.py and bench/train_torch.py, use the same):
// V=4096, H=512, 8 heads, 4 kv heads, I=1536.
#pragma once

#include <cstdint>
#include <vector>

#include "strata/io/llama_config.h"
#include "strata/lazy/tensor.h"

namespace strata::bench {

inline io::LlamaConfig BenchConfig(int64_t layers) {
  io::LlamaConfig c;
  c.vocab_size = 4096;
  c.hidden_size = 512;
  c.intermediate_size = 1536;
  c.num_hidden_layers = layers;
  c.num_attention_heads = 8;
  c.num_key_value_heads = 4;
  return c;
}

// Deterministic token ids (a multiplicative hash of the position) in [0, vocab).
inline Tensor Tokens(int64_t batch, int64_t seq, int64_t vocab, uint64_t salt) {
  std::vector<int64_t> ids(batch * seq);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = (i * 2654435761u + salt) % vocab;
  return Tensor::FromVector(ids, {batch, seq});
}

}  // namespace strata::bench
