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
}

}  // namespace
}  // namespace strata
