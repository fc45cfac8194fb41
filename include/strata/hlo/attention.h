// Fused attention as two custom-calls, the way XLA:GPU hands attention to
// cuDNN's fused kernels: one target computes softmax(q k^T * scale) v without
// ever writing the [B, H, S, S] scores, the other its gradient from what the
// first saved (the output and each row's log-sum-exp).
//
//   (o, lse) = custom-call(q, k, v), custom_call_target="strata.attention",
//              backend_config="causal=1;scale=0.125"
//     q [B, H, S, D], k and v [B, KV, S, D] with H a multiple of KV (query
//     head h reads kv head h / (H / KV)); o like q; lse f32[B, H, S], the
//     log of each row's sum of exp(scores).
//   (dq, dk, dv) = custom-call(q, k, v, o, lse, do),
//              custom_call_target="strata.attention_grad", backend_config=...
//
// q, k, v, o and do share one element type, f32 or bf16; the kernels compute
// in f32 either way. causal=1 masks key j for query i when j > i.
// Either call may take one more operand, an additive mask f32[Bm, Hm, S, S]
// (Bm 1 or B, Hm 1 or H, broadcast over what is 1): the scores are then
// q k^T * scale + mask, as torch's attn_mask (Hugging Face's causal and
// padding masks, 0 or a large negative number). The mask gets no gradient.
// backend_config may also say "layout=bshd": q, o, do and dq are then
// [B, S, H, D] and k, v, dk, dv [B, S, KV, D] (JAX's layout, and how a
// projection's output splits into heads), read and written in place; lse
// stays [B, H, S]. Without the key the layout is [B, H, S, D] (PyTorch's).
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "strata/core/shape.h"

namespace strata::hlo {

inline constexpr std::string_view kAttentionTarget = "strata.attention";
inline constexpr std::string_view kAttentionGradTarget = "strata.attention_grad";

inline bool IsAttentionTarget(std::string_view target) {
  return target == kAttentionTarget || target == kAttentionGradTarget;
}

enum class AttentionLayout { kBHSD, kBSHD };

struct AttentionConfig {
  bool causal = true;
  double scale = 1.0;  // multiplies q k^T before the softmax
  AttentionLayout layout = AttentionLayout::kBHSD;

  // Where the heads are in an array of the call of this rank: 4 (q, k, v,
  // o, do and the gradients) or 3 (the log-sum-exp, always [B, H, S]).
  int64_t heads_dim(int64_t rank) const {
    return rank == 4 && layout == AttentionLayout::kBSHD ? 2 : 1;
  }
};

// "causal=1;scale=0.125", and ";layout=bshd" for that layout (the scale
// printed so that it reads back exactly).
std::string PrintAttentionConfig(const AttentionConfig& config);
// The inverse; an Error naming the text and what it expected otherwise.
AttentionConfig ParseAttentionConfig(std::string_view text);

// The result of `target` over operands of these shapes in the config's
// layout (with or without the mask): a tuple (o, lse) or (dq, dk, dv). An
// Error saying what was expected and what was found for anything else.
Shape AttentionResultShape(std::string_view target, const AttentionConfig& config,
                           std::span<const Shape* const> operands);

// How many operands `target` takes without the mask (3 or 6); one more is
// the mask.
inline size_t AttentionOperandCount(std::string_view target) {
  return target == kAttentionGradTarget ? 6 : 3;
}

}  // namespace strata::hlo
