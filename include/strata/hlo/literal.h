// Literal: host data for a `constant` instruction, row-major, little-endian.
#pragma once

#include <cstring>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "strata/core/error.h"
#include "strata/core/shape.h"

namespace strata::hlo {

class Literal {
 public:
  Literal() = default;
  explicit Literal(Shape shape);  // zero-filled array
  Literal(Shape shape, std::vector<uint8_t> bytes);

  template <typename T>
  static Literal Scalar(T value) {
    Literal lit(Shape::Scalar(DTypeOf<T>::value));
    std::memcpy(lit.bytes_.data(), &value, sizeof(T));
    return lit;
  }
  template <typename T>
  static Literal Vector(std::span<const T> values, std::vector<int64_t> dims) {
    Literal lit(Shape(DTypeOf<T>::value, std::move(dims)));
    STRATA_CHECK(static_cast<int64_t>(values.size()) == lit.shape_.num_elements(),
                 "literal has {} values for shape {}", values.size(), lit.shape_.ToString());
    if (!values.empty()) std::memcpy(lit.bytes_.data(), values.data(), values.size() * sizeof(T));
    return lit;
  }
  // A scalar of any dtype from a double (integers truncate, pred is value != 0).
  static Literal ScalarOf(DType dtype, double value);
  // A scalar from an integer, exact: an integer dtype keeps its low bits (two's
  // complement wrap-around, as C++ and torch narrow), pred is value != 0, a
  // floating dtype rounds.
  static Literal IntegerOf(DType dtype, int64_t value);

  const Shape& shape() const { return shape_; }
  const uint8_t* data() const { return bytes_.data(); }
  uint8_t* mutable_data() { return bytes_.data(); }
  int64_t size_bytes() const { return static_cast<int64_t>(bytes_.size()); }
  template <typename T>
  const T* data_as() const {
    return reinterpret_cast<const T*>(bytes_.data());
  }

  // Element i converted to double (for printing, folding and tests). A
  // complex element is its real part when its imaginary part is 0 and NaN
  // otherwise (no double equals it); SetFromDouble gives it imaginary part 0.
  double GetAsDouble(int64_t i) const;
  void SetFromDouble(int64_t i, double value);
  // Element i of a c64 / c128 literal as (real, imaginary).
  std::pair<double, double> GetComplex(int64_t i) const;
  void SetComplex(int64_t i, double real, double imaginary);
  // Exact element equality of shape and bytes.
  bool operator==(const Literal& other) const {
    return shape_ == other.shape_ && bytes_ == other.bytes_;
  }
  // XLA's text form of the value: "1", "{1, 2}", "{ {1, 2}, {3, 4} }".
  std::string ValueToString() const;

 private:
  Shape shape_;
  std::vector<uint8_t> bytes_;
};

// f16 / bf16 conversions (storage types).
float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);
// bf16 is an f32's top half: widening is exact; narrowing rounds to nearest
// even and keeps a NaN a quiet NaN. Inline: the kernels' loops use them.
inline float BFloat16ToFloat(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
inline uint16_t FloatToBFloat16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  if ((x & 0x7fffffff) > 0x7f800000) return static_cast<uint16_t>((x >> 16) | 0x40);  // quiet NaN
  return static_cast<uint16_t>((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

}  // namespace strata::hlo
