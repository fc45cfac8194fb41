// The fused attention custom-calls (hlo/attention.h) against plain loops in
// doubles: the forward output and log-sum-exp, and the gradients written out
// from the textbook formulas (P = softmax(s), dP = dO V^T, dS = P (dP -
// rowsum(dP P)), dQ = scale dS K, dK = scale dS^T Q, dV = P^T dO). Shapes
// cross the kernel's tiles: sequences not a multiple of its 64-row query
// blocks, and longer than its 512-key tiles (the online softmax's rescaling).
// The runtime tests also run under each narrower instruction set.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "runtime/test_util.h"
#include "strata/compiler/compile.h"
#include "strata/hlo/text.h"

namespace strata::runtime {
namespace {

struct Case {
  int64_t b, h, kv, s, d;
  bool causal;
  bool bf16 = false;
  bool bshd = false;  // the arrays [B, S, heads, D]; the reference works in [B, heads, S, D]
  // An additive mask: 0 none, 1 [B, H, S, S], 2 [1, 1, S, S], 3 [B, 1, S, S].
  int mask = 0;
  double scale() const { return 1.0 / std::sqrt(static_cast<double>(d)); }
  int64_t mask_b() const { return mask == 2 ? 1 : b; }
  int64_t mask_h() const { return mask == 1 ? h : 1; }
  std::string Mask() const { return fmt::format("f32[{},{},{},{}]", mask_b(), mask_h(), s, s); }
  std::string Type() const { return bf16 ? "bf16" : "f32"; }
  std::string Array(int64_t heads) const {
    return bshd ? fmt::format("{}[{},{},{},{}]", Type(), b, s, heads, d)
                : fmt::format("{}[{},{},{},{}]", Type(), b, heads, s, d);
  }
  std::string Q() const { return Array(h); }
  std::string Kv() const { return Array(kv); }
  std::string Config() const {
    return fmt::format("backend_config=\"causal={};scale={:.17g}{}\"", causal ? 1 : 0, scale(),
                       bshd ? ";layout=bshd" : "");
  }
};

// [B, n, S, D] values as [B, S, n, D] (forward), or back.
std::vector<float> SwapHeadsAndPositions(const std::vector<float>& x, int64_t b, int64_t n,
                                         int64_t s, int64_t d, bool forward) {
  std::vector<float> out(x.size());
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t hi = 0; hi < n; ++hi)
      for (int64_t i = 0; i < s; ++i)
        for (int64_t e = 0; e < d; ++e) {
          const int64_t heads_first = ((bi * n + hi) * s + i) * d + e;
          const int64_t positions_first = ((bi * s + i) * n + hi) * d + e;
          if (forward) {
            out[positions_first] = x[heads_first];
          } else {
            out[heads_first] = x[positions_first];
          }
        }
  return out;
}

std::string ForwardModule(const Case& c) {
  return fmt::format(R"(HloModule attention
ENTRY main {{
  q = {0} parameter(0)
  k = {1} parameter(1)
  v = {1} parameter(2)
  {6}
  ROOT a = ({0}, f32[{2},{3},{4}]) custom-call(q, k, v{7}), custom_call_target="strata.attention", {5}
}}
)",
                     c.Q(), c.Kv(), c.b, c.h, c.s, c.Config(),
                     c.mask ? "m = " + c.Mask() + " parameter(3)" : "", c.mask ? ", m" : "");
}

std::string GradModule(const Case& c) {
  return fmt::format(R"(HloModule attention_grad
ENTRY main {{
  q = {0} parameter(0)
  k = {1} parameter(1)
  v = {1} parameter(2)
  do = {0} parameter(3)
  {6}
  a = ({0}, f32[{2},{3},{4}]) custom-call(q, k, v{7}), custom_call_target="strata.attention", {5}
  o = {0} get-tuple-element(a), index=0
  lse = f32[{2},{3},{4}] get-tuple-element(a), index=1
  ROOT g = ({0}, {1}, {1}) custom-call(q, k, v, o, lse, do{7}), custom_call_target="strata.attention_grad", {5}
}}
)",
                     c.Q(), c.Kv(), c.b, c.h, c.s, c.Config(),
                     c.mask ? "m = " + c.Mask() + " parameter(4)" : "", c.mask ? ", m" : "");
}

float RoundBf16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  bits += 0x7FFF + ((bits >> 16) & 1);
  bits &= 0xFFFF0000u;
  std::memcpy(&x, &bits, 4);
  return x;
}

// Values in [-2, 2] (bf16-exact when the case is bf16).
std::vector<float> Random(int64_t n, int seed, bool bf16) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  std::vector<float> v(n);
  for (float& x : v) x = bf16 ? RoundBf16(dist(rng)) : dist(rng);
  return v;
}

Buffer ToBuffer(const std::vector<float>& values, std::vector<int64_t> dims, bool bf16) {
  Buffer f32 = test::Arg(values, dims);
  if (!bf16) return f32;
  std::vector<uint16_t> bits(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    uint32_t word;
    std::memcpy(&word, &values[i], 4);
    bits[i] = static_cast<uint16_t>(word >> 16);
  }
  std::vector<uint8_t> bytes(bits.size() * 2);
  std::memcpy(bytes.data(), bits.data(), bytes.size());
  return Buffer::FromHost(Shape(DType::kBF16, std::move(dims)), bytes, test::Cpu());
}

std::vector<double> FromBuffer(const Buffer& buffer) {
  std::vector<double> out;
  if (buffer.shape().dtype() == DType::kBF16) {
    for (int64_t i = 0; i < buffer.shape().num_elements(); ++i) {
      uint16_t half;
      std::memcpy(&half, buffer.data() + 2 * i, 2);
      uint32_t word = static_cast<uint32_t>(half) << 16;
      float f;
      std::memcpy(&f, &word, 4);
      out.push_back(f);
    }
  } else {
    for (float f : buffer.ToVector<float>()) out.push_back(f);
  }
  return out;
}

// Attention in doubles, every (batch, head) by itself.
struct Reference {
  std::vector<double> o, lse, dq, dk, dv;
};

// The case's mask: values in [-3, 0], some keys -inf (never key 0, so no
// row is wholly masked), and over 512 keys one row whose first 512 are all
// -inf (the kernel's first key tile adds nothing to it).
std::vector<float> MaskValues(const Case& c) {
  if (!c.mask) return {};
  std::vector<float> m = Random(c.mask_b() * c.mask_h() * c.s * c.s, 5, false);
  for (size_t x = 0; x < m.size(); ++x) {
    const int64_t j = static_cast<int64_t>(x) % c.s, i = static_cast<int64_t>(x) / c.s % c.s;
    m[x] = (m[x] - 2.0f) * 0.75f;
    if (j > 0 && x % 7 == 3) m[x] = -INFINITY;
    if (c.s > 512 && i == 5 && !c.causal) m[x] = j < 512 ? -INFINITY : 0.0f;
  }
  return m;
}

Reference Attend(const Case& c, const std::vector<float>& q, const std::vector<float>& k,
                 const std::vector<float>& v, const std::vector<float>& dout,
                 const std::vector<float>& mask = {}) {
  Reference r;
  r.o.assign(q.size(), 0.0);
  r.lse.assign(c.b * c.h * c.s, 0.0);
  r.dq.assign(q.size(), 0.0);
  r.dk.assign(k.size(), 0.0);
  r.dv.assign(v.size(), 0.0);
  const double scale = c.scale();
  for (int64_t b = 0; b < c.b; ++b) {
    for (int64_t h = 0; h < c.h; ++h) {
      const int64_t g = h / (c.h / c.kv);
      const int64_t qo = (b * c.h + h) * c.s * c.d, ko = (b * c.kv + g) * c.s * c.d;
      std::vector<double> p(c.s * c.s, 0.0), dp(c.s * c.s, 0.0);
      for (int64_t i = 0; i < c.s; ++i) {
        const int64_t keys = c.causal ? i + 1 : c.s;
        double max = -INFINITY;
        for (int64_t j = 0; j < keys; ++j) {
          double dot = 0;
          for (int64_t x = 0; x < c.d; ++x)
            dot += double{q[qo + i * c.d + x]} * k[ko + j * c.d + x];
          p[i * c.s + j] = dot * scale;
          if (!mask.empty()) {
            const int64_t mb = c.mask_b() == 1 ? 0 : b, mh = c.mask_h() == 1 ? 0 : h;
            p[i * c.s + j] += mask[((mb * c.mask_h() + mh) * c.s + i) * c.s + j];
          }
          max = std::max(max, p[i * c.s + j]);
        }
        double total = 0;
        for (int64_t j = 0; j < keys; ++j)
          total += (p[i * c.s + j] = std::exp(p[i * c.s + j] - max));
        for (int64_t j = 0; j < keys; ++j) p[i * c.s + j] /= total;
        r.lse[(b * c.h + h) * c.s + i] = max + std::log(total);
        for (int64_t x = 0; x < c.d; ++x) {
          double sum = 0;
          for (int64_t j = 0; j < keys; ++j) sum += p[i * c.s + j] * v[ko + j * c.d + x];
          r.o[qo + i * c.d + x] = sum;
        }
        if (dout.empty()) continue;
        double row = 0;  // sum_j dP_ij P_ij
        for (int64_t j = 0; j < keys; ++j) {
          double sum = 0;
          for (int64_t x = 0; x < c.d; ++x)
            sum += double{dout[qo + i * c.d + x]} * v[ko + j * c.d + x];
          dp[i * c.s + j] = sum;
          row += sum * p[i * c.s + j];
        }
        for (int64_t j = 0; j < keys; ++j) {
          const double ds = p[i * c.s + j] * (dp[i * c.s + j] - row) * scale;
          for (int64_t x = 0; x < c.d; ++x) {
            r.dq[qo + i * c.d + x] += ds * k[ko + j * c.d + x];
            r.dk[ko + j * c.d + x] += ds * q[qo + i * c.d + x];
            r.dv[ko + j * c.d + x] += p[i * c.s + j] * dout[qo + i * c.d + x];
          }
        }
      }
    }
  }
  return r;
}

// |got - want| <= tolerance * max(1, max |want|), element by element.
void ExpectClose(const std::vector<double>& got, const std::vector<double>& want, double tolerance,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double largest = 1.0;
  for (double w : want) largest = std::max(largest, std::abs(w));
  int failures = 0;
  for (size_t i = 0; i < got.size() && failures < 5; ++i) {
    if (!(std::abs(got[i] - want[i]) <= tolerance * largest)) {
      ADD_FAILURE() << what << "[" << i << "] = " << got[i] << ", expected " << want[i]
                    << " (tolerance " << tolerance * largest << ")";
      ++failures;
    }
  }
}

// f32: the kernel sums in f32 over at most a few hundred terms of size ~1;
// bf16: each probability (and score gradient) rounded to bf16 before its
// product (relative 2^-9), outputs rounded to bf16: a few parts in 1000 of
// the largest value.
void Check(const Case& c) {
  SCOPED_TRACE(fmt::format("b={} h={} kv={} s={} d={} causal={} {}", c.b, c.h, c.kv, c.s, c.d,
                           c.causal, c.Type()));
  const auto q = Random(c.b * c.h * c.s * c.d, 1, c.bf16);
  const auto k = Random(c.b * c.kv * c.s * c.d, 2, c.bf16);
  const auto v = Random(c.b * c.kv * c.s * c.d, 3, c.bf16);
  const auto dout = Random(c.b * c.h * c.s * c.d, 4, c.bf16);
  const auto mask = MaskValues(c);
  const Reference want = Attend(c, q, k, v, dout, mask);
  const double tolerance = c.bf16 ? 1e-2 : 2e-5, grad_tolerance = c.bf16 ? 2e-2 : 5e-5;
  // Arrays in the case's layout, in and out.
  auto in = [&](const std::vector<float>& x, int64_t heads) {
    if (!c.bshd) return ToBuffer(x, {c.b, heads, c.s, c.d}, c.bf16);
    return ToBuffer(SwapHeadsAndPositions(x, c.b, heads, c.s, c.d, true), {c.b, c.s, heads, c.d},
                    c.bf16);
  };
  auto out = [&](const Buffer& x, int64_t heads) {
    std::vector<double> values = FromBuffer(x);
    if (!c.bshd) return values;
    auto back = SwapHeadsAndPositions(std::vector<float>(values.begin(), values.end()), c.b, heads,
                                      c.s, c.d, false);
    return std::vector<double>(back.begin(), back.end());
  };

  auto forward = compiler::Compile(*hlo::ParseModule(ForwardModule(c)));
  const std::vector<int64_t> mask_dims{c.mask_b(), c.mask_h(), c.s, c.s};
  std::vector<Buffer> args{in(q, c.h), in(k, c.kv), in(v, c.kv)};
  if (c.mask) args.push_back(test::Arg(mask, mask_dims));
  std::vector<Buffer> o = forward->Run(args);
  ASSERT_EQ(o.size(), 2u);
  ExpectClose(out(o[0], c.h), want.o, tolerance, "o");
  ExpectClose(FromBuffer(o[1]), want.lse, c.bf16 ? 1e-4 : 1e-6, "lse");

  auto backward = compiler::Compile(*hlo::ParseModule(GradModule(c)));
  args = {in(q, c.h), in(k, c.kv), in(v, c.kv), in(dout, c.h)};
  if (c.mask) args.push_back(test::Arg(mask, mask_dims));
  std::vector<Buffer> grads = backward->Run(args);
  ASSERT_EQ(grads.size(), 3u);
  ExpectClose(out(grads[0], c.h), want.dq, grad_tolerance, "dq");
  ExpectClose(out(grads[1], c.kv), want.dk, grad_tolerance, "dk");
  ExpectClose(out(grads[2], c.kv), want.dv, grad_tolerance, "dv");
}

TEST(FusedAttention, GroupedQueryTilesMatchALoopInDoubles) {
  Check({2, 4, 2, 70, 16, true});
  Check({2, 4, 2, 70, 16, false});
  Check({1, 3, 3, 1, 5, true});  // one position, one key
}

TEST(FusedAttention, SequencesLongerThanAKeyTileRescaleTheRunningSums) {
  Check({1, 2, 1, 600, 8, true});
  Check({1, 2, 1, 600, 8, false});
}

TEST(FusedAttention, Bf16OperandsMatchDoublesOverTheRoundedInputs) {
  Check({1, 4, 2, 130, 32, true, true});
  Check({1, 2, 2, 70, 16, false, true});
}

// The [B, S, heads, D] layout: rows of a head are H * D (KV * D) apart,
// read and written in place; the same values as the loop.
TEST(FusedAttention, PositionsBeforeHeadsLayoutMatchesALoopInDoubles) {
  Check({2, 4, 2, 70, 16, true, false, true});
  Check({2, 4, 2, 70, 16, false, false, true});
  Check({1, 2, 1, 600, 8, true, false, true});
  Check({1, 4, 2, 130, 32, true, true, true});
  Check({1, 2, 2, 70, 16, false, true, true});
}

// An additive mask (torch's float attn_mask, Hugging Face's causal and
// padding masks) over each broadcast it may take, with the causal mask, in
// both layouts, in bf16, and past one key tile with a row whose first tile
// is wholly masked.
TEST(FusedAttention, AnAdditiveMaskMatchesALoopInDoubles) {
  for (int mask : {1, 2, 3}) {
    Check({2, 4, 2, 70, 16, true, false, false, mask});
    Check({2, 4, 2, 70, 16, false, false, false, mask});
  }
  Check({2, 4, 2, 70, 16, false, false, true, 3});
  Check({1, 4, 2, 130, 32, true, true, false, 3});
  Check({1, 2, 1, 600, 8, false, false, false, 2});
}

TEST(FusedAttention, NaNInAQueryReachesItsRowOnly) {
  const Case c{1, 1, 1, 3, 4, true};
  auto q = Random(12, 1, false), k = Random(12, 2, false), v = Random(12, 3, false);
  q[1 * 4 + 2] = NAN;  // query row 1
  auto out = compiler::Compile(*hlo::ParseModule(ForwardModule(c)))
                 ->Run({ToBuffer(q, {1, 1, 3, 4}, false), ToBuffer(k, {1, 1, 3, 4}, false),
                        ToBuffer(v, {1, 1, 3, 4}, false)});
  std::vector<double> o = FromBuffer(out[0]);
  for (int64_t x = 0; x < 4; ++x) {
    EXPECT_FALSE(std::isnan(o[0 * 4 + x])) << x;
    EXPECT_TRUE(std::isnan(o[1 * 4 + x])) << x;
    EXPECT_FALSE(std::isnan(o[2 * 4 + x])) << x;
  }
}

void ExpectRejected(const std::string& text, const std::string& message) {
  try {
    compiler::Compile(*hlo::ParseModule(text));
    ADD_FAILURE() << "accepted:\n" << text;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
  }
}

TEST(FusedAttention, MalformedCallsAreErrorsSayingWhatWasExpected) {
  const Case c{1, 2, 1, 4, 8, true};
  std::string good = ForwardModule(c);
  auto with = [&](const std::string& from, const std::string& to) {
    std::string text = good;
    text.replace(text.find(from), from.size(), to);
    return text;
  };
  ExpectRejected(with(c.Config(), "backend_config=\"causal=2;scale=1\""), "causal is '2'");
  ExpectRejected(with(c.Config(), "backend_config=\"causal=1\""), "causal and scale are needed");
  ExpectRejected(with(c.Config(), "backend_config=\"causal=1;scale=1;layout=sbhd\""),
                 "layout is 'sbhd'");
  // [B, H, S, D] arrays read as [B, S, H, D]: 2 positions of 4 heads against 2 of 1.
  ExpectRejected(with(c.Config(), "backend_config=\"causal=1;scale=1;layout=bshd\""),
                 "expected q [B, S, H, D] and k, v [B, S, KV, D]");
  ExpectRejected(with(c.Config(), "backend_config=\"causal=1;scale=-1\""), "scale is '-1'");
  ExpectRejected(with(", " + c.Config(), ""), "backend_config");
  ExpectRejected(with("custom-call(q, k, v)", "custom-call(q, k)"),
                 "takes 3 operands (4 with a mask), found 2");
  // A mask of the wrong shape or element type.
  std::string masked = with("  ROOT", "  m = f32[1,2,4,5] parameter(3)\n  ROOT");
  masked = masked.replace(masked.find("custom-call(q, k, v)"), 20, "custom-call(q, k, v, m)");
  ExpectRejected(masked, "expected the mask f32[1 or 1, 2 or 1, 4, 4]");
  std::string wide = with("  ROOT", "  m = f32[1,3,4,4] parameter(3)\n  ROOT");
  wide = wide.replace(wide.find("custom-call(q, k, v)"), 20, "custom-call(q, k, v, m)");
  ExpectRejected(wide, "f32[1,3,4,4]");
  // Three query heads cannot share one... two kv heads evenly.
  const Case odd{1, 3, 2, 4, 8, true};
  ExpectRejected(ForwardModule(odd), "H a multiple of KV");
  std::string f64 = ForwardModule(c);
  for (size_t at; (at = f64.find("f32[1,2,4,8]")) != std::string::npos;) f64.replace(at, 3, "f64");
  for (size_t at; (at = f64.find("f32[1,1,4,8]")) != std::string::npos;) f64.replace(at, 3, "f64");
  ExpectRejected(f64, "f32 or bf16");
  // The result the text declares must be the one the operands give.
  ExpectRejected(with("f32[1,2,4]) custom-call", "f32[1,2,5]) custom-call"), "f32[1,2,4]");
}

TEST(FusedAttention, TextRoundTripsWithItsConfig) {
  for (bool bshd : {false, true}) {
    const Case c{1, 2, 1, 4, 8, false, false, bshd};
    auto module = hlo::ParseModule(GradModule(c));
    const std::string printed = hlo::ToText(*module);
    EXPECT_NE(printed.find(c.Config()), std::string::npos) << printed;
    EXPECT_EQ(hlo::ToText(*hlo::ParseModule(printed)), printed);
  }
}

}  // namespace
}  // namespace strata::runtime
