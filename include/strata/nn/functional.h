// Neural-network functions built from primitives (so their gradients come
// from the primitives' VJP rules), with PyTorch's semantics.
#pragma once

#include <optional>
#include <string>

#include "strata/hlo/attention.h"
#include "strata/lazy/ops.h"

namespace strata::nn {

enum class Reduction { kMean, kSum, kNone };

// torch.nn.functional.linear: x [..., in] times weight [out, in]
// transposed, plus bias [out].
Tensor linear(const Tensor& x, const Tensor& weight,
              const std::optional<Tensor>& bias = std::nullopt);

Tensor relu(const Tensor& x);
// approximate = false: x/2 (1 + erf(x/sqrt 2)); true: the tanh form.
Tensor gelu(const Tensor& x, bool tanh_approximation = false);
Tensor silu(const Tensor& x);

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::kMean);
// logits [N, C] (or [C]), target integer class indices [N] (or []); targets
// equal to ignore_index contribute nothing, and the mean is over the rest.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index = -100,
                     Reduction reduction = Reduction::kMean);

// Over the last dimension. rms_norm computes in f32 at least, as Hugging Face
// Llama does, and returns the input's dtype scaled by weight.
Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps = 1e-6);
Tensor layer_norm(const Tensor& x, const std::optional<Tensor>& weight,
                  const std::optional<Tensor>& bias, double eps = 1e-5);

// Inverted dropout with keyed random bits; identity when !training or p == 0.
Tensor dropout(const Tensor& x, double p, const Tensor& key, bool training = true);

// Rotary position embeddings, Hugging Face Llama convention: cos/sin are
// [seq, head_dim] with the frequencies repeated (cat(freqs, freqs)), and
// x * cos + rotate_half(x) * sin over x [..., seq, head_dim], or with the
// positions at dim `seq_dim` of x ([B, S, H, D]: seq_dim 1, or -3) and the
// tables broadcast over the dims between (Hugging Face's unsqueeze_dim).
struct RotaryTables {
  Tensor cos, sin;
};
RotaryTables rotary_tables(int64_t seq_len, int64_t head_dim, double theta = 10000.0,
                           DType dtype = DType::kF32);
Tensor rotate_half(const Tensor& x);
Tensor apply_rotary(const Tensor& x, const Tensor& cos, const Tensor& sin, int64_t seq_dim = -2);

// Scaled dot-product attention over q [B, H, S, D], k and v [B, KV, S, D]
// with H a multiple of KV (grouped-query: query head h reads kv head
// h / (H / KV)); causal masks keys after the query position. With layout
// kBSHD every array is [B, S, heads, D] instead (JAX's layout: a
// projection's output reshaped into heads, no transpose on either side).
// f32 and bf16 run fused (one kernel each way, hlo/attention.h: the
// [B, H, S, S] scores are never written) unless `fused` is false; other
// types, and fused=false, run the composite softmax(q k^T / sqrt(D)) v of
// primitives (which also has second derivatives; the fused gradient does
// not).
using hlo::AttentionLayout;
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    bool causal = true, bool fused = true,
                                    AttentionLayout layout = AttentionLayout::kBHSD);

// The fused kernel's two calls as they are, for front ends whose graphs
// already hold both (PyTorch's flash-attention ops): the output and each
// row's log-sum-exp (f32 [B, H, S]), and the gradients of q, k and v from
// those, the cotangent of the output and the same causal and scale. q, k, v
// (and o, dout) share one dtype, f32 or bf16, in [B, H, S, D] / [B, KV, S, D].
// A defined `mask` is added to the scaled scores: f32 [B or 1, H or 1, S, S]
// (torch's float attn_mask; a bool one is where(mask, 0, -inf)). It gets no
// gradient (an Error says so when one is asked for).
struct AttentionOutput {
  Tensor out, lse;
};
AttentionOutput fused_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                                double scale, const Tensor& mask = Tensor());
std::vector<Tensor> fused_attention_grad(const Tensor& q, const Tensor& k, const Tensor& v,
                                         const Tensor& out, const Tensor& lse, const Tensor& dout,
                                         bool causal, double scale, const Tensor& mask = Tensor());

}  // namespace strata::nn
