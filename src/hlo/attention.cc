// The fused-attention custom-calls' config text and shape rule.
#include "strata/hlo/attention.h"

#include <fmt/core.h>

#include <charconv>
#include <cmath>

#include "strata/core/error.h"

namespace strata::hlo {

std::string PrintAttentionConfig(const AttentionConfig& config) {
  return fmt::format("causal={};scale={:.17g}{}", config.causal ? 1 : 0, config.scale,
                     config.layout == AttentionLayout::kBSHD ? ";layout=bshd" : "");
}

AttentionConfig ParseAttentionConfig(std::string_view text) {
  auto bad = [&](std::string_view why) {
    Fail(
        "[attention] backend_config \"{}\": {}; expected \"causal=0|1;scale=<positive "
        "number>[;layout=bhsd|bshd]\"",
        text, why);
  };
  AttentionConfig config;
  bool has_causal = false, has_scale = false, has_layout = false;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = std::min(text.find(';', start), text.size());
    std::string_view item = text.substr(start, end - start);
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) bad(fmt::format("'{}' is not key=value", item));
    std::string_view key = item.substr(0, eq), value = item.substr(eq + 1);
    if (key == "causal" && !has_causal) {
      if (value != "0" && value != "1") bad(fmt::format("causal is '{}'", value));
      config.causal = value == "1";
      has_causal = true;
    } else if (key == "scale" && !has_scale) {
      const auto [ptr, ec] =
          std::from_chars(value.data(), value.data() + value.size(), config.scale);
      if (ec != std::errc() || ptr != value.data() + value.size() || !std::isfinite(config.scale) ||
          !(config.scale > 0)) {
        bad(fmt::format("scale is '{}'", value));
      }
      has_scale = true;
    } else if (key == "layout" && !has_layout) {
      if (value != "bhsd" && value != "bshd") bad(fmt::format("layout is '{}'", value));
      config.layout = value == "bshd" ? AttentionLayout::kBSHD : AttentionLayout::kBHSD;
      has_layout = true;
    } else {
      bad(fmt::format("unexpected or repeated key '{}'", key));
    }
    start = end + 1;
  }
  if (!has_causal || !has_scale) bad("causal and scale are needed");
  return config;
}

Shape AttentionResultShape(std::string_view target, const AttentionConfig& config,
                           std::span<const Shape* const> operands) {
  const bool grad = target == kAttentionGradTarget;
  if (!grad && target != kAttentionTarget) Fail("[attention] unknown target '{}'", target);
  const size_t expected = AttentionOperandCount(target);
  if (operands.size() != expected && operands.size() != expected + 1) {
    Fail("[{}] expected {} operands ({}) or {} with a mask, found {}", target, expected,
         grad ? "q, k, v, o, lse, do" : "q, k, v", expected + 1, operands.size());
  }
  const Shape &q = *operands[0], &k = *operands[1], &v = *operands[2];
  auto describe = [&] {
    return fmt::format("q {}, k {}, v {}", q.ToString(), k.ToString(), v.ToString());
  };
  const bool bshd = config.layout == AttentionLayout::kBSHD;
  const int64_t heads = config.heads_dim(4), seq = bshd ? 1 : 2;
  if (!q.is_array() || !k.is_array() || !v.is_array() || q.rank() != 4 || k.rank() != 4 ||
      v.dims() != k.dims() || q.dim(0) != k.dim(0) || q.dim(seq) != k.dim(seq) ||
      q.dim(3) != k.dim(3) || k.dim(heads) == 0 || q.dim(heads) % k.dim(heads) != 0) {
    Fail("[{}] expected q {} and k, v {} with H a multiple of KV, got {}", target,
         bshd ? "[B, S, H, D]" : "[B, H, S, D]", bshd ? "[B, S, KV, D]" : "[B, KV, S, D]",
         describe());
  }
  if ((q.dtype() != DType::kF32 && q.dtype() != DType::kBF16) || k.dtype() != q.dtype() ||
      v.dtype() != q.dtype()) {
    Fail("[{}] expected q, k and v of one element type, f32 or bf16, got {}", target, describe());
  }
  if (operands.size() == expected + 1) {
    const Shape& mask = *operands[expected];
    const int64_t b = q.dim(0), h = q.dim(heads), s = q.dim(seq);
    if (!mask.is_array() || mask.dtype() != DType::kF32 || mask.rank() != 4 ||
        (mask.dim(0) != 1 && mask.dim(0) != b) || (mask.dim(1) != 1 && mask.dim(1) != h) ||
        mask.dim(2) != s || mask.dim(3) != s) {
      Fail("[{}] expected the mask f32[{} or 1, {} or 1, {}, {}] (for {}), found {}", target, b, h,
           s, s, describe(), mask.ToString());
    }
  }
  const Shape lse(DType::kF32, {q.dim(0), q.dim(heads), q.dim(seq)});
  if (!grad) return Shape::Tuple({q, lse});
  const char* names[] = {"o", "lse", "do"};
  const Shape* wanted[] = {&q, &lse, &q};
  for (int i = 0; i < 3; ++i) {
    if (*operands[3 + i] != *wanted[i]) {
      Fail("[{}] expected {} {} (for {}), found {}", target, names[i], wanted[i]->ToString(),
           describe(), operands[3 + i]->ToString());
    }
  }
  return Shape::Tuple({q, k, v});
}

}  // namespace strata::hlo
