// Shape: an array (dtype + dimensions, row-major) or a tuple of shapes.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

#include "strata/core/dtype.h"

namespace strata {

class Shape {
 public:
  Shape() = default;  // f32[] scalar
  Shape(DType dtype, std::vector<int64_t> dims);
  static Shape Scalar(DType dtype) { return Shape(dtype, {}); }
  static Shape Tuple(std::vector<Shape> elements);

  bool is_tuple() const { return is_tuple_; }
  bool is_array() const { return !is_tuple_; }
  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& dims() const { return dims_; }
  int64_t dim(int64_t i) const { return dims_[i]; }
  int64_t rank() const { return static_cast<int64_t>(dims_.size()); }
  bool is_scalar() const { return !is_tuple_ && dims_.empty(); }
  const std::vector<Shape>& tuple_shapes() const { return tuple_shapes_; }
  const Shape& tuple_shape(int64_t i) const { return tuple_shapes_[i]; }
  int64_t tuple_size() const { return static_cast<int64_t>(tuple_shapes_.size()); }

  int64_t num_elements() const;  // arrays only
  int64_t byte_size() const;     // arrays only
  // Leaves of a (possibly nested) tuple in order; an array is its own leaf.
  std::vector<Shape> Leaves() const;

  Shape WithDType(DType dtype) const { return Shape(dtype, dims_); }
  // "f32[2,3]" or "(f32[2], s32[])".
  std::string ToString() const;

  bool operator==(const Shape& other) const;
  bool operator!=(const Shape& other) const { return !(*this == other); }

 private:
  DType dtype_ = DType::kF32;
  bool is_tuple_ = false;
  std::vector<int64_t> dims_;
  std::vector<Shape> tuple_shapes_;
};

// Row-major strides in elements.
std::vector<int64_t> RowMajorStrides(std::span<const int64_t> dims);
int64_t Product(std::span<const int64_t> dims);
std::string DimsToString(std::span<const int64_t> dims);  // "[2,3]"

}  // namespace strata
