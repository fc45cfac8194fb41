// Building ops: IR construction, dims, broadcasting, type promotion,
// scalars. Shared by lazy's op files and by the layers above that write ops
// of their own (autograd's VJP rules, checkpoint, scan); not needed to use
// the ops (lazy/ops.h).
#pragma once

#include <string_view>
#include <vector>

#include "strata/core/error.h"
#include "strata/lazy/ops.h"

namespace strata::lazy {

// A primitive op's single output (or output `index`).
ir::Value Op(hlo::Opcode opcode, std::vector<ir::Value> operands, hlo::Attributes attributes = {},
             Shape declared = {}, int64_t index = 0);
inline Tensor Wrap(ir::Value v) { return Tensor(std::move(v)); }

// A dim in [-rank, rank) made non-negative; Error naming `op` otherwise.
int64_t NormalizeDim(std::string_view op, int64_t dim, int64_t rank);
std::vector<int64_t> NormalizeDims(std::string_view op, std::vector<int64_t> dims, int64_t rank);
// The same, with errors naming the tensor's shape (rank 0 accepts 0 and -1, as torch).
int64_t NormalizeDim(std::string_view op, int64_t dim, const Shape& shape);
std::vector<int64_t> NormalizeDims(std::string_view op, std::vector<int64_t> dims,
                                   const Shape& shape);

// NumPy broadcasting of two shapes; Error naming `op` and both shapes.
std::vector<int64_t> BroadcastDims(std::string_view op, const std::vector<int64_t>& a,
                                   const std::vector<int64_t>& b);
// `v` broadcast to `dims` (trailing alignment; size-1 dims stretch).
ir::Value BroadcastValue(const ir::Value& v, const std::vector<int64_t>& dims);

// PyTorch's type promotion of two dtypes.
DType PromoteTypes(DType a, DType b);
// PyTorch's result type of two tensors: as PromoteTypes, but a 0-d tensor
// meeting a dimensioned one decides only when its category (bool < integer
// < floating) is higher (int32 [n] + int64 [] is int32, bf16 [n] * f32 [] is bf16).
DType ResultType(const Tensor& a, const Tensor& b);
ir::Value ConvertValue(const ir::Value& v, DType dtype);
// The dtype arithmetic on `t` runs in: the runtime stores f16 and bf16 but
// computes in f32, so ops convert up and round once at the end.
inline DType ComputeType(DType t) {
  return t == DType::kF16 || t == DType::kBF16 ? DType::kF32 : t;
}

// A scalar of `dtype`: a literal for 0 and 1 (or when `bake`), else a scalar
// parameter; broadcast to `dims`.
ir::Value ScalarValue(double value, DType dtype, const std::vector<int64_t>& dims,
                      bool bake = false);
// The dtype a C++ scalar takes next to a tensor of `dtype`.
DType ScalarTypeWith(DType tensor_dtype, double value);

// Elementwise binary op with broadcasting and promotion (the result dtype
// of comparisons is pred).
Tensor BinaryOp(std::string_view name, hlo::Opcode opcode, const Tensor& a, const Tensor& b);
Tensor CompareOp(std::string_view name, hlo::Comparison direction, const Tensor& a,
                 const Tensor& b);
Tensor UnaryOp(std::string_view name, hlo::Opcode opcode, const Tensor& x, bool float_only);

// x with src added at the positions index names along dimension d (torch's
// scatter_add without its checks: index and src have one shape, positions
// are in range). sort's gradient and scatter_add build on it.
ir::Value ScatterAddAlongDim(const ir::Value& x, int64_t d, const ir::Value& index,
                             const ir::Value& src);

// A PyTorch convolution's or pooling's per-dim argument (stride=2 or (2, 1)):
// `values` as given or its one value repeated, each at least `least`
// (ops_convolution.cc).
std::vector<int64_t> PerSpatialDim(std::string_view op, std::string_view what,
                                   const std::vector<int64_t>& values, int64_t spatial,
                                   int64_t least);

}  // namespace strata::lazy
