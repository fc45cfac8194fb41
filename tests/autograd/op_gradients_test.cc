// The gradient-check harness: every differentiable op in lazy/ops.h and every
// function in nn/functional.h against central finite differences in f64, on
// small random shapes with broadcasting across ranks and size-1 dims and
// reductions over several dims. Each case reduces its output to a scalar with
// a weighted sum whose weights are fixed, random and of mixed sign, so the
// cotangent reaching the op is not all ones (that is what exposes transposed
// or misrouted gradients). A few primitives ops.h never emits (reverse,
// atan2, clamp, interior pad, ...) are built directly with ir::Node::MakeOp so
// that their VJP rules are covered too.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "gradient_check.h"
#include "strata/autograd/grad.h"
#include "strata/ir/node.h"
#include "strata/lazy/context.h"
#include "strata/lazy/ops.h"
#include "strata/nn/functional.h"

namespace strata {
namespace {

using nn::Reduction;
using X = std::vector<Tensor>;
using ::testing::HasSubstr;

int64_t Numel(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

// ---- inputs -------------------------------------------------------------------

// Random in [-1, 1] (filled in by CheckGradients).
Input R(std::vector<int64_t> dims) { return Input{std::move(dims), {}}; }

// Random in [lo, hi]: positive bases, logs, square roots.
Input U(std::vector<int64_t> dims, double lo, double hi, uint32_t seed = 1) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(Numel(dims));
  for (double& x : v) x = dist(rng);
  return Input{std::move(dims), std::move(v)};
}

// Magnitude in [lo, hi] with a random sign: away from a kink or pole at 0
// (abs, relu, denominators) while still exercising both signs.
Input Signed(std::vector<int64_t> dims, double lo = 0.2, double hi = 1.0, uint32_t seed = 2) {
  Input in = U(std::move(dims), lo, hi, seed);
  std::mt19937 rng(seed + 100);
  for (double& x : in.values) x *= rng() % 2 ? 1.0 : -1.0;
  return in;
}

// ---- constants ------------------------------------------------------------------

Tensor D(std::vector<double> v, std::vector<int64_t> dims) { return Tensor::FromVector(v, dims); }
Tensor I64(std::vector<int64_t> v) {
  int64_t n = static_cast<int64_t>(v.size());
  return Tensor::FromVector(v, {n});
}
// A rank-0 start index for dynamic_slice / dynamic_update_slice.
Tensor Start(int64_t v) { return Tensor::FromVector<int64_t>({v}, {}); }

// Fixed weights shaped `dims`: magnitudes in [0.5, 1.5], mixed signs. `salt`
// gives pieces of the same shape different weights.
Tensor Weights(const std::vector<int64_t>& dims, uint32_t salt = 0) {
  std::mt19937 rng(static_cast<uint32_t>(1000 + 31 * Numel(dims) + 7 * dims.size() + salt));
  std::uniform_real_distribution<double> dist(0.5, 1.5);
  std::vector<double> v(Numel(dims));
  for (double& x : v) x = (rng() % 2 ? 1.0 : -1.0) * dist(rng);
  return Tensor::FromVector(v, dims);
}

// The scalar each case checks: <y, w> for fixed random w.
Tensor WSum(const Tensor& y, uint32_t salt = 0) {
  return sum(astype(y, DType::kF64) * Weights(y.shape().dims(), salt));
}
Tensor WSum(const std::vector<Tensor>& pieces) {
  Tensor total = WSum(pieces[0], 0);
  for (size_t i = 1; i < pieces.size(); ++i)
    total = total + WSum(pieces[i], static_cast<uint32_t>(i));
  return total;
}

// A primitive built directly, for VJP rules ops.h never reaches.
Tensor Prim(hlo::Opcode opcode, const std::vector<Tensor>& operands,
            hlo::Attributes attributes = {}, Shape declared = {}, int64_t output = 0) {
  std::vector<ir::Value> values;
  for (const Tensor& t : operands) values.push_back(t.value());
  return Tensor(ir::Value{
      ir::Node::MakeOp(opcode, std::move(values), std::move(attributes), std::move(declared)),
      output});
}

Tensor ConstantF64(double v) {
  return Tensor(ir::Value{ir::Node::MakeConstant(hlo::Literal::ScalarOf(DType::kF64, v))});
}

// ---- the table ---------------------------------------------------------------------

struct Case {
  std::string name;
  Fn fn;
  std::vector<Input> inputs;
  double tolerance = 1e-6;
};

void RunCases(const std::vector<Case>& cases) {
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    CheckGradients(c.name, c.fn, c.inputs, c.tolerance);
  }
}

TEST(OpGradients, ElementwiseUnary) {
  RunCases({
      {"abs", [](const X& x) { return WSum(abs(x[0])); }, {Signed({2, 3})}},
      {"neg", [](const X& x) { return WSum(-x[0]); }, {R({2, 3})}},
      // Piecewise constant: zero gradient away from the jumps.
      {"sign", [](const X& x) { return WSum(sign(x[0]) * 2.0 + x[0]); }, {Signed({5})}},
      {"floor,ceil",
       [](const X& x) { return WSum(floor(x[0] * 3.0) + ceil(x[0] * 3.0) + x[0]); },
       {R({2, 3})}},
      {"exp", [](const X& x) { return WSum(exp(x[0])); }, {R({2, 3})}},
      {"log", [](const X& x) { return WSum(log(x[0])); }, {U({2, 3}, 0.3, 2.0)}},
      {"log of exp", [](const X& x) { return WSum(log(exp(x[0]) + 0.5)); }, {R({4})}},
      {"log1p", [](const X& x) { return WSum(log1p(x[0])); }, {U({2, 3}, -0.5, 2.0)}},
      {"expm1", [](const X& x) { return WSum(expm1(x[0])); }, {R({2, 3})}},
      {"sqrt", [](const X& x) { return WSum(sqrt(x[0])); }, {U({2, 3}, 0.2, 2.0)}},
      {"sqrt(x*x+0.5)", [](const X& x) { return WSum(sqrt(x[0] * x[0] + 0.5)); }, {R({5})}},
      {"rsqrt", [](const X& x) { return WSum(rsqrt(x[0])); }, {U({2, 3}, 0.2, 2.0)}},
      {"tanh", [](const X& x) { return WSum(tanh(x[0] * 2.0)); }, {R({2, 3})}},
      {"sigmoid", [](const X& x) { return WSum(sigmoid(x[0] * 3.0)); }, {R({2, 3})}},
      {"sin", [](const X& x) { return WSum(sin(x[0] * 2.0)); }, {R({2, 3})}},
      {"cos", [](const X& x) { return WSum(cos(x[0] * 2.0)); }, {R({2, 3})}},
      {"erf", [](const X& x) { return WSum(erf(x[0] * 1.5)); }, {R({2, 3})}},
      {"rank-0", [](const X& x) { return WSum(exp(sin(x[0])) * x[0]); }, {R({})}},
      // The gradient goes back through the convert; f32 rounding makes the
      // finite difference itself accurate to a few percent only.
      {"astype f64->f32->f64",
       [](const X& x) { return WSum(astype(astype(x[0], DType::kF32), DType::kF64)); },
       {U({4}, 0.05, 0.25)},
       0.1},
  });
}

TEST(OpGradients, ElementwiseBinary) {
  RunCases({
      {"add same shape", [](const X& x) { return WSum(x[0] + x[1]); }, {R({2, 3}), R({2, 3})}},
      {"add rank 2 + rank 1", [](const X& x) { return WSum(x[0] + x[1]); }, {R({2, 3}), R({3})}},
      {"add size-1 dims both sides",
       [](const X& x) { return WSum(x[0] + x[1]); },
       {R({2, 1, 4}), R({3, 1})}},
      {"add rank 0 + rank 2", [](const X& x) { return WSum(x[0] + x[1]); }, {R({}), R({2, 3})}},
      {"sub broadcast", [](const X& x) { return WSum(x[0] - x[1]); }, {R({4}), R({2, 3, 1})}},
      {"sub size-1 lhs", [](const X& x) { return WSum(x[0] - x[1]); }, {R({1, 3}), R({2, 1})}},
      {"mul broadcast", [](const X& x) { return WSum(x[0] * x[1]); }, {R({2, 1, 3}), R({4, 1})}},
      {"mul self", [](const X& x) { return WSum(x[0] * x[0]); }, {R({2, 3})}},
      {"div broadcast",
       [](const X& x) { return WSum(x[0] / x[1]); },
       {R({2, 3}), Signed({3}, 0.5, 1.5)}},
      {"div rank 1 / rank 3",
       [](const X& x) { return WSum(x[0] / x[1]); },
       {R({4}), Signed({2, 1, 4}, 0.5, 1.5)}},
      {"div by self-derived",
       [](const X& x) { return WSum(x[0] / (x[0] * x[0] + 1.0)); },
       {R({5})}},
      {"maximum broadcast",
       [](const X& x) { return WSum(maximum(x[0], x[1])); },
       {R({2, 3}), R({3})}},
      {"minimum size-1 dims",
       [](const X& x) { return WSum(minimum(x[0], x[1])); },
       {R({2, 1}), R({1, 4})}},
      {"pow tensor exponent",
       [](const X& x) { return WSum(pow(x[0], x[1])); },
       {U({2, 3}, 0.3, 2.0), R({3})}},
      {"pow rank-0 base",
       [](const X& x) { return WSum(pow(x[0], x[1])); },
       {U({}, 0.5, 2.0), R({2, 2})}},
      {"pow scalar 1.5", [](const X& x) { return WSum(pow(x[0], 1.5)); }, {U({2, 3}, 0.2, 2.0)}},
      {"pow scalar 2", [](const X& x) { return WSum(pow(x[0], 2.0)); }, {R({2, 3})}},
      // An integer exponent is fine on a negative base.
      {"pow scalar 3 negative base",
       [](const X& x) { return WSum(pow(x[0], 3.0)); },
       {U({4}, -1.5, -0.2)}},
      {"pow scalar -0.5", [](const X& x) { return WSum(pow(x[0], -0.5)); }, {U({4}, 0.3, 2.0)}},
      // torch.remainder: the divisor's sign, so d/db is -floor(a / b).
      {"remainder broadcast",
       [](const X& x) { return WSum(remainder(x[0], x[1])); },
       {U({2, 3}, -3.0, 3.0, 5), Signed({3}, 0.5, 1.5, 6)}},
      {"remainder rank 0 divisor",
       [](const X& x) { return WSum(remainder(x[0], x[1])); },
       {U({5}, -3.0, 3.0, 7), Signed({}, 0.6, 1.2, 8)}},
      {"scalar operands",
       [](const X& x) {
         return WSum(x[0] + 2.5) + WSum(1.5 - x[0], 1) + WSum(x[0] * -1.5, 2) +
                WSum(x[0] / 1.7, 3) + WSum(2.0 * x[0], 4) + WSum(x[0] - 0.25, 5);
       },
       {R({2, 3})}},
      {"scalar / tensor", [](const X& x) { return WSum(2.0 / x[0]); }, {Signed({2, 3}, 0.4)}},
      {"where fixed pred, broadcast branches",
       [](const X& x) {
         Tensor pred = Tensor::FromVector<bool>({true, false, false, true, true, false}, {2, 3});
         return WSum(where(pred, x[0], x[1]));
       },
       {R({3}), R({2, 1})}},
      {"where pred [2,1], rank-0 branch",
       [](const X& x) {
         Tensor pred = Tensor::FromVector<bool>({false, true}, {2, 1});
         return WSum(where(pred, x[0], x[1]));
       },
       {R({3}), R({})}},
      {"where pred from inputs",
       [](const X& x) { return WSum(where(gt(x[0], x[1]), x[0] * x[0], x[1] * 3.0)); },
       {R({2, 3}), R({3})}},
      {"clamp both", [](const X& x) { return WSum(clamp(x[0], -0.5, 0.4)); }, {R({3, 4})}},
      {"clamp low", [](const X& x) { return WSum(clamp(x[0], -0.3, std::nullopt)); }, {R({3, 4})}},
      {"clamp high", [](const X& x) { return WSum(clamp(x[0], std::nullopt, 0.2)); }, {R({3, 4})}},
  });
}

TEST(OpGradients, Matmul) {
  RunCases({
      {"1-D . 1-D", [](const X& x) { return WSum(matmul(x[0], x[1])); }, {R({4}), R({4})}},
      {"1-D . 2-D", [](const X& x) { return WSum(matmul(x[0], x[1])); }, {R({3}), R({3, 4})}},
      {"2-D . 1-D", [](const X& x) { return WSum(matmul(x[0], x[1])); }, {R({3, 4}), R({4})}},
      {"2-D . 2-D", [](const X& x) { return WSum(matmul(x[0], x[1])); }, {R({3, 4}), R({4, 2})}},
      {"batched",
       [](const X& x) { return WSum(matmul(x[0], x[1])); },
       {R({2, 3, 4}), R({2, 4, 2})}},
      {"broadcast batch dims",
       [](const X& x) { return WSum(matmul(x[0], x[1])); },
       {R({2, 1, 2, 3}), R({3, 3, 2})}},
      {"batched . 1-D",
       [](const X& x) { return WSum(matmul(x[0], x[1])); },
       {R({2, 3, 4}), R({4})}},
      {"1-D . batched",
       [](const X& x) { return WSum(matmul(x[0], x[1])); },
       {R({3}), R({2, 3, 4})}},
      {"x . x^T",
       [](const X& x) { return WSum(matmul(x[0], transpose(x[0], 0, 1))); },
       {R({3, 4})}},
  });
}

TEST(OpGradients, Reductions) {
  RunCases({
      {"sum dim 1", [](const X& x) { return WSum(sum(x[0], {1})); }, {R({2, 3, 4})}},
      {"sum dims 0,2",
       [](const X& x) {
         return WSum(sum(x[0], {0, 2}));
       },
       {R({2, 3, 4})}},
      {"sum dims -1,0 keepdim",
       [](const X& x) {
         return WSum(sum(x[0], {-1, 0}, true));
       },
       {R({2, 3, 4})}},
      {"sum all", [](const X& x) { return WSum(sum(x[0])); }, {R({2, 3, 4})}},
      {"sum all keepdim", [](const X& x) { return WSum(sum(x[0], {}, true)); }, {R({2, 3})}},
      {"mean dim -1", [](const X& x) { return WSum(mean(x[0], {-1})); }, {R({2, 3, 4})}},
      {"mean dims 0,2 keepdim",
       [](const X& x) {
         return WSum(mean(x[0], {0, 2}, true));
       },
       {R({2, 3, 4})}},
      {"mean all", [](const X& x) { return WSum(mean(x[0]) * x[0]); }, {R({3, 4})}},
      {"max dim 0", [](const X& x) { return WSum(max(x[0], {0})); }, {R({2, 3, 4})}},
      {"max dims 1,2",
       [](const X& x) {
         return WSum(max(x[0], {1, 2}));
       },
       {R({2, 3, 4})}},
      {"max dim -1 keepdim",
       [](const X& x) { return WSum(max(x[0], {-1}, true)); },
       {R({2, 3, 4})}},
      {"max all", [](const X& x) { return WSum(max(x[0])); }, {R({3, 4})}},
      {"min dims 0,2 keepdim",
       [](const X& x) {
         return WSum(min(x[0], {0, 2}, true));
       },
       {R({2, 3, 4})}},
      {"min all", [](const X& x) { return WSum(min(x[0])); }, {R({3, 4})}},
      {"min dim 1", [](const X& x) { return WSum(min(x[0], {1})); }, {R({3, 4})}},
      // argmax itself is an integer; taking the values it points at is not.
      {"take_along_dim(argmax dim 1)",
       [](const X& x) { return WSum(take_along_dim(x[0], argmax(x[0], 1, true), 1)); },
       {R({3, 4})}},
      {"take_along_dim(argmin dim 0)",
       [](const X& x) { return WSum(take_along_dim(x[0], argmin(x[0], 0, true), 0)); },
       {R({3, 4})}},
      {"take_along_dim(argmax dim -1) 3-D",
       [](const X& x) { return WSum(take_along_dim(x[0], argmax(x[0], -1, true), -1)); },
       {R({2, 2, 3})}},
      {"softmax dim 0", [](const X& x) { return WSum(softmax(x[0], 0)); }, {R({2, 3, 4})}},
      {"softmax dim 1", [](const X& x) { return WSum(softmax(x[0] * 2.0, 1)); }, {R({2, 3, 4})}},
      {"softmax dim -1", [](const X& x) { return WSum(softmax(x[0], -1)); }, {R({2, 3, 4})}},
      {"log_softmax dim 0", [](const X& x) { return WSum(log_softmax(x[0], 0)); }, {R({2, 3, 4})}},
      {"log_softmax dim -1",
       [](const X& x) { return WSum(log_softmax(x[0] * 3.0, -1)); },
       {R({2, 3, 4})}},
      {"log_softmax 1-D", [](const X& x) { return WSum(log_softmax(x[0], 0)); }, {R({5})}},
  });
}

TEST(OpGradients, ShapeOps) {
  RunCases({
      {"reshape -1",
       [](const X& x) {
         return WSum(reshape(x[0], {4, -1}));
       },
       {R({2, 3, 4})}},
      {"reshape flat", [](const X& x) { return WSum(reshape(x[0], {6})); }, {R({2, 3})}},
      {"reshape rank 0 -> [1,1]",
       [](const X& x) {
         return WSum(reshape(x[0], {1, 1}));
       },
       {R({})}},
      {"transpose 0,2", [](const X& x) { return WSum(transpose(x[0], 0, 2)); }, {R({2, 3, 4})}},
      {"transpose -1,-2", [](const X& x) { return WSum(transpose(x[0], -1, -2)); }, {R({2, 3, 4})}},
      {"permute 2,0,1",
       [](const X& x) {
         return WSum(permute(x[0], {2, 0, 1}));
       },
       {R({2, 3, 4})}},
      {"permute 1,2,0 then reshape",
       [](const X& x) {
         return WSum(reshape(permute(x[0], {1, 2, 0}), {3, 8}));
       },
       {R({2, 3, 4})}},
      {"expand new and size-1 dims",
       [](const X& x) {
         return WSum(expand(x[0], {2, 3, 4}));
       },
       {R({3, 1})}},
      {"expand -1",
       [](const X& x) {
         return WSum(expand(x[0], {2, -1, 4}));
       },
       {R({3, 1})}},
      {"broadcast_to",
       [](const X& x) {
         return WSum(broadcast_to(x[0], {2, 3, 4}));
       },
       {R({4})}},
      {"broadcast_to from rank 0",
       [](const X& x) {
         return WSum(broadcast_to(x[0], {2, 3}));
       },
       {R({})}},
      {"squeeze all", [](const X& x) { return WSum(squeeze(x[0])); }, {R({1, 3, 1, 2})}},
      {"squeeze dim 2", [](const X& x) { return WSum(squeeze(x[0], 2)); }, {R({1, 3, 1, 2})}},
      {"squeeze non-1 dim is a no-op",
       [](const X& x) { return WSum(squeeze(x[0], 1)); },
       {R({1, 3, 1, 2})}},
      {"unsqueeze -1", [](const X& x) { return WSum(unsqueeze(x[0], -1)); }, {R({3, 2})}},
      {"unsqueeze 0 then broadcast",
       [](const X& x) { return WSum(unsqueeze(x[0], 0) * x[1]); },
       {R({3, 2}), R({2, 1, 1})}},
      {"slice start",
       [](const X& x) { return WSum(slice(x[0], 1, 1, std::nullopt)); },
       {R({4, 6})}},
      {"slice negative bounds",
       [](const X& x) { return WSum(slice(x[0], 0, -3, -1)); },
       {R({4, 6})}},
      {"slice step 2", [](const X& x) { return WSum(slice(x[0], 1, 1, 6, 2)); }, {R({4, 6})}},
      {"slice negative start step 3",
       [](const X& x) { return WSum(slice(x[0], 1, -5, std::nullopt, 3)); },
       {R({4, 6})}},
      {"slice out-of-range bounds clamp",
       [](const X& x) { return WSum(slice(x[0], -1, -100, 100, 4)); },
       {R({4, 6})}},
      {"slice step past the end",
       [](const X& x) { return WSum(slice(x[0], 0, 3, 4, 5)); },
       {R({4, 6})}},
      {"slice of slice",
       [](const X& x) {
         return WSum(slice(slice(x[0], 0, 1, std::nullopt, 2), 1, std::nullopt, -1));
       },
       {R({4, 6})}},
      {"concat dim 1, three sizes",
       [](const X& x) {
         return WSum(concat({x[0], x[1], x[2]}, 1));
       },
       {R({2, 1}), R({2, 3}), R({2, 2})}},
      {"concat same tensor twice",
       [](const X& x) {
         return WSum(concat({x[0], x[0] * 2.0}, 0));
       },
       {R({2, 3})}},
      {"concat dim -1 3-D",
       [](const X& x) {
         return WSum(concat({x[0], x[1]}, -1));
       },
       {R({2, 2, 1}), R({2, 2, 3})}},
      {"stack dim 0",
       [](const X& x) {
         return WSum(stack({x[0], x[1], x[0]}, 0));
       },
       {R({2, 3}), R({2, 3})}},
      {"stack dim -1",
       [](const X& x) {
         return WSum(stack({x[0], x[1]}, -1));
       },
       {R({2, 3}), R({2, 3})}},
      {"stack dim 1",
       [](const X& x) {
         return WSum(stack({x[0], x[1]}, 1));
       },
       {R({2, 3}), R({2, 3})}},
      {"split uneven", [](const X& x) { return WSum(split(x[0], 2, 0)); }, {R({5, 3})}},
      {"split dim -1", [](const X& x) { return WSum(split(x[0], 3, -1)); }, {R({2, 7})}},
      {"split, one piece unused",
       [](const X& x) { return WSum(split(x[0], 2, 1)[1]); },
       {R({3, 6})}},
      {"chunk even", [](const X& x) { return WSum(chunk(x[0], 3, 1)); }, {R({3, 6})}},
      {"chunk uneven", [](const X& x) { return WSum(chunk(x[0], 2, 0)); }, {R({5, 2})}},
      {"pad",
       [](const X& x) {
         return WSum(pad(x[0], {1, 0}, {2, 1}, 0.5));
       },
       {R({2, 3})}},
      {"pad 3-D zero",
       [](const X& x) {
         return WSum(pad(x[0], {0, 2, 1}, {1, 0, 1}));
       },
       {R({2, 2, 3})}},
      {"pad nothing",
       [](const X& x) {
         return WSum(pad(x[0], {0, 0}, {0, 0}, 3.0) * x[0]);
       },
       {R({2, 3})}},
  });
}

TEST(OpGradients, Indexing) {
  RunCases({
      {"index_select repeated dim 0",
       [](const X& x) {
         return WSum(index_select(x[0], 0, I64({2, 0, 2, 2})));
       },
       {R({3, 4})}},
      {"index_select int32 dim 1",
       [](const X& x) {
         return WSum(index_select(x[0], 1, Tensor::FromVector<int32_t>({3, 3, 0}, {3})));
       },
       {R({3, 4})}},
      {"index_select dim -2 3-D",
       [](const X& x) {
         return WSum(index_select(x[0], -2, I64({1, 1, 0, 2})));
       },
       {R({2, 3, 2})}},
      {"index_select rank-0 index",
       [](const X& x) { return WSum(index_select(x[0], 1, Tensor::FromVector<int64_t>({2}, {}))); },
       {R({2, 3})}},
      {"take_along_dim dim 1 repeated",
       [](const X& x) {
         Tensor idx = Tensor::FromVector<int64_t>({3, 0, 1, 1, 2, 3}, {3, 2});
         return WSum(take_along_dim(x[0], idx, 1));
       },
       {R({3, 4})}},
      {"take_along_dim dim 0",
       [](const X& x) {
         Tensor idx = Tensor::FromVector<int64_t>({2, 0, 1, 2, 2, 2, 0, 1}, {2, 4});
         return WSum(take_along_dim(x[0], idx, 0));
       },
       {R({3, 4})}},
      // Size-1 dims of x broadcast against the indices outside `dim`.
      {"take_along_dim broadcast x",
       [](const X& x) {
         Tensor idx = Tensor::FromVector<int64_t>({4, 0, 1, 1, 3, 4}, {3, 2});
         return WSum(take_along_dim(x[0], idx, 1));
       },
       {R({1, 5})}},
      {"take_along_dim broadcast indices",
       [](const X& x) {
         Tensor idx = Tensor::FromVector<int64_t>({1, 0, 1}, {1, 3});
         return WSum(take_along_dim(x[0], idx, 1));
       },
       {R({3, 2})}},
      {"dynamic_slice",
       [](const X& x) {
         return WSum(dynamic_slice(x[0], {Start(1), Start(2)}, {2, 3}));
       },
       {R({4, 5})}},
      // Starts past the end and negative clamp into range (XLA semantics).
      {"dynamic_slice clamped starts",
       [](const X& x) {
         return WSum(dynamic_slice(x[0], {Start(3), Start(-1)}, {2, 3}));
       },
       {R({4, 5})}},
      {"dynamic_slice 3-D",
       [](const X& x) {
         return WSum(dynamic_slice(x[0], {Start(0), Start(1), Start(5)}, {2, 1, 2}));
       },
       {R({2, 3, 3})}},
      {"dynamic_update_slice",
       [](const X& x) {
         return WSum(dynamic_update_slice(x[0], x[1], {Start(1), Start(1)}));
       },
       {R({4, 5}), R({2, 3})}},
      {"dynamic_update_slice clamped starts",
       [](const X& x) {
         return WSum(dynamic_update_slice(x[0], x[1], {Start(5), Start(-2)}));
       },
       {R({4, 5}), R({2, 3})}},
      {"dynamic_update_slice of itself",
       [](const X& x) {
         Tensor window = dynamic_slice(x[0], {Start(0), Start(2)}, {2, 2});
         return WSum(dynamic_update_slice(x[0], window * window, {Start(2), Start(0)}));
       },
       {R({4, 4})}},
      {"index_add repeated dim 0",
       [](const X& x) {
         return WSum(index_add(x[0], 0, I64({1, 3, 1, 1}), x[1]));
       },
       {R({4, 3}), R({4, 3})}},
      {"index_add alpha dim 1",
       [](const X& x) {
         return WSum(index_add(x[0], 1, I64({0, 0, 3}), x[1], -2.5));
       },
       {R({2, 4}), R({2, 3})}},
      {"index_add dim -1 3-D int32",
       [](const X& x) {
         return WSum(index_add(x[0], -1, Tensor::FromVector<int32_t>({2, 2}, {2}), x[1], 0.5));
       },
       {R({2, 2, 3}), R({2, 2, 2})}},
  });
}

// Empty, rank-0 and size-1 shapes: the corners of the shape rules.
TEST(OpGradients, EdgeShapes) {
  Tensor no_index = Tensor::FromVector<int64_t>({}, {0});
  RunCases({
      {"rank-0 sum dim 0", [](const X& x) { return WSum(sum(x[0], {0}) * 3.0); }, {R({})}},
      {"rank-0 mean, max dim -1",
       [](const X& x) { return WSum(mean(x[0]) + max(x[0], {-1}) * 2.0); },
       {R({})}},
      {"rank-0 softmax", [](const X& x) { return WSum(softmax(x[0], 0) + x[0]); }, {R({})}},
      {"size-1 broadcast both ways",
       [](const X& x) { return WSum(x[0] + x[1]); },
       {R({1, 1}), R({1, 3})}},
      {"matmul 1x1", [](const X& x) { return WSum(matmul(x[0], x[1])); }, {R({1, 1}), R({1, 1})}},
      {"matmul length-1 vectors",
       [](const X& x) { return WSum(matmul(x[0], x[1])); },
       {R({1}), R({1})}},
      {"matmul contracting 0",
       [](const X& x) { return WSum(matmul(x[0], x[1]) + x[2]); },
       {R({2, 0}), R({0, 3}), R({3})}},
      {"sum over an empty dim",
       [](const X& x) { return WSum(sum(x[0], {1}) + x[1]); },
       {R({2, 0}), R({2})}},
      {"slice to empty",
       [](const X& x) { return WSum(slice(x[0], 0, 3, 1)) + WSum(x[0], 1); },
       {R({4, 3})}},
      {"concat with empty pieces",
       [](const X& x) {
         return WSum(concat({slice(x[0], 1, 0, 0), x[0], x[1]}, 1));
       },
       {R({2, 3}), R({2, 0})}},
      {"pad an empty dim",
       [](const X& x) {
         return WSum(pad(x[1], {1, 1}, {0, 2}, 0.5)) + WSum(x[0]);
       },
       {R({2}), R({0, 2})}},
      {"dynamic_slice size 0",
       [](const X& x) {
         return WSum(dynamic_slice(x[0], {Start(1), Start(1)}, {0, 2})) + WSum(x[0], 2);
       },
       {R({3, 3})}},
      {"index_select empty index",
       [no_index](const X& x) { return WSum(index_select(x[0], 0, no_index)) + WSum(x[0], 1); },
       {R({3, 2})}},
      {"take_along_dim empty indices",
       [](const X& x) {
         Tensor idx = Tensor::FromVector<int64_t>({}, {2, 0});
         return WSum(take_along_dim(x[0], idx, 1)) + WSum(x[0], 1);
       },
       {R({2, 3})}},
      {"index_add empty index",
       [no_index](const X& x) { return WSum(index_add(x[0], 0, no_index, x[1])); },
       {R({2, 2}), R({0, 2})}},
      {"chunk into more pieces than rows",
       [](const X& x) { return WSum(chunk(x[0], 5, 0)); },
       {R({2, 3})}},
      // Masked -inf entries never win the max.
      {"max over rows with -inf entries",
       [](const X& x) {
         Tensor keep = Tensor::FromVector<bool>({true, false, true, false, false, true}, {2, 3});
         return WSum(max(where(keep, x[0], constant(-INFINITY, DType::kF64)), {1}));
       },
       {R({2, 3})}},
      // pow at a zero base with integer exponents (the base's gradient only).
      {"pow zero base",
       [](const X& x) {
         return WSum(pow(x[0], D({2, 3, 1}, {3})));
       },
       {Input{{3}, {0, 0, 0}}}},
  });
}

TEST(OpGradients, NnFunctions) {
  RunCases({
      {"relu", [](const X& x) { return WSum(nn::relu(x[0])); }, {Signed({3, 4})}},
      {"gelu erf", [](const X& x) { return WSum(nn::gelu(x[0] * 2.0)); }, {R({3, 4})}},
      {"gelu tanh", [](const X& x) { return WSum(nn::gelu(x[0] * 2.0, true)); }, {R({3, 4})}},
      {"silu", [](const X& x) { return WSum(nn::silu(x[0] * 2.0)); }, {R({3, 4})}},
      {"mse_loss mean",
       [](const X& x) { return nn::mse_loss(x[0], x[1]); },
       {R({2, 3}), R({2, 3})}},
      {"mse_loss sum",
       [](const X& x) { return nn::mse_loss(x[0], x[1], Reduction::kSum); },
       {R({2, 3}), R({2, 3})}},
      {"mse_loss none",
       [](const X& x) { return WSum(nn::mse_loss(x[0], x[1], Reduction::kNone)); },
       {R({2, 3}), R({2, 3})}},
      {"cross_entropy mean, ignored row",
       [](const X& x) {
         return nn::cross_entropy(x[0] * 2.0, I64({1, -100, 4, 0}));
       },
       {R({4, 5})}},
      {"cross_entropy sum",
       [](const X& x) {
         return nn::cross_entropy(x[0] * 2.0, I64({1, -100, 4, 0}), -100, Reduction::kSum);
       },
       {R({4, 5})}},
      {"cross_entropy none",
       [](const X& x) {
         return WSum(nn::cross_entropy(x[0] * 2.0, I64({1, -100, 4, 0}), -100, Reduction::kNone));
       },
       {R({4, 5})}},
      {"cross_entropy ignore_index 2",
       [](const X& x) {
         return nn::cross_entropy(x[0] * 2.0, I64({2, 0, 2, 3}), 2);
       },
       {R({4, 5})}},
      {"cross_entropy 1-D logits",
       [](const X& x) {
         return nn::cross_entropy(x[0] * 2.0, Tensor::FromVector<int64_t>({3}, {}));
       },
       {R({5})}},
      {"cross_entropy 1-D logits none",
       [](const X& x) {
         return WSum(
             nn::cross_entropy(x[0], Tensor::FromVector<int64_t>({1}, {}), -100, Reduction::kNone));
       },
       {R({5})}},
      {"rms_norm",
       [](const X& x) { return WSum(nn::rms_norm(x[0], x[1])); },
       {R({2, 3, 4}), R({4})}},
      {"rms_norm eps",
       [](const X& x) { return WSum(nn::rms_norm(x[0], x[1], 0.1)); },
       {R({3, 4}), R({4})}},
      {"layer_norm affine",
       [](const X& x) { return WSum(nn::layer_norm(x[0], x[1], x[2])); },
       {R({2, 3, 4}), R({4}), R({4})}},
      {"layer_norm plain",
       [](const X& x) { return WSum(nn::layer_norm(x[0], std::nullopt, std::nullopt)); },
       {R({3, 4})}},
      {"layer_norm weight only",
       [](const X& x) { return WSum(nn::layer_norm(x[0], x[1], std::nullopt, 0.1)); },
       {R({3, 4}), R({4})}},
      {"layer_norm bias only",
       [](const X& x) { return WSum(nn::layer_norm(x[0], std::nullopt, x[1])); },
       {R({3, 4}), R({4})}},
      // The key fixes the mask, so dropout is linear in x.
      {"dropout training",
       [](const X& x) { return WSum(nn::dropout(x[0], 0.3, random_key(5))); },
       {R({4, 5})}},
      {"dropout x * dropout(x)",
       [](const X& x) { return WSum(nn::dropout(x[0], 0.5, random_key(6)) * x[0]); },
       {R({12})}},
      {"dropout eval",
       [](const X& x) { return WSum(nn::dropout(x[0], 0.3, random_key(5), false)); },
       {R({2, 3})}},
      {"dropout p=1",
       [](const X& x) { return WSum(nn::dropout(x[0], 1.0, random_key(5)) + x[0]); },
       {R({2, 3})}},
      {"rotate_half", [](const X& x) { return WSum(nn::rotate_half(x[0])); }, {R({2, 3, 4})}},
      {"apply_rotary",
       [](const X& x) {
         auto t = nn::rotary_tables(3, 4, 10000.0, DType::kF64);
         return WSum(nn::apply_rotary(x[0], t.cos, t.sin));
       },
       {R({2, 3, 4})}},
      // Rotary with cos / sin themselves as inputs (they are plain tensors).
      {"apply_rotary wrt tables",
       [](const X& x) { return WSum(nn::apply_rotary(x[0], x[1], x[2])); },
       {R({2, 2, 4}), R({2, 4}), R({2, 4})}},
      {"sdpa causal",
       [](const X& x) { return WSum(nn::scaled_dot_product_attention(x[0], x[1], x[2])); },
       {R({1, 2, 3, 2}), R({1, 2, 3, 2}), R({1, 2, 3, 2})}},
      {"sdpa not causal",
       [](const X& x) { return WSum(nn::scaled_dot_product_attention(x[0], x[1], x[2], false)); },
       {R({2, 1, 3, 2}), R({2, 1, 3, 2}), R({2, 1, 3, 2})}},
      {"sdpa gqa causal",
       [](const X& x) { return WSum(nn::scaled_dot_product_attention(x[0], x[1], x[2])); },
       {R({1, 4, 3, 2}), R({1, 2, 3, 2}), R({1, 2, 3, 2})}},
      {"sdpa gqa not causal, one kv head",
       [](const X& x) { return WSum(nn::scaled_dot_product_attention(x[0], x[1], x[2], false)); },
       {R({2, 2, 2, 3}), R({2, 1, 2, 3}), R({2, 1, 2, 3})}},
      {"checkpoint",
       [](const X& x) {
         auto out = checkpoint(
             [](const X& in) {
               return X{tanh(matmul(in[0], in[1])), sin(in[0])};
             },
             {x[0], x[1]});
         return WSum(out[0]) + WSum(out[1], 1);
       },
       {R({2, 3}), R({3, 2})}},
  });
}

// VJP rules for primitives ops.h never emits, built with ir::Node::MakeOp.
TEST(OpGradients, PrimitivesOutsideOps) {
  auto reverse = [](const X& x) {
    hlo::Attributes a;
    a.dimensions = {0, 2};
    return WSum(Prim(hlo::Opcode::kReverse, {x[0]}, a));
  };
  auto atan2 = [](const X& x) { return WSum(Prim(hlo::Opcode::kAtan2, {x[0], x[1]})); };
  auto clamp_tensor_bounds = [](const X& x) {
    return WSum(Prim(hlo::Opcode::kClamp, {x[0], x[1], x[2]}));
  };
  auto clamp_scalar_bounds = [](const X& x) {
    return WSum(Prim(hlo::Opcode::kClamp, {x[0], x[1], x[2]}));
  };
  auto interior_pad = [](const X& x) {
    hlo::Attributes a;
    a.padding = {{1, 0, 2}, {0, 1, 1}};
    return WSum(Prim(hlo::Opcode::kPad, {x[0], x[1]}, a));
  };
  // A broadcast whose operand dims land out of order (ops.h only makes
  // sorted ones): the rule must transpose after summing.
  auto permuted_broadcast = [](const X& x) {
    hlo::Attributes a;
    a.dimensions = {2, 0};
    return WSum(Prim(hlo::Opcode::kBroadcast, {x[0]}, a, Shape(DType::kF64, {2, 4, 3})));
  };
  auto copy = [](const X& x) { return WSum(Prim(hlo::Opcode::kCopy, {x[0]}) * x[0]); };
  auto round = [](const X& x) {
    return WSum(Prim(hlo::Opcode::kRoundNearestEven, {x[0] * 3.0}) + x[0]);
  };
  // The value output of the (value, index) reduce argmax builds.
  auto arg_max_value = [](const X& x) {
    const std::vector<int64_t> dims = {3, 4};
    hlo::Attributes iota;
    iota.dimensions = {1};
    Tensor index = Prim(hlo::Opcode::kIota, {}, iota, Shape(DType::kS64, dims));
    hlo::Attributes a;
    a.dimensions = {1};
    a.called = {ir::ArgCombiner(true, DType::kF64, DType::kS64)};
    Tensor init = ConstantF64(-INFINITY), zero = Tensor::FromVector<int64_t>({0}, {});
    return WSum(Prim(hlo::Opcode::kReduce, {x[0], index, init, zero}, a, {}, 0));
  };
  RunCases({
      {"reverse dims 0,2", reverse, {R({2, 3, 2})}},
      {"atan2", atan2, {R({2, 3}), Signed({2, 3}, 0.3, 1.0)}},
      {"clamp tensor bounds",
       clamp_tensor_bounds,
       {U({2, 3}, -1.0, -0.1, 11), R({2, 3}), U({2, 3}, 0.1, 1.0, 12)}},
      {"clamp scalar bounds",
       clamp_scalar_bounds,
       {U({}, -0.6, -0.4, 13), R({3, 4}), U({}, 0.3, 0.5, 14)}},
      {"pad interior, padding value as input", interior_pad, {R({2, 3}), R({})}},
      {"broadcast with permuted dims", permuted_broadcast, {R({3, 2})}},
      {"copy", copy, {R({2, 3})}},
      {"round-nearest-even", round, {R({2, 3})}},
      {"variadic reduce value", arg_max_value, {R({3, 4})}},
  });
}

// ---- integer and boolean values; missing rules ----------------------------------------

TEST(OpGradients, IntegerAndBoolValuesCarryNoGradient) {
  std::vector<double> xs = {1.5, -2.5, 0.25, -0.75, 3.0, 0.5};
  Tensor x = D(xs, {2, 3});
  // An integer output is an error, as in torch and JAX (its gradient would
  // be zeros: piecewise constant), not a silent zero.
  EXPECT_THROW(gradients(sum(astype(x, DType::kS64) * 2.0), {x}), Error);
  std::vector<Tensor> g;
  // Through an integer round trip only the direct use of x counts:
  // d/dx sum(float(int(x)) * x) = float(int(x)).
  Tensor truncated = astype(astype(x, DType::kS64), DType::kF64);
  g = gradients(sum(truncated * x), {x});
  EXPECT_EQ(g[0].to_vector<double>(), truncated.to_vector<double>());
  // The predicate of where carries none: d/dx sum(where(x > 0, x, 0)) = [x > 0].
  g = gradients(sum(where(gt(x, zeros({}, DType::kF64)), x, zeros({}, DType::kF64))), {x});
  EXPECT_EQ(g[0].to_vector<double>(), (std::vector<double>{1, 0, 1, 0, 1, 1}));
  // A mask converted from bool: d/dx sum(float(x > 0) * x) = float(x > 0).
  g = gradients(sum(astype(gt(x, zeros({}, DType::kF64)), DType::kF64) * x), {x});
  EXPECT_EQ(g[0].to_vector<double>(), (std::vector<double>{1, 0, 1, 0, 1, 1}));
  // argmax is an integer: no gradient through it.
  g = gradients(sum(astype(argmax(x, 1), DType::kF64)) + sum(x), {x});
  EXPECT_EQ(g[0].to_vector<double>(), std::vector<double>(6, 1.0));
  // one_hot of integer data times x: the one-hot rows.
  Tensor labels = I64({2, 0});
  g = gradients(sum(one_hot(labels, 3, DType::kF64) * x), {x});
  EXPECT_EQ(g[0].to_vector<double>(), (std::vector<double>{0, 0, 1, 1, 0, 0}));
  // Integer index and start tensors on the path are fine.
  g = gradients(sum(dynamic_slice(index_select(x, 1, I64({2, 2})), {Start(1), Start(0)}, {1, 2})),
                {x});
  EXPECT_EQ(g[0].to_vector<double>(), (std::vector<double>{0, 0, 0, 0, 0, 2}));
  // Integer-only graphs: an integer output of integer data.
  Tensor k = Tensor::FromVector<int64_t>({1, 2, 3}, {3});
  g = gradients(sum(k * k) + sum(x), {x});
  EXPECT_EQ(g[0].to_vector<double>(), std::vector<double>(6, 1.0));
  // Asking for the gradient of an integer or bool tensor is an error.
  Tensor b = Tensor::FromVector<bool>({true, false, true}, {3});
  Tensor y = D({1, 2, 3}, {3});
  EXPECT_THROW(gradients(sum(where(b, y, -y)), {b}), Error);
  EXPECT_THROW(gradients(sum(astype(k, DType::kF64) * y), {k}), Error);
  // ... while the float input next to them gets its gradient.
  EXPECT_EQ(gradients(sum(where(b, y, -y)), {y})[0].to_vector<double>(),
            (std::vector<double>{1, -1, 1}));
}

TEST(OpGradients, MissingVjpRuleNamesThePrimitive) {
  Tensor x = D({1, 2, 3, 4, 5, 6}, {2, 3}), y = D({1, -2}, {2});
  // A product reduction (no prod() in ops.h yet, but the primitive is public).
  hlo::Attributes a;
  a.dimensions = {1};
  a.called = {ir::ScalarCombiner(hlo::Opcode::kMultiply, DType::kF64)};
  Tensor prod = Prim(hlo::Opcode::kReduce, {x, ConstantF64(1)}, a);
  // The forward is fine. (Materialize a copy: to_vector rebinds its handle to
  // device data, which would cut the gradient path; see
  // MaterializedOutputIsAnErrorNotZeros.)
  EXPECT_EQ(Tensor(prod).to_vector<double>(), (std::vector<double>{6, 120}));
  Tensor loss = sum(prod) + sum(y * y);
  try {
    gradients(loss, {x});
    ADD_FAILURE() << "expected an error for reduce with multiply";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("[grad]"));
    EXPECT_THAT(e.what(), HasSubstr("multiply"));
  }
  // Only the path to the requested inputs needs rules.
  EXPECT_EQ(gradients(loss, {y})[0].to_vector<double>(), (std::vector<double>{2, -4}));
  // bitcast-convert has no rule at all: f64 -> u64 -> f64 round trips bits.
  Tensor bits = Prim(hlo::Opcode::kBitcastConvert, {x}, {}, Shape(DType::kU64, {2, 3}));
  Tensor back = Prim(hlo::Opcode::kBitcastConvert, {bits}, {}, Shape(DType::kF64, {2, 3}));
  EXPECT_EQ(Tensor(back).to_vector<double>(), Tensor(x).to_vector<double>());
  try {
    gradients(sum(back * x), {x});
    ADD_FAILURE() << "expected an error for bitcast-convert";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("bitcast-convert"));
  }
}

// ---- known bugs (disabled until fixed in src/) ------------------------------------------

// Out-of-range indices with index checks off: index_select and
// take_along_dim clamp them (so the clamped-to rows get the gradient),
// index_add drops them (so the dropped source rows get none). Both VJPs once
// disagreed with their forward.
TEST(OpGradients, OutOfRangeIndices) {
  lazy::Context::Get().set_index_checks(false);
  struct On {
    ~On() { lazy::Context::Get().set_index_checks(true); }
  } on;
  RunCases({
      {"index_select clamps out-of-range indices",
       [](const X& x) {
         return WSum(index_select(x[0], 0, I64({5, -1, 1})));
       },
       {R({3, 2})}},
      {"take_along_dim clamps out-of-range indices",
       [](const X& x) {
         Tensor idx = Tensor::FromVector<int64_t>({7, -2, 0, 1}, {2, 2});
         return WSum(take_along_dim(x[0], idx, 1));
       },
       {R({2, 3})}},
      {"index_add drops out-of-range indices",
       [](const X& x) {
         return WSum(index_add(x[0], 0, I64({4, -1, 1}), x[1]));
       },
       {R({3, 2}), R({3, 2})}},
  });
}

// d/db pow(a, b) where a == 0 and b >= 0 is 0 (0^b is constant there), as
// in torch, not 0 * log(0) = NaN.
TEST(OpGradients, PowExponentGradientAtZeroBase) {
  RunCases({
      {"pow zero base wrt exponent",
       [](const X& x) {
         return WSum(pow(D({0, 0, 2}, {3}), x[0]));
       },
       {U({3}, 0.5, 1.5)}},
  });
}

// Reading a value (item, to_vector, sync) rebinds its tensor to the computed
// buffer, which keeps the graph it came from: differentiating it afterwards
// gives the same gradient as before the read, never silently zeros.
TEST(OpGradients, MaterializedOutputStillDifferentiates) {
  Tensor x = D({1, 2, 3}, {3});
  Tensor loss = sum(x * x);
  EXPECT_EQ(loss.item<double>(), 14.0);
  EXPECT_EQ(gradients(loss, {x})[0].to_vector<double>(), (std::vector<double>{2, 4, 6}));
}

}  // namespace
}  // namespace strata
