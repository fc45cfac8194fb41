// Shape rules of reductions and dots.
#include <fmt/ranges.h>

#include <algorithm>
#include <set>

#include "shape_rules.h"

namespace strata::hlo::shape_rules {
namespace {

Shape InferReduce(const View& inst) {
  int64_t n = inst.operand_count() / 2;
  if (inst.operand_count() < 2 || inst.operand_count() % 2 != 0) {
    Reject(inst, "expected N operands and N init values, got {} operands", inst.operand_count());
  }
  if (inst.attrs.called.size() != 1) Reject(inst, "expected one to_apply computation");
  const Shape& first = ArrayOperand(inst, 0);
  CheckDimensions(inst, inst.attrs.dimensions, first.rank(), "reduced dimension");
  std::vector<Shape> results;
  std::vector<int64_t> out_dims;
  for (int64_t d = 0; d < first.rank(); ++d) {
    if (std::find(inst.attrs.dimensions.begin(), inst.attrs.dimensions.end(), d) ==
        inst.attrs.dimensions.end()) {
      out_dims.push_back(first.dim(d));
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    const Shape& x = ArrayOperand(inst, i);
    const Shape& init = ArrayOperand(inst, n + i);
    if (x.dims() != first.dims()) {
      Reject(inst, "operand {} has dimensions {} but operand 0 has {}", i, DimsToString(x.dims()),
             DimsToString(first.dims()));
    }
    if (!init.is_scalar() || init.dtype() != x.dtype()) {
      Reject(inst, "init value {} must be a {} scalar, got {}", i, DTypeName(x.dtype()),
             init.ToString());
    }
    results.push_back(Shape(x.dtype(), out_dims));
  }
  // to_apply: (acc_0..acc_{n-1}, x_0..x_{n-1}) -> acc scalars.
  const Computation& f = *inst.attrs.called[0];
  auto params = f.parameters();
  if (static_cast<int64_t>(params.size()) != 2 * n) {
    Reject(inst, "to_apply {} must take {} scalar parameters, takes {}", f.name(), 2 * n,
           params.size());
  }
  std::vector<Shape> scalars;
  for (int64_t i = 0; i < n; ++i) scalars.push_back(Shape::Scalar(results[i].dtype()));
  for (int64_t i = 0; i < 2 * n; ++i) {
    if (params[i]->shape() != scalars[i % n]) {
      Reject(inst, "to_apply {} parameter {} must be {}, is {}", f.name(), i,
             scalars[i % n].ToString(), params[i]->shape().ToString());
    }
  }
  Shape expected_root = n == 1 ? scalars[0] : Shape::Tuple(scalars);
  if (f.root() && f.root()->shape() != expected_root) {
    Reject(inst, "to_apply {} must return {}, returns {}", f.name(), expected_root.ToString(),
           f.root()->shape().ToString());
  }
  return n == 1 ? results[0] : Shape::Tuple(results);
}

Shape InferDot(const View& inst) {
  ExpectOperands(inst, 2);
  const Shape& lhs = ArrayOperand(inst, 0);
  const Shape& rhs = ArrayOperand(inst, 1);
  const DotDims& d = inst.attrs.dot;
  if (lhs.dtype() != rhs.dtype()) {
    Reject(inst, "operands must have one element type, got {} and {}", DTypeName(lhs.dtype()),
           DTypeName(rhs.dtype()));
  }
  if (lhs.dtype() == DType::kPred) Reject(inst, "pred operands are not supported");
  if (d.lhs_batch.size() != d.rhs_batch.size() ||
      d.lhs_contracting.size() != d.rhs_contracting.size()) {
    Reject(inst, "lhs and rhs must have as many batch and contracting dimensions");
  }
  std::vector<int64_t> lhs_used = d.lhs_batch, rhs_used = d.rhs_batch;
  lhs_used.insert(lhs_used.end(), d.lhs_contracting.begin(), d.lhs_contracting.end());
  rhs_used.insert(rhs_used.end(), d.rhs_contracting.begin(), d.rhs_contracting.end());
  CheckDimensions(inst, lhs_used, lhs.rank(), "lhs batch/contracting dimension");
  CheckDimensions(inst, rhs_used, rhs.rank(), "rhs batch/contracting dimension");
  for (size_t i = 0; i < d.lhs_batch.size(); ++i) {
    if (lhs.dim(d.lhs_batch[i]) != rhs.dim(d.rhs_batch[i])) {
      Reject(inst, "batch dimension sizes differ: lhs {} vs rhs {}", lhs.dim(d.lhs_batch[i]),
             rhs.dim(d.rhs_batch[i]));
    }
  }
  for (size_t i = 0; i < d.lhs_contracting.size(); ++i) {
    if (lhs.dim(d.lhs_contracting[i]) != rhs.dim(d.rhs_contracting[i])) {
      Reject(inst,
             "contracting dimension sizes differ: lhs dimension {} is {}, rhs dimension {} is {}",
             d.lhs_contracting[i], lhs.dim(d.lhs_contracting[i]), d.rhs_contracting[i],
             rhs.dim(d.rhs_contracting[i]));
    }
  }
  std::vector<int64_t> out;
  for (int64_t b : d.lhs_batch) out.push_back(lhs.dim(b));
  for (int64_t i = 0; i < lhs.rank(); ++i) {
    if (std::find(lhs_used.begin(), lhs_used.end(), i) == lhs_used.end()) out.push_back(lhs.dim(i));
  }
  for (int64_t i = 0; i < rhs.rank(); ++i) {
    if (std::find(rhs_used.begin(), rhs_used.end(), i) == rhs_used.end()) out.push_back(rhs.dim(i));
  }
  return Shape(lhs.dtype(), out);
}

}  // namespace

Shape ReductionShape(const View& inst) {
  [[maybe_unused]] const Shape& declared = inst.declared;
  switch (inst.op) {
    case Opcode::kReduce:
      return InferReduce(inst);
    case Opcode::kDot:
      return InferDot(inst);
    default:
      Reject(inst, "is not a reduction");
  }
}

}  // namespace strata::hlo::shape_rules
