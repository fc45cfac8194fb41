// sort(x_0, .., x_{n-1}), dimensions={d}, to_apply=comparator: every operand
// permuted along d by the one order the comparator gives (XLA's sort).
#include <limits>

#include "shape_rules.h"

namespace strata::hlo::shape_rules {

Shape SortShape(const View& inst) {
  if (inst.operand_count() < 1) Reject(inst, "expected at least one operand");
  if (inst.attrs.called.size() != 1) Reject(inst, "expected one comparator (to_apply)");
  const Shape& first = ArrayOperand(inst, 0);
  std::vector<Shape> results, params;
  for (int64_t i = 0; i < inst.operand_count(); ++i) {
    const Shape& s = ArrayOperand(inst, i);
    if (s.dims() != first.dims()) {
      Reject(inst, "operand {} has dimensions {}; every operand must have operand 0's {}", i,
             DimsToString(s.dims()), DimsToString(first.dims()));
    }
    results.push_back(s);
    params.push_back(Shape::Scalar(s.dtype()));
    params.push_back(Shape::Scalar(s.dtype()));
  }
  if (inst.attrs.dimensions.size() != 1) {
    Reject(inst, "expected one sort dimension, got dimensions={}",
           DimsToString(inst.attrs.dimensions));
  }
  const int64_t d = inst.attrs.dimensions[0];
  if (first.rank() == 0 || d < 0 || d >= first.rank()) {
    Reject(inst, "sort dimension {} is out of range for rank {}", d, first.rank());
  }
  const Shape r = CheckCalledSignature(inst, *inst.attrs.called[0], params, "comparator");
  if (r != Shape::Scalar(DType::kPred)) {
    Reject(inst, "comparator {} must return pred[], returns {}", inst.attrs.called[0]->name(),
           r.ToString());
  }
  return results.size() == 1 ? results[0] : Shape::Tuple(results);
}

// topk(x), k=K, largest=true|false: the K largest (or smallest) elements of
// each row along x's last dimension and their s32 positions, in order.
Shape TopKShape(const View& inst) {
  ExpectOperands(inst, 1);
  const Shape& x = ArrayOperand(inst, 0);
  if (x.rank() == 0) Reject(inst, "needs an operand of rank 1 or more, got {}", x.ToString());
  if (x.dtype() == DType::kPred) Reject(inst, "takes numbers, got {}", x.ToString());
  const int64_t n = x.dims().back();
  if (n > std::numeric_limits<int32_t>::max()) {
    Reject(inst, "a last dimension of {} elements is more than its s32 positions can name", n);
  }
  if (inst.attrs.k < 0 || inst.attrs.k > n) {
    Reject(inst, "k = {} is out of range for a last dimension of {}", inst.attrs.k, n);
  }
  std::vector<int64_t> dims = x.dims();
  dims.back() = inst.attrs.k;
  return Shape::Tuple({Shape(x.dtype(), dims), Shape(DType::kS32, dims)});
}

}  // namespace strata::hlo::shape_rules
