// Gradients of sort, topk and scatter_add against central finite
// differences in f64, and the error a sort without its permutation gives.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "gradient_check.h"
#include "strata/core/error.h"
#include "strata/hlo/builder.h"
#include "strata/ir/node.h"

namespace strata {
namespace {

TEST(SortGradients, ValuesOfSortAndTopk) {
  CheckGradients("sort along 1",
                 [](const std::vector<Tensor>& t) { return WeightedSum(sort(t[0], 1).values); },
                 {{{3, 7}, Distinct(21)}});
  CheckGradients(
      "sort along 0, descending",
      [](const std::vector<Tensor>& t) { return WeightedSum(sort(t[0], 0, true).values); },
      {{{5, 2, 3}, Distinct(30)}});
  CheckGradients(
      "topk 3 of 8, smallest",
      [](const std::vector<Tensor>& t) { return WeightedSum(topk(t[0], 3, -1, false).values); },
      {{{2, 8}, Distinct(16)}});
  // The sorted values feed more arithmetic, and x is read elsewhere too.
  CheckGradients("x * topk(x) broadcast",
                 [](const std::vector<Tensor>& t) {
                   Tensor top = topk(t[0], 2, 1).values;
                   return WeightedSum(t[0] * sum(top * top, {1}, true));
                 },
                 {{{3, 5}, Distinct(15)}});
}

TEST(SortGradients, ScatterAddInBothOperands) {
  const Tensor index = Tensor::FromVector<int64_t>({2, 0, 2, 1, 1, 1}, {2, 3});
  CheckGradients("scatter_add along 0",
                 [&](const std::vector<Tensor>& t) {
                   return WeightedSum(scatter_add(t[0], 0, index, t[1]) * t[0]);
                 },
                 {{{3, 3}}, {{2, 4}}});
}

// A sort built without an iota among its operands has no permutation to
// send cotangents back through: an error saying so, never a wrong gradient.
TEST(SortGradients, ASortWithoutItsPermutationIsAnError) {
  hlo::NameScope names;
  hlo::Builder b("lt_f64");
  auto* lhs = b.Parameter(0, Shape::Scalar(DType::kF64));
  auto* rhs = b.Parameter(1, Shape::Scalar(DType::kF64));
  static std::unique_ptr<hlo::Computation> lt = b.Build(b.Compare(lhs, rhs, hlo::Comparison::kLt));
  Tensor x = Tensor::FromVector<double>({3, 1, 2}, {3});
  hlo::Attributes a;
  a.dimensions = {0};
  a.called = {lt.get()};
  Tensor sorted(ir::Value{ir::Node::MakeOp(hlo::Opcode::kSort, {x.value()}, a), 0});
  EXPECT_EQ(sorted.to_vector<double>(), (std::vector<double>{1, 2, 3}));
  EXPECT_THAT([&] { gradients(sum(sorted * sorted), {x}); },
              testing::ThrowsMessage<Error>(
                  testing::HasSubstr("differentiating a sort needs its permutation")));
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

TEST(CumulativeGradients, AgainstFiniteDifferences) {
  CheckGradients("cumsum along 1",
                 [](const std::vector<Tensor>& t) { return WeightedSum(cumsum(t[0], 1)); },
                 {{{3, 11}}});
  // A zero in the product: its gradient is the product of the others.
  std::vector<double> with_zero(30);
  for (int i = 0; i < 30; ++i) with_zero[i] = 0.5 + 0.03 * ((i * 7) % 30);
  with_zero[8] = 0;
  CheckGradients("cumprod along 0 through a zero",
                 [](const std::vector<Tensor>& t) { return WeightedSum(cumprod(t[0], 0)); },
                 {{{10, 3}, with_zero}});
  CheckGradients("logcumsumexp along 0",
                 [](const std::vector<Tensor>& t) { return WeightedSum(logcumsumexp(t[0], 0)); },
                 {{{9, 2}}});
  CheckGradients("cummax and cummin values",
                 [](const std::vector<Tensor>& t) {
                   return WeightedSum(cummax(t[0], 1).values - cummin(t[0], 1).values * t[0]);
                 },
                 {{{2, 13}, Distinct(26)}});
}

// Equal elements: log(e^a + e^a) moves half as fast with each of them.
TEST(CumulativeGradients, LogCumSumExpSplitsTiesEvenly) {
  Tensor x = Tensor::FromVector<double>({0.5, 0.5}, {2});
  std::vector<double> g =
      gradients(sum(slice(logcumsumexp(x, 0), 0, 1, 2)), {x})[0].to_vector<double>();
  EXPECT_DOUBLE_EQ(g[0], 0.5);
  EXPECT_DOUBLE_EQ(g[1], 0.5);
}

}  // namespace
}  // namespace strata
