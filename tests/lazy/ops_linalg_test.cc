// matmul against a triple loop that follows torch.matmul's rules: 1-D
// operands gain a dim that is dropped afterwards; batch dims broadcast.
#include "lazy/op_test_util.h"

namespace strata::test {
namespace {

// Reference: promotes 1-D operands, broadcasts batch dims, loops in double.
std::vector<double> MatmulReference(const std::vector<double>& a, Dims a_dims,
                                    const std::vector<double>& b, Dims b_dims, Dims* out_dims) {
  bool a_vector = a_dims.size() == 1, b_vector = b_dims.size() == 1;
  if (a_vector) a_dims.insert(a_dims.begin(), 1);
  if (b_vector) b_dims.push_back(1);
  const int64_t n = a_dims[a_dims.size() - 2], k = a_dims.back(), m = b_dims.back();
  Dims a_batch(a_dims.begin(), a_dims.end() - 2), b_batch(b_dims.begin(), b_dims.end() - 2);
  size_t rank = std::max(a_batch.size(), b_batch.size());
  a_batch.insert(a_batch.begin(), rank - a_batch.size(), 1);
  b_batch.insert(b_batch.begin(), rank - b_batch.size(), 1);
  Dims batch(rank);
  for (size_t i = 0; i < rank; ++i) batch[i] = a_batch[i] == 1 ? b_batch[i] : a_batch[i];
  std::vector<double> out;
  for (int64_t flat = 0; flat < NumElements(batch); ++flat) {
    Dims index = Unravel(flat, batch), ai(rank), bi(rank);
    for (size_t i = 0; i < rank; ++i) {
      ai[i] = a_batch[i] == 1 ? 0 : index[i];
      bi[i] = b_batch[i] == 1 ? 0 : index[i];
    }
    const int64_t a_base = Ravel(ai, a_batch) * n * k, b_base = Ravel(bi, b_batch) * k * m;
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t c = 0; c < m; ++c) {
        double acc = 0;
        for (int64_t j = 0; j < k; ++j) acc += a[a_base + r * k + j] * b[b_base + j * m + c];
        out.push_back(acc);
      }
    }
  }
  *out_dims = batch;
  if (!a_vector) out_dims->push_back(n);
  if (!b_vector) out_dims->push_back(m);
  return out;
}

template <typename T>
std::vector<double> ToDouble(const std::vector<T>& v) {
  return std::vector<double>(v.begin(), v.end());
}

struct ShapeCase {
  Dims a, b;
};
void PrintTo(const ShapeCase& c, std::ostream* os) {
  *os << DimsToString(c.a) << " @ " << DimsToString(c.b);
}

class MatmulShapes : public ::testing::TestWithParam<ShapeCase> {};

TEST_P(MatmulShapes, F32MatchesTripleLoop) {
  const ShapeCase& c = GetParam();
  auto a = RandomValues<float>(NumElements(c.a), 1);
  auto b = RandomValues<float>(NumElements(c.b), 2);
  Dims dims;
  auto expected = MatmulReference(ToDouble(a), c.a, ToDouble(b), c.b, &dims);
  Tensor r = matmul(Tensor::FromVector(a, c.a), Tensor::FromVector(b, c.b));
  ASSERT_EQ(r.shape(), Shape(DType::kF32, dims));
  EXPECT_TRUE(AllClose(expected, ToDouble(r.to_vector<float>()), 1e-5, 1e-5));
}

TEST_P(MatmulShapes, S32MatchesTripleLoopExactly) {
  const ShapeCase& c = GetParam();
  auto a = RandomValues<int32_t>(NumElements(c.a), 3, -9, 9);
  auto b = RandomValues<int32_t>(NumElements(c.b), 4, -9, 9);
  Dims dims;
  auto expected = MatmulReference(ToDouble(a), c.a, ToDouble(b), c.b, &dims);
  Tensor r = matmul(Tensor::FromVector(a, c.a), Tensor::FromVector(b, c.b));
  ASSERT_EQ(r.shape(), Shape(DType::kS32, dims));
  EXPECT_TRUE(AllClose(expected, ToDouble(r.to_vector<int32_t>())));
}

INSTANTIATE_TEST_SUITE_P(Lazy, MatmulShapes,
                         ::testing::Values(ShapeCase{{3}, {3}},                 // dot -> scalar
                                           ShapeCase{{2, 3}, {3}},              // matrix x vector
                                           ShapeCase{{3}, {3, 4}},              // vector x matrix
                                           ShapeCase{{2, 3}, {3, 4}},           // matrix x matrix
                                           ShapeCase{{2, 2, 3}, {3, 4}},        // batched x matrix
                                           ShapeCase{{2, 4, 3}, {3}},           // batched x vector
                                           ShapeCase{{3}, {2, 3, 4}},           // vector x batched
                                           ShapeCase{{3, 4}, {2, 4, 5}},        // matrix x batched
                                           ShapeCase{{2, 3, 4}, {2, 4, 5}},     // equal batches
                                           ShapeCase{{2, 1, 3, 4}, {5, 4, 6}},  // broadcast batches
                                           ShapeCase{{1, 3, 4},
                                                     {3, 1, 4, 2}},       // broadcast both ways
                                           ShapeCase{{2, 0}, {0, 3}},     // empty contraction
                                           ShapeCase{{0, 2, 3}, {3, 4}},  // empty batch
                                           ShapeCase{{4, 1}, {1, 5}}));   // outer product

TEST(Matmul, Promotion) {
  Tensor i32 = Tensor::FromVector<int32_t>({1, 2, 3, 4}, {2, 2});
  Tensor f32 = Tensor::FromVector<float>({0.5f, 1.5f}, {2});
  Tensor i64 = Tensor::FromVector<int64_t>({1, -1}, {2});
  Tensor f64 = Tensor::FromVector<double>({2, 3}, {2});
  ExpectTensor<float>(matmul(i32, f32), {2}, {3.5f, 7.5f});
  ExpectTensor<int64_t>(matmul(i32, i64), {2}, {-1, -1});
  ExpectTensor<double>(matmul(f32, f64), {}, {5.5});
  Tensor u8 = Tensor::FromVector<uint8_t>({200, 100}, {2});
  ExpectTensor<uint8_t>(matmul(u8, Tensor::FromVector<uint8_t>({1, 1}, {2})), {},
                        {44});  // wraps, as torch
}

TEST(Matmul, HalfPrecisionRoundsOnce) {
  Tensor a = astype(Tensor::FromVector<float>({1, 2, 3, 4}, {2, 2}), DType::kF16);
  Tensor r = matmul(a, a);
  EXPECT_EQ(r.dtype(), DType::kF16);
  ExpectTensor<float>(astype(r, DType::kF32), {2, 2}, {7, 10, 15, 22});
}

}  // namespace
}  // namespace strata::test
