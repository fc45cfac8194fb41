// cumsum, cumprod, cummax, cummin and logcumsumexp against running loops.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "op_test_util.h"

namespace strata {
namespace {

using test::Dims;
using test::ExpectError;
using test::NumElements;
using test::Ravel;
using test::Unravel;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// out[i] = fold(out[i - 1 along d], x[i]); the first of each row is x's.
template <typename T, typename Fold>
std::vector<T> Running(const std::vector<T>& x, const Dims& dims, int64_t d, Fold fold) {
  std::vector<T> out(x.size());
  for (int64_t flat = 0; flat < NumElements(dims); ++flat) {
    Dims i = Unravel(flat, dims);
    if (i[d] == 0) {
      out[flat] = x[flat];
      continue;
    }
    Dims previous = i;
    --previous[d];
    out[flat] = fold(out[Ravel(previous, dims)], x[flat]);
  }
  return out;
}

TEST(Cumulative, SumsAndProductsAlongEachDimension) {
  const Dims dims = {3, 17, 2};  // 17: rounds of 1, 2, 4, 8 and 16
  const std::vector<double> x = test::RandomValues<double>(NumElements(dims), 3, -1.5, 1.5);
  const Tensor t = Tensor::FromVector(x, dims);
  for (int64_t d = 0; d < 3; ++d) {
    SCOPED_TRACE(d);
    test::ExpectTensor<double>(cumsum(t, d), dims,
                               Running(x, dims, d, [](double a, double b) { return a + b; }), 1e-12,
                               1e-12);
    test::ExpectTensor<double>(cumprod(t, d - 3), dims,
                               Running(x, dims, d, [](double a, double b) { return a * b; }), 1e-12,
                               1e-15);
    test::ExpectTensor<double>(
        logcumsumexp(t, d), dims,
        Running(x, dims, d, [](double a, double b) { return std::log(std::exp(a) + std::exp(b)); }),
        1e-12, 1e-12);
  }
}

TEST(Cumulative, IntegerAndBoolInputsAccumulateInS64) {
  const std::vector<int32_t> x = {3, -1, 4, 1, -5, 9, 2};
  std::vector<int64_t> wide(x.begin(), x.end());
  test::ExpectTensor<int64_t>(cumsum(Tensor::FromVector(x, {7}), 0), {7},
                              Running(wide, {7}, 0, [](int64_t a, int64_t b) { return a + b; }));
  test::ExpectTensor<int64_t>(cumprod(Tensor::FromVector(x, {7}), 0), {7},
                              Running(wide, {7}, 0, [](int64_t a, int64_t b) { return a * b; }));
  test::ExpectTensor<int64_t>(cumsum(test::BoolTensor({1, 0, 1, 1}, {4}), 0), {4}, {1, 1, 2, 3});
}

TEST(Cumulative, LogCumSumExpAtInfinitiesAndFarApart) {
  const std::vector<double> x = {-kInf, -kInf, -1000, 0, kInf, 3, kInf};
  const std::vector<double> got = logcumsumexp(Tensor::FromVector(x, {7}), 0).to_vector<double>();
  EXPECT_EQ(got[0], -kInf);
  EXPECT_EQ(got[1], -kInf);
  EXPECT_DOUBLE_EQ(got[2], -1000);  // exp(-1000) underflows: the max-shifted form must not
  EXPECT_DOUBLE_EQ(got[3], 0);
  EXPECT_EQ(got[4], kInf);
  EXPECT_EQ(got[5], kInf);
  EXPECT_EQ(got[6], kInf);
  const std::vector<double> nan =
      logcumsumexp(Tensor::FromVector<double>({1, kNaN, 2}, {3}), 0).to_vector<double>();
  EXPECT_DOUBLE_EQ(nan[0], 1);
  EXPECT_TRUE(std::isnan(nan[1]) && std::isnan(nan[2]));
}

// torch's rule, run as a loop: a NaN replaces the running value and stays;
// otherwise x replaces it when x >= it (max) or x <= it (min), ties taking
// the later index.
void ExpectRunningExtreme(const std::vector<double>& x, bool is_max) {
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<double> value(n);
  std::vector<int64_t> index(n);
  for (int64_t i = 0; i < n; ++i) {
    const bool take =
        i == 0 || std::isnan(x[i]) ||
        (!std::isnan(value[i - 1]) && (is_max ? x[i] >= value[i - 1] : x[i] <= value[i - 1]));
    value[i] = take ? x[i] : value[i - 1];
    index[i] = take ? i : index[i - 1];
  }
  auto [v, ix] =
      is_max ? cummax(Tensor::FromVector(x, {n}), 0) : cummin(Tensor::FromVector(x, {n}), 0);
  test::ExpectTensor<double>(v, {n}, value);
  test::ExpectTensor<int64_t>(ix, {n}, index);
}

TEST(Cumulative, RunningExtremesWithTiesAndNaNs) {
  std::vector<double> x = test::RandomValues<double>(40, 9, -3, 3);
  for (double& v : x) v = std::round(v);
  for (bool is_max : {true, false}) {
    SCOPED_TRACE(is_max);
    ExpectRunningExtreme(x, is_max);
    std::vector<double> with_nan = x;
    with_nan[13] = kNaN;
    with_nan[29] = kNaN;
    ExpectRunningExtreme(with_nan, is_max);
  }
  auto [v, i] = cummax(Tensor::FromVector<int64_t>({2, 7, 7, 1, 9}, {5}), 0);
  test::ExpectTensor<int64_t>(v, {5}, {2, 7, 7, 7, 9});
  test::ExpectTensor<int64_t>(i, {5}, {0, 1, 2, 2, 4});
}

// The running extremes' identities are each type's own bounds: values at
// those bounds, and bools, come out as a loop gives them.
TEST(Cumulative, RunningExtremesAtTheBoundsOfIntegerTypes) {
  const int64_t top = std::numeric_limits<int64_t>::max(),
                bottom = std::numeric_limits<int64_t>::lowest();
  auto [v, i] = cummin(Tensor::FromVector<int64_t>({top, top, 5, bottom, bottom, 7}, {6}), 0);
  test::ExpectTensor<int64_t>(v, {6}, {top, top, 5, bottom, bottom, bottom});
  test::ExpectTensor<int64_t>(i, {6}, {0, 1, 2, 3, 4, 4});
  auto [vu, iu] = cummax(Tensor::FromVector<uint8_t>({0, 255, 3, 255}, {4}), 0);
  test::ExpectTensor<uint8_t>(vu, {4}, {0, 255, 255, 255});
  test::ExpectTensor<int64_t>(iu, {4}, {0, 1, 1, 3});
  auto [vb, ib] = cummax(test::BoolTensor({0, 0, 1, 0, 1}, {5}), 0);
  EXPECT_EQ(test::BoolValues(vb), (std::vector<uint8_t>{0, 0, 1, 1, 1}));
  test::ExpectTensor<int64_t>(ib, {5}, {0, 1, 2, 2, 4});
}

TEST(Cumulative, BadArgumentsAreErrors) {
  ExpectError([] { cumsum(zeros({2, 3}), 2); }, "cumsum", {"dimension 2 out of range"});
  ExpectError([] { cummin(zeros({2}), -2); }, "cummin", {"dimension -2 out of range"});
  ExpectError([] { logcumsumexp(zeros({2}, DType::kS32), 0); }, "logcumsumexp",
              {"needs a floating-point tensor, got s32[2]"});
}

}  // namespace
}  // namespace strata
