#include "strata/core/shape.h"

#include <fmt/format.h>

#include <algorithm>

#include "strata/core/error.h"

namespace strata {

Shape::Shape(DType dtype, std::vector<int64_t> dims) : dtype_(dtype), dims_(std::move(dims)) {
  bool empty = false;
  for (int64_t d : dims_) {
    if (d < 0) Fail("[shape] dimensions must be non-negative, got {}", DimsToString(dims_));
    empty |= d == 0;
  }
  if (empty) return;
  // The one size check every front end passes through (ops, the HLO parser,
  // files, Python): a shape whose bytes do not fit in an int64 is refused
  // here, before any kernel computes an offset into it.
  int64_t bytes = std::max<int64_t>(DTypeSize(dtype_), 1);
  for (int64_t d : dims_) {
    if (__builtin_mul_overflow(bytes, d, &bytes)) {
      Fail("[shape] {}{} is too large: its size in bytes does not fit in 64 bits",
           DTypeName(dtype_), DimsToString(dims_));
    }
  }
}

Shape Shape::Tuple(std::vector<Shape> elements) {
  Shape s;
  s.is_tuple_ = true;
  s.tuple_shapes_ = std::move(elements);
  return s;
}

int64_t Shape::num_elements() const {
  STRATA_CHECK(!is_tuple_, "num_elements of tuple shape {}", ToString());
  return Product(dims_);
}

int64_t Shape::byte_size() const { return num_elements() * DTypeSize(dtype_); }

std::vector<Shape> Shape::Leaves() const {
  if (!is_tuple_) return {*this};
  std::vector<Shape> leaves;
  for (const Shape& s : tuple_shapes_) {
    auto sub = s.Leaves();
    leaves.insert(leaves.end(), sub.begin(), sub.end());
  }
  return leaves;
}

std::string Shape::ToString() const {
  if (!is_tuple_) return fmt::format("{}{}", DTypeName(dtype_), DimsToString(dims_));
  std::string out = "(";
  for (size_t i = 0; i < tuple_shapes_.size(); ++i) {
    if (i) out += ", ";
    out += tuple_shapes_[i].ToString();
  }
  return out + ")";
}

bool Shape::operator==(const Shape& other) const {
  if (is_tuple_ != other.is_tuple_) return false;
  if (is_tuple_) return tuple_shapes_ == other.tuple_shapes_;
  return dtype_ == other.dtype_ && dims_ == other.dims_;
}

std::vector<int64_t> RowMajorStrides(std::span<const int64_t> dims) {
  std::vector<int64_t> strides(dims.size());
  int64_t s = 1;
  for (size_t i = dims.size(); i-- > 0;) {
    strides[i] = s;
    s *= dims[i];
  }
  return strides;
}

int64_t Product(std::span<const int64_t> dims) {
  for (int64_t d : dims) {
    if (d == 0) return 0;  // [2^40, 2^40, 0] holds nothing, whatever comes before the 0
  }
  int64_t n = 1;
  for (int64_t d : dims) {
    if (__builtin_mul_overflow(n, d, &n)) {
      Fail("[shape] {} has more elements than a 64-bit count holds", DimsToString(dims));
    }
  }
  return n;
}

std::string DimsToString(std::span<const int64_t> dims) {
  return fmt::format("[{}]", fmt::join(dims, ","));
}

}  // namespace strata
