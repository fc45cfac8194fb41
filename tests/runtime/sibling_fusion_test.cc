// Sibling fusions merged (passes/merge_sibling_fusions.cc): loop fusions over
// the same dims that read a common array become one multi-output fusion,
// unless one reads what the other computes; then producers only that fusion
// reads join it (passes/fuse_producers.cc). Values against plain loops in
// doubles, and bit for bit against the unfused program.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "test_util.h"

namespace strata::runtime {
namespace {

using hlo::Opcode;
using test::Arg;
using test::Count;
using test::Graph;
using test::Random;

TEST(SiblingFusion, ASwiGluBackwardReadsItsInputsInOneFusion) {
  // SwiGLU's backward over gate, up and the incoming gradient dy, with the
  // logistic s (an exp: computed once, not in each reader): the up
  // gradient, the gate gradient and the recomputed product each read gate
  // and s, and two of them dy or up. One fusion computes all three.
  const int64_t rows = 24, cols = 97, n = rows * cols;
  const auto gate = Random<float>(n, 81, -3, 3), up = Random<float>(n, 82, -2, 2),
             dy = Random<float>(n, 83, -1, 1);
  auto run = [&](bool fuse, int64_t* fusions) {
    const Shape m(DType::kF32, {rows, cols});
    Graph g({m, m, m});
    g.fuse = fuse;
    auto* one = g.b.Broadcast(g.b.ConstantScalar<float>(1), {rows, cols}, {});
    auto* s = g.b.Unary(Opcode::kLogistic, g.params[0]);
    auto* gs = g.b.Multiply(g.params[0], s);
    auto* d_up = g.b.Multiply(g.params[2], gs);
    auto* d_gate = g.b.Multiply(g.b.Multiply(g.b.Multiply(g.params[2], g.params[1]), s),
                                g.b.Add(one, g.b.Multiply(g.params[0], g.b.Subtract(one, s))));
    auto* h = g.b.Multiply(gs, g.params[1]);
    auto exe = g.Compile(g.b.Tuple({d_up, d_gate, h}));
    *fusions = Count(*exe->module().entry(), Opcode::kFusion);
    return exe->Run({Arg(gate, {rows, cols}), Arg(up, {rows, cols}), Arg(dy, {rows, cols})});
  };
  int64_t fusions = 0;
  auto fused = run(true, &fusions);
  EXPECT_EQ(fusions, 1);
  const auto got_up = fused[0].ToVector<float>(), got_gate = fused[1].ToVector<float>(),
             got_h = fused[2].ToVector<float>();
  for (int64_t i = 0; i < n; ++i) {
    const double x = gate[i], s = 1 / (1 + std::exp(-x));
    const double want_up = dy[i] * x * s, want_h = x * s * up[i];
    const double want_gate = dy[i] * up[i] * s * (1 + x * (1 - s));
    ASSERT_NEAR(got_up[i], want_up, 1e-5 * (1 + std::abs(want_up))) << i;
    ASSERT_NEAR(got_gate[i], want_gate, 1e-5 * (1 + std::abs(want_gate))) << i;
    ASSERT_NEAR(got_h[i], want_h, 1e-5 * (1 + std::abs(want_h))) << i;
  }
  auto unfused = run(false, &fusions);
  for (size_t k = 0; k < fused.size(); ++k) {
    EXPECT_EQ(std::memcmp(fused[k].data(), unfused[k].data(), fused[k].shape().byte_size()), 0)
        << "output " << k;
  }
}

TEST(SiblingFusion, AFusionReadingTheOtherThroughAProductStaysApart) {
  // y = exp(a) * b, then r = y · w (a matrix product), then z = (r + a) * a:
  // the two fusions share a, but z's reads y's through the product, so one
  // fusion of both would read its own result.
  const int64_t k = 32, n = k * k;
  const auto a = Random<float>(n, 91, -1, 1), b = Random<float>(n, 92, -1, 1),
             w = Random<float>(n, 93, -1, 1);
  const Shape m(DType::kF32, {k, k});
  Graph g({m, m, m});
  auto* y = g.b.Multiply(g.b.Unary(Opcode::kExp, g.params[0]), g.params[1]);
  auto* r = g.b.Dot(y, g.params[2], {{}, {}, {1}, {0}});
  auto* z = g.b.Multiply(g.b.Add(r, g.params[0]), g.params[0]);
  auto exe = g.Compile(g.b.Tuple({y, z}));
  EXPECT_EQ(Count(*exe->module().entry(), Opcode::kFusion), 2);
  auto out = exe->Run({Arg(a, {k, k}), Arg(b, {k, k}), Arg(w, {k, k})});
  const auto got_y = out[0].ToVector<float>(), got_z = out[1].ToVector<float>();
  for (int64_t i = 0; i < k; ++i) {
    for (int64_t j = 0; j < k; ++j) {
      double dot = 0;
      for (int64_t p = 0; p < k; ++p)
        dot += double{std::exp(a[i * k + p])} * b[i * k + p] * w[p * k + j];
      const double want_y = std::exp(double{a[i * k + j]}) * b[i * k + j];
      const double want_z = (dot + a[i * k + j]) * a[i * k + j];
      ASSERT_NEAR(got_y[i * k + j], want_y, 1e-5 * (1 + std::abs(want_y)));
      ASSERT_NEAR(got_z[i * k + j], want_z, 1e-4 * (1 + std::abs(want_z)));
    }
  }
}

// Producers only the merged fusion reads join it (passes/fuse_producers.cc).
// SwiGLU's gate gradient and up gradient as two fusions over a logistic s
// that both read (too costly to compute in each, so FuseElementwise writes
// it) and s rounded to bf16, as a mixed-precision step holds it. Once the
// two are one fusion, s and its rounding have one reader and are computed
// inside it.
std::vector<Buffer> RunSwiGluGradients(bool also_return_s, int64_t* logistics, int64_t* fusions,
                                       const std::vector<float>& gate, const std::vector<float>& up,
                                       const std::vector<float>& dy) {
  const int64_t rows = 16, cols = 96;
  const Shape m(DType::kF32, {rows, cols});
  Graph g({m, m, m});
  auto* one = g.b.Broadcast(g.b.ConstantScalar<float>(1), {rows, cols}, {});
  auto* s = g.b.Unary(Opcode::kLogistic, g.params[0]);
  auto* s_half = g.b.Convert(g.b.Convert(s, DType::kBF16), DType::kF32);
  auto* d_up = g.b.Multiply(g.params[2], g.b.Multiply(g.params[0], s_half));
  auto* d_gate = g.b.Multiply(g.b.Multiply(g.b.Multiply(g.params[2], g.params[1]), s),
                              g.b.Add(one, g.b.Multiply(g.params[0], g.b.Subtract(one, s_half))));
  std::vector<hlo::Instruction*> results = {d_up, d_gate};
  if (also_return_s) results.push_back(s);
  auto exe = g.Compile(g.b.Tuple(results));
  *logistics = Count(*exe->module().entry(), Opcode::kLogistic);
  *fusions = Count(*exe->module().entry(), Opcode::kFusion);
  return exe->Run({Arg(gate, {rows, cols}), Arg(up, {rows, cols}), Arg(dy, {rows, cols})});
}

TEST(FuseProducers, AValueOnlyTheMergedFusionReadsIsComputedInIt) {
  const int64_t n = 16 * 96;
  const auto gate = Random<float>(n, 71, -3, 3), up = Random<float>(n, 72, -2, 2),
             dy = Random<float>(n, 73, -1, 1);
  for (bool also_return_s : {false, true}) {
    SCOPED_TRACE(also_return_s ? "s is also a result" : "s is read by the fusions only");
    int64_t logistics = 0, fusions = 0;
    auto out = RunSwiGluGradients(also_return_s, &logistics, &fusions, gate, up, dy);
    // A value read outside as well stays written once.
    EXPECT_EQ(logistics, also_return_s ? 1 : 0);
    EXPECT_EQ(fusions, 1);
    const auto got_up = out[0].ToVector<float>(), got_gate = out[1].ToVector<float>();
    for (int64_t i = 0; i < n; ++i) {
      const double x = gate[i], s = 1 / (1 + std::exp(-x));
      const double s_half = hlo::BFloat16ToFloat(hlo::FloatToBFloat16(static_cast<float>(s)));
      const double want_up = dy[i] * x * s_half;
      const double want_gate = dy[i] * up[i] * s * (1 + x * (1 - s_half));
      // (s is rounded from an f32 logistic: allow its last bf16 place.)
      ASSERT_NEAR(got_up[i], want_up, 1e-5 * (1 + std::abs(want_up)) + 0.008 * std::abs(dy[i] * x))
          << i;
      ASSERT_NEAR(got_gate[i], want_gate, 1e-4 * (1 + std::abs(want_gate))) << i;
    }
  }
}

}  // namespace
}  // namespace strata::runtime
