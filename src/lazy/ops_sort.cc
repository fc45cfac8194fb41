// Sorting: sort, argsort and topk over XLA's sort. Every sort strata builds
// sorts an s64 iota along the dimension with its keys, so its last output is
// the permutation: the indices users ask for, and what the gradient rule
// (autograd/vjp_sort.cc) sends cotangents back through.
#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <map>
#include <mutex>

#include "strata/hlo/builder.h"
#include "strata/lazy/op_builder.h"

namespace strata {

using hlo::Opcode;
using lazy::Op;
using lazy::Wrap;

namespace {

// (lhs_key, rhs_key, then a pair per other operand) -> lhs_key before
// rhs_key. Float keys compare in XLA's total order, on keys whose NaNs and
// zeros were made positive first (so NaN is the largest and -0 == +0).
// Per process, as ir::ScalarCombiner's cache: a pure function of its key.
hlo::Computation* KeyComparator(DType key, bool descending, const std::vector<DType>& others) {
  static std::mutex mutex;
  static auto* cache = new std::map<std::string, std::unique_ptr<hlo::Computation>>();
  std::string name = fmt::format("sort_{}_{}", descending ? "gt" : "lt", DTypeName(key));
  for (DType t : others) name += fmt::format("_{}", DTypeName(t));
  std::lock_guard<std::mutex> lock(mutex);
  auto& slot = (*cache)[name];
  if (!slot) {
    hlo::NameScope names;
    hlo::Builder b(name);
    auto* lhs = b.Parameter(0, Shape::Scalar(key), "lhs");
    auto* rhs = b.Parameter(1, Shape::Scalar(key), "rhs");
    for (size_t i = 0; i < others.size(); ++i) {
      b.Parameter(2 + 2 * static_cast<int64_t>(i), Shape::Scalar(others[i]));
      b.Parameter(3 + 2 * static_cast<int64_t>(i), Shape::Scalar(others[i]));
    }
    slot = b.Build(b.Compare(
        lhs, rhs, descending ? hlo::Comparison::kGt : hlo::Comparison::kLt,
        IsFloating(key) ? hlo::ComparisonType::kTotalOrder : hlo::ComparisonType::kDefault));
  }
  return slot.get();
}

// Float keys with every NaN made +NaN and -0 made +0, so the total order
// puts NaNs last and keeps zeros in their order, as torch's sort does.
ir::Value CanonicalKeys(const ir::Value& x) {
  const std::vector<int64_t>& dims = x.shape().dims();
  const DType t = x.shape().dtype();
  auto compare = [](const ir::Value& a, const ir::Value& b, hlo::Comparison c) {
    hlo::Attributes attributes;
    attributes.direction = c;
    return Op(Opcode::kCompare, {a, b}, std::move(attributes));
  };
  ir::Value zero = lazy::ScalarValue(0, t, dims);
  ir::Value nan = lazy::ScalarValue(std::numeric_limits<double>::quiet_NaN(), t, dims, true);
  ir::Value no_negative_zero =
      Op(Opcode::kSelect, {compare(x, zero, hlo::Comparison::kEq), zero, x});
  return Op(Opcode::kSelect, {compare(x, x, hlo::Comparison::kNe), nan, no_negative_zero});
}

ValuesIndices SortAlong(std::string_view op, const Tensor& x, int64_t dim, bool descending,
                        bool stable) {
  const Shape& s = x.shape();
  if (s.rank() == 0) {
    lazy::NormalizeDim(op, dim, s);
    return {x, zeros({}, DType::kS64)};
  }
  const int64_t d = lazy::NormalizeDim(op, dim, s);
  hlo::Attributes iota_attributes;
  iota_attributes.dimensions = {d};
  ir::Value iota = Op(Opcode::kIota, {}, std::move(iota_attributes), Shape(DType::kS64, s.dims()));
  std::vector<ir::Value> operands;
  std::vector<DType> others;
  if (IsFloating(x.dtype())) {  // (keys, x, iota): keys in f32 or f64, the values as they are
    operands = {CanonicalKeys(lazy::ConvertValue(x.value(), lazy::ComputeType(x.dtype()))),
                x.value(), iota};
    others = {x.dtype(), DType::kS64};
  } else {  // (x, iota)
    operands = {x.value(), iota};
    others = {DType::kS64};
  }
  hlo::Attributes a;
  a.dimensions = {d};
  a.is_stable = stable;
  a.called = {KeyComparator(operands[0].shape().dtype(), descending, others)};
  ir::NodePtr sorted = ir::Node::MakeOp(Opcode::kSort, std::move(operands), std::move(a));
  const int64_t n = sorted->num_outputs();
  return {Wrap(ir::Value{sorted, n - 2}), Wrap(ir::Value{sorted, n - 1})};
}

}  // namespace

ValuesIndices sort(const Tensor& x, int64_t dim, bool descending, bool stable) {
  return SortAlong("sort", x, dim, descending, stable);
}

Tensor argsort(const Tensor& x, int64_t dim, bool descending, bool stable) {
  return SortAlong("argsort", x, dim, descending, stable).indices;
}

// XLA's topk over the last dimension (moved there and back for another),
// on canonical keys as sort's; the values are gathered from x itself, so they
// keep their bits (a -0, a NaN's payload) and their gradient is the gather's.
ValuesIndices topk(const Tensor& x, int64_t k, int64_t dim, bool largest, bool sorted) {
  const Shape& s = x.shape();
  const int64_t d = lazy::NormalizeDim("topk", dim, s);
  const int64_t size = s.rank() == 0 ? 1 : s.dim(d);
  if (k < 0 || k > size) {
    Fail("[topk] k = {} is out of range for dimension {} of {}: expected 0 <= k <= {}", k, d,
         s.ToString(), size);
  }
  if (s.rank() == 0) return {x, zeros({}, DType::kS64)};
  if (k == 0 || s.num_elements() == 0) {  // nothing to choose
    std::vector<int64_t> dims = s.dims();
    dims[d] = k;
    return {zeros(dims, x.dtype()), zeros(dims, DType::kS64)};
  }
  if (x.dtype() == DType::kPred) {  // XLA's topk takes numbers
    ValuesIndices r = topk(astype(x, DType::kU8), k, d, largest, sorted);
    return {astype(r.values, DType::kPred), r.indices};
  }
  const int64_t last = s.rank() - 1;
  std::vector<int64_t> order(s.rank());
  for (int64_t i = 0; i < s.rank(); ++i) order[i] = i;
  std::swap(order[d], order[last]);  // its own inverse
  Tensor moved = d == last ? x : permute(x, order);
  ir::Value keys = moved.value();
  if (IsFloating(x.dtype()))
    keys = CanonicalKeys(lazy::ConvertValue(keys, lazy::ComputeType(x.dtype())));
  hlo::Attributes a;
  a.k = k;
  a.largest = largest;
  ir::NodePtr top = ir::Node::MakeOp(Opcode::kTopK, {keys}, std::move(a));
  Tensor indices = astype(Wrap(ir::Value{top, 1}), DType::kS64);
  Tensor values = take_along_dim(moved, indices, last);
  if (d != last) {
    values = permute(values, order);
    indices = permute(indices, order);
  }
  return {values, indices};
}

}  // namespace strata
