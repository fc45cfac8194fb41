// Reductions: sum, mean, max, min over any set of dims; argmax / argmin over one.
#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "strata/lazy/op_builder.h"

namespace strata {

using hlo::Opcode;
using lazy::Op;
using lazy::Wrap;

namespace {

// The reduced dims, non-negative and sorted; empty `dims` means all. A rank-0
// tensor accepts dim 0 / -1 (as torch) and has nothing to reduce.
std::vector<int64_t> ReducedDims(std::string_view op, const Tensor& x, std::vector<int64_t> dims) {
  if (x.rank() == 0) {
    lazy::NormalizeDims(op, std::move(dims), x.shape());
    return {};
  }
  if (dims.empty()) {
    for (int64_t d = 0; d < x.rank(); ++d) dims.push_back(d);
    return dims;
  }
  dims = lazy::NormalizeDims(op, std::move(dims), x.shape());
  std::sort(dims.begin(), dims.end());
  return dims;
}

std::vector<int64_t> KeptDims(const std::vector<int64_t>& dims, const std::vector<int64_t>& reduced,
                              bool keepdim) {
  std::vector<int64_t> out;
  for (size_t d = 0; d < dims.size(); ++d) {
    bool is_reduced = std::binary_search(reduced.begin(), reduced.end(), static_cast<int64_t>(d));
    if (!is_reduced) {
      out.push_back(dims[d]);
    } else if (keepdim) {
      out.push_back(1);
    }
  }
  return out;
}

ir::Value Reduce(std::vector<ir::Value> operands_and_inits, std::vector<int64_t> reduced,
                 hlo::Computation* combiner, int64_t output = 0) {
  hlo::Attributes a;
  a.dimensions = std::move(reduced);
  a.called = {combiner};
  return Op(Opcode::kReduce, std::move(operands_and_inits), std::move(a), {}, output);
}

// Result of reducing `x`'s `reduced` dims, reshaped for keepdim.
Tensor Finish(const ir::Value& v, const Tensor& x, const std::vector<int64_t>& reduced,
              bool keepdim) {
  if (!keepdim || reduced.empty()) return Wrap(v);
  return Wrap(Op(Opcode::kReshape, {v}, {},
                 Shape(v.shape().dtype(), KeptDims(x.shape().dims(), reduced, true))));
}

void CheckNonEmpty(std::string_view op, const Tensor& x, const std::vector<int64_t>& reduced) {
  for (int64_t d : reduced) {
    if (x.shape().dim(d) == 0) {
      Fail("[{}] cannot reduce dimension {} of size 0 in {}: the operation has no identity", op, d,
           x.shape().ToString());
    }
  }
}

template <typename T>
hlo::Literal Bound(bool lowest) {
  using Limits = std::numeric_limits<T>;
  if constexpr (Limits::has_infinity)
    return hlo::Literal::Scalar<T>(lowest ? -Limits::infinity() : Limits::infinity());
  return hlo::Literal::Scalar<T>(lowest ? Limits::lowest() : Limits::max());
}

// The identity of max (lowest) or min (highest) for `dtype`.
ir::Value Extreme(DType dtype, bool lowest) {
  hlo::Literal lit;
  switch (dtype) {
    case DType::kPred:
      lit = hlo::Literal::Scalar<bool>(!lowest);
      break;
    case DType::kS8:
      lit = Bound<int8_t>(lowest);
      break;
    case DType::kS16:
      lit = Bound<int16_t>(lowest);
      break;
    case DType::kU16:
      lit = Bound<uint16_t>(lowest);
      break;
    case DType::kS32:
      lit = Bound<int32_t>(lowest);
      break;
    case DType::kS64:
      lit = Bound<int64_t>(lowest);
      break;
    case DType::kU8:
      lit = Bound<uint8_t>(lowest);
      break;
    case DType::kU32:
      lit = Bound<uint32_t>(lowest);
      break;
    case DType::kU64:
      lit = Bound<uint64_t>(lowest);
      break;
    case DType::kF32:
      lit = Bound<float>(lowest);
      break;
    case DType::kF64:
      lit = Bound<double>(lowest);
      break;
    default:
      STRATA_CHECK(false, "no extreme value for {}", DTypeName(dtype));
  }
  return ir::Value{ir::Node::MakeConstant(std::move(lit))};
}

Tensor MaxOrMin(std::string_view op, bool is_max, const Tensor& x, std::vector<int64_t> dims,
                bool keepdim) {
  auto reduced = ReducedDims(op, x, std::move(dims));
  CheckNonEmpty(op, x, reduced);
  if (reduced.empty()) return x;
  DType compute = lazy::ComputeType(x.dtype());
  // On pred, max is "any" and min is "all".
  Opcode combine = compute == DType::kPred ? (is_max ? Opcode::kOr : Opcode::kAnd)
                                           : (is_max ? Opcode::kMaximum : Opcode::kMinimum);
  ir::Value r = Reduce({lazy::ConvertValue(x.value(), compute), Extreme(compute, is_max)}, reduced,
                       ir::ScalarCombiner(combine, compute));
  return Finish(lazy::ConvertValue(r, x.dtype()), x, reduced, keepdim);
}

Tensor ArgMaxOrMin(std::string_view op, bool is_max, const Tensor& x, int64_t dim, bool keepdim) {
  int64_t d = lazy::NormalizeDim(op, dim, x.shape());
  if (x.dtype() == DType::kPred)
    Fail("[{}] is not defined for bool tensors ({})", op, x.shape().ToString());
  if (x.rank() == 0) return zeros({}, DType::kS64);
  CheckNonEmpty(op, x, {d});
  DType compute = lazy::ComputeType(x.dtype());
  hlo::Attributes iota;
  iota.dimensions = {d};
  ir::Value index = Op(Opcode::kIota, {}, std::move(iota), Shape(DType::kS64, x.shape().dims()));
  ir::Value zero = lazy::ScalarValue(0, DType::kS64, {});
  ir::Value r =
      Reduce({lazy::ConvertValue(x.value(), compute), index, Extreme(compute, is_max), zero}, {d},
             ir::ArgCombiner(is_max, compute, DType::kS64), /*output=*/1);
  return Finish(r, x, {d}, keepdim);
}

}  // namespace

Tensor sum(const Tensor& x, std::vector<int64_t> dims, bool keepdim) {
  auto reduced = ReducedDims("sum", x, std::move(dims));
  // As torch: bool and integer sums are s64.
  DType out = IsFloating(x.dtype()) ? x.dtype() : DType::kS64;
  DType compute = lazy::ComputeType(out);
  ir::Value v = lazy::ConvertValue(x.value(), compute);
  if (reduced.empty()) return Wrap(lazy::ConvertValue(v, out));
  ir::Value r = Reduce({v, lazy::ScalarValue(0, compute, {})}, reduced,
                       ir::ScalarCombiner(Opcode::kAdd, compute));
  return Finish(lazy::ConvertValue(r, out), x, reduced, keepdim);
}

Tensor mean(const Tensor& x, std::vector<int64_t> dims, bool keepdim) {
  auto reduced = ReducedDims("mean", x, std::move(dims));
  if (!IsFloating(x.dtype())) {
    Fail("[mean] needs a floating-point tensor, got {}; convert it with astype first",
         x.shape().ToString());
  }
  if (reduced.empty()) return x;
  DType compute = lazy::ComputeType(x.dtype());
  int64_t count = 1;
  for (int64_t d : reduced) count *= x.shape().dim(d);
  ir::Value total =
      Reduce({lazy::ConvertValue(x.value(), compute), lazy::ScalarValue(0, compute, {})}, reduced,
             ir::ScalarCombiner(Opcode::kAdd, compute));
  // The count follows from the shape, so it is baked in; 0 / 0 gives NaN as torch.
  ir::Value divided = Op(
      Opcode::kDivide,
      {total, lazy::ScalarValue(static_cast<double>(count), compute, total.shape().dims(), true)});
  return Finish(lazy::ConvertValue(divided, x.dtype()), x, reduced, keepdim);
}

Tensor max(const Tensor& x, std::vector<int64_t> dims, bool keepdim) {
  return MaxOrMin("max", true, x, std::move(dims), keepdim);
}
Tensor min(const Tensor& x, std::vector<int64_t> dims, bool keepdim) {
  return MaxOrMin("min", false, x, std::move(dims), keepdim);
}
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) {
  return ArgMaxOrMin("argmax", true, x, dim, keepdim);
}
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim) {
  return ArgMaxOrMin("argmin", false, x, dim, keepdim);
}

}  // namespace strata
