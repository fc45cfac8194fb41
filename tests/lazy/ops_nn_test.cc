// softmax / log_softmax against a loop in double; one_hot against a loop.
#include "lazy/op_test_util.h"
#include "strata/lazy/context.h"

namespace strata::test {
namespace {

// softmax (or log_softmax) along `dim` of a row-major tensor, in double.
std::vector<double> SoftmaxReference(const std::vector<double>& x, const Dims& dims, int64_t dim,
                                     bool log_space) {
  std::vector<double> out(x.size());
  Dims outer = dims;
  outer[dim] = 1;
  for (int64_t o = 0; o < NumElements(outer); ++o) {
    Dims index = Unravel(o, outer);
    std::vector<int64_t> flat;
    for (int64_t i = 0; i < dims[dim]; ++i) {
      index[dim] = i;
      flat.push_back(Ravel(index, dims));
    }
    double top = -INFINITY;
    for (int64_t f : flat) top = std::max(top, x[f]);
    double total = 0;
    for (int64_t f : flat) total += std::exp(x[f] - top);
    for (int64_t f : flat)
      out[f] = log_space ? x[f] - top - std::log(total) : std::exp(x[f] - top) / total;
  }
  return out;
}

template <typename T>
std::vector<double> ToDouble(const std::vector<T>& v) {
  return std::vector<double>(v.begin(), v.end());
}

TEST(NN, SoftmaxAndLogSoftmaxAlongEveryDim) {
  Dims dims = {2, 3, 4};
  auto data = RandomValues<float>(24, 5, -6, 6);
  Tensor x = Tensor::FromVector(data, dims);
  for (int64_t dim : {0, 1, 2, -1, -3}) {
    SCOPED_TRACE(::testing::Message() << "dim " << dim);
    int64_t d = dim < 0 ? dim + 3 : dim;
    Tensor s = softmax(x, dim);
    ASSERT_EQ(s.shape(), Shape(DType::kF32, dims));
    EXPECT_TRUE(AllClose(SoftmaxReference(ToDouble(data), dims, d, false),
                         ToDouble(s.to_vector<float>()), 1e-5, 1e-7));
    Tensor l = log_softmax(x, dim);
    ASSERT_EQ(l.shape(), Shape(DType::kF32, dims));
    EXPECT_TRUE(AllClose(SoftmaxReference(ToDouble(data), dims, d, true),
                         ToDouble(l.to_vector<float>()), 1e-5, 1e-5));
  }
}

TEST(NN, SoftmaxIsStableForLargeInputs) {
  std::vector<double> data = {1000, 1001, 1002, -1000, -1001, -1002};
  Tensor x = Tensor::FromVector(data, {2, 3});
  ExpectTensor<double>(softmax(x, 1), {2, 3}, SoftmaxReference(data, {2, 3}, 1, false), 1e-12,
                       1e-15);
  ExpectTensor<double>(log_softmax(x, 1), {2, 3}, SoftmaxReference(data, {2, 3}, 1, true), 1e-12,
                       1e-12);
  // f32 exp(1000) overflows without the max subtraction.
  auto f = softmax(astype(x, DType::kF32), -1).to_vector<float>();
  for (float v : f) EXPECT_TRUE(std::isfinite(v));
}

TEST(NN, SoftmaxPromotesIntegersToF32) {
  std::vector<int32_t> data = {1, 2, 3, 4};
  Tensor s = softmax(Tensor::FromVector(data, {4}), 0);
  ASSERT_EQ(s.dtype(), DType::kF32);
  EXPECT_TRUE(AllClose(SoftmaxReference(ToDouble(data), {4}, 0, false),
                       ToDouble(s.to_vector<float>()), 1e-6, 1e-7));
  EXPECT_EQ(log_softmax(Tensor::FromVector(data, {2, 2}), 1).dtype(), DType::kF32);
}

TEST(NN, SoftmaxEdgeShapes) {
  ExpectTensor<float>(softmax(constant(3), 0), {}, {1});
  ExpectTensor<float>(log_softmax(constant(3), -1), {}, {0});
  ExpectTensor<float>(softmax(zeros({0, 4}), 1), {0, 4}, {});
  ExpectTensor<float>(softmax(zeros({3, 0}), 1), {3, 0}, {});
  ExpectTensor<float>(softmax(zeros({2, 1}), 1), {2, 1}, {1, 1});
}

TEST(NN, OneHot) {
  std::vector<int64_t> index = {2, 0, 3, 3, 1, 0};
  Tensor t = one_hot(Tensor::FromVector(index, {2, 3}), 4);
  ExpectTensor<float>(t, {2, 3, 4}, Tabulate<float>({2, 3, 4}, [&](const Dims& i) {
                        return index[i[0] * 3 + i[1]] == i[2] ? 1 : 0;
                      }));
  // 5 and -1 are out of range: an error (tests/lazy/index_check_test.cc);
  // with index checks off, all-zero rows.
  std::vector<int32_t> small = {1, 5, -1, 0};
  lazy::Context::Get().set_index_checks(false);
  ExpectTensor<int32_t>(one_hot(Tensor::FromVector(small, {4}), 3, DType::kS32), {4, 3},
                        {0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0});
  lazy::Context::Get().set_index_checks(true);
  ExpectTensor<float>(one_hot(Tensor::FromVector<uint8_t>({2}, {}), 3), {3}, {0, 0, 1});
  ExpectTensor<float>(one_hot(Tensor::FromVector<int64_t>({}, {0}), 5), {0, 5}, {});
  EXPECT_EQ(BoolValues(one_hot(Tensor::FromVector<int64_t>({1}, {1}), 2, DType::kPred)),
            (std::vector<uint8_t>{0, 1}));
}

}  // namespace
}  // namespace strata::test
