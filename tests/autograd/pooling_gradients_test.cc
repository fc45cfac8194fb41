// Gradients of pooling against central finite differences in f64:
// PyTorch-style max and avg pooling with strides, padding and dilation, and
// XLA's reduce-window sums with input dilation.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "gradient_check.h"
#include "strata/core/error.h"

namespace strata {
namespace {

TEST(PoolingGradients, MaxPooling) {
  CheckGradients(
      "max_pool2d 3x3 stride 2 pad 1",
      [](const std::vector<Tensor>& t) { return WeightedSum(max_pool2d(t[0], {3}, {2}, {1})); },
      {{{2, 3, 7, 6}, Distinct(2 * 3 * 7 * 6)}});
  CheckGradients("max_pool1d dilation 2",
                 [](const std::vector<Tensor>& t) {
                   return WeightedSum(max_pool1d(t[0], {2}, {1}, {0}, {2}));
                 },
                 {{{1, 2, 9}, Distinct(18)}});
  CheckGradients("max_pool3d, unbatched",
                 [](const std::vector<Tensor>& t) { return WeightedSum(max_pool3d(t[0], {2})); },
                 {{{2, 4, 4, 4}, Distinct(128)}});
}

// ceil_mode adds windows that reach past the input (and its padding).
TEST(PoolingGradients, CeilMode) {
  CheckGradients("max_pool2d 3x3 stride 2, ceil_mode",
                 [](const std::vector<Tensor>& t) {
                   return WeightedSum(max_pool2d(t[0], {3}, {2}, {0}, {1}, true));
                 },
                 {{{1, 2, 8, 7}, Distinct(112)}});
  CheckGradients("avg_pool1d 3 stride 2 pad 1, ceil_mode",
                 [](const std::vector<Tensor>& t) {
                   return WeightedSum(avg_pool1d(t[0], {3}, {2}, {1}, true, true));
                 },
                 {{{2, 1, 8}}});
  CheckGradients("avg_pool2d without the padding, ceil_mode",
                 [](const std::vector<Tensor>& t) {
                   return WeightedSum(avg_pool2d(t[0], {2, 3}, {2}, {1}, false, true));
                 },
                 {{{1, 1, 5, 6}}});
}

TEST(PoolingGradients, AveragePooling) {
  CheckGradients("avg_pool2d 3x2 stride 2x1 pad 1x0",
                 [](const std::vector<Tensor>& t) {
                   return WeightedSum(avg_pool2d(t[0], {3, 2}, {2, 1}, {1, 0}));
                 },
                 {{{2, 2, 6, 5}}});
  CheckGradients("avg_pool2d without the padding in the count",
                 [](const std::vector<Tensor>& t) {
                   return WeightedSum(avg_pool2d(t[0], {2}, {2}, {1}, /*count_include_pad=*/false));
                 },
                 {{{1, 2, 5, 5}}});
}

// Where each window's maximum is, as a plain loop over the windows finds it
// (the first position holding the maximum, as torch's CPU kernel).
TEST(PoolingGradients, MaxPoolIndicesMatchAPlainLoop) {
  const int64_t n = 2, c = 2, h = 7, w = 6, k = 3, s = 2, p = 1, d = 1;
  std::vector<double> x = Distinct(n * c * h * w);
  for (int64_t i = 0; i + 1 < static_cast<int64_t>(x.size()); i += 5) x[i + 1] = x[i];  // ties
  ValuesIndices r =
      max_pool2d_with_indices(Tensor::FromVector(x, {n, c, h, w}), {k}, {s}, {p}, {d});
  const int64_t oh = (h + 2 * p - k) / s + 1, ow = (w + 2 * p - k) / s + 1;
  ASSERT_EQ(r.indices.shape(), Shape(DType::kS64, {n, c, oh, ow}));
  std::vector<int64_t> got = r.indices.to_vector<int64_t>();
  std::vector<double> values = r.values.to_vector<double>();
  for (int64_t plane = 0; plane < n * c; ++plane) {
    for (int64_t i = 0; i < oh; ++i) {
      for (int64_t j = 0; j < ow; ++j) {
        double best = -INFINITY;
        int64_t at = -1;
        for (int64_t a = 0; a < k; ++a) {
          for (int64_t b = 0; b < k; ++b) {
            const int64_t y = i * s - p + a * d, z = j * s - p + b * d;
            if (y < 0 || y >= h || z < 0 || z >= w) continue;
            const double v = x[plane * h * w + y * w + z];
            if (at < 0 || v > best) best = v, at = y * w + z;
          }
        }
        const int64_t o = (plane * oh + i) * ow + j;
        EXPECT_EQ(got[o], at) << "window " << o;
        EXPECT_EQ(values[o], best) << "window " << o;
      }
    }
  }
  CheckGradients("max_pool2d_with_indices' values",
                 [](const std::vector<Tensor>& t) {
                   return WeightedSum(max_pool2d_with_indices(t[0], {3}, {2}, {1}).values);
                 },
                 {{{1, 2, 7, 6}, Distinct(84)}});
}

TEST(PoolingGradients, AveragePoolingWithADivisorOverride) {
  CheckGradients("avg_pool2d 3x3 stride 2 pad 1, divisor 4",
                 [](const std::vector<Tensor>& t) {
                   return WeightedSum(avg_pool2d(t[0], {3}, {2}, {1}, true, false, 4));
                 },
                 {{{1, 2, 5, 6}}});
  // Each window's sum over 4: a window of ones at the corner covers 4 ones.
  Tensor y = avg_pool2d(ones({1, 1, 4, 4}, DType::kF64), {3}, {2}, {1}, true, false, 4);
  EXPECT_EQ(y.to_vector<double>(), (std::vector<double>{1, 1.5, 1.5, 2.25}));
}

TEST(PoolingGradients, ReduceWindowSumWithDilations) {
  std::vector<hlo::WindowDim> window(2);
  window[0] = {2, 1, 1, 0, 1, 2, false};   // size 2, pad 1_0, lhs_dilate 2
  window[1] = {3, 2, 0, -1, 2, 1, false};  // size 3, stride 2, pad 0_-1, rhs_dilate 2
  CheckGradients("reduce_window add",
                 [&](const std::vector<Tensor>& t) {
                   return WeightedSum(reduce_window(t[0], hlo::Opcode::kAdd, window));
                 },
                 {{{3, 9}}});
}

TEST(PoolingGradients, BadArgumentsNameTheOp) {
  using ::testing::HasSubstr;
  Tensor x = zeros({1, 2, 5, 5}, DType::kF32);
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message([&] { max_pool2d(x, {2}); }), "no error");
  EXPECT_THAT(message([&] { max_pool2d(x, {2}, {}, {2}); }),
              HasSubstr("[max_pool2d] padding (2) must be at most half the kernel size (2)"));
  EXPECT_THAT(message([&] { max_pool2d(x, {7}); }), HasSubstr("is larger than the padded input"));
  EXPECT_THAT(message([&] { avg_pool1d(x, {2}); }),
              HasSubstr("[avg_pool1d] expected input of rank 3"));
  EXPECT_THAT(message([&] {
                max_pool2d(zeros({1, 2, 5, 5}, DType::kS32), {2});
              }),
              HasSubstr("takes floats"));
  EXPECT_THAT(message([&] {
                max_pool2d(x, {2, 2, 2});
              }),
              HasSubstr("kernel_size takes one value or one per spatial dim (2), got 3"));
}

}  // namespace
}  // namespace strata
