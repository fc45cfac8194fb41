// Reductions against plain loops: every subset of a rank-3 input's dims
// (given as negative dims too), keepdim, integer and bool sums, NaN, ties and
// zero-size dims.
#include <limits>

#include "lazy/op_test_util.h"

namespace strata::test {
namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();

// Folds each input element into its output (reduced dims dropped or kept as 1).
template <typename T, typename F>
std::vector<T> ReduceReference(const std::vector<T>& x, const Dims& dims, const Dims& reduced,
                               bool keepdim, T init, F op, Dims* out_dims) {
  auto is_reduced = [&](size_t d) {
    return reduced.empty() ||
           std::find(reduced.begin(), reduced.end(), static_cast<int64_t>(d)) != reduced.end();
  };
  Dims kept_dims;
  out_dims->clear();
  for (size_t d = 0; d < dims.size(); ++d) {
    if (!is_reduced(d)) kept_dims.push_back(dims[d]);
    if (!is_reduced(d) || keepdim) out_dims->push_back(is_reduced(d) ? 1 : dims[d]);
  }
  std::vector<T> out(NumElements(kept_dims), init);
  for (int64_t i = 0; i < static_cast<int64_t>(x.size()); ++i) {
    Dims index = Unravel(i, dims), out_index;
    for (size_t d = 0; d < dims.size(); ++d) {
      if (!is_reduced(d)) out_index.push_back(index[d]);
    }
    T& slot = out[Ravel(out_index, kept_dims)];
    slot = op(slot, x[i]);
  }
  return out;
}

std::vector<Dims> Subsets(int64_t rank) {
  std::vector<Dims> out;
  for (int64_t mask = 1; mask < (1 << rank); ++mask) {
    Dims s;
    for (int64_t d = 0; d < rank; ++d) {
      if (mask & (1 << d)) s.push_back(d);
    }
    out.push_back(s);
  }
  return out;
}

Dims Negated(const Dims& dims, int64_t rank) {
  Dims out;
  for (int64_t d : dims) out.push_back(d - rank);
  return out;
}

const Dims kDims = {2, 3, 4};

TEST(Reduce, SumMeanMaxMinOverEverySubset) {
  auto data = RandomValues<float>(24, 7);
  Tensor x = Tensor::FromVector(data, kDims);
  std::vector<Dims> subsets = Subsets(3);
  subsets.push_back({});  // all dims
  for (const Dims& dims : subsets) {
    for (bool keepdim : {false, true}) {
      for (bool negative : {false, true}) {
        Dims given = negative ? Negated(dims, 3) : dims;
        SCOPED_TRACE(::testing::Message()
                     << "dims " << DimsToString(given) << " keepdim " << keepdim);
        Dims out;
        auto s = ReduceReference(data, kDims, dims, keepdim, 0.0f, std::plus<float>(), &out);
        ExpectTensor<float>(sum(x, given, keepdim), out, s, 1e-5, 1e-5);
        int64_t count = 1;
        for (size_t d = 0; d < kDims.size(); ++d) {
          if (dims.empty() ||
              std::find(dims.begin(), dims.end(), static_cast<int64_t>(d)) != dims.end()) {
            count *= kDims[d];
          }
        }
        std::vector<float> m;
        for (float v : s) m.push_back(v / static_cast<float>(count));
        ExpectTensor<float>(mean(x, given, keepdim), out, m, 1e-5, 1e-5);
        auto hi = ReduceReference(
            data, kDims, dims, keepdim, -INFINITY, [](float a, float b) { return std::max(a, b); },
            &out);
        ExpectTensor<float>(max(x, given, keepdim), out, hi);
        auto lo = ReduceReference(
            data, kDims, dims, keepdim, INFINITY, [](float a, float b) { return std::min(a, b); },
            &out);
        ExpectTensor<float>(min(x, given, keepdim), out, lo);
      }
    }
  }
}

TEST(Reduce, IntegerAndBoolSumsAreS64) {
  Tensor i32 = Tensor::FromVector<int32_t>({2000000000, 2000000000, -5, 7}, {2, 2});
  ExpectTensor<int64_t>(sum(i32), {}, {4000000002});
  ExpectTensor<int64_t>(sum(i32, {0}), {2}, {1999999995, 2000000007});
  Tensor u8 = Tensor::FromVector<uint8_t>({200, 200, 200}, {3});
  ExpectTensor<int64_t>(sum(u8), {}, {600});
  Tensor flags = BoolTensor({1, 0, 1, 1, 0, 1}, {2, 3});
  ExpectTensor<int64_t>(sum(flags, {1}), {2}, {2, 2});
  ExpectTensor<int64_t>(sum(flags, {-2}, true), {1, 3}, {2, 0, 2});
  ExpectTensor<double>(sum(Tensor::FromVector<double>({0.5, 0.25}, {2})), {}, {0.75});
}

TEST(Reduce, HalfPrecisionSumsInF32) {
  // 2048 + 1 + 1 is 2048 when every partial sum is rounded to f16.
  Tensor x = astype(Tensor::FromVector<float>({2048, 1, 1}, {3}), DType::kF16);
  Tensor s = sum(x);
  EXPECT_EQ(s.dtype(), DType::kF16);
  ExpectTensor<float>(astype(s, DType::kF32), {}, {2050});
  ExpectTensor<float>(astype(max(x), DType::kF32), {}, {2048});
}

TEST(Reduce, EmptyAndScalarInputs) {
  Tensor empty = zeros({0, 3});
  ExpectTensor<float>(sum(empty), {}, {0});
  ExpectTensor<float>(sum(empty, {0}), {3}, {0, 0, 0});
  ExpectTensor<float>(mean(empty, {0}), {3}, {NAN, NAN, NAN});
  ExpectTensor<float>(max(empty, {1}), {0}, {});  // reducing a non-empty dim of an empty tensor
  Tensor s = Tensor::FromVector<float>({2.5f}, {});
  ExpectTensor<float>(sum(s), {}, {2.5f});
  ExpectTensor<float>(mean(s, {0}), {}, {2.5f});
  ExpectTensor<float>(max(s, {-1}, true), {}, {2.5f});
  ExpectTensor<int64_t>(argmax(s, 0), {}, {0});
}

TEST(Reduce, MaxMinPropagateNaN) {
  Tensor x = Tensor::FromVector<double>({1, kNaN, 3, 4, 5, 6}, {2, 3});
  ExpectTensor<double>(max(x, {1}), {2}, {kNaN, 6});
  ExpectTensor<double>(min(x, {0}), {3}, {1, kNaN, 3});
  ExpectTensor<double>(max(x), {}, {kNaN});
}

TEST(Reduce, MaxMinIntegersAndBools) {
  Tensor x = Tensor::FromVector<int32_t>({-7, -3, -9, 4}, {2, 2});
  ExpectTensor<int32_t>(max(x, {1}), {2}, {-3, 4});
  ExpectTensor<int32_t>(min(x), {}, {-9});
  Tensor u =
      Tensor::FromVector<uint64_t>({~uint64_t{0}, 5, ~uint64_t{0} - 1, ~uint64_t{0}}, {2, 2});
  ExpectTensor<uint64_t>(min(u, {1}), {2}, {5, ~uint64_t{0} - 1});
  ExpectTensor<uint64_t>(max(u, {0}), {2}, {~uint64_t{0}, ~uint64_t{0}});
  Tensor s8 = Tensor::FromVector<int8_t>({-128, -128}, {2});
  ExpectTensor<int8_t>(max(s8), {}, {-128});
  Tensor flags = BoolTensor({0, 0, 1, 1}, {2, 2});
  EXPECT_EQ(BoolValues(max(flags, {1})), (std::vector<uint8_t>{0, 1}));
  EXPECT_EQ(BoolValues(min(flags, {1})), (std::vector<uint8_t>{0, 1}));
  EXPECT_EQ(BoolValues(max(flags, {0})), (std::vector<uint8_t>{1, 1}));
  EXPECT_EQ(BoolValues(min(flags, {0})), (std::vector<uint8_t>{0, 0}));
}

// First index of the extreme value along `dim` of a [rows, cols] matrix.
std::vector<int64_t> ArgReference(const std::vector<float>& x, int64_t rows, int64_t cols,
                                  int64_t dim, bool is_max) {
  std::vector<int64_t> out;
  int64_t outer = dim == 0 ? cols : rows, inner = dim == 0 ? rows : cols;
  for (int64_t o = 0; o < outer; ++o) {
    int64_t best = 0;
    for (int64_t i = 0; i < inner; ++i) {
      float v = dim == 0 ? x[i * cols + o] : x[o * cols + i];
      float b = dim == 0 ? x[best * cols + o] : x[o * cols + best];
      if (std::isnan(b)) break;
      if (std::isnan(v) || (is_max ? v > b : v < b)) best = i;
    }
    out.push_back(best);
  }
  return out;
}

TEST(Reduce, ArgmaxArgminFirstIndexOnTies) {
  // Small integers so that ties are common.
  auto data = RandomValues<float>(30, 3, 0, 3);
  for (float& v : data) v = std::round(v);
  data[7] = NAN;
  data[9] = NAN;  // the first NaN wins, as torch
  Tensor x = Tensor::FromVector(data, {5, 6});
  for (int64_t dim : {0, 1}) {
    for (bool is_max : {true, false}) {
      SCOPED_TRACE(::testing::Message() << "dim " << dim << (is_max ? " argmax" : " argmin"));
      auto expected = ArgReference(data, 5, 6, dim, is_max);
      Dims out = {dim == 0 ? 6 : 5};
      ExpectTensor<int64_t>(is_max ? argmax(x, dim) : argmin(x, dim), out, expected);
      ExpectTensor<int64_t>(is_max ? argmax(x, dim - 2) : argmin(x, dim - 2), out, expected);
      Dims kept = dim == 0 ? Dims{1, 6} : Dims{5, 1};
      ExpectTensor<int64_t>(is_max ? argmax(x, dim, true) : argmin(x, dim, true), kept, expected);
    }
  }
}

TEST(Reduce, ArgmaxIntegersAndInfinities) {
  Tensor x = Tensor::FromVector<int32_t>({3, 9, 9, -1, -1, -5}, {2, 3});
  ExpectTensor<int64_t>(argmax(x, 1), {2}, {1, 0});
  ExpectTensor<int64_t>(argmin(x, 1), {2}, {0, 2});
  ExpectTensor<int64_t>(argmin(x, 0), {3}, {1, 1, 1});
  Tensor inf = Tensor::FromVector<float>({-INFINITY, -INFINITY, INFINITY, INFINITY}, {2, 2});
  ExpectTensor<int64_t>(argmax(inf, 1), {2}, {0, 0});
  ExpectTensor<int64_t>(argmin(inf, 1), {2}, {0, 0});
  Tensor lowest = Tensor::FromVector<int64_t>({INT64_MIN, INT64_MIN, INT64_MAX}, {3});
  ExpectTensor<int64_t>(argmax(lowest, 0), {}, {2});
  ExpectTensor<int64_t>(argmin(lowest, 0), {}, {0});
}

}  // namespace
}  // namespace strata::test
