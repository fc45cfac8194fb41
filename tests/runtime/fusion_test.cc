// Loop fusion (passes/fuse_elementwise.cc, kernels/fusion.cc) against plain
// loops: which ops fuse, the numbers of every fusible op in f32 and f64,
// broadcasts read through index maps across block boundaries, selects of
// compares, values the same for every element, when a fusion may write
// over what it reads, and row reductions (a softmax in one fusion).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <functional>

#include "host_values.h"
#include "strata/compiler/compile.h"
#include "test_util.h"

namespace strata::runtime {
namespace {

using hlo::Instruction;
using hlo::Opcode;
using test::Arg;
using test::Count;
using test::Graph;
using test::Random;

// A softmax over the last dim of x * s, masked where m is false:
// exp(z - max) / sum, the max and sum given (they are reductions, which do
// not fuse). Three loops of elementwise work become two fusions... and with
// the max and sum as inputs, one: sub, exp, divide, multiply and select.
TEST(Fusion, AChainBecomesOneLoopThatMatchesAPlainLoop) {
  const int64_t rows = 37, cols = 129;  // blocks of 512 cut rows anywhere
  const int64_t n = rows * cols;
  std::vector<float> x = Random<float>(n, 1, -3, 3), mx = Random<float>(rows, 2, 2, 3);
  std::vector<float> sum = Random<float>(rows, 3, 1, 4);
  std::vector<bool> mask(n);
  for (int64_t i = 0; i < n; ++i) mask[i] = (i % cols) <= (i / cols) * 3;
  const float s = 0.7f;
  Graph g({Shape(DType::kF32, {rows, cols}), Shape(DType::kF32, {rows}), Shape(DType::kF32, {rows}),
           Shape(DType::kPred, {rows, cols}), Shape(DType::kF32, {})});
  auto* z = g.b.Select(g.params[3],
                       g.b.Multiply(g.params[0], g.b.Broadcast(g.params[4], {rows, cols}, {})),
                       g.b.Broadcast(g.b.ConstantScalar<float>(-INFINITY), {rows, cols}, {}));
  auto* e = g.b.Unary(Opcode::kExp, g.b.Subtract(z, g.b.Broadcast(g.params[1], {rows, cols}, {0})));
  auto* y = g.b.Divide(e, g.b.Broadcast(g.params[2], {rows, cols}, {0}));
  auto exe = g.Compile(y);
  const hlo::Computation& entry = *exe->module().entry();
  EXPECT_EQ(Count(entry, Opcode::kFusion), 1) << hlo::ToText(exe->module());
  EXPECT_EQ(Count(entry, Opcode::kBroadcast), 0);  // read through, never written
  EXPECT_EQ(exe->stats().kernels, 1);
  auto out = exe->Run({Arg(x, {rows, cols}), Arg(mx, {rows}), Arg(sum, {rows}),
                       Arg(mask, {rows, cols}), Arg(std::vector<float>{s}, {})})[0]
                 .ToVector<float>();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = i / cols;
    const double zi = mask[i] ? double(x[i]) * s : -INFINITY;
    const double expected = std::exp(zi - mx[r]) / sum[r];
    EXPECT_NEAR(out[i], expected, 2e-6 * std::max(1.0, expected)) << i;
  }
}

// Every fusible unary and binary op, chained two at a time so each fuses,
// in f32 and f64, against std:: in double.
template <typename T>
void CheckEveryOp() {
  const int64_t n = 1500;
  const DType dtype = std::is_same_v<T, float> ? DType::kF32 : DType::kF64;
  // Positive inputs keep log, sqrt, pow and rsqrt real.
  std::vector<T> a = Random<T>(n, 4, 0.1, 2.5), b = Random<T>(n, 5, 0.2, 1.8);
  const double tol = std::is_same_v<T, float> ? 3e-6 : 1e-13;
  const std::vector<std::pair<Opcode, std::function<double(double)>>> unary = {
      {Opcode::kNegate, [](double v) { return -v; }},
      {Opcode::kAbs, [](double v) { return std::abs(v); }},
      {Opcode::kSign, [](double v) { return v > 0   ? 1.0
                                            : v < 0 ? -1.0
                                                    : 0.0; }},
      {Opcode::kExp, [](double v) { return std::exp(v); }},
      {Opcode::kExpm1, [](double v) { return std::expm1(v); }},
      {Opcode::kLog, [](double v) { return std::log(v); }},
      {Opcode::kLog1p, [](double v) { return std::log1p(v); }},
      {Opcode::kTanh, [](double v) { return std::tanh(v); }},
      {Opcode::kLogistic, [](double v) { return 1 / (1 + std::exp(-v)); }},
      {Opcode::kSqrt, [](double v) { return std::sqrt(v); }},
      {Opcode::kRsqrt, [](double v) { return 1 / std::sqrt(v); }},
      {Opcode::kSin, [](double v) { return std::sin(v); }},
      {Opcode::kCos, [](double v) { return std::cos(v); }},
      {Opcode::kErf, [](double v) { return std::erf(v); }},
      {Opcode::kFloor, [](double v) { return std::floor(v); }},
      {Opcode::kCeil, [](double v) { return std::ceil(v); }},
      {Opcode::kRoundNearestEven, [](double v) { return std::nearbyint(v); }},
  };
  const std::vector<std::pair<Opcode, std::function<double(double, double)>>> binary = {
      {Opcode::kAdd, [](double x, double y) { return x + y; }},
      {Opcode::kSubtract, [](double x, double y) { return x - y; }},
      {Opcode::kMultiply, [](double x, double y) { return x * y; }},
      {Opcode::kDivide, [](double x, double y) { return x / y; }},
      {Opcode::kMaximum, [](double x, double y) { return std::max(x, y); }},
      {Opcode::kMinimum, [](double x, double y) { return std::min(x, y); }},
      {Opcode::kPower, [](double x, double y) { return std::pow(x, y); }},
      {Opcode::kRemainder, [](double x, double y) { return std::fmod(x, y); }},
      {Opcode::kAtan2, [](double x, double y) { return std::atan2(x, y); }},
  };
  for (const auto& [uop, uf] : unary) {
    for (const auto& [bop, bf] : binary) {
      SCOPED_TRACE(std::string(hlo::OpcodeName(uop)) + " of " + std::string(hlo::OpcodeName(bop)));
      Graph g({Shape(dtype, {n}), Shape(dtype, {n})});
      auto exe = g.Compile(g.b.Unary(uop, g.b.Binary(bop, g.params[0], g.params[1])));
      ASSERT_EQ(Count(*exe->module().entry(), Opcode::kFusion), 1);
      auto out = exe->Run({Arg(a, {n}), Arg(b, {n})})[0].template ToVector<T>();
      for (int64_t i = 0; i < n; ++i) {
        // The binary result rounded to T first, as the unfused program stores it.
        const double inner = static_cast<T>(bf(a[i], b[i]));
        const double expected = uf(inner);
        ASSERT_TRUE(test::IsClose(static_cast<T>(expected), out[i], tol, tol))
            << i << ": " << expected << " vs " << out[i];
      }
    }
  }
}

TEST(Fusion, EveryFusibleOpMatchesStdInF32AndF64) {
  CheckEveryOp<float>();
  CheckEveryOp<double>();
}

// Broadcasts into middle and permuted dims and a pred mask,
// read through index maps; the iteration space is cut into blocks at
// arbitrary places (7 * 97 * 3 * 5 elements).
TEST(Fusion, BroadcastsReadThroughIndexMaps) {
  const std::vector<int64_t> dims = {7, 97, 3, 5};
  const int64_t n = test::NumElements(dims);
  std::vector<double> x = Random<double>(n, 6, -1, 1);
  std::vector<double> mid = Random<double>(97 * 5, 7, -1, 1);     // [97, 5] -> dims {1, 3}
  std::vector<double> swapped = Random<double>(3 * 7, 8, -1, 1);  // [3, 7] -> dims {2, 0}
  std::vector<double> single = Random<double>(3, 9, -1, 1);       // [3] -> dims {2}
  std::vector<bool> mask(5 * 97);
  for (size_t i = 0; i < mask.size(); ++i) mask[i] = (i * 7) % 3 != 0;  // [5, 97] -> dims {3, 1}
  const Shape f64 = Shape(DType::kF64, dims);
  Graph g({f64, Shape(DType::kF64, {97, 5}), Shape(DType::kF64, {3, 7}), Shape(DType::kF64, {3}),
           Shape(DType::kPred, {5, 97})});
  auto* sum = g.b.Add(g.b.Multiply(g.params[0], g.b.Broadcast(g.params[1], dims, {1, 3})),
                      g.b.Broadcast(g.params[2], dims, {2, 0}));
  sum = g.b.Add(sum, g.b.Broadcast(g.params[3], dims, {2}));
  auto* y = g.b.Select(g.b.Broadcast(g.params[4], dims, {3, 1}), sum, g.params[0]);
  auto exe = g.Compile(y);
  EXPECT_EQ(Count(*exe->module().entry(), Opcode::kFusion), 1) << hlo::ToText(exe->module());
  auto out = exe->Run({Arg(x, dims), Arg(mid, {97, 5}), Arg(swapped, {3, 7}), Arg(single, {3}),
                       Arg(mask, {5, 97})})[0]
                 .ToVector<double>();
  for (int64_t i = 0; i < n; ++i) {
    std::vector<int64_t> at = test::Unravel(i, dims);  // [a, b, c, d]
    double expected = x[i] * mid[at[1] * 5 + at[3]] + swapped[at[2] * 7 + at[0]] + single[at[2]];
    if (!mask[at[3] * 97 + at[1]]) expected = x[i];
    ASSERT_NEAR(out[i], expected, 1e-14) << i;  // (a contracted multiply-add may round once)
  }
}

// Operands the same for every element (broadcast scalars, constants) are
// computed once; a fusion of only those fills its result.
TEST(Fusion, UniformValuesAndSelectsOfCompares) {
  const int64_t n = 2000;
  std::vector<float> x = Random<float>(n, 10, -2, 2);
  Graph g({Shape(DType::kF32, {n}), Shape(DType::kF32, {}), Shape(DType::kF32, {})});
  auto* lo = g.b.Broadcast(g.params[1], {n}, {});
  auto* hi = g.b.Broadcast(g.params[2], {n}, {});
  auto* filled = g.b.Multiply(g.b.Unary(Opcode::kExp, lo), hi);  // uniform: a fill
  auto* clipped =
      g.b.Select(g.b.Compare(g.params[0], lo, hlo::Comparison::kLt), lo,
                 g.b.Select(g.b.Compare(g.params[0], hi, hlo::Comparison::kGt), hi, g.params[0]));
  auto exe = g.Compile(g.b.Tuple({filled, g.b.Add(clipped, filled)}));
  EXPECT_EQ(Count(*exe->module().entry(), Opcode::kCompare), 0) << hlo::ToText(exe->module());
  const float l = -0.5f, h = 0.75f;
  auto out =
      exe->Run({Arg(x, {n}), Arg(std::vector<float>{l}, {}), Arg(std::vector<float>{h}, {})});
  const float fill = std::exp(l) * h;
  std::vector<float> fills = out[0].ToVector<float>(), sums = out[1].ToVector<float>();
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_NEAR(fills[i], fill, 1e-6) << i;
    const float c = x[i] < l ? l : x[i] > h ? h : x[i];
    ASSERT_NEAR(sums[i], c + fill, 1e-6) << i;
  }
}

// A fusion may write over an operand it reads element by element, never
// over one it reads through a broadcast: y = t + transpose-like broadcast(t)
// of a square t reads t[j][i] for y[i][j], so writing y over t would read
// overwritten values. t is a dot's result (not fusible), dying at the fusion.
TEST(Fusion, WritesOverWhatItReadsOnlyElementwise) {
  const int64_t k = 96;
  std::vector<float> a = Random<float>(k * k, 11, -1, 1), identity(k * k, 0.0f);
  for (int64_t i = 0; i < k; ++i) identity[i * k + i] = 1;
  const Shape square(DType::kF32, {k, k});
  hlo::DotDims dims;
  dims.lhs_contracting = {1};
  dims.rhs_contracting = {0};
  for (bool transposed : {false, true}) {
    SCOPED_TRACE(transposed ? "transposed read" : "elementwise read");
    Graph g({square, square});
    auto* t = g.b.Dot(g.params[0], g.params[1], dims);
    auto* other = transposed ? g.b.Broadcast(t, {k, k}, {1, 0}) : g.b.Unary(Opcode::kExp, t);
    auto* y =
        g.b.Multiply(g.b.Add(t, other), g.b.Broadcast(g.b.ConstantScalar<float>(2), {k, k}, {}));
    auto exe = g.Compile(y);
    EXPECT_EQ(Count(*exe->module().entry(), Opcode::kFusion), 1) << hlo::ToText(exe->module());
    EXPECT_EQ(exe->stats().in_place_updates, transposed ? 0 : 1);
    auto out = exe->Run({Arg(a, {k, k}), Arg(identity, {k, k})})[0].ToVector<float>();
    for (int64_t i = 0; i < k; ++i) {
      for (int64_t j = 0; j < k; ++j) {
        const float tij = a[i * k + j];
        const float o = transposed ? a[j * k + i] : std::exp(tij);
        ASSERT_NEAR(out[i * k + j], (tij + o) * 2, 1e-5) << i << "," << j;
      }
    }
  }
}

// AdamW's update: the new moments are results the new parameter also reads.
// One fusion writes all three (a tuple), reading p, m, v and g once; with
// the three inputs donated, each result goes into its input's buffer.
TEST(Fusion, AdamWUpdateIsOneMultiOutputLoop) {
  const int64_t n = 1500;  // blocks of 512 and a partial one
  const Shape vec(DType::kF32, {n});
  std::vector<float> p = Random<float>(n, 21, -1, 1), m = Random<float>(n, 22, -0.1, 0.1),
                     v = Random<float>(n, 23, 0, 0.01), grad = Random<float>(n, 24, -1, 1);
  const float b1 = 0.9f, b2 = 0.95f, decay = 0.999f, eps = 1e-8f, c1 = 0.01f, c2 = 3.2f;
  for (bool donate : {false, true}) {
    SCOPED_TRACE(donate ? "donated" : "not donated");
    Graph g({vec, vec, vec, vec});
    auto scalar = [&](float x) { return g.b.Broadcast(g.b.ConstantScalar<float>(x), {n}, {}); };
    auto* m1 =
        g.b.Add(g.b.Multiply(g.params[1], scalar(b1)), g.b.Multiply(g.params[3], scalar(1 - b1)));
    auto* v1 = g.b.Add(g.b.Multiply(g.params[2], scalar(b2)),
                       g.b.Multiply(g.b.Multiply(g.params[3], g.params[3]), scalar(1 - b2)));
    auto* denom = g.b.Add(g.b.Multiply(g.b.Unary(Opcode::kSqrt, v1), scalar(c2)), scalar(eps));
    auto* p1 = g.b.Subtract(g.b.Multiply(g.params[0], scalar(decay)),
                            g.b.Multiply(g.b.Divide(m1, denom), scalar(c1)));
    auto exe = g.Compile(g.b.Tuple({p1, m1, v1}));
    const hlo::Computation& entry = *exe->module().entry();
    ASSERT_EQ(Count(entry, Opcode::kFusion), 1) << hlo::ToText(exe->module());
    for (const auto& inst : entry.instructions()) {
      if (inst->opcode() == Opcode::kFusion) EXPECT_EQ(inst->shape().tuple_size(), 3);
    }
    EXPECT_EQ(exe->stats().kernels, 1);
    std::vector<Buffer> args = {Arg(p, {n}), Arg(m, {n}), Arg(v, {n}), Arg(grad, {n})};
    std::vector<const void*> inputs;
    for (const Buffer& a : args) inputs.push_back(a.data());
    auto out = exe->Run(args, nullptr,
                        donate ? std::vector<bool>{true, true, true, false} : std::vector<bool>{});
    ASSERT_EQ(out.size(), 3u);
    for (int j = 0; j < 3 && donate; ++j) EXPECT_EQ(out[j].data(), inputs[j]) << "result " << j;
    const std::vector<float> p_out = out[0].ToVector<float>(), m_out = out[1].ToVector<float>(),
                             v_out = out[2].ToVector<float>();
    for (int64_t i = 0; i < n; ++i) {
      const double mi = double(m[i]) * b1 + double(grad[i]) * (1 - double(b1));
      const double vi = double(v[i]) * b2 + double(grad[i]) * grad[i] * (1 - double(b2));
      const double pi = double(p[i]) * decay - mi / (std::sqrt(vi) * c2 + eps) * c1;
      ASSERT_NEAR(m_out[i], mi, 1e-6) << i;
      ASSERT_NEAR(v_out[i], vi, 1e-7) << i;
      ASSERT_NEAR(p_out[i], pi, 1e-5 * std::max(1.0, std::abs(pi))) << i;
    }
  }
}

// What does not fuse: integer ops and a lone op with nothing to gain. An intermediate that is also
// a result joins as a second output.
TEST(Fusion, LeavesWhatItCannotFuse) {
  const int64_t n = 600;
  std::vector<float> x = Random<float>(n, 12, -1, 1);
  Graph g({Shape(DType::kF32, {n}), Shape(DType::kS32, {n})});
  auto* shared = g.b.Unary(Opcode::kTanh, g.params[0]);  // two readers: a fusion and a result
  auto* chain = g.b.Multiply(g.b.Unary(Opcode::kExp, shared), shared);
  auto* ints = g.b.Add(g.b.Multiply(g.params[1], g.params[1]), g.params[1]);
  auto* lone = g.b.Unary(Opcode::kNegate, g.params[0]);
  auto exe = g.Compile(g.b.Tuple({chain, shared, ints, lone}));
  const hlo::Computation& entry = *exe->module().entry();
  EXPECT_EQ(Count(entry, Opcode::kFusion), 1) << hlo::ToText(exe->module());
  EXPECT_EQ(Count(entry, Opcode::kTanh), 0);
  for (const auto& inst : entry.instructions()) {
    if (inst->opcode() == Opcode::kFusion) EXPECT_EQ(inst->shape().tuple_size(), 2);
  }
  EXPECT_EQ(Count(entry, Opcode::kNegate), 1);
  std::vector<int32_t> k(n);
  for (int64_t i = 0; i < n; ++i) k[i] = static_cast<int32_t>(i) - 300;
  auto out = exe->Run({Arg(x, {n}), Arg(k, {n})});
  std::vector<float> c = out[0].ToVector<float>(), s = out[1].ToVector<float>();
  std::vector<int32_t> m = out[2].ToVector<int32_t>();
  std::vector<float> l = out[3].ToVector<float>();
  for (int64_t i = 0; i < n; ++i) {
    const float t = std::tanh(x[i]);
    ASSERT_NEAR(s[i], t, 1e-6);
    ASSERT_NEAR(c[i], std::exp(t) * t, 1e-5);
    ASSERT_EQ(m[i], k[i] * k[i] + k[i]);
    ASSERT_EQ(l[i], -x[i]);
  }
}

// bf16 arithmetic (a mixed-precision step's activations): each op computed
// in f32 and rounded to bf16 once (the widening pass's converts), the whole
// chain one loop reading and writing bf16 memory. A multiply and an add of
// bf16 values rounded from f32 are the correctly rounded bf16 results (f32
// carries more than twice bf16's bits), so they must equal a loop in long
// double rounded per op; exp and tanh (an f32 routine of about an ulp) are
// within one bf16 ulp. The same program unfused gives the same bits.
TEST(Fusion, Bf16ChainsAreOneLoopOverBf16Memory) {
  const int64_t rows = 37, cols = 129;  // blocks of 512 cut rows anywhere
  const int64_t n = rows * cols;
  const DType bf16 = DType::kBF16;
  const host::Format format = host::FormatOf(bf16);
  auto round = [&](long double v) { return static_cast<double>(host::RoundTo(format, v)); };
  std::vector<double> x, y, s;
  for (float v : Random<float>(n, 61, -2, 2)) x.push_back(round(v));
  for (float v : Random<float>(n, 62, -2, 2)) y.push_back(round(v));
  for (float v : Random<float>(cols, 63, -1.5, 1.5)) s.push_back(round(v));
  std::vector<bool> mask(n);
  for (int64_t i = 0; i < n; ++i) mask[i] = (i * 7) % 5 != 0;
  auto run = [&](bool fuse, int64_t* fusions, int64_t* converts) {
    Graph g({Shape(bf16, {rows, cols}), Shape(bf16, {rows, cols}), Shape(bf16, {cols}),
             Shape(DType::kPred, {rows, cols})});
    g.fuse = fuse;
    auto* p = g.b.Multiply(g.params[0], g.b.Broadcast(g.params[2], {rows, cols}, {1}));
    auto* q = g.b.Add(p, g.params[1]);
    auto* r = g.b.Select(
        g.params[3], g.b.Multiply(g.b.Unary(Opcode::kExp, q), g.b.Unary(Opcode::kTanh, q)),
        g.b.Broadcast(g.b.Convert(g.b.ConstantScalar<float>(-INFINITY), bf16), {rows, cols}, {}));
    // An f32 result and a bf16 one (q, also read inside): one multi-output fusion.
    auto* u = g.b.Multiply(g.b.Convert(r, DType::kF32),
                           g.b.Broadcast(g.b.ConstantScalar<float>(2), {rows, cols}, {}));
    auto exe = g.Compile(g.b.Tuple({u, q}));
    *fusions = Count(*exe->module().entry(), Opcode::kFusion);
    *converts = Count(*exe->module().entry(), Opcode::kConvert);
    return exe->Run({host::HalfBuffer(bf16, x, {rows, cols}),
                     host::HalfBuffer(bf16, y, {rows, cols}), host::HalfBuffer(bf16, s, {cols}),
                     Arg(mask, {rows, cols})});
  };
  int64_t fusions = 0, converts = 0;
  auto fused = run(true, &fusions, &converts);
  EXPECT_EQ(fusions, 1);
  EXPECT_EQ(converts, 0);
  ASSERT_EQ(fused[0].shape(), Shape(DType::kF32, {rows, cols}));
  ASSERT_EQ(fused[1].shape(), Shape(bf16, {rows, cols}));
  const std::vector<float> u = fused[0].ToVector<float>();
  const std::vector<double> q = host::HalfValues(fused[1]);
  for (int64_t i = 0; i < n; ++i) {
    const double want_q = round(round(static_cast<long double>(x[i]) * s[i % cols]) + y[i]);
    ASSERT_EQ(q[i], want_q) << i;
    if (!mask[i]) {
      ASSERT_EQ(u[i], -INFINITY) << i;
      continue;
    }
    // exp and tanh each within a bf16 ulp, their product rounded once more.
    const double want = 2 * std::exp(want_q) * std::tanh(want_q);
    ASSERT_NEAR(u[i], want, 3 * std::ldexp(std::fabs(want), -8) + 1e-30) << i;
    // u is twice a bf16 value: its low 16 bits are 0.
    ASSERT_EQ(std::bit_cast<uint32_t>(u[i]) & 0xffffu, 0u) << i;
  }
  auto unfused = run(false, &fusions, &converts);
  EXPECT_EQ(fusions, 0);
  for (size_t k = 0; k < fused.size(); ++k) {
    ASSERT_EQ(fused[k].shape(), unfused[k].shape());
    EXPECT_EQ(std::memcmp(fused[k].data(), unfused[k].data(), fused[k].shape().byte_size()), 0)
        << "output " << k;
  }
}

// A NaN rounded to bf16 stays a NaN (its payload's top bits may be zero:
// cut off, it would read as infinity), and bf16 rounding ties to even.
TEST(Fusion, Bf16RoundingInTheFusedLoopTiesToEvenAndKeepsNaNs) {
  const int64_t n = 6;
  const std::vector<float> x = {
      std::bit_cast<float>(0x7f800001u), 1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f,
      -(1.0f + 0x1p-8f + 0x1p-20f),      3.0e38f,        std::bit_cast<float>(0x3f808000u)};
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: to 1 (even); 1 + 3 * 2^-8 to
  // 1 + 2^-6; just past a tie rounds away; 3e38 to the nearest bf16 (finite).
  const std::vector<float> want = {
      NAN, 1.0f, 1.0f + 0x1p-6f, -(1.0f + 0x1p-7f), std::bit_cast<float>(0x7f620000u), 1.0f};
  // A select passes each value as it is (a signalling NaN too); then the
  // convert: two ops, one fusion.
  Graph g({Shape(DType::kF32, {n}), Shape(DType::kPred, {n})});
  auto* picked =
      g.b.Select(g.params[1], g.params[0], g.b.Broadcast(g.b.ConstantScalar<float>(0), {n}, {}));
  auto exe = g.Compile(g.b.Convert(picked, DType::kBF16));
  EXPECT_EQ(Count(*exe->module().entry(), Opcode::kFusion), 1) << hlo::ToText(exe->module());
  EXPECT_EQ(Count(*exe->module().entry(), Opcode::kConvert), 0);
  const std::vector<double> got =
      host::HalfValues(exe->Run({Arg(x, {n}), Arg(std::vector<bool>(n, true), {n})})[0]);
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << i;
    } else {
      EXPECT_EQ(got[i], want[i]) << i;
    }
  }
}

// Rank above the fused loop's limit (8): left unfused, still right.
TEST(Fusion, RanksAboveEightStayUnfused) {
  const std::vector<int64_t> dims = {2, 1, 2, 1, 2, 1, 2, 1, 3};
  const int64_t n = test::NumElements(dims);
  std::vector<float> x = Random<float>(n, 13, -1, 1);
  Graph g({Shape(DType::kF32, dims)});
  auto exe = g.Compile(g.b.Multiply(g.b.Unary(Opcode::kExp, g.params[0]), g.params[0]));
  EXPECT_EQ(Count(*exe->module().entry(), Opcode::kFusion), 0);
  auto out = exe->Run({Arg(x, dims)})[0].ToVector<float>();
  for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(out[i], std::exp(x[i]) * x[i], 1e-6) << i;
}

// Empty results: the fused loop runs no block (and reads nothing).
TEST(Fusion, EmptyResults) {
  for (const std::vector<int64_t>& dims :
       {std::vector<int64_t>{0, 3}, std::vector<int64_t>{4, 0}}) {
    Graph g({Shape(DType::kF32, dims), Shape(DType::kF32, {dims[0]})});
    auto* b = g.b.Broadcast(g.params[1], dims, {0});
    auto exe = g.Compile(g.b.Multiply(g.b.Unary(Opcode::kExp, g.params[0]), b));
    auto out = exe->Run(
        {Arg(std::vector<float>{}, dims), Arg(std::vector<float>(dims[0], 1.0f), {dims[0]})});
    EXPECT_EQ(out[0].shape(), Shape(DType::kF32, dims));
    EXPECT_TRUE(out[0].ToVector<float>().empty());
  }
}

// XLA's text may hold a fusion whose body computes something the root never
// reads; run as written (no passes to remove it), the fused loop skips it.
// Found by the HLO fuzzer: it was an error that the root is not last.
TEST(Fusion, ADeadInstructionInTheBodyIsSkipped) {
  auto module = hlo::ParseModule(R"(HloModule m
body {
  p0 = f32[4] parameter(0)
  one = f32[] constant(1)
  unused = f32[] constant(6.5)
  ones = f32[4] broadcast(one), dimensions={}
  dead = f32[4] exponential(p0)
  ROOT sum = f32[4] add(p0, ones)
}
ENTRY main {
  x = f32[4] parameter(0)
  ROOT f = f32[4] fusion(x), kind=kLoop, calls=body
})");
  compiler::CompileOptions as_written;
  as_written.run_passes = false;
  auto exe = compiler::Compile(*module, as_written);
  auto out = exe->Run({Arg(std::vector<float>{1, 2, 3, 4}, {4})})[0].ToVector<float>();
  EXPECT_EQ(out, (std::vector<float>{2, 3, 4, 5}));
}

// ---------------------------------------------------------------------------
// Row reductions: a reduce over the trailing dims whose result is only
// broadcast back along the rows joins the fusion, which then runs a row at a
// time.

hlo::Computation* Reducer(Graph& g, Opcode op, DType t) {
  return g.Add(hlo::MakeScalarBinaryComputation(std::string(hlo::OpcodeName(op)), op, t));
}

int64_t CountInFusions(const hlo::Module& m, Opcode op) {
  int64_t n = 0;
  for (const auto& inst : m.entry()->instructions()) {
    if (inst->opcode() == Opcode::kFusion) n += Count(*inst->called.at(0), op);
  }
  return n;
}

// softmax(where(mask, x * s, -inf)) over the last dim, as attention computes
// it: the max, the exponentials, their sum and the division in one fusion.
template <typename T>
void CheckMaskedSoftmax() {
  const int64_t rows = 37, cols = 129;
  const DType t = std::is_same_v<T, float> ? DType::kF32 : DType::kF64;
  std::vector<T> x = Random<T>(rows * cols, 7, -4, 4);
  std::vector<bool> mask(rows * cols);  // a fifth masked, anywhere in a row
  for (int64_t i = 0; i < rows * cols; ++i) mask[i] = (i % cols + i / cols) % 5 != 0;
  const T s = T(0.6);
  Graph g({Shape(t, {rows, cols}), Shape(DType::kPred, {rows, cols}), Shape(t, {})});
  auto& b = g.b;
  auto* z =
      b.Select(g.params[1], b.Multiply(g.params[0], b.Broadcast(g.params[2], {rows, cols}, {})),
               b.Broadcast(b.ConstantScalar<T>(-INFINITY), {rows, cols}, {}));
  auto* mx = b.Reduce(z, b.ConstantScalar<T>(-INFINITY), {1}, Reducer(g, Opcode::kMaximum, t));
  auto* e = b.Unary(Opcode::kExp, b.Subtract(z, b.Broadcast(mx, {rows, cols}, {0})));
  auto* sum = b.Reduce(e, b.ConstantScalar<T>(0), {1}, Reducer(g, Opcode::kAdd, t));
  auto exe = g.Compile(b.Divide(e, b.Broadcast(sum, {rows, cols}, {0})));
  EXPECT_EQ(Count(*exe->module().entry(), Opcode::kFusion), 1) << hlo::ToText(exe->module());
  EXPECT_EQ(Count(*exe->module().entry(), Opcode::kReduce), 0);
  EXPECT_EQ(CountInFusions(exe->module(), Opcode::kReduce), 2);
  EXPECT_EQ(exe->stats().kernels, 1);
  auto out =
      exe->Run({Arg(x, {rows, cols}), Arg(mask, {rows, cols}), Arg(std::vector<T>{s}, {})})[0]
          .template ToVector<T>();
  const double tol = std::is_same_v<T, float> ? 2e-6 : 1e-14;
  for (int64_t r = 0; r < rows; ++r) {
    double max = -INFINITY, total = 0;
    for (int64_t c = 0; c < cols; ++c) {
      if (mask[r * cols + c]) max = std::max(max, double(T(x[r * cols + c] * s)));
    }
    for (int64_t c = 0; c < cols; ++c) {
      if (mask[r * cols + c]) total += std::exp(double(T(x[r * cols + c] * s)) - max);
    }
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t i = r * cols + c;
      const double expected = mask[i] ? std::exp(double(T(x[i] * s)) - max) / total : 0.0;
      ASSERT_NEAR(out[i], expected, tol) << r << ", " << c;
    }
  }
}

TEST(RowFusion, MaskedSoftmaxIsOneFusionThatMatchesAPlainLoop) {
  CheckMaskedSoftmax<float>();
  CheckMaskedSoftmax<double>();
}

// The softmax backward, y * (g - sum(g * y)), over two trailing dims at once
// (rows of 6 x 40), with a value computed once per row (1 / n) on the way.
TEST(RowFusion, ReductionOverTwoTrailingDimsWithPerRowArithmetic) {
  const int64_t a = 5, b0 = 6, c0 = 40, n = a * b0 * c0;
  std::vector<float> y = Random<float>(n, 8, 0, 1), gr = Random<float>(n, 9, -1, 1);
  Graph g({Shape(DType::kF32, {a, b0, c0}), Shape(DType::kF32, {a, b0, c0})});
  auto& b = g.b;
  const std::vector<int64_t> dims = {a, b0, c0};
  auto* dot = b.Reduce(b.Multiply(g.params[0], g.params[1]), b.ConstantScalar(0.0f), {1, 2},
                       Reducer(g, Opcode::kAdd, DType::kF32));
  // (sum / n) * n: arithmetic on the row's value alone, inside the fusion.
  auto* count = b.Broadcast(b.ConstantScalar(float(b0 * c0)), dims, {});
  auto* per_row = b.Multiply(b.Divide(b.Broadcast(dot, dims, {0}), count), count);
  auto exe = g.Compile(b.Multiply(g.params[1], b.Subtract(g.params[0], per_row)));
  EXPECT_EQ(Count(*exe->module().entry(), Opcode::kFusion), 1) << hlo::ToText(exe->module());
  EXPECT_EQ(Count(*exe->module().entry(), Opcode::kReduce), 0);
  auto out = exe->Run({Arg(gr, dims), Arg(y, dims)})[0].ToVector<float>();
  for (int64_t r = 0; r < a; ++r) {
    double s = 0;
    for (int64_t k = 0; k < b0 * c0; ++k) s += double(gr[r * b0 * c0 + k]) * y[r * b0 * c0 + k];
    for (int64_t k = 0; k < b0 * c0; ++k) {
      const int64_t i = r * b0 * c0 + k;
      ASSERT_NEAR(out[i], y[i] * (gr[i] - s), 2e-5) << i;
    }
  }
}

// A fusion whose result is the same along each row (a row mean broadcast
// back) writes the whole row.
TEST(RowFusion, AResultConstantAlongTheRowFillsIt) {
  const int64_t rows = 9, cols = 70;
  std::vector<float> x = Random<float>(rows * cols, 10, -2, 2);
  Graph g({Shape(DType::kF32, {rows, cols})});
  auto& b = g.b;
  auto* sum =
      b.Reduce(g.params[0], b.ConstantScalar(0.0f), {1}, Reducer(g, Opcode::kAdd, DType::kF32));
  auto* mean = b.Divide(b.Broadcast(sum, {rows, cols}, {0}),
                        b.Broadcast(b.ConstantScalar(float(cols)), {rows, cols}, {}));
  auto exe = g.Compile(b.Unary(Opcode::kNegate, mean));
  EXPECT_EQ(Count(*exe->module().entry(), Opcode::kFusion), 1) << hlo::ToText(exe->module());
  auto out = exe->Run({Arg(x, {rows, cols})})[0].ToVector<float>();
  for (int64_t r = 0; r < rows; ++r) {
    double s = 0;
    for (int64_t c = 0; c < cols; ++c) s += x[r * cols + c];
    for (int64_t c = 0; c < cols; ++c)
      ASSERT_NEAR(out[r * cols + c], -s / cols, 1e-5) << r << ", " << c;
  }
}

// What stays a reduce kernel: a result also read outside the fusion, a
// reduction over a leading dim, rows too short to be worth a block.
TEST(RowFusion, LeavesReductionsItCannotFuse) {
  const int64_t rows = 6, cols = 64;
  std::vector<float> x = Random<float>(rows * cols, 11, -1, 1);
  auto sum_of = [&](Graph& g, hlo::Instruction* v, std::vector<int64_t> dims) {
    return g.b.Reduce(v, g.b.ConstantScalar(0.0f), std::move(dims),
                      Reducer(g, Opcode::kAdd, DType::kF32));
  };
  {  // the sums are also a result
    Graph g({Shape(DType::kF32, {rows, cols})});
    auto* e = g.b.Unary(Opcode::kExp, g.params[0]);
    auto* sum = sum_of(g, e, {1});
    auto exe = g.Compile(g.b.Tuple({g.b.Divide(e, g.b.Broadcast(sum, {rows, cols}, {0})), sum}));
    EXPECT_EQ(Count(*exe->module().entry(), Opcode::kReduce), 1) << hlo::ToText(exe->module());
    auto out = exe->Run({Arg(x, {rows, cols})});
    auto y = out[0].ToVector<float>(), s = out[1].ToVector<float>();
    for (int64_t r = 0; r < rows; ++r) {
      double total = 0;
      for (int64_t c = 0; c < cols; ++c) total += std::exp(double(x[r * cols + c]));
      ASSERT_NEAR(s[r], total, 1e-4 * total);
      for (int64_t c = 0; c < cols; ++c)
        ASSERT_NEAR(y[r * cols + c], std::exp(double(x[r * cols + c])) / total, 1e-6);
    }
  }
  {  // over the leading dim
    Graph g({Shape(DType::kF32, {cols, rows})});
    auto* e = g.b.Unary(Opcode::kExp, g.params[0]);
    auto exe = g.Compile(g.b.Divide(e, g.b.Broadcast(sum_of(g, e, {0}), {cols, rows}, {1})));
    EXPECT_EQ(Count(*exe->module().entry(), Opcode::kReduce), 1) << hlo::ToText(exe->module());
  }
  {  // rows of 8
    Graph g({Shape(DType::kF32, {8, 8})});
    auto* e = g.b.Unary(Opcode::kExp, g.params[0]);
    auto exe = g.Compile(g.b.Divide(e, g.b.Broadcast(sum_of(g, e, {1}), {8, 8}, {0})));
    EXPECT_EQ(Count(*exe->module().entry(), Opcode::kReduce), 1) << hlo::ToText(exe->module());
  }
}

// An RMS norm as the model writes it: the mean of squares, reshaped to
// [rows, 1], plus eps, rsqrt, reshaped back and broadcast over the row. The
// per-row arithmetic joins too (computed once per row), so the norm is one
// fusion reading x once.
TEST(RowFusion, RmsNormWithPerRowArithmeticIsOneFusion) {
  const int64_t rows = 11, cols = 96;
  std::vector<float> x = Random<float>(rows * cols, 12, -2, 2),
                     w = Random<float>(cols, 13, 0.5, 1.5);
  const float eps = 1e-5f;
  Graph g({Shape(DType::kF32, {rows, cols}), Shape(DType::kF32, {cols}), Shape(DType::kF32, {})});
  auto& b = g.b;
  auto* squares = b.Reduce(b.Multiply(g.params[0], g.params[0]), b.ConstantScalar(0.0f), {1},
                           Reducer(g, Opcode::kAdd, DType::kF32));
  auto* mean = b.Divide(squares, b.Broadcast(b.ConstantScalar(float(cols)), {rows}, {}));
  auto* column = b.Reshape(mean, {rows, 1});
  auto* r = b.Unary(Opcode::kRsqrt, b.Add(column, b.Broadcast(g.params[2], {rows, 1}, {})));
  auto* scale = b.Broadcast(b.Reshape(r, {rows}), {rows, cols}, {0});
  auto exe = g.Compile(
      b.Multiply(b.Multiply(g.params[0], scale), b.Broadcast(g.params[1], {rows, cols}, {1})));
  const hlo::Computation& entry = *exe->module().entry();
  EXPECT_EQ(Count(entry, Opcode::kFusion), 1) << hlo::ToText(exe->module());
  EXPECT_EQ(Count(entry, Opcode::kReduce), 0);
  EXPECT_EQ(exe->stats().kernels, 1);
  auto out = exe->Run({Arg(x, {rows, cols}), Arg(w, {cols}), Arg(std::vector<float>{eps}, {})})[0]
                 .ToVector<float>();
  for (int64_t i = 0; i < rows; ++i) {
    double ss = 0;
    for (int64_t c = 0; c < cols; ++c) ss += double(x[i * cols + c]) * x[i * cols + c];
    const double scale_i = 1 / std::sqrt(ss / cols + eps);
    for (int64_t c = 0; c < cols; ++c) {
      ASSERT_NEAR(out[i * cols + c], x[i * cols + c] * scale_i * w[c], 2e-5) << i << ", " << c;
    }
  }
}

// An RMS norm whose scale two fusions read (the normalized value and
// another): neither may compute the reduction inside only, since the other
// reads the scale too. So the reduction roots a fusion of its own (a reduce
// fusion) that squares the bf16 input as it reads it — the f32 input and its
// squares are never written — and writes one value per row; the sum, the
// reduction and the rsqrt are each computed once (with the scale absorbed
// by the first fusion, the second read it from a copy computed outside as
// well). Against a plain loop in doubles.
TEST(RowFusion, AReductionReadOutsideFusesWithTheOpsThatMakeItsInput) {
  const int64_t rows = 13, cols = 160;
  const int64_t n = rows * cols;
  const DType bf16 = DType::kBF16;
  std::vector<double> x;
  for (float v : Random<float>(n, 91, -2, 2)) x.push_back(static_cast<double>(v));
  const host::Format format = host::FormatOf(bf16);
  for (double& v : x) v = static_cast<double>(host::RoundTo(format, v));
  Graph g({Shape(bf16, {rows, cols})});
  auto& b = g.b;
  auto* wide = b.Convert(g.params[0], DType::kF32);
  auto* squares = b.Reduce(b.Multiply(wide, wide), b.ConstantScalar(0.0f), {1},
                           Reducer(g, Opcode::kAdd, DType::kF32));
  auto* mean = b.Divide(squares, b.Broadcast(b.ConstantScalar(float(cols)), {rows}, {}));
  auto* r = b.Unary(Opcode::kRsqrt, b.Add(mean, b.Broadcast(b.ConstantScalar(1e-5f), {rows}, {})));
  auto* scale = b.Broadcast(r, {rows, cols}, {0});
  auto* normed = b.Convert(b.Multiply(wide, scale), bf16);
  auto* other = b.Multiply(b.Unary(Opcode::kExp, wide), scale);
  auto exe = g.Compile(b.Tuple({normed, other}));
  int64_t reduces = 0, roots = 0, rsqrts = 0;
  for (const auto& c : exe->module().computations()) {
    reduces += Count(*c, Opcode::kReduce);
    rsqrts += Count(*c, Opcode::kRsqrt);
    roots += c->root()->opcode() == Opcode::kReduce;
  }
  const hlo::Computation& entry = *exe->module().entry();
  EXPECT_EQ(reduces, 1) << hlo::ToText(exe->module());
  EXPECT_EQ(rsqrts, 1) << hlo::ToText(exe->module());
  EXPECT_EQ(roots, 1) << "the reduce fusion's computation";
  EXPECT_EQ(Count(entry, Opcode::kReduce), 0);
  EXPECT_EQ(Count(entry, Opcode::kConvert) + Count(entry, Opcode::kMultiply), 0);
  auto out = exe->Run({host::HalfBuffer(bf16, x, {rows, cols})});
  const std::vector<double> got_normed = host::HalfValues(out[0]);
  const std::vector<float> got_other = out[1].ToVector<float>();
  for (int64_t i = 0; i < rows; ++i) {
    double ss = 0;
    for (int64_t c = 0; c < cols; ++c) ss += x[i * cols + c] * x[i * cols + c];
    const double scale_i = 1 / std::sqrt(ss / cols + 1e-5);
    for (int64_t c = 0; c < cols; ++c) {
      const double v = x[i * cols + c];
      ASSERT_NEAR(got_normed[i * cols + c], v * scale_i, std::ldexp(std::fabs(v * scale_i), -7))
          << i << ", " << c;
      ASSERT_NEAR(got_other[i * cols + c], std::exp(v) * scale_i, 1e-5 * std::exp(v) * scale_i)
          << i << ", " << c;
    }
  }
}

// Per-row values computed outside (a row operand) are read one per row, and
// per-row ops over only them stay outside when the fusion has no reduction.
TEST(RowFusion, PerRowOperandsAndRowOpsWithoutAReduction) {
  const int64_t rows = 7, cols = 50;
  std::vector<float> x = Random<float>(rows * cols, 14, -1, 1), m = Random<float>(rows, 15, 1, 2);
  {  // x * rsqrt(m) along rows, no reduction: the rsqrt stays its own op
    Graph g({Shape(DType::kF32, {rows, cols}), Shape(DType::kF32, {rows})});
    auto* r = g.b.Unary(Opcode::kRsqrt, g.params[1]);
    auto exe = g.Compile(
        g.b.Unary(Opcode::kNegate, g.b.Multiply(g.params[0], g.b.Broadcast(r, {rows, cols}, {0}))));
    auto out = exe->Run({Arg(x, {rows, cols}), Arg(m, {rows})})[0].ToVector<float>();
    for (int64_t i = 0; i < rows * cols; ++i)
      ASSERT_NEAR(out[i], -x[i] / std::sqrt(double(m[i / cols])), 1e-6) << i;
  }
  {  // (x - max) * (sum / m): m is a row operand of a row op in a row fusion
    Graph g({Shape(DType::kF32, {rows, cols}), Shape(DType::kF32, {rows})});
    auto& b = g.b;
    auto* mx = b.Reduce(g.params[0], b.ConstantScalar<float>(-INFINITY), {1},
                        Reducer(g, Opcode::kMaximum, DType::kF32));
    auto* per_row = b.Divide(mx, g.params[1]);
    auto exe = g.Compile(b.Multiply(g.params[0], b.Broadcast(per_row, {rows, cols}, {0})));
    EXPECT_EQ(Count(*exe->module().entry(), Opcode::kFusion), 1) << hlo::ToText(exe->module());
    EXPECT_EQ(Count(*exe->module().entry(), Opcode::kReduce), 0);
    auto out = exe->Run({Arg(x, {rows, cols}), Arg(m, {rows})})[0].ToVector<float>();
    for (int64_t i = 0; i < rows; ++i) {
      float top = -INFINITY;
      for (int64_t c = 0; c < cols; ++c) top = std::max(top, x[i * cols + c]);
      for (int64_t c = 0; c < cols; ++c)
        ASSERT_NEAR(out[i * cols + c], x[i * cols + c] * (double(top) / m[i]), 1e-6) << i;
    }
  }
}

// A multi-output fusion whose first output is written over a donated input
// that a later op of the same block still reads: the block's outputs are
// copied out only once it is computed.
TEST(Fusion, OutputsOverADonatedInputAreWrittenAfterTheBlockReadsIt) {
  const int64_t n = 1000;
  std::vector<float> x = Random<float>(n, 41, -1, 1);
  Graph g({Shape(DType::kF32, {n})});
  auto* out0 = g.b.Unary(Opcode::kExp, g.params[0]);
  auto* out1 = g.b.Multiply(g.b.Unary(Opcode::kTanh, out0), g.params[0]);
  auto exe = g.Compile(g.b.Tuple({out0, out1}));
  ASSERT_EQ(Count(*exe->module().entry(), Opcode::kFusion), 1);
  Buffer arg = Arg(x, {n});
  const void* bytes = arg.data();
  auto out = exe->Run({arg}, nullptr, {true});
  EXPECT_TRUE(out[0].data() == bytes || out[1].data() == bytes);  // one took the input's bytes
  const std::vector<float> e = out[0].ToVector<float>(), y = out[1].ToVector<float>();
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_NEAR(e[i], std::exp(x[i]), 1e-6 * std::exp(x[i])) << i;
    ASSERT_NEAR(y[i], std::tanh(std::exp(x[i])) * x[i], 1e-6) << i;
  }
}

// A multi-output fusion over values computed inside the program (dots, not
// arguments): each output may take the bytes of an operand that dies there.
TEST(Fusion, MultiOutputFusionWritesOverOperandsThatDieThere) {
  const int64_t k = 64;
  const Shape square(DType::kF32, {k, k});
  std::vector<float> a = Random<float>(k * k, 51, -1, 1), b = Random<float>(k * k, 52, -1, 1);
  hlo::DotDims dims;
  dims.lhs_contracting = {1};
  dims.rhs_contracting = {0};
  Graph g({square, square});
  auto* x = g.b.Dot(g.params[0], g.params[1], dims);  // dies in the fusion
  auto* y = g.b.Dot(g.params[1], g.params[0], dims);  // dies in the fusion
  auto* first = g.b.Add(g.b.Unary(Opcode::kTanh, x), y);
  auto* second = g.b.Multiply(first, x);
  auto exe = g.Compile(g.b.Tuple({second, first}));
  ASSERT_EQ(Count(*exe->module().entry(), Opcode::kFusion), 1) << hlo::ToText(exe->module());
  EXPECT_EQ(exe->stats().in_place_updates, 2);
  auto out = exe->Run({Arg(a, {k, k}), Arg(b, {k, k})});
  const std::vector<float> s_out = out[0].ToVector<float>(), f_out = out[1].ToVector<float>();
  for (int64_t i = 0; i < k; ++i) {
    for (int64_t j = 0; j < k; ++j) {
      double xij = 0, yij = 0;
      for (int64_t p = 0; p < k; ++p) {
        xij += double(a[i * k + p]) * b[p * k + j];
        yij += double(b[i * k + p]) * a[p * k + j];
      }
      const double f = std::tanh(xij) + yij;
      ASSERT_NEAR(f_out[i * k + j], f, 1e-4) << i << "," << j;
      ASSERT_NEAR(s_out[i * k + j], f * xij, 1e-3 * std::max(1.0, std::abs(f * xij)));
    }
  }
}

// An intermediate that is a result and is read by an op outside the fusion
// that wants it (here a reduction) is written by its own fusion: joining the
// later fusion as an output could make a cycle through that op.
TEST(Fusion, AResultOthersReadStaysItsOwnFusion) {
  const int64_t n = 700;
  const Shape vec(DType::kF32, {n});
  std::vector<float> a = Random<float>(n, 31, -1, 1), b = Random<float>(n, 32, -1, 1);
  Graph g({vec, vec});
  auto* t = g.b.Unary(Opcode::kExp, g.b.Add(g.params[0], g.params[1]));
  auto* total =
      g.b.Reduce(t, g.b.ConstantScalar<float>(0), {0}, Reducer(g, Opcode::kAdd, DType::kF32));
  auto* y = g.b.Multiply(g.b.Unary(Opcode::kTanh, t), g.b.Broadcast(total, {n}, {}));
  auto exe = g.Compile(g.b.Tuple({y, t}));
  for (const auto& inst : exe->module().entry()->instructions()) {
    if (inst->opcode() == Opcode::kFusion) EXPECT_TRUE(inst->shape().is_array());
  }
  auto out = exe->Run({Arg(a, {n}), Arg(b, {n})});
  const std::vector<float> y_out = out[0].ToVector<float>(), t_out = out[1].ToVector<float>();
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(double(a[i]) + b[i]);
  for (int64_t i = 0; i < n; ++i) {
    const double ti = std::exp(double(a[i]) + b[i]);
    ASSERT_NEAR(t_out[i], ti, 1e-6 * ti) << i;
    ASSERT_NEAR(y_out[i], std::tanh(ti) * sum, 1e-5 * sum) << i;
  }
}

// SwiGLU's backward in bf16 (a mixed-precision step's), each op rounded
// once: the widening converts of g and dy and the cheap ops on them are read
// by both gradients' fusions, so each fusion computes them again from the
// bf16 values instead of reading f32 copies written once; the logistic (not
// cheap) stays one fusion of its own, which writes it rounded to bf16. Against a loop rounding each
// op in long double, and bit for bit against the same program unfused.
TEST(Fusion, CheapOpsSeveralFusionsReadAreComputedInEach) {
  const int64_t rows = 19, cols = 101;
  const int64_t n = rows * cols;
  const DType bf16 = DType::kBF16;
  const host::Format format = host::FormatOf(bf16);
  auto round = [&](long double v) { return static_cast<double>(host::RoundTo(format, v)); };
  std::vector<double> gate, up, dy;
  for (float v : Random<float>(n, 71, -3, 3)) gate.push_back(round(v));
  for (float v : Random<float>(n, 72, -2, 2)) up.push_back(round(v));
  for (float v : Random<float>(n, 73, -1, 1)) dy.push_back(round(v));
  auto run = [&](bool fuse, int64_t* converts, int64_t* wide) {
    const Shape m(bf16, {rows, cols});
    Graph g({m, m, m});
    g.fuse = fuse;
    auto* one = g.b.Broadcast(g.b.Convert(g.b.ConstantScalar<float>(1), bf16), {rows, cols}, {});
    auto* s = g.b.Unary(Opcode::kLogistic, g.params[0]);
    auto* d_up = g.b.Multiply(g.params[2], g.b.Multiply(g.params[0], s));
    auto* d_gate = g.b.Multiply(g.b.Multiply(g.b.Multiply(g.params[2], g.params[1]), s),
                                g.b.Add(one, g.b.Multiply(g.params[0], g.b.Subtract(one, s))));
    auto exe = g.Compile(g.b.Tuple({d_up, d_gate}));
    *converts = Count(*exe->module().entry(), Opcode::kConvert);
    *wide = 0;  // f32 arrays written
    for (const auto& inst : exe->module().entry()->instructions())
      *wide += inst->shape() == Shape(DType::kF32, {rows, cols});
    return exe->Run({host::HalfBuffer(bf16, gate, {rows, cols}),
                     host::HalfBuffer(bf16, up, {rows, cols}),
                     host::HalfBuffer(bf16, dy, {rows, cols})});
  };
  int64_t converts = 0, wide = 0;
  auto fused = run(true, &converts, &wide);
  EXPECT_EQ(converts, 0) << "a widened copy written for several readers";
  EXPECT_EQ(wide, 0) << "the logistic's fusion writes it rounded to bf16";
  const std::vector<double> got_up = host::HalfValues(fused[0]);
  const std::vector<double> got_gate = host::HalfValues(fused[1]);
  for (int64_t i = 0; i < n; ++i) {
    // The logistic is an f32 routine within about an ulp: its bf16 may be
    // one bf16 ulp off the exact value's, and so may what reads it.
    const long double x = gate[i];
    const double s = round(1 / (1 + std::exp(-x)));
    const double want_up = round(dy[i] * round(x * s));
    const double want_gate =
        round(round(round(dy[i] * up[i]) * s) * round(1 + round(x * round(1 - s))));
    ASSERT_NEAR(got_up[i], want_up, std::ldexp(std::fabs(want_up), -6) + 1e-30) << i;
    ASSERT_NEAR(got_gate[i], want_gate, std::ldexp(std::fabs(want_gate), -6) + 1e-30) << i;
  }
  auto unfused = run(false, &converts, &wide);
  for (size_t k = 0; k < fused.size(); ++k) {
    EXPECT_EQ(std::memcmp(fused[k].data(), unfused[k].data(), fused[k].shape().byte_size()), 0)
        << "output " << k;
  }
}

// An f32 sum of two full-size operands read by four fusions is written once:
// computing it in each would read both operands four times (32 bytes an
// element) where writing it reads them once, writes it and reads it four
// times (28). With two readers it is computed in each (16 against 20).
TEST(Fusion, ACheapOpIsComputedAgainOnlyWhereThatMovesFewerBytes) {
  const int64_t n = 999;
  const Shape vec(DType::kF32, {n});
  std::vector<float> a = Random<float>(n, 81, -1, 1), b = Random<float>(n, 82, -1, 1);
  for (int readers : {2, 4}) {
    SCOPED_TRACE(readers);
    Graph g({vec, vec});
    auto* sum = g.b.Add(g.params[0], g.params[1]);
    std::vector<Instruction*> results;
    for (int k = 0; k < readers; ++k) {
      auto* scale = g.b.Broadcast(g.b.ConstantScalar<float>(k + 1.0f), {n}, {});
      results.push_back(g.b.Unary(Opcode::kExp, g.b.Multiply(sum, scale)));
    }
    auto exe = g.Compile(g.b.Tuple(results));
    EXPECT_EQ(Count(*exe->module().entry(), Opcode::kAdd), readers == 2 ? 0 : 1)
        << hlo::ToText(exe->module());
    auto out = exe->Run({Arg(a, {n}), Arg(b, {n})});
    for (int k = 0; k < readers; ++k) {
      const std::vector<float> y = out[k].ToVector<float>();
      for (int64_t i = 0; i < n; ++i) {
        const double want = std::exp((double(a[i]) + b[i]) * (k + 1));
        ASSERT_NEAR(y[i], want, 1e-6 * want) << k << "," << i;
      }
    }
  }
}

}  // namespace
}  // namespace strata::runtime
