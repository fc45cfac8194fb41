#include "strata/nn/functional.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>

#include "strata/core/error.h"
#include "strata/hlo/attention.h"
#include "strata/lazy/index_check.h"
#include "strata/lazy/op_builder.h"

namespace strata::nn {
namespace {

Tensor Reduce(const Tensor& per_element, Reduction reduction) {
  switch (reduction) {
    case Reduction::kMean:
      return mean(per_element);
    case Reduction::kSum:
      return sum(per_element);
    case Reduction::kNone:
      return per_element;
  }
  return per_element;
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const std::optional<Tensor>& bias) {
  if (weight.rank() != 2) {
    Fail("[linear] weight must be [out_features, in_features], got {}", weight.shape().ToString());
  }
  if (x.rank() == 0 || x.dim(-1) != weight.dim(1)) {
    Fail("[linear] input {} must end in {} features (weight {})", x.shape().ToString(),
         weight.dim(1), weight.shape().ToString());
  }
  if (bias && (bias->rank() != 1 || bias->dim(0) != weight.dim(0))) {
    Fail("[linear] bias must be [{}], got {}", weight.dim(0), bias->shape().ToString());
  }
  Tensor y = matmul(x, mT(weight));
  return bias ? y + *bias : y;
}

// where(x <= 0, 0, x): a gradient of 0 at 0 and NaN kept, as torch (maximum
// would split a tie's gradient).
Tensor relu(const Tensor& x) {
  if (x.dtype() == DType::kPred) Fail("[relu] is not defined for bool tensors (as torch)");
  const Tensor zero = zeros({}, x.dtype());
  return where(le(x, zero), zero, x);
}

Tensor gelu(const Tensor& x, bool tanh_approximation) {
  if (tanh_approximation) {
    const double c = std::sqrt(2.0 / M_PI);
    return x * 0.5 * (1.0 + tanh((x + x * x * x * 0.044715) * c));
  }
  return x * 0.5 * (1.0 + erf(x * (1.0 / std::sqrt(2.0))));
}

Tensor silu(const Tensor& x) { return x * sigmoid(x); }

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  if (input.shape().dims() != target.shape().dims()) {
    Fail("[mse_loss] input {} and target {} must have the same shape", input.shape().ToString(),
         target.shape().ToString());
  }
  Tensor d = input - target;
  return Reduce(d * d, reduction);
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index,
                     Reduction reduction) {
  if (!IsInteger(target.dtype())) {
    Fail("[cross_entropy] target must hold integer class indices, got {}",
         target.shape().ToString());
  }
  bool batched = logits.rank() == 2;
  if (!(batched && target.rank() == 1 && target.dim(0) == logits.dim(0)) &&
      !(logits.rank() == 1 && target.rank() == 0)) {
    Fail("[cross_entropy] expected logits [N, C] with target [N] (or [C] with []), got {} and {}",
         logits.shape().ToString(), target.shape().ToString());
  }
  Tensor lg = batched ? logits : unsqueeze(logits, 0);
  Tensor tg = batched ? target : unsqueeze(target, 0);
  const int64_t classes = lg.dim(1);
  Tensor keep = ne(tg, full({}, static_cast<double>(ignore_index), tg.dtype()));
  // A label out of range is cross_entropy's error (checked indexing), not
  // take_along_dim's: the labels it reads are clamped into range.
  Tensor safe = where(keep, clamp(tg, 0, static_cast<double>(classes - 1)), zeros({}, tg.dtype()));
  Tensor log_probs = log_softmax(lg, -1);
  Tensor picked = squeeze(take_along_dim(log_probs, unsqueeze(safe, 1), 1), 1);
  Tensor weight = astype(keep, log_probs.dtype());
  // An ignored row contributes 0 whatever its logits hold (-picked * 0
  // would be NaN for an infinite or NaN logit there).
  Tensor losses = lazy::WithIndexCheck(
      where(keep, -picked, zeros({}, log_probs.dtype())), target, classes, "cross_entropy",
      fmt::format("the {} classes of logits {}", classes, logits.shape().ToString()), ignore_index);
  switch (reduction) {
    case Reduction::kMean:
      return sum(losses) / sum(weight);  // NaN when every target is ignored, as torch
    case Reduction::kSum:
      return sum(losses);
    case Reduction::kNone:
      return batched ? losses : squeeze(losses, 0);
  }
  return losses;
}

Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  if (x.rank() == 0) Fail("[rms_norm] needs at least one dimension to normalize, got a 0-d tensor");
  DType compute = x.dtype() == DType::kF64 ? DType::kF64 : DType::kF32;
  Tensor h = astype(x, compute);
  Tensor normed = h * rsqrt(mean(h * h, {-1}, true) + eps);
  return weight * astype(normed, x.dtype());
}

Tensor layer_norm(const Tensor& x, const std::optional<Tensor>& weight,
                  const std::optional<Tensor>& bias, double eps) {
  if (x.rank() == 0)
    Fail("[layer_norm] needs at least one dimension to normalize, got a 0-d tensor");
  Tensor mu = mean(x, {-1}, true);
  Tensor centered = x - mu;
  Tensor var = mean(centered * centered, {-1}, true);  // biased, as torch
  Tensor y = centered * rsqrt(var + eps);
  if (weight) y = y * *weight;
  if (bias) y = y + *bias;
  return y;
}

Tensor dropout(const Tensor& x, double p, const Tensor& key, bool training) {
  if (p < 0 || p > 1) Fail("[dropout] p must be in [0, 1], got {}", p);
  if (!training || p == 0) return x;
  if (p == 1) return x * 0.0;
  Tensor keep = ge(uniform(key, x.shape().dims(), 0, 1, x.dtype()), full({}, p, x.dtype()));
  return where(keep, x * (1.0 / (1.0 - p)), zeros({}, x.dtype()));
}

RotaryTables rotary_tables(int64_t seq_len, int64_t head_dim, double theta, DType dtype) {
  if (head_dim % 2 != 0) Fail("[rotary_tables] head_dim must be even, got {}", head_dim);
  // inv_freq[i] = theta^(-2i/head_dim), as HF computes it.
  Tensor i = arange(0, static_cast<double>(head_dim / 2), 1, DType::kF64);
  Tensor inv_freq = exp(i * (-2.0 * std::log(theta) / static_cast<double>(head_dim)));
  Tensor positions = arange(0, static_cast<double>(seq_len), 1, DType::kF64);
  Tensor freqs = matmul(unsqueeze(positions, 1), unsqueeze(inv_freq, 0));  // [S, D/2]
  Tensor emb = concat({freqs, freqs}, 1);
  return {astype(cos(emb), dtype), astype(sin(emb), dtype)};
}

Tensor rotate_half(const Tensor& x) {
  int64_t d = x.dim(-1);
  if (d % 2 != 0) Fail("[rotate_half] last dimension must be even, got {}", x.shape().ToString());
  // concat(-x2, x1) as the halves swapped (a reverse of a [2, d/2] view:
  // an index map a fused loop reads in place) times a sign per element.
  std::vector<int64_t> halves = x.shape().dims();
  halves.back() = 2;
  halves.push_back(d / 2);
  Tensor swapped = reshape(flip(reshape(x, halves), {-2}), x.shape().dims());
  Tensor sign = concat({full({d / 2}, -1.0, x.dtype()), full({d / 2}, 1.0, x.dtype())}, 0);
  return swapped * sign;
}

Tensor apply_rotary(const Tensor& x, const Tensor& cos, const Tensor& sin, int64_t seq_dim) {
  const int64_t at = seq_dim < 0 ? seq_dim + x.rank() : seq_dim;
  if (at < 0 || at >= x.rank() - 1) {
    Fail("[apply_rotary] seq_dim {} is not a dim of x {} before its last", seq_dim,
         x.shape().ToString());
  }
  if (cos.rank() != 2 || cos.dim(0) != x.dim(at) || cos.dim(1) != x.dim(-1) ||
      sin.shape() != cos.shape()) {
    Fail(
        "[apply_rotary] expected cos and sin [S, D] = [{}, {}] (x {} with the positions at dim "
        "{}), got {} and {}",
        x.dim(at), x.dim(-1), x.shape().ToString(), at, cos.shape().ToString(),
        sin.shape().ToString());
  }
  // [S, D] as [S, 1, ..., 1, D]: broadcast over the dims between.
  std::vector<int64_t> table(x.rank() - at, 1);
  table.front() = cos.dim(0);
  table.back() = cos.dim(1);
  return x * reshape(cos, table) + rotate_half(x) * reshape(sin, table);
}

namespace {

// The fused kernel's gradient: one strata.attention_grad call reading q, k,
// v and what the forward call saved (o and each row's log-sum-exp).
class FusedAttentionGradient final : public ir::GradientRule {
 public:
  explicit FusedAttentionGradient(std::string config) : config_(std::move(config)) {}
  std::vector<ir::Value> Vjp(const ir::NodePtr& node, const std::vector<ir::Value>& cotangents,
                             const std::vector<bool>& needed) const override;

 private:
  std::string config_;
};

// The gradient call is not differentiated again: a second derivative
// through attention takes the unfused form (fused=false).
class NoSecondDerivative final : public ir::GradientRule {
 public:
  std::vector<ir::Value> Vjp(const ir::NodePtr&, const std::vector<ir::Value>&,
                             const std::vector<bool>&) const override {
    Fail(
        "[scaled_dot_product_attention] the fused kernel's gradient has no gradient of its own; "
        "for second derivatives call scaled_dot_product_attention(q, k, v, causal, "
        "/*fused=*/false)");
  }
};

std::vector<ir::Value> FusedAttentionGradient::Vjp(const ir::NodePtr& node,
                                                   const std::vector<ir::Value>& cotangents,
                                                   const std::vector<bool>& needed) const {
  std::vector<ir::Value> grads(node->operands().size());
  if (!cotangents[0] || std::none_of(needed.begin(), needed.end(), [](bool b) { return b; })) {
    return grads;
  }
  const auto& in = node->operands();
  const bool masked = in.size() > 3;
  if (masked && needed[3]) {
    Fail(
        "[fused_attention] the fused kernel gives no gradient for its mask; for one, write the "
        "attention unfused (scores, softmax and products)");
  }
  hlo::Attributes attributes;
  attributes.custom_call_target = std::string(hlo::kAttentionGradTarget);
  attributes.backend_config = config_;
  const ir::Value dout = lazy::ConvertValue(cotangents[0], in[0].shape().dtype());
  std::vector<ir::Value> operands{in[0], in[1], in[2], ir::Value{node, 0}, ir::Value{node, 1},
                                  dout};
  if (masked) operands.push_back(in[3]);
  ir::NodePtr grad =
      ir::Node::MakeOp(hlo::Opcode::kCustomCall, std::move(operands), std::move(attributes))
          ->WithGradientRule(std::make_shared<NoSecondDerivative>());
  for (int i = 0; i < 3; ++i) grads[i] = ir::Value{grad, i};
  return grads;
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                                    bool fused, AttentionLayout layout) {
  const bool bshd = layout == AttentionLayout::kBSHD;
  const int hd = bshd ? 2 : 1, sd = bshd ? 1 : 2;  // the heads' and the positions' dims
  if (q.rank() != 4 || k.rank() != 4 || v.shape() != k.shape() || q.dim(0) != k.dim(0) ||
      q.dim(3) != k.dim(3) || q.dim(sd) != k.dim(sd) || k.dim(hd) == 0 ||
      q.dim(hd) % k.dim(hd) != 0) {
    Fail(
        "[scaled_dot_product_attention] expected q {} and k, v {} with H a multiple of KV, got q "
        "{}, k {}, v {}",
        bshd ? "[B, S, H, D]" : "[B, H, S, D]", bshd ? "[B, S, KV, D]" : "[B, KV, S, D]",
        q.shape().ToString(), k.shape().ToString(), v.shape().ToString());
  }
  const int64_t d = q.dim(3);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  const DType dtype = q.dtype();
  if (fused && k.dtype() == dtype && v.dtype() == dtype &&
      (dtype == DType::kF32 || dtype == DType::kBF16) && d > 0) {
    hlo::Attributes attributes;
    attributes.custom_call_target = std::string(hlo::kAttentionTarget);
    attributes.backend_config = hlo::PrintAttentionConfig({causal, scale, layout});
    std::string config = attributes.backend_config;
    ir::NodePtr node =
        ir::Node::MakeOp(hlo::Opcode::kCustomCall, {q.value(), k.value(), v.value()},
                         std::move(attributes))
            ->WithGradientRule(std::make_shared<FusedAttentionGradient>(std::move(config)));
    return Tensor(ir::Value{node, 0});
  }
  if (bshd) {  // the composite in [B, H, S, D]
    auto heads_first = [](const Tensor& t) { return permute(t, {0, 2, 1, 3}); };
    return heads_first(scaled_dot_product_attention(heads_first(q), heads_first(k), heads_first(v),
                                                    causal, fused));
  }
  const int64_t b = q.dim(0), h = q.dim(1), s = q.dim(2), kv = k.dim(1), groups = h / kv;
  auto repeat =
      [&](const Tensor& t) {  // [B, KV, S, D] -> [B, H, S, D], each kv head `groups` times
        if (groups == 1) return t;
        return reshape(expand(unsqueeze(t, 2), {b, kv, groups, s, d}), {b, h, s, d});
      };
  Tensor scores = matmul(q, transpose(repeat(k), -1, -2)) * scale;
  if (causal) {
    Tensor rows = unsqueeze(arange(s), 1), cols = unsqueeze(arange(s), 0);
    scores = where(ge(rows, cols), scores, constant(-INFINITY, scores.dtype()));
  }
  // Half-precision scores: the softmax in f32, as Hugging Face's eager
  // attention does, the probabilities rounded once for their product with v.
  if (scores.dtype() == DType::kBF16 || scores.dtype() == DType::kF16)
    return matmul(astype(softmax(astype(scores, DType::kF32), -1), scores.dtype()), repeat(v));
  return matmul(softmax(scores, -1), repeat(v));
}

namespace {

void CheckFusedTypes(std::string_view op, std::initializer_list<const Tensor*> tensors) {
  const DType dtype = (*tensors.begin())->dtype();
  for (const Tensor* t : tensors) {
    if (t->dtype() != dtype || (dtype != DType::kF32 && dtype != DType::kBF16)) {
      Fail("[{}] the fused kernel takes q, k, v, out and dout of one dtype, f32 or bf16; got {}",
           op, t->shape().ToString());
    }
  }
}

}  // namespace

AttentionOutput fused_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                                double scale, const Tensor& mask) {
  CheckFusedTypes("fused_attention", {&q, &k, &v});
  hlo::Attributes attributes;
  attributes.custom_call_target = std::string(hlo::kAttentionTarget);
  attributes.backend_config = hlo::PrintAttentionConfig({causal, scale, AttentionLayout::kBHSD});
  std::string config = attributes.backend_config;
  std::vector<ir::Value> operands{q.value(), k.value(), v.value()};
  if (mask.defined()) operands.push_back(mask.value());
  // The shape rule (hlo::AttentionResultShape) names any shape mismatch.
  ir::NodePtr node =
      ir::Node::MakeOp(hlo::Opcode::kCustomCall, std::move(operands), std::move(attributes))
          ->WithGradientRule(std::make_shared<FusedAttentionGradient>(std::move(config)));
  return {Tensor(ir::Value{node, 0}), Tensor(ir::Value{node, 1})};
}

std::vector<Tensor> fused_attention_grad(const Tensor& q, const Tensor& k, const Tensor& v,
                                         const Tensor& out, const Tensor& lse, const Tensor& dout,
                                         bool causal, double scale, const Tensor& mask) {
  CheckFusedTypes("fused_attention_grad", {&q, &k, &v, &out, &dout});
  if (lse.dtype() != DType::kF32) {
    Fail("[fused_attention_grad] lse must be f32 [B, H, S], got {}", lse.shape().ToString());
  }
  hlo::Attributes attributes;
  attributes.custom_call_target = std::string(hlo::kAttentionGradTarget);
  attributes.backend_config = hlo::PrintAttentionConfig({causal, scale, AttentionLayout::kBHSD});
  std::vector<ir::Value> operands{q.value(),   k.value(),   v.value(),
                                  out.value(), lse.value(), dout.value()};
  if (mask.defined()) operands.push_back(mask.value());
  ir::NodePtr grad =
      ir::Node::MakeOp(hlo::Opcode::kCustomCall, std::move(operands), std::move(attributes))
          ->WithGradientRule(std::make_shared<NoSecondDerivative>());
  return {Tensor(ir::Value{grad, 0}), Tensor(ir::Value{grad, 1}), Tensor(ir::Value{grad, 2})};
}

}  // namespace strata::nn
