// Shapes whose element count does not fit 64 bits are an error, not a
// wrapped count (issue 14: an intermediate_size near INT64_MAX reported a
// wrong shape).
#include <gtest/gtest.h>

#include <limits>

#include "strata/core/error.h"
#include "strata/core/shape.h"

namespace strata {
namespace {

TEST(Shape, ElementCountsThatOverflowAreErrors) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(Product(std::vector<int64_t>{3, 5, 7}), 105);
  EXPECT_EQ(Product(std::vector<int64_t>{kMax, 1}), kMax);
  EXPECT_EQ(Product(std::vector<int64_t>{kMax, 0}), 0);
  try {
    Product(std::vector<int64_t>{kMax / 2 + 1, 2});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("more elements than a 64-bit count holds"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(Shape(DType::kF32, {int64_t{1} << 40, int64_t{1} << 40}).num_elements(), Error);
  // A zero anywhere holds nothing, whatever overflows before it.
  EXPECT_EQ(Product(std::vector<int64_t>{kMax, kMax, 0}), 0);
  EXPECT_EQ(Shape(DType::kF32, {kMax, kMax, 0}).num_elements(), 0);
}

// Every shape is checked where it is made: its bytes must fit in an int64
// (2^61 f32 elements are 2^63 bytes, one past it: that made the thread pool
// index out of its buffer where 2^60 got a clean out-of-memory error).
TEST(Shape, ShapesWhoseBytesOverflowAreRefusedWhereTheyAreMade) {
  const int64_t two_61 = int64_t{1} << 61;
  EXPECT_EQ(Shape(DType::kF32, {int64_t{1} << 60}).byte_size(), int64_t{1} << 62);
  EXPECT_EQ(Shape(DType::kU8, {two_61}).byte_size(), two_61);
  try {
    Shape(DType::kF32, {two_61});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("f32[2305843009213693952] is too large"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(Shape(DType::kF32, {int64_t{1} << 40, int64_t{1} << 22}), Error);
  EXPECT_THROW(Shape(DType::kF64, {int64_t{1} << 30, int64_t{1} << 30, 8}), Error);
  EXPECT_NO_THROW(Shape(DType::kF64, {int64_t{1} << 30, int64_t{1} << 30, 0}));
}

}  // namespace
}  // namespace strata
