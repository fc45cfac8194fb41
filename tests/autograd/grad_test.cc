// Gradients against central finite differences in f64.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "gradient_check.h"
#include "strata/autograd/grad.h"
#include "strata/compiler/compile.h"
#include "strata/ir/lowering.h"
#include "strata/lazy/context.h"
#include "strata/lazy/ops.h"

namespace strata {
namespace {

Tensor C(std::vector<double> v, std::vector<int64_t> dims) { return Tensor::FromVector(v, dims); }

TEST(Gradients, ElementwiseMath) {
  CheckGradients("exp*x", [](auto& x) { return sum(exp(x[0]) * x[0]); }, {{{2, 3}}});
  CheckGradients("tanh,sigmoid,sin,cos",
                 [](auto& x) { return sum(tanh(x[0]) * sigmoid(x[0]) + sin(x[0]) * cos(x[0])); },
                 {{{5}}});
  CheckGradients("sqrt,rsqrt,log,log1p",
                 [](auto& x) {
                   Tensor p = x[0] * x[0] + 0.5;
                   return sum(sqrt(p) + rsqrt(p) + log(p) + log1p(p));
                 },
                 {{{4}}});
  CheckGradients(
      "erf,abs,pow",
      [](auto& x) { return sum(erf(x[0]) + abs(x[0]) * 3.0 + pow(x[0] * x[0] + 1.0, 1.5)); },
      {{{4}}});
  CheckGradients(
      "div,max,min",
      [](auto& x) {
        return sum(x[0] / (x[1] * x[1] + 1.0) + maximum(x[0], x[1]) - minimum(x[0], x[1] * 2.0));
      },
      {{{3}}, {{3}}});
}

TEST(Gradients, BroadcastingAndReductions) {
  CheckGradients("broadcast",
                 [](auto& x) { return sum((x[0] + x[1]) * (x[0] - x[1]) / (x[1] * x[1] + 1.0)); },
                 {{{2, 3}}, {{3}}});
  CheckGradients("mean keepdim", [](auto& x) { return sum(x[0] * mean(x[0], {1}, true)); },
                 {{{3, 4}}});
  CheckGradients("max", [](auto& x) { return sum(max(x[0], {0}) * 2.0) + sum(min(x[0], {1})); },
                 {{{3, 4}}});
  CheckGradients("log_softmax",
                 [](auto& x) {
                   return sum(log_softmax(x[0], -1) * C({1, 0, 0, 0, 0, 1, 0, 0}, {2, 4}));
                 },
                 {{{2, 4}}});
  CheckGradients("softmax",
                 [](auto& x) {
                   return sum(softmax(x[0], 0) * C({1, 2, 3, 4, 5, 6}, {3, 2}));
                 },
                 {{{3, 2}}});
}

TEST(Gradients, LinearAlgebra) {
  CheckGradients("matmul", [](auto& x) { return sum(tanh(matmul(x[0], x[1]))); },
                 {{{3, 4}}, {{4, 2}}});
  CheckGradients("batched broadcast matmul",
                 [](auto& x) { return sum(matmul(x[0], x[1]) * matmul(x[0], x[1])); },
                 {{{2, 3, 4}}, {{4, 5}}});
  CheckGradients("matrix-vector", [](auto& x) { return sum(exp(matmul(x[0], x[1]))); },
                 {{{3, 4}}, {{4}}});
}

TEST(Gradients, ShapeOps) {
  CheckGradients("slice+concat",
                 [](auto& x) {
                   Tensor y = concat({slice(x[0], 1, 0, 2), slice(x[0], 1, 1, 3) * 2.0}, 1);
                   return sum(y * y);
                 },
                 {{{2, 3}}});
  CheckGradients("strided slice",
                 [](auto& x) { return sum(exp(slice(x[0], 0, 1, std::nullopt, 2))); }, {{{6}}});
  CheckGradients("permute+reshape",
                 [](auto& x) {
                   return sum(reshape(permute(x[0], {1, 0}), {-1}) * C({1, 2, 3, 4, 5, 6}, {6}));
                 },
                 {{{2, 3}}});
  CheckGradients("index_select with repeats",
                 [](auto& x) {
                   Tensor idx = Tensor::FromVector<int64_t>({2, 0, 2}, {3});
                   return sum(index_select(x[0], 0, idx) * C({1, 2, 3, 4, 5, 6}, {3, 2}));
                 },
                 {{{3, 2}}});
  CheckGradients("where",
                 [](auto& x) { return sum(where(gt(x[0], x[1]), x[0] * x[0], x[1] * 3.0)); },
                 {{{4}}, {{4}}});
}

TEST(Gradients, UnusedInputsGetZerosAndIntegersNone) {
  Tensor x = C({1, 2}, {2}), unused = C({5, 6, 7}, {3});
  Tensor k = Tensor::FromVector<int64_t>({3, 4}, {2});
  // The integer tensor on the way carries no gradient and is no error...
  auto g = gradients(sum(x * astype(k, DType::kF64)), {x, unused});
  EXPECT_EQ(g[0].to_vector<double>(), (std::vector<double>{3, 4}));
  EXPECT_EQ(g[1].to_vector<double>(), (std::vector<double>{0, 0, 0}));
  // ...but asking for its gradient is.
  EXPECT_THROW(gradients(sum(x * astype(k, DType::kF64)), {x, k}), Error);
  EXPECT_THROW(vjp(x, x, {k}), Error);
  // A tensor used several times accumulates: d/dx sum(x*x + x) = 2x + 1.
  EXPECT_EQ(gradients(sum(x * x + x), {x})[0].to_vector<double>(), (std::vector<double>{3, 5}));
  EXPECT_THROW(gradients(x * x, {x}), Error);  // not a scalar
}

}  // namespace
}  // namespace strata

// A dot with two contracting dims and a batch dim that is not leading, built
// from the primitive directly (matmul never makes one).
#include "strata/lazy/op_builder.h"

namespace strata {
namespace {

TEST(Gradients, GeneralDotDimensionNumbers) {
  auto fn = [](const std::vector<Tensor>& x) {
    hlo::Attributes a;
    a.dot.lhs_batch = {1};
    a.dot.rhs_batch = {0};
    a.dot.lhs_contracting = {2, 0};
    a.dot.rhs_contracting = {1, 2};
    // lhs [3 (contract), 2 (batch), 4 (contract)], rhs [2 (batch), 4, 3, 5] -> [2, 5]
    Tensor out(lazy::Op(hlo::Opcode::kDot, {x[0].value(), x[1].value()}, a));
    return sum(out * out);
  };
  CheckGradients("dot with two contracting dims", fn, {{{3, 2, 4}}, {{2, 4, 3, 5}}});
}

// Reading a tensor as disjoint slices (layers of a stacked parameter) sums
// the slices' cotangents into one concatenate, not one full-size add per
// slice; overlapping slices still add. Values against the hand derivative.
TEST(Gradients, DisjointSlicesJoinIntoOneConcatenate) {
  Tensor x = C({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {6, 2});
  // rows 0, 1, 2 and 4 read with weights 1..4 (row 3 and 5 unread):
  // d/dx[r] sum(w_r * x[r]^2) = 2 w_r x[r].
  const std::vector<int64_t> rows{4, 0, 2, 1};
  auto loss_of = [&](const Tensor& t) {
    Tensor loss = zeros({}, DType::kF64);
    for (size_t i = 0; i < rows.size(); ++i)
      loss = loss + sum(pow(slice(t, 0, rows[i], rows[i] + 1), 2.0)) * double(i + 1);
    return loss;
  };
  Tensor g = gradients(loss_of(x), {x})[0];
  auto count = [](const Tensor& t, hlo::Opcode op) {
    int64_t n = 0;
    for (const ir::Node* node : ir::BuildGraph({t.value()}).post_order)
      n += node->kind() == ir::NodeKind::kOp && node->opcode() == op;
    return n;
  };
  EXPECT_EQ(count(g, hlo::Opcode::kConcatenate), 1);
  EXPECT_EQ(count(g, hlo::Opcode::kPad), 0);  // no slice cotangent padded to full size
  std::vector<double> expected(12, 0.0), xs = x.to_vector<double>();
  for (size_t i = 0; i < rows.size(); ++i)
    for (int c = 0; c < 2; ++c) expected[rows[i] * 2 + c] = 2.0 * (i + 1) * xs[rows[i] * 2 + c];
  EXPECT_EQ(g.to_vector<double>(), expected);
  // Overlapping windows (rows 0-1 and 1-2) fall back to adds: row 1 gets both.
  Tensor overlap = sum(pow(slice(x, 0, 0, 2), 2.0)) + sum(pow(slice(x, 0, 1, 3), 2.0));
  Tensor h = gradients(overlap, {x})[0];
  EXPECT_EQ(count(h, hlo::Opcode::kConcatenate), 0);
  EXPECT_EQ(count(h, hlo::Opcode::kPad), 2);
  std::vector<double> hv = h.to_vector<double>();
  for (int i = 0; i < 12; ++i) {
    int row = i / 2;
    double factor = row == 1 ? 4 : row <= 2 ? 2 : 0;
    EXPECT_EQ(hv[i], factor * xs[i]) << i;
  }
}

// softmax and log_softmax are shift-invariant, so their max shift carries no
// gradient: the backward has no argmax mask (no compare), and still matches
// finite differences (op_gradients_test) and the closed form here.
TEST(Gradients, SoftmaxShiftCarriesNoGradient) {
  Tensor x = C({0.5, -1.0, 2.0, 0.25, 3.0, 1.0}, {2, 3});
  Tensor w = C({1.0, 2.0, -1.0, 0.5, 0.0, 4.0}, {2, 3});
  for (bool log_form : {false, true}) {
    Tensor y = log_form ? log_softmax(x, -1) : softmax(x, -1);
    Tensor g = gradients(sum(y * w), {x})[0];
    int64_t compares = 0;
    for (const ir::Node* node : ir::BuildGraph({g.value()}).post_order)
      compares += node->kind() == ir::NodeKind::kOp && node->opcode() == hlo::Opcode::kCompare;
    EXPECT_EQ(compares, 0) << (log_form ? "log_softmax" : "softmax");
    std::vector<double> xs = x.to_vector<double>(), ws = w.to_vector<double>();
    std::vector<double> got = g.to_vector<double>();
    for (int r = 0; r < 2; ++r) {
      double z = 0;
      for (int c = 0; c < 3; ++c) z += std::exp(xs[r * 3 + c]);
      double wp = 0, wsum = 0;  // sum_c w_c p_c, sum_c w_c
      for (int c = 0; c < 3; ++c) {
        wp += ws[r * 3 + c] * std::exp(xs[r * 3 + c]) / z;
        wsum += ws[r * 3 + c];
      }
      for (int c = 0; c < 3; ++c) {
        const double p = std::exp(xs[r * 3 + c]) / z, wc = ws[r * 3 + c];
        // softmax: p_c (w_c - sum w p); log_softmax: w_c - p_c sum w.
        const double expected = log_form ? wc - p * wsum : p * (wc - wp);
        EXPECT_NEAR(got[r * 3 + c], expected, 1e-12) << r << "," << c;
      }
    }
  }
}

// softmax differentiates through its own rule, dx = y * (g - sum(g * y)):
// the compiled forward-and-backward program exponentiates once, divides
// once (the forward's y = e / s) and sums each row three times (the
// forward's max and sum, the backward's one sum). The op-by-op derivative of
// e / s divides twice more (g / s and g e / s^2), reading e in the backward.
// The rule's result is made of ops that differentiate again: the second
// derivative against central differences of the closed-form first one.
TEST(Gradients, SoftmaxBackwardReadsOnlyItsResultAndDifferentiatesAgain) {
  const std::vector<double> xs = {0.5, -1.0, 2.0, 0.25, 3.0, 1.0, -0.5, 0.0};
  const std::vector<double> ws = {1.0, 2.0, -1.0, 0.5, 0.0, 4.0, -2.0, 1.5};
  Tensor x = C(xs, {2, 4}), w = C(ws, {2, 4});
  Tensor y = softmax(x, -1);
  Tensor g = gradients(sum(y * w), {x})[0];
  auto exe = compiler::Compile(lazy::LoweringContext({y, g}).module());
  int64_t exps = 0, divides = 0, reduces = 0;
  for (const auto& c : exe->module().computations()) {
    for (const auto& inst : c->instructions()) {
      exps += inst->opcode() == hlo::Opcode::kExp;
      divides += inst->opcode() == hlo::Opcode::kDivide;
      reduces += inst->opcode() == hlo::Opcode::kReduce;
    }
  }
  EXPECT_EQ(exps, 1);
  EXPECT_EQ(divides, 1);
  EXPECT_EQ(reduces, 3);
  // d/dx_k of sum_c h_c dL/dx_c, with dL/dx = p * (w - sum w p) per row.
  const std::vector<double> hs = {0.3, -0.7, 1.1, 0.2, -0.4, 0.9, 0.6, -1.2};
  auto first = [&](const std::vector<double>& v) {
    double total = 0;
    for (int r = 0; r < 2; ++r) {
      double z = 0, wp = 0;
      for (int c = 0; c < 4; ++c) z += std::exp(v[r * 4 + c]);
      for (int c = 0; c < 4; ++c) wp += ws[r * 4 + c] * std::exp(v[r * 4 + c]) / z;
      for (int c = 0; c < 4; ++c) {
        const double p = std::exp(v[r * 4 + c]) / z;
        total += hs[r * 4 + c] * p * (ws[r * 4 + c] - wp);
      }
    }
    return total;
  };
  std::vector<double> got = gradients(sum(g * C(hs, {2, 4})), {x})[0].to_vector<double>();
  for (int k = 0; k < 8; ++k) {
    std::vector<double> up = xs, down = xs;
    up[k] += 1e-5;
    down[k] -= 1e-5;
    EXPECT_NEAR(got[k], (first(up) - first(down)) / 2e-5, 1e-8) << k;
  }
}

}  // namespace
}  // namespace strata
