// Driven by the opcode list: every opcode declares where its VJP lives
// (its row's vjp column), every
// elementwise float opcode with a rule matches central finite differences,
// and an opcode without a rule is an Error when a gradient must pass through
// it, never a silent zero.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "opcode_list.h"
#include "strata/autograd/grad.h"
#include "strata/autograd/vjp_sweep.h"
#include "strata/hlo/opcode.h"
#include "strata/ir/node.h"
#include "strata/lazy/ops.h"

namespace strata {
namespace {

using hlo::Opcode;

using strata::test_support::AllOpcodes;

// Inputs away from every kink of the ops (integers, halves, zero, ties).
const std::vector<double> kA = {0.6, 0.75, 1.3, 1.45};
const std::vector<double> kB = {0.9, 1.2, 0.7, 1.1};
const std::vector<double> kWeights = {0.3, -1.1, 0.7, 2.0};

Tensor F64(const std::vector<double>& v) { return Tensor::FromVector(v, {4}); }

// sum(weights * op(a[, b])) in f64.
double Loss(Opcode op, const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<ir::Value> operands = {F64(a).value()};
  if (hlo::IsElementwiseBinary(op)) operands.push_back(F64(b).value());
  Tensor y(ir::Value{ir::Node::MakeOp(op, operands), 0});
  return sum(y * F64(kWeights)).item<double>();
}

TEST(VjpCoverage, EveryOpcodeDeclaresItsRule) {
  int with_rule = 0;
  for (Opcode op : AllOpcodes()) {
    const VjpRule rule = hlo::VjpRuleOf(op);
    with_rule +=
        rule != VjpRule::kHloOnly && rule != VjpRule::kAttached && rule != VjpRule::kNoGradient;
    if (hlo::IsElementwiseUnary(op) || hlo::IsElementwiseBinary(op)) {
      // a gradient exactly when the row takes floats
      EXPECT_EQ(rule == VjpRule::kElementwise, hlo::TakesFloats(hlo::ElementTypesOf(op)))
          << hlo::OpcodeName(op);
    }
  }
  EXPECT_GE(with_rule, 40);
}

TEST(VjpCoverage, EveryElementwiseFloatRuleMatchesFiniteDifferences) {
  int checked = 0;
  for (Opcode op : AllOpcodes()) {
    const bool unary = hlo::IsElementwiseUnary(op), binary = hlo::IsElementwiseBinary(op);
    if ((!unary && !binary) || hlo::VjpRuleOf(op) != VjpRule::kElementwise) continue;
    SCOPED_TRACE(std::string(hlo::OpcodeName(op)));
    Tensor a = F64(kA), b = F64(kB);
    std::vector<ir::Value> operands = {a.value()};
    if (binary) operands.push_back(b.value());
    Tensor y(ir::Value{ir::Node::MakeOp(op, operands), 0});
    Tensor loss = sum(y * F64(kWeights));
    std::vector<Tensor> wrt = {a};
    if (binary) wrt.push_back(b);
    std::vector<Tensor> grads = gradients(loss, wrt);
    const double h = 1e-6;
    for (size_t side = 0; side < wrt.size(); ++side) {
      std::vector<double> got = grads[side].to_vector<double>();
      for (size_t i = 0; i < kA.size(); ++i) {
        std::vector<double> plus_a = kA, minus_a = kA, plus_b = kB, minus_b = kB;
        (side == 0 ? plus_a : plus_b)[i] += h;
        (side == 0 ? minus_a : minus_b)[i] -= h;
        const double fd = (Loss(op, plus_a, plus_b) - Loss(op, minus_a, minus_b)) / (2 * h);
        EXPECT_NEAR(got[i], fd, 1e-6 * (1 + std::abs(fd)))
            << "operand " << side << " [" << i << "]";
      }
    }
    ++checked;
  }
  EXPECT_GE(checked, 25);  // every float unary and binary op of the list
}

TEST(VjpCoverage, AnOpWithoutARuleIsAnErrorNamingIt) {
  ASSERT_EQ(hlo::VjpRuleOf(Opcode::kBitcastConvert), VjpRule::kHloOnly);
  Tensor x = Tensor::FromVector<float>({1, 2}, {2});
  hlo::Attributes a;
  Tensor bits(ir::Value{
      ir::Node::MakeOp(Opcode::kBitcastConvert, {x.value()}, a, Shape(DType::kF32, {2})), 0});
  try {
    gradients(sum(bits * 2.0), {x});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("bitcast-convert")) << e.what();
  }
}

}  // namespace
}  // namespace strata
