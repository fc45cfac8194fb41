// Fused attention (hlo/attention.h): softmax(q k^T * scale [+ mask]) v and its
// gradient without writing the [B, H, S, S] scores or probabilities, the
// FlashAttention recurrence on the CPU. A block of query rows meets the keys
// a block at a time: its scores land in a [rows, keys] tile that stays in
// cache, are exponentiated there against a running row max (the online
// softmax) and multiply v straight away. The forward pass saves each row's
// log-sum-exp; the backward pass recomputes a tile's probabilities from it
// (exp(score - lse)) instead of reading them back. Under a causal mask the
// tiles wholly above the diagonal are skipped: about half the products the
// unfused program computes.
//
// The products are strata's GEMM (f32, or bf16 operands summed in f32 with
// vdpbf16ps where the CPU has it); everything else is f32. A bf16
// probability or score-gradient tile is rounded to bf16 before its product,
// as the unfused bf16 program rounds them. Compiled once per instruction set
// (isa.h) for the exp and the row loops.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/elementwise_ops.h"
#include "kernels/gemm.h"
#include "kernels/isa_kernels.h"
#include "strata/hlo/attention.h"

STRATA_ISA_BEGIN
namespace strata::runtime::STRATA_ISA_NAMESPACE {
namespace {

constexpr int64_t kQueryBlock = 64;  // query rows per tile
constexpr int64_t kKeyBlock = 512;   // keys per tile: [64, 512] f32 scores are 128 KiB

inline float Widen(float x) { return x; }
inline float Widen(HalfBits x) {
  uint32_t bits = static_cast<uint32_t>(static_cast<uint16_t>(x)) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// The GEMM over T's elements (bf16 as its bits), C in f32, overwritten.
template <typename T>
void Product(int64_t m, int64_t n, int64_t k, const T* a, int64_t a_rows, int64_t a_cols,
             const T* b, int64_t b_rows, int64_t b_cols, float* c, int64_t ldc) {
  if constexpr (std::is_same_v<T, float>) {
    Gemm<float>(m, n, k, {a, a_rows, a_cols}, {b, b_rows, b_cols}, c, ldc);
  } else {
    GemmBf16(m, n, k, {reinterpret_cast<const uint16_t*>(a), a_rows, a_cols},
             {reinterpret_cast<const uint16_t*>(b), b_rows, b_cols}, c, ldc);
  }
}

// An f32 tile as a product's operand: itself, or rounded to bf16 in `half`.
template <typename T>
const T* AsOperand(const float* tile, int64_t n, std::vector<HalfBits>& half) {
  if constexpr (std::is_same_v<T, float>) {
    return tile;
  } else {
    half.resize(n);
    NarrowToBf16(tile, reinterpret_cast<uint16_t*>(half.data()), n);
    return half.data();
  }
}

// `rows` rows of `cols` f32 values, contiguous, into rows `stride` apart.
template <typename T>
void Store(const float* src, int64_t rows, int64_t cols, T* dst, int64_t stride) {
  for (int64_t r = 0; r < rows; ++r, src += cols, dst += stride) {
    if constexpr (std::is_same_v<T, float>) {
      std::copy(src, src + cols, dst);
    } else {
      NarrowToBf16(src, reinterpret_cast<uint16_t*>(dst), cols);
    }
  }
}

// `rows` rows of `cols` elements `stride` apart as one contiguous block:
// the rows themselves when they are, else a copy in `buffer`. The GEMM
// reads a product's left operand in place, and rows H * D apart (a power of
// two) fall into a few cache sets: the [B, S, H, D] layout's query blocks
// ran slower read in place than the transposes they replaced.
template <typename T>
const T* Contiguous(const T* src, int64_t rows, int64_t cols, int64_t stride,
                    std::vector<T>& buffer) {
  if (stride == cols) return src;
  buffer.resize(rows * cols);
  for (int64_t r = 0; r < rows; ++r)
    std::copy(src + r * stride, src + r * stride + cols, buffer.data() + r * cols);
  return buffer.data();
}

// A head's [S, D] matrix is rows `q_stride` (or `kv_stride`) apart: D in
// the [B, H, S, D] layout, H * D (KV * D) in [B, S, H, D].
struct Dims {
  int64_t batch, heads, kv_heads, seq, head_dim;
  bool bshd;
  // The additive mask's strides over batch and heads (0 where it broadcasts);
  // its [S, S] rows are contiguous.
  int64_t mask_batch_stride = 0, mask_head_stride = 0;
  int64_t groups() const { return heads / kv_heads; }
  int64_t q_stride() const { return bshd ? heads * head_dim : head_dim; }
  int64_t kv_stride() const { return bshd ? kv_heads * head_dim : head_dim; }
  // Offsets in elements of the first row of head h's (or kv head g's) matrix.
  int64_t q_offset(int64_t b, int64_t h) const {
    return bshd ? (b * seq * heads + h) * head_dim : (b * heads + h) * seq * head_dim;
  }
  int64_t kv_offset(int64_t b, int64_t g) const {
    return bshd ? (b * seq * kv_heads + g) * head_dim : (b * kv_heads + g) * seq * head_dim;
  }
  // Head h of batch b's [S, S] mask, or null without one.
  const float* mask_of(const float* mask, int64_t b, int64_t h) const {
    return mask ? mask + b * mask_batch_stride + h * mask_head_stride : nullptr;
  }
};

// Runs work(t) for t in [0, n) on the pool, each thread taking the next t
// (the causal tiles' work grows with t's query block).
template <typename F>
void ForEachTask(ThreadPool& pool, int64_t n, F&& work) {
  std::atomic<int64_t> next{0};
  pool.ParallelFor(pool.num_threads(), 1, [&](int64_t, int64_t) {
    for (int64_t t; (t = next.fetch_add(1)) < n;) work(t);
  });
}

// q k^T for query rows [i0, i0 + rows) against keys [j0, j0 + cols)
// (q_rows contiguous, k_rows at the first key); causally masked keys -inf.
// Returns the scale still to apply: without an additive mask (`mask`, the
// head's [S, S]) the scores are left unscaled and callers fold the scale
// into the one pass that shifts the row for its exp; with one they are
// scaled here and the mask added, and the scale left is 1.
template <typename T>
float Scores(const Dims& d, const hlo::AttentionConfig& config, const T* q_rows, const T* k_rows,
             const float* mask, int64_t i0, int64_t rows, int64_t j0, int64_t cols, float* s) {
  Product<T>(rows, cols, d.head_dim, q_rows, d.head_dim, 1, k_rows, 1, d.head_dim, s, cols);
  float left = static_cast<float>(config.scale);
  if (mask) {
    for (int64_t r = 0; r < rows; ++r) {
      float* row = s + r * cols;
      const float* add = mask + (i0 + r) * d.seq + j0;
      for (int64_t c = 0; c < cols; ++c) row[c] = row[c] * left + add[c];
    }
    left = 1.0f;
  }
  if (!config.causal || j0 + cols <= i0 + 1) return left;  // no key past the first row's
  for (int64_t r = 0; r < rows; ++r) {
    // Causal: keys past the query's position are masked.
    const int64_t open = std::clamp<int64_t>(i0 + r + 1 - j0, 0, cols);
    std::fill(s + r * cols + open, s + (r + 1) * cols, -std::numeric_limits<float>::infinity());
  }
  return left;
}

template <typename T>
void Forward(const Dims& d, const hlo::AttentionConfig& config, const T* q, const T* k, const T* v,
             const float* mask, T* o, float* lse, ThreadPool& pool) {
  const int64_t blocks = (d.seq + kQueryBlock - 1) / kQueryBlock, dh = d.head_dim;
  const int64_t qs = d.q_stride(), ks = d.kv_stride();
  ForEachTask(pool, d.batch * d.heads * blocks, [&](int64_t task) {
    const int64_t bh = task / blocks, i0 = task % blocks * kQueryBlock;
    const int64_t b = bh / d.heads, h = bh % d.heads, g = h / d.groups();
    const int64_t rows = std::min(kQueryBlock, d.seq - i0);
    const int64_t keys = config.causal ? i0 + rows : d.seq;
    // (The [B, S, H, D] layout's rows copied together: see Contiguous.)
    thread_local std::vector<T> q_block, k_block, v_block;
    const T* q_rows = Contiguous(q + d.q_offset(b, h) + i0 * qs, rows, dh, qs, q_block);
    const T* k_head = Contiguous(k + d.kv_offset(b, g), keys, dh, ks, k_block);
    const T* v_head = Contiguous(v + d.kv_offset(b, g), keys, dh, ks, v_block);
    thread_local std::vector<float> s, pv, acc, row_max, row_sum;
    thread_local std::vector<HalfBits> half;
    const int64_t tile = std::min(kKeyBlock, keys);
    s.resize(rows * tile);
    pv.resize(rows * dh);
    acc.resize(rows * dh);
    row_max.assign(rows, -std::numeric_limits<float>::infinity());
    row_sum.assign(rows, 0.0f);
    for (int64_t j0 = 0; j0 < keys; j0 += kKeyBlock) {
      const int64_t cols = std::min(kKeyBlock, keys - j0);
      const float scale = Scores<T>(d, config, q_rows, k_head + j0 * dh, d.mask_of(mask, b, h), i0,
                                    rows, j0, cols, s.data());
      for (int64_t r = 0; r < rows; ++r) {
        float* row = s.data() + r * cols;
        float raw_max = -std::numeric_limits<float>::infinity();
        for (int64_t c = 0; c < cols; ++c) raw_max = row[c] > raw_max ? row[c] : raw_max;
        // The running max of the scaled scores (scale > 0 keeps the order).
        // Without a mask the first tile holds each row's key 0, so m is
        // finite from there on (or NaN, which then reaches the row's
        // output). A mask may hide every key of a tile: m stays -inf, the
        // tile adds nothing and the sums so far keep their scale.
        const float m = std::max(row_max[r], raw_max * scale);
        if (m == -std::numeric_limits<float>::infinity()) {
          std::fill(row, row + cols, 0.0f);
          continue;
        }
        const float rescale = std::exp(row_max[r] - m);
        row_max[r] = m;
        for (int64_t c = 0; c < cols; ++c) row[c] = row[c] * scale - m;
        ExpFloats(row, row, cols);
        float sum = 0.0f;
        for (int64_t c = 0; c < cols; ++c) sum += row[c];
        row_sum[r] = row_sum[r] * rescale + sum;
        if (j0 > 0) {
          for (int64_t x = 0; x < dh; ++x) acc[r * dh + x] *= rescale;
        }
      }
      const T* p = AsOperand<T>(s.data(), rows * cols, half);
      // The first tile's product is the sum so far; later ones add to it.
      float* into = j0 == 0 ? acc.data() : pv.data();
      Product<T>(rows, dh, cols, p, cols, 1, v_head + j0 * dh, dh, 1, into, dh);
      if (j0 > 0) {
        for (int64_t x = 0; x < rows * dh; ++x) acc[x] += pv[x];
      }
    }
    for (int64_t r = 0; r < rows; ++r) {
      const float inverse = 1.0f / row_sum[r];
      for (int64_t x = 0; x < dh; ++x) acc[r * dh + x] *= inverse;
      lse[bh * d.seq + i0 + r] = row_max[r] + std::log(row_sum[r]);
    }
    Store(acc.data(), rows, dh, o + d.q_offset(b, h) + i0 * qs, qs);
  });
}

// One task per (batch, kv head): it owns dk and dv of that head, summed
// over the query heads that read it and over every query block, so no two
// tasks write one value.
template <typename T>
void Backward(const Dims& d, const hlo::AttentionConfig& config, const T* q, const T* k, const T* v,
              const T* o, const float* lse, const T* dout, const float* mask, T* dq, T* dk, T* dv,
              ThreadPool& pool) {
  const int64_t dh = d.head_dim, qs = d.q_stride(), ks = d.kv_stride();
  const float scale = static_cast<float>(config.scale);
  ForEachTask(pool, d.batch * d.kv_heads, [&](int64_t task) {
    const int64_t b = task / d.kv_heads, g = task % d.kv_heads;
    thread_local std::vector<T> q_block, do_block, k_block, v_block;
    const T* k_head = Contiguous(k + d.kv_offset(b, g), d.seq, dh, ks, k_block);
    const T* v_head = Contiguous(v + d.kv_offset(b, g), d.seq, dh, ks, v_block);
    thread_local std::vector<float> p, dp, prod, dq_acc, dk_acc, dv_acc, delta;
    thread_local std::vector<HalfBits> half;
    dk_acc.assign(d.seq * dh, 0.0f);
    dv_acc.assign(d.seq * dh, 0.0f);
    for (int64_t h = g * d.groups(); h < (g + 1) * d.groups(); ++h) {
      const int64_t bh = b * d.heads + h;
      for (int64_t i0 = 0; i0 < d.seq; i0 += kQueryBlock) {
        const int64_t rows = std::min(kQueryBlock, d.seq - i0);
        const int64_t keys = config.causal ? i0 + rows : d.seq;
        const int64_t at = d.q_offset(b, h) + i0 * qs;
        const T* o_rows = o + at;
        const T* q_rows = Contiguous(q + at, rows, dh, qs, q_block);
        const T* do_rows = Contiguous(dout + at, rows, dh, qs, do_block);
        const float* row_lse = lse + bh * d.seq + i0;
        // delta_i = sum_x do[i, x] o[i, x]: the softmax backward's row term.
        delta.resize(rows);
        for (int64_t r = 0; r < rows; ++r) {
          float sum = 0.0f;
          for (int64_t x = 0; x < dh; ++x) {
            sum += Widen(do_rows[r * dh + x]) * Widen(o_rows[r * qs + x]);
          }
          delta[r] = sum;
        }
        dq_acc.resize(rows * dh);
        const int64_t tile = std::min(kKeyBlock, keys);
        p.resize(rows * tile);
        dp.resize(rows * tile);
        prod.resize(std::max(rows, tile) * dh);
        for (int64_t j0 = 0; j0 < keys; j0 += kKeyBlock) {
          const int64_t cols = std::min(kKeyBlock, keys - j0);
          // p = exp(scores - lse): the forward pass's probabilities.
          const float left = Scores<T>(d, config, q_rows, k_head + j0 * dh, d.mask_of(mask, b, h),
                                       i0, rows, j0, cols, p.data());
          for (int64_t r = 0; r < rows; ++r) {
            float* row = p.data() + r * cols;
            // A row whose every key is masked has lse -inf: its p is 0.
            const float shift = row_lse[r] == -std::numeric_limits<float>::infinity()
                                    ? std::numeric_limits<float>::infinity()
                                    : row_lse[r];
            for (int64_t c = 0; c < cols; ++c) row[c] = row[c] * left - shift;
            ExpFloats(row, row, cols);
          }
          // dv[keys] += p^T do.
          const T* p_op = AsOperand<T>(p.data(), rows * cols, half);
          Product<T>(cols, dh, rows, p_op, 1, cols, do_rows, dh, 1, prod.data(), dh);
          float* dv_rows = dv_acc.data() + j0 * dh;
          for (int64_t x = 0; x < cols * dh; ++x) dv_rows[x] += prod[x];
          // dp = do v^T; ds = p (dp - delta) * scale, the scores' gradient
          // times the scale that made them.
          Product<T>(rows, cols, dh, do_rows, dh, 1, v_head + j0 * dh, 1, dh, dp.data(), cols);
          for (int64_t r = 0; r < rows; ++r) {
            const float* pr = p.data() + r * cols;
            float* ds = dp.data() + r * cols;
            for (int64_t c = 0; c < cols; ++c) ds[c] = pr[c] * (ds[c] - delta[r]) * scale;
          }
          const T* ds_op = AsOperand<T>(dp.data(), rows * cols, half);
          // dq[rows] += ds k; dk[keys] += ds^T q.
          float* into = j0 == 0 ? dq_acc.data() : prod.data();
          Product<T>(rows, dh, cols, ds_op, cols, 1, k_head + j0 * dh, dh, 1, into, dh);
          if (j0 > 0) {
            for (int64_t x = 0; x < rows * dh; ++x) dq_acc[x] += prod[x];
          }
          Product<T>(cols, dh, rows, ds_op, 1, cols, q_rows, dh, 1, prod.data(), dh);
          float* dk_rows = dk_acc.data() + j0 * dh;
          for (int64_t x = 0; x < cols * dh; ++x) dk_rows[x] += prod[x];
        }
        Store(dq_acc.data(), rows, dh, dq + at, qs);
      }
    }
    Store(dk_acc.data(), d.seq, dh, dk + d.kv_offset(b, g), ks);
    Store(dv_acc.data(), d.seq, dh, dv + d.kv_offset(b, g), ks);
  });
}

}  // namespace

KernelInfo MakeAttentionKernel(const hlo::Instruction& inst, ThreadPool& pool) {
  const hlo::AttentionConfig config = hlo::ParseAttentionConfig(inst.backend_config);
  const Shape &qs = inst.operand(0)->shape(), &ks = inst.operand(1)->shape();
  const bool bshd = config.layout == hlo::AttentionLayout::kBSHD;
  const int64_t h = config.heads_dim(4), s = bshd ? 1 : 2;
  Dims d{qs.dim(0), qs.dim(h), ks.dim(h), qs.dim(s), qs.dim(3), bshd};
  const bool grad = inst.custom_call_target == hlo::kAttentionGradTarget;
  const int mask_at = static_cast<int>(hlo::AttentionOperandCount(inst.custom_call_target));
  const bool masked = inst.operand_count() > mask_at;
  if (masked) {
    const Shape& m = inst.operand(mask_at)->shape();
    d.mask_head_stride = m.dim(1) == 1 ? 0 : d.seq * d.seq;
    d.mask_batch_stride = m.dim(0) == 1 ? 0 : m.dim(1) * d.seq * d.seq;
  }
  auto make = [&](auto tag) -> KernelInfo {
    using T = typename decltype(tag)::type;
    if (d.batch * d.heads * d.seq == 0) return {[](const KernelArgs&) {}};  // nothing at all
    if (d.head_dim == 0) {
      // Every score is 0: o and the gradients have no elements, and each
      // row's log-sum-exp is the log of how many keys it sees.
      return {[grad, d, config](const KernelArgs& args) {
        if (grad) return;
        float* lse = reinterpret_cast<float*>(args.outputs[1]);
        for (int64_t x = 0; x < d.batch * d.heads * d.seq; ++x) {
          const int64_t i = x % d.seq;
          lse[x] = std::log(static_cast<float>(config.causal ? i + 1 : d.seq));
        }
      }};
    }
    if (grad) {
      return {[d, config, masked, mask_at, &pool](const KernelArgs& args) {
        auto in = [&](int i) { return reinterpret_cast<const T*>(args.operands[i]); };
        auto out = [&](int i) { return reinterpret_cast<T*>(args.outputs[i]); };
        const float* mask =
            masked ? reinterpret_cast<const float*>(args.operands[mask_at]) : nullptr;
        Backward<T>(d, config, in(0), in(1), in(2), in(3),
                    reinterpret_cast<const float*>(args.operands[4]), in(5), mask, out(0), out(1),
                    out(2), pool);
      }};
    }
    return {[d, config, masked, mask_at, &pool](const KernelArgs& args) {
      auto in = [&](int i) { return reinterpret_cast<const T*>(args.operands[i]); };
      const float* mask = masked ? reinterpret_cast<const float*>(args.operands[mask_at]) : nullptr;
      Forward<T>(d, config, in(0), in(1), in(2), mask, reinterpret_cast<T*>(args.outputs[0]),
                 reinterpret_cast<float*>(args.outputs[1]), pool);
    }};
  };
  if (qs.dtype() == DType::kF32) return make(TypeTag<float>{});
  return make(TypeTag<HalfBits>{});
}

}  // namespace strata::runtime::STRATA_ISA_NAMESPACE
STRATA_ISA_END
