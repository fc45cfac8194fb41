// sort, argsort, topk and scatter_add against plain loops: std::stable_sort
// over each row with torch's order (NaN largest, -0 == +0, ties in order).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "op_test_util.h"

namespace strata {
namespace {

using test::Dims;
using test::ExpectError;
using test::NumElements;
using test::Ravel;
using test::Unravel;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// torch's ascending order: NaN after everything, else by value.
bool TorchLess(double a, double b) {
  if (std::isnan(a)) return false;
  if (std::isnan(b)) return true;
  return a < b;
}

// For every row along `d`: the stable permutation that sorts it.
template <typename T>
std::vector<int64_t> ReferenceIndices(const std::vector<T>& x, const Dims& dims, int64_t d,
                                      bool descending) {
  std::vector<int64_t> out(x.size());
  for (int64_t flat = 0; flat < NumElements(dims); ++flat) {
    Dims at = Unravel(flat, dims);
    if (at[d] != 0) continue;
    std::vector<int64_t> p(dims[d]);
    std::iota(p.begin(), p.end(), 0);
    auto value = [&](int64_t k) {
      Dims i = at;
      i[d] = k;
      return static_cast<double>(x[Ravel(i, dims)]);
    };
    std::stable_sort(p.begin(), p.end(), [&](int64_t a, int64_t b) {
      return descending ? TorchLess(value(b), value(a)) : TorchLess(value(a), value(b));
    });
    for (int64_t k = 0; k < dims[d]; ++k) {
      Dims i = at;
      i[d] = k;
      out[Ravel(i, dims)] = p[k];
    }
  }
  return out;
}

template <typename T>
std::vector<T> Gathered(const std::vector<T>& x, const Dims& dims, int64_t d,
                        const std::vector<int64_t>& indices, const Dims& index_dims) {
  std::vector<T> out(indices.size());
  for (int64_t flat = 0; flat < NumElements(index_dims); ++flat) {
    Dims i = Unravel(flat, index_dims);
    i[d] = indices[flat];
    out[flat] = x[Ravel(i, dims)];
  }
  return out;
}

TEST(Sort, EveryDimensionBothDirectionsWithTies) {
  const Dims dims = {4, 5, 6};
  std::vector<float> x = test::RandomValues<float>(NumElements(dims), 11, -3, 3);
  for (float& v : x) v = std::round(v);  // few distinct values: many ties
  const Tensor t = Tensor::FromVector(x, dims);
  for (int64_t d = 0; d < 3; ++d) {
    for (bool descending : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "dim " << d << (descending ? " descending" : ""));
      auto [values, indices] = sort(t, d - 3, descending, /*stable=*/true);
      const std::vector<int64_t> want = ReferenceIndices(x, dims, d, descending);
      test::ExpectTensor<int64_t>(indices, dims, want);
      test::ExpectTensor<float>(values, dims, Gathered(x, dims, d, want, dims));
      test::ExpectTensor<int64_t>(argsort(t, d, descending, true), dims, want);
    }
  }
}

TEST(Sort, NaNIsTheLargestAndSignedZerosAreEqual) {
  const float neg_nan = -kNaN;  // x86's default NaN (0 * inf) has its sign bit set
  const std::vector<float> x = {2, kNaN, -0.0f, -1, neg_nan, 0.0f, -0.0f, 5, -kNaN, 2};
  const Tensor t = Tensor::FromVector(x, {10});
  for (bool descending : {false, true}) {
    auto [values, indices] = sort(t, 0, descending, true);
    const std::vector<int64_t> want = ReferenceIndices(x, {10}, 0, descending);
    EXPECT_EQ(indices.to_vector<int64_t>(), want) << descending;
    const std::vector<float> got = values.to_vector<float>();
    for (size_t k = 0; k < x.size(); ++k) {  // the values themselves, sign and all
      const float w = x[want[k]];
      EXPECT_TRUE(std::memcmp(&got[k], &w, sizeof w) == 0 || (std::isnan(w) && std::isnan(got[k])))
          << k << ": " << got[k] << " vs " << w;
      if (w == 0) {
        EXPECT_EQ(std::signbit(got[k]), std::signbit(w)) << k;
      }
    }
  }
}

TEST(Sort, IntegerBoolAndHalfTensors) {
  const std::vector<int32_t> xi = {5, -2, 7, 7, 0, -2, 3};
  auto [vi, ii] = sort(Tensor::FromVector(xi, {7}), 0, true, true);
  const auto want_i = ReferenceIndices(xi, {7}, 0, true);
  test::ExpectTensor<int64_t>(ii, {7}, want_i);
  test::ExpectTensor<int32_t>(vi, {7}, Gathered(xi, {7}, 0, want_i, {7}));

  auto [vb, ib] = sort(test::BoolTensor({1, 0, 1, 0, 0}, {5}));
  EXPECT_EQ(test::BoolValues(vb), (std::vector<uint8_t>{0, 0, 0, 1, 1}));
  test::ExpectTensor<int64_t>(ib, {5}, {1, 3, 4, 0, 2});

  // bf16 keeps its dtype; the order is that of its values.
  const std::vector<float> xf = {1.5f, -3, 0.25f, 100, -0.5f, 7};
  Tensor h = astype(Tensor::FromVector(xf, {2, 3}), DType::kBF16);
  auto [vh, ih] = sort(h, 1);
  EXPECT_EQ(vh.dtype(), DType::kBF16);
  const auto want_h = ReferenceIndices(xf, {2, 3}, 1, false);
  test::ExpectTensor<int64_t>(ih, {2, 3}, want_h);
  test::ExpectTensor<float>(astype(vh, DType::kF32), {2, 3},
                            Gathered(xf, {2, 3}, 1, want_h, {2, 3}));
}

TEST(Sort, ScalarsAndEmptyDimensions) {
  auto [v, i] = sort(scalar(3.0f), 0);
  EXPECT_EQ(v.item<float>(), 3.0f);
  EXPECT_EQ(i.item<int64_t>(), 0);
  auto [ve, ie] = sort(zeros({3, 0}), 1);
  EXPECT_EQ(ve.shape().dims(), (Dims{3, 0}));
  EXPECT_EQ(ie.to_vector<int64_t>().size(), 0u);
}

TEST(Topk, LargestAndSmallestAlongADimension) {
  const Dims dims = {3, 8};
  const std::vector<double> x = test::RandomValues<double>(24, 5, -10, 10);
  const Tensor t = Tensor::FromVector(x, dims);
  for (bool largest : {true, false}) {
    auto [values, indices] = topk(t, 3, 1, largest);
    const auto all = ReferenceIndices(x, dims, 1, largest);
    std::vector<int64_t> want;
    for (int r = 0; r < 3; ++r)
      want.insert(want.end(), all.begin() + 8 * r, all.begin() + 8 * r + 3);
    test::ExpectTensor<int64_t>(indices, {3, 3}, want);
    test::ExpectTensor<double>(values, {3, 3}, Gathered(x, dims, 1, want, {3, 3}));
  }
  // Ties: the earlier index first, as the stable sort keeps them.
  auto [tv, ti] = topk(Tensor::FromVector(std::vector<float>{1, 4, 4, 2, 4}, {5}), 2);
  test::ExpectTensor<int64_t>(ti, {2}, {1, 2});
  EXPECT_EQ(topk(t, 0, 0).values.shape().dims(), (Dims{0, 8}));
  EXPECT_EQ(topk(t, 8).indices.shape().dims(), (Dims{3, 8}));
}

TEST(Sort, BadArgumentsAreErrorsNamingThem) {
  const Tensor t = zeros({2, 5});
  ExpectError([&] { sort(t, 2); }, "sort", {"dimension 2 out of range"});
  ExpectError([&] { argsort(t, -3); }, "argsort", {"dimension -3 out of range"});
  ExpectError([&] { topk(t, 6); }, "topk",
              {"k = 6 is out of range for dimension 1 of f32[2,5]", "0 <= k <= 5"});
  ExpectError([&] { topk(t, -1, 0); }, "topk", {"k = -1"});
}

TEST(ScatterAdd, AgainstALoopWithRepeatedIndices) {
  const Dims xd = {3, 4}, id = {2, 4}, sd = {3, 5};
  const std::vector<double> x = test::RandomValues<double>(12, 1);
  const std::vector<double> src = test::RandomValues<double>(15, 2);
  const std::vector<int64_t> index = {0, 2, 2, 1, 2, 2, 0, 1};
  for (int64_t d : {0, 1}) {
    SCOPED_TRACE(d);
    std::vector<int64_t> idx = index;
    if (d == 1) idx = {3, 3, 0, 1, 2, 0, 3, 3};
    std::vector<double> want = x;
    for (int64_t flat = 0; flat < NumElements(id); ++flat) {
      Dims i = Unravel(flat, id);
      Dims at = i;
      at[d] = idx[flat];
      want[Ravel(at, xd)] += src[Ravel(i, sd)];
    }
    Tensor r = scatter_add(Tensor::FromVector(x, xd), d, Tensor::FromVector(idx, id),
                           Tensor::FromVector(src, sd));
    test::ExpectTensor<double>(r, xd, want, 1e-12, 1e-12);
  }
  ExpectError([&] { scatter_add(zeros({3}), 0, zeros({2}), zeros({2})); }, "scatter_add",
              {"index must be an integer tensor"});
  ExpectError(
      [&] {
        scatter_add(zeros({3, 2}), 0, zeros({2, 3}, DType::kS64), zeros({2, 3}));
      },
      "scatter_add", {"nor than the input f32[3,2] outside dimension 0"});
  EXPECT_THROW(scatter_add(zeros({3}), 0, Tensor::FromVector<int64_t>({0, 3}, {2}), ones({2}))
                   .to_vector<float>(),
               Error);
}

}  // namespace
}  // namespace strata
