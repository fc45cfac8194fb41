// Gradients of convolution against central finite differences in f64:
// PyTorch-style conv1d/2d/3d with strides, padding, dilation and groups,
// and XLA's general form with input dilation, window reversal, other
// dim_labels and batch groups.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "gradient_check.h"
#include "strata/core/error.h"

namespace strata {
namespace {

TEST(ConvolutionGradients, Conv2dStridePaddingDilationGroups) {
  CheckGradients(
      "conv2d stride 2 pad 1",
      [](const std::vector<Tensor>& t) { return WeightedSum(conv2d(t[0], t[1], {2}, {1})); },
      {{{2, 3, 5, 6}}, {{4, 3, 3, 2}}});
  CheckGradients("conv2d dilation 2, stride 1x2, pad 2x0",
                 [](const std::vector<Tensor>& t) {
                   return WeightedSum(conv2d(t[0], t[1], {1, 2}, {2, 0}, {2, 1}));
                 },
                 {{{1, 2, 5, 7}}, {{3, 2, 2, 3}}});
  CheckGradients("conv2d groups 2",
                 [](const std::vector<Tensor>& t) {
                   return WeightedSum(conv2d(t[0], t[1], {1}, {1}, {1}, 2));
                 },
                 {{{2, 4, 4, 4}}, {{6, 2, 3, 3}}});
  CheckGradients("conv2d depthwise, stride 2",
                 [](const std::vector<Tensor>& t) {
                   return WeightedSum(conv2d(t[0], t[1], {2}, {1}, {1}, 3));
                 },
                 {{{1, 3, 5, 5}}, {{6, 1, 3, 3}}});
}

TEST(ConvolutionGradients, Conv1dAndConv3dAndUnbatched) {
  CheckGradients(
      "conv1d stride 3 pad 2",
      [](const std::vector<Tensor>& t) { return WeightedSum(conv1d(t[0], t[1], {3}, {2})); },
      {{{2, 3, 10}}, {{2, 3, 4}}});
  CheckGradients("conv3d",
                 [](const std::vector<Tensor>& t) {
                   return WeightedSum(conv3d(t[0], t[1], {1, 2, 1}, {0, 1, 1}));
                 },
                 {{{1, 2, 3, 4, 3}}, {{2, 2, 2, 2, 2}}});
  CheckGradients("unbatched conv2d",
                 [](const std::vector<Tensor>& t) { return WeightedSum(conv2d(t[0], t[1])); },
                 {{{2, 4, 4}}, {{3, 2, 2, 2}}});
}

TEST(ConvolutionGradients, GeneralFormInputDilationReversalAndLabels) {
  hlo::ConvolutionDims nhwc{0, 3, {1, 2}, 2, 3, {0, 1}, 0, 3, {1, 2}};  // b01f_01io->b01f
  std::vector<hlo::WindowDim> window(2);
  window[0] = {2, 1, 1, 2, 2, 2, true};    // size 2, pad 1_2, rhs_dilate 2, lhs_dilate 2, reversed
  window[1] = {3, 2, 0, -1, 1, 1, false};  // size 3, stride 2, pad 0_-1
  CheckGradients("conv_general b01f_01io->b01f",
                 [&](const std::vector<Tensor>& t) {
                   return WeightedSum(conv_general(t[0], t[1], window, nhwc));
                 },
                 {{{2, 4, 7, 3}}, {{2, 3, 3, 2}}});
  hlo::ConvolutionDims odd{2, 0, {1, 3}, 0, 2, {3, 1}, 1, 3, {2, 0}};  // f0b1_i1o0->10bf
  std::vector<hlo::WindowDim> small(2);
  small[0].size = 2;
  small[1] = {2, 1, 1, 1, 1, 1, false};
  CheckGradients("conv_general f0b1_i1o0->10bf",
                 [&](const std::vector<Tensor>& t) {
                   return WeightedSum(conv_general(t[0], t[1], small, odd));
                 },
                 {{{3, 4, 2, 3}}, {{3, 2, 2, 2}}});
}

TEST(ConvolutionGradients, BatchGroups) {
  hlo::ConvolutionDims nchw{0, 1, {2, 3}, 1, 0, {2, 3}, 0, 1, {2, 3}};  // bf01_oi01->bf01
  std::vector<hlo::WindowDim> window(2);
  window[0].size = window[1].size = 2;
  window[1].stride = 2;
  CheckGradients("batch_group_count 2",
                 [&](const std::vector<Tensor>& t) {
                   return WeightedSum(conv_general(t[0], t[1], window, nchw, 1, 2));
                 },
                 {{{4, 2, 3, 4}}, {{4, 2, 2, 2}}});
}

TEST(ConvolutionGradients, PyTorchArgumentErrorsNameTheOp) {
  using ::testing::HasSubstr;
  Tensor x = zeros({1, 4, 5, 5}, DType::kF32), w = zeros({6, 2, 3, 3}, DType::kF32);
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message([&] { conv2d(x, w, {1}, {0}, {1}, 2); }), "no error");
  EXPECT_THAT(message([&] { conv2d(x, w); }),
              HasSubstr("[conv2d] input f32[1,4,5,5] has 4 channels"));
  EXPECT_THAT(message([&] { conv1d(x, w); }), HasSubstr("[conv1d] expected weight of rank 3"));
  EXPECT_THAT(message([&] {
                conv2d(x, w, {1, 2, 3}, {0}, {1}, 2);
              }),
              HasSubstr("stride takes one value or one per spatial dim (2), got 3"));
  EXPECT_THAT(message([&] { conv2d(x, w, {0}, {0}, {1}, 2); }),
              HasSubstr("stride must be at least 1"));
  EXPECT_THAT(message([&] { conv2d(x, w, {1}, {0}, {3}, 2); }),
              HasSubstr("is larger than the padded input"));
  EXPECT_THAT(message([&] {
                conv2d(zeros({4, 5}, DType::kF32), w);
              }),
              HasSubstr("expected input of rank 4"));
}

}  // namespace
}  // namespace strata
