// The two remat policies of scan's backward pass: the same gradients as the
// for-loop, recomputation visible in the HLO, and the memory each plans.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "strata/autograd/grad.h"
#include "strata/compiler/compile.h"
#include "strata/hlo/text.h"
#include "strata/ir/lowering.h"
#include "strata/lazy/context.h"
#include "strata/lazy/ops.h"
#include "strata/transforms/scan.h"

namespace strata {
namespace {

Tensor TenSines(Tensor x) {
  for (int i = 0; i < 10; ++i) x = sin(x);
  return x;
}

// carry' = ten_sines(carry * w + x), y = carry'^2.
std::pair<Tree, Tree> Step(const Tree& c, const Tree& x, const Tensor& w) {
  Tensor h = TenSines(c.leaf() * w + x.leaf());
  return {Tree(h), Tree(h * h)};
}

std::vector<double> Range(int64_t n, double scale, double offset) {
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = std::sin(0.7 * i + offset) * scale;
  return v;
}

// The recurrence's weight, first carry and xs, and the reference: the same
// recurrence as a plain loop of lazy ops, sum_t weight(t) * sum(h_t^2) +
// sum(h_last).
struct Recurrence {
  int64_t length, width;
  Tensor w, h0, xs;
  Recurrence(int64_t length, int64_t width)
      : length(length),
        width(width),
        w(Tensor::FromVector(Range(width, 0.9, 1.0), {width})),
        h0(Tensor::FromVector(Range(width, 0.5, 2.0), {width})),
        xs(Tensor::FromVector(Range(length * width, 0.8, 0.3), {length, width})) {}
  Tensor PlainLoop(const std::function<double(int64_t)>& weight) const {
    Tensor h = h0, ref = zeros({}, DType::kF64);
    for (int64_t t = 0; t < length; ++t) {
      h = TenSines(h * w + reshape(slice(xs, 0, t, t + 1), {width}));
      ref = ref + sum(h * h) * weight(t);
    }
    return ref + sum(h);
  }
};

TEST(ScanRemat, BothPoliciesMatchTheForLoop) {
  const Recurrence r(6, 3);
  const int64_t length = r.length;
  const Tensor &w = r.w, &h0 = r.h0, &xs = r.xs;
  Tensor ref = r.PlainLoop([](int64_t t) { return static_cast<double>(t + 1); });
  std::vector<Tensor> expected = gradients(ref, {w, h0, xs});
  double expected_loss = ref.item<double>();
  Tensor weights = arange(1, length + 1, 1, DType::kF64);
  for (Remat remat : {Remat::kSaveCarries, Remat::kSaveAll}) {
    SCOPED_TRACE(remat == Remat::kSaveAll ? "save all" : "save carries");
    auto [carry, ys] = scan([&](const Tree& c, const Tree& x) { return Step(c, x, w); }, Tree(h0),
                            Tree(xs), {.remat = remat});
    Tensor loss = sum(sum(ys.leaf(), {1}) * weights) + sum(carry.leaf());
    std::vector<Tensor> got = gradients(loss, {w, h0, xs});
    EXPECT_NEAR(loss.item<double>(), expected_loss, 1e-10 * std::abs(expected_loss));
    for (size_t i = 0; i < got.size(); ++i) {
      auto a = got[i].to_vector<double>(), b = expected[i].to_vector<double>();
      ASSERT_EQ(a.size(), b.size());
      for (size_t k = 0; k < a.size(); ++k)
        EXPECT_NEAR(a[k], b[k], 1e-10 * std::max(1.0, std::abs(b[k]))) << i << "," << k;
    }
  }
}

// Loop nodes in the graph computing `values`.
int64_t Loops(const std::vector<Tensor>& values) {
  std::vector<ir::Value> roots;
  for (const Tensor& t : values) roots.push_back(t.value());
  int64_t n = 0;
  for (const ir::Node* node : ir::BuildGraph(roots).post_order) n += node->loop() != nullptr;
  return n;
}

// vjp_with_residuals, as strata.torch.scan's autograd function uses it: the
// residuals synced with the output, the pullback reads the loop's carry
// history (and saved residuals) as data and runs only the reverse loop.
TEST(ScanRemat, AStagedVjpReadsTheSyncedResidualsInsteadOfRunningTheLoopAgain) {
  const Recurrence r(5, 3);
  const Tensor &w = r.w, &h0 = r.h0, &xs = r.xs;
  Tensor ref = r.PlainLoop([](int64_t) { return 1.0; });
  std::vector<Tensor> expected = gradients(ref, {w, h0, xs});
  for (Remat remat : {Remat::kSaveCarries, Remat::kSaveAll}) {
    SCOPED_TRACE(remat == Remat::kSaveAll ? "save all" : "save carries");
    auto f = [&](const Tree& p) {
      auto [carry, ys] = scan([&](const Tree& c, const Tree& x) { return Step(c, x, p[0].leaf()); },
                              p[1], p[2], {.remat = remat});
      return Tree(sum(ys.leaf()) + sum(carry.leaf()));
    };
    StagedVjp staged = vjp_with_residuals(f, Tree{w, h0, xs});
    ASSERT_FALSE(staged.residuals.empty());
    Tensor seed = ones({}, DType::kF64);
    // Unsynced, the residuals are the forward's own values: both loops.
    EXPECT_EQ(Loops(staged.pullback(Tree(seed), staged.residuals).leaves()), 2);
    std::vector<Tensor> residuals = staged.residuals;
    std::vector<Tensor> out = staged.out.leaves();
    std::vector<Tensor*> synced{&out[0]};
    for (Tensor& r : residuals) synced.push_back(&r);
    sync(synced);
    EXPECT_NEAR(out[0].item<double>(), ref.item<double>(), 1e-10 * std::abs(ref.item<double>()));
    std::vector<Tensor> got = staged.pullback(Tree(seed), residuals).leaves();
    EXPECT_EQ(Loops(got), 1);  // the reverse loop alone
    for (size_t i = 0; i < got.size(); ++i) {
      auto a = got[i].to_vector<double>(), b = expected[i].to_vector<double>();
      ASSERT_EQ(a.size(), b.size());
      for (size_t k = 0; k < a.size(); ++k)
        EXPECT_NEAR(a[k], b[k], 1e-10 * std::max(1.0, std::abs(b[k]))) << i << "," << k;
    }
    EXPECT_THROW(staged.pullback(Tree(seed), {}), Error);
    std::vector<Tensor> wrong = residuals;
    wrong[0] = zeros({7}, DType::kF64);
    EXPECT_THROW(staged.pullback(Tree(seed), wrong), Error);
  }
}

// The optimized backward program of a length-`length` scan of ten sines.
std::unique_ptr<runtime::Executable> Backward(Remat remat, int64_t length, int64_t width) {
  std::vector<float> wv(width, 0.9f), hv(width, 0.1f), xv(length * width, 0.2f);
  Tensor w = Tensor::FromVector(wv, {width}), h0 = Tensor::FromVector(hv, {width});
  Tensor xs = Tensor::FromVector(xv, {length, width});
  auto [carry, ys] = scan([&](const Tree& c, const Tree& x) { return Step(c, x, w); }, Tree(h0),
                          Tree(xs), {.remat = remat});
  Tensor loss = sum(ys.leaf()) + sum(carry.leaf());
  std::vector<Tensor> roots = gradients(loss, {w, xs});
  roots.push_back(loss);
  lazy::LoweringContext lowering(roots);
  return compiler::Compile(lowering.module());
}

int64_t Count(const hlo::Module& m, hlo::Opcode op, const std::string& prefix = "") {
  int64_t n = 0;
  for (const auto& c : m.computations()) {
    if (c->name().rfind(prefix, 0) != 0) continue;
    for (const auto& inst : c->instructions()) n += inst->opcode() == op;
  }
  return n;
}

TEST(ScanRemat, RecomputationShowsInTheBackwardLoop) {
  auto carries = Backward(Remat::kSaveCarries, 8, 4);
  auto all = Backward(Remat::kSaveAll, 8, 4);
  // One While forward, one backward, whatever the policy.
  EXPECT_EQ(Count(carries->module(), hlo::Opcode::kWhile), 2);
  EXPECT_EQ(Count(all->module(), hlo::Opcode::kWhile), 2);
  // Forward body: 10 sines. Saving only carries, the backward body runs the
  // step again (10 more); saving everything it reads them (0 more). The
  // sine rule needs cosines either way.
  EXPECT_EQ(Count(carries->module(), hlo::Opcode::kSin), 20);
  EXPECT_EQ(Count(all->module(), hlo::Opcode::kSin), 10);
  EXPECT_EQ(Count(carries->module(), hlo::Opcode::kCos), 10);
  EXPECT_EQ(Count(all->module(), hlo::Opcode::kCos), 10);
}

TEST(ScanRemat, SavingOnlyCarriesPlansLessMemoryAsLengthGrows) {
  const int64_t width = 1024;
  std::map<int64_t, std::pair<int64_t, int64_t>> peak;  // length -> (carries, all)
  for (int64_t length : {10, 100, 1000}) {
    peak[length] = {Backward(Remat::kSaveCarries, length, width)->stats().planned_peak_bytes,
                    Backward(Remat::kSaveAll, length, width)->stats().planned_peak_bytes};
    RecordProperty("carries_peak_" + std::to_string(length), std::to_string(peak[length].first));
    RecordProperty("all_peak_" + std::to_string(length), std::to_string(peak[length].second));
    EXPECT_LT(peak[length].first, peak[length].second) << length;
  }
  // Per extra step the save-all loop also stacks the ten sines' values
  // (and the cosines' inputs), the carries-only loop only one carry beyond
  // what both stack (ys, their cotangents, dxs, loop copies of xs).
  int64_t grow_carries = peak[1000].first - peak[10].first;
  int64_t grow_all = peak[1000].second - peak[10].second;
  int64_t row = 990 * width * 4;  // one [990, width] f32 stack
  EXPECT_GT(grow_all - grow_carries, 8 * row) << grow_carries << " vs " << grow_all;
  EXPECT_GT(grow_all, 2 * grow_carries);
}

// h' = sin(tanh(h w1) w2 + x): two matrix products per step.
std::pair<Tree, Tree> DotStep(const Tree& c, const Tree& x, const Tensor& w1, const Tensor& w2) {
  Tensor h = sin(matmul(tanh(matmul(c.leaf(), w1)), w2) + x.leaf());
  return {Tree(h), Tree(h * h)};
}

// The gradient program's dot count (compiled, before anything runs), after
// checking the loss and every gradient against the for-loop's (1e-10, f64).
int64_t DotsAndCheck(const Tensor& loss, const Tensor& ref, const std::vector<Tensor>& got,
                     const std::vector<Tensor>& expected) {
  int64_t dots = 0;
  {
    lazy::LoweringContext lowering(got);
    dots = Count(compiler::Compile(lowering.module())->module(), hlo::Opcode::kDot);
  }
  EXPECT_NEAR(loss.item<double>(), ref.item<double>(), 1e-10 * std::abs(ref.item<double>()));
  for (size_t i = 0; i < got.size(); ++i) {
    auto a = got[i].to_vector<double>(), b = expected[i].to_vector<double>();
    EXPECT_EQ(a.size(), b.size());
    for (size_t k = 0; k < a.size() && k < b.size(); ++k)
      EXPECT_NEAR(a[k], b[k], 1e-10 * std::max(1.0, std::abs(b[k]))) << i << "," << k;
  }
  return dots;
}

TEST(ScanRemat, SavingDotsMatchesTheForLoopAndRunsNoProductTwice) {
  const int64_t length = 5, width = 3;
  Tensor w1 =
      reshape(Tensor::FromVector(Range(width * width, 0.8, 0.1), {width * width}), {width, width});
  Tensor w2 =
      reshape(Tensor::FromVector(Range(width * width, 0.7, 1.3), {width * width}), {width, width});
  Tensor h0 = Tensor::FromVector(Range(2 * width, 0.5, 2.0), {2, width});
  Tensor xs = Tensor::FromVector(Range(length * 2 * width, 0.6, 0.4), {length, 2, width});
  // The reference: a plain loop.
  Tensor h = h0, ref = zeros({}, DType::kF64);
  for (int64_t t = 0; t < length; ++t) {
    h = sin(matmul(tanh(matmul(h, w1)), w2) + reshape(slice(xs, 0, t, t + 1), {2, width}));
    ref = ref + sum(h * h) * static_cast<double>(t + 1);
  }
  ref = ref + sum(h);
  std::vector<Tensor> expected = gradients(ref, {w1, w2, h0, xs});
  Tensor weights = reshape(arange(1, length + 1, 1, DType::kF64), {length, 1, 1});
  std::map<Remat, int64_t> dots;
  for (Remat remat : {Remat::kSaveCarries, Remat::kSaveDots}) {
    SCOPED_TRACE(remat == Remat::kSaveDots ? "save dots" : "save carries");
    auto [carry, ys] = scan([&](const Tree& c, const Tree& x) { return DotStep(c, x, w1, w2); },
                            Tree(h0), Tree(xs), {.remat = remat});
    Tensor loss = sum(ys.leaf() * weights) + sum(carry.leaf());
    std::vector<Tensor> got = gradients(loss, {w1, w2, h0, xs});
    dots[remat] = DotsAndCheck(loss, ref, got, expected);
  }
  // Forward: 2 products. Backward: 2 per product (d lhs, d rhs), plus the
  // forward's 2 again when only carries are saved.
  EXPECT_EQ(dots[Remat::kSaveCarries], 2 + 2 + 4);
  EXPECT_EQ(dots[Remat::kSaveDots], 2 + 4);
}

// Saving only the products without batch dimensions: the batched product
// (per row of h, [1, w] x [w, 1]) is recomputed, the plain one is not.
TEST(ScanRemat, SavingUnbatchedDotsRecomputesOnlyTheBatchedOnes) {
  const int64_t length = 4, width = 3;
  Tensor w1 =
      reshape(Tensor::FromVector(Range(width * width, 0.8, 0.1), {width * width}), {width, width});
  Tensor h0 = Tensor::FromVector(Range(2 * width, 0.5, 2.0), {2, width});
  Tensor xs = Tensor::FromVector(Range(length * 2 * width, 0.6, 0.4), {length, 2, width});
  auto step = [&](const Tensor& h, const Tensor& x) {
    Tensor a = tanh(matmul(h, w1));                                        // a plain product
    Tensor s = reshape(matmul(unsqueeze(a, 1), unsqueeze(h, 2)), {2, 1});  // batched over rows
    return sin(a * s + x);
  };
  Tensor h = h0, ref = zeros({}, DType::kF64);  // the reference: a plain loop
  for (int64_t t = 0; t < length; ++t) {
    h = step(h, reshape(slice(xs, 0, t, t + 1), {2, width}));
    ref = ref + sum(h * h);
  }
  std::vector<Tensor> expected = gradients(ref, {w1, h0, xs});
  std::map<Remat, int64_t> dots;
  for (Remat remat : {Remat::kSaveCarries, Remat::kSaveDots, Remat::kSaveDotsWithNoBatchDims}) {
    SCOPED_TRACE(static_cast<int>(remat));
    auto [carry, ys] = scan(
        [&](const Tree& c, const Tree& x) {
          Tensor next = step(c.leaf(), x.leaf());
          return std::pair{Tree(next), Tree(next)};
        },
        Tree(h0), Tree(xs), {.remat = remat});
    Tensor loss = sum(ys.leaf() * ys.leaf());
    std::vector<Tensor> got = gradients(loss, {w1, h0, xs});
    dots[remat] = DotsAndCheck(loss, ref, got, expected);
  }
  // Forward 2 products, backward 2 per product; recomputed: both (carries),
  // none (dots), the batched one (unbatched dots).
  EXPECT_EQ(dots[Remat::kSaveCarries], 2 + 4 + 2);
  EXPECT_EQ(dots[Remat::kSaveDots], 2 + 4);
  EXPECT_EQ(dots[Remat::kSaveDotsWithNoBatchDims], 2 + 4 + 1);
}

// A step that multiplies by a scalar literal (a kScalar parameter) and by a
// table computed from literals alone (cos of an arange, like a rotary
// table), both broadcast to the carry's shape inside the body. The loops
// carry the scalar and the [W] table, not their [R, W] broadcasts, and the
// backward loop keeps no accumulator for the scalar's gradient, which
// nothing asks for; the gradients match the plain loop's.
TEST(ScanRemat, LoopStateHoldsScalarsAndTablesNotTheirBroadcasts) {
  const int64_t length = 4, rows = 3, width = 5;
  Tensor h0 =
      reshape(Tensor::FromVector(Range(rows * width, 0.5, 2.0), {rows * width}), {rows, width});
  Tensor xs =
      reshape(Tensor::FromVector(Range(length * rows * width, 0.8, 0.3), {length * rows * width}),
              {length, rows, width});
  Tensor table = cos(arange(0, width, 1, DType::kF64) * 0.3);
  auto step = [&](const Tensor& h, const Tensor& x) { return tanh(h * 0.7 + x * table); };
  Tensor h = h0, ref = zeros({}, DType::kF64);
  for (int64_t t = 0; t < length; ++t) {
    h = step(h, reshape(slice(xs, 0, t, t + 1), {rows, width}));
    ref = ref + sum(h * h) * static_cast<double>(t + 1);
  }
  std::vector<Tensor> expected = gradients(ref, {h0, xs});
  auto [carry, ys] = scan(
      [&](const Tree& c, const Tree& x) {
        Tensor next = step(c.leaf(), x.leaf());
        return std::pair{Tree(next), Tree(next * next)};
      },
      Tree(h0), Tree(xs));
  Tensor weights = arange(1, length + 1, 1, DType::kF64);
  Tensor loss = sum(sum(ys.leaf(), {1, 2}) * weights);
  std::vector<Tensor> got = gradients(loss, {h0, xs});
  auto exe = compiler::Compile(lazy::LoweringContext(got).module());
  int64_t loops = 0;
  for (const auto& c : exe->module().computations()) {
    for (const auto& inst : c->instructions()) {
      if (inst->opcode() != hlo::Opcode::kWhile) continue;
      ++loops;
      const Shape& state = inst->shape();
      int64_t full = 0, scalars = 0;
      for (int64_t i = 0; i < state.tuple_size(); ++i) {
        full += state.tuple_shape(i) == Shape(DType::kF64, {rows, width});
        scalars += state.tuple_shape(i) == Shape(DType::kF64, {});
      }
      EXPECT_EQ(full, 1) << "one [R, W] carry, no broadcast: " << state.ToString();
      EXPECT_EQ(scalars, 1) << "the scalar, no gradient accumulator: " << state.ToString();
    }
  }
  EXPECT_EQ(loops, 2);
  EXPECT_NEAR(loss.item<double>(), ref.item<double>(), 1e-10 * std::abs(ref.item<double>()));
  for (size_t i = 0; i < got.size(); ++i) {
    auto a = got[i].to_vector<double>(), b = expected[i].to_vector<double>();
    ASSERT_EQ(a.size(), b.size());
    for (size_t k = 0; k < a.size(); ++k)
      EXPECT_NEAR(a[k], b[k], 1e-10 * std::max(1.0, std::abs(b[k]))) << i << "," << k;
  }
}

TEST(ScanRemat, MixedPrecisionLoopsScanTheMasterWeightsNotABf16Copy) {
  // A bf16 copy of f32 stacked weights, scanned forward and back: both loops
  // read the f32 weights and convert one layer at a time (no bf16 stack is
  // made before the loops), with the plain loop's values and gradients.
  const int64_t length = 3, rows = 4, width = 8;
  auto floats = [](const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); };
  // Data, as a model's weights are: entry parameters of the compiled step.
  Tensor h0 = Tensor::FromVector(floats(Range(rows * width, 0.5, 2.0)), {rows, width});
  Tensor w =
      Tensor::FromVector(floats(Range(length * width * width, 0.4, 0.3)), {length, width, width});
  auto step = [](const Tensor& h, const Tensor& layer) {
    return tanh(astype(matmul(astype(h, DType::kBF16), layer), DType::kF32));
  };
  Tensor h = h0;
  for (int64_t t = 0; t < length; ++t)
    h = step(h, astype(reshape(slice(w, 0, t, t + 1), {width, width}), DType::kBF16));
  Tensor ref = sum(h * h);
  std::vector<Tensor> expected = gradients(ref, {h0, w});
  ScanOptions options;
  options.remat = Remat::kSaveDotsWithNoBatchDims;
  auto [carry, ys] = scan(
      [&](const Tree& c, const Tree& x) {
        return std::pair{Tree(step(c.leaf(), x.leaf())), Tree()};
      },
      Tree(h0), Tree(astype(w, DType::kBF16)), options);
  Tensor loss = sum(carry.leaf() * carry.leaf());
  std::vector<Tensor> got = gradients(loss, {h0, w});
  std::vector<Tensor> all = got;
  all.push_back(loss);
  auto exe = compiler::Compile(lazy::LoweringContext(all).module());
  int64_t loops = 0;
  for (const auto& inst : exe->module().entry()->instructions()) {
    loops += inst->opcode() == hlo::Opcode::kWhile;
    EXPECT_FALSE(inst->opcode() == hlo::Opcode::kConvert &&
                 inst->shape() == Shape(DType::kBF16, {length, width, width}) &&
                 inst->operand(0)->opcode() == hlo::Opcode::kParameter)
        << "a bf16 copy of the whole stack: " << hlo::ToText(exe->module());
  }
  EXPECT_EQ(loops, 2);
  EXPECT_NEAR(loss.item<float>(), ref.item<float>(), 1e-6 * std::abs(ref.item<float>()));
  for (size_t i = 0; i < got.size(); ++i) {
    auto a = got[i].to_vector<float>(), b = expected[i].to_vector<float>();
    ASSERT_EQ(a.size(), b.size());
    for (size_t k = 0; k < a.size(); ++k)
      EXPECT_NEAR(a[k], b[k], 1e-6 * std::max(1.0f, std::abs(b[k]))) << i << "," << k;
  }
}

}  // namespace
}  // namespace strata
