// Shape rules of XLA's ops that strata runs as others (hlo/expand.h):
// batch norm, map, reduce-precision, and copy-start / copy-done.
#include "shape_rules.h"

namespace strata::hlo::shape_rules {
namespace {

// batch-norm-*: operand [..., C, ...] with C at feature_index, the vectors
// [C] of its float type. Returns C's vector shape.
Shape BatchNormVectors(const View& inst, int64_t vectors_from, int64_t vectors_to) {
  const Shape& x = ArrayOperand(inst, 0);
  if (!IsFloating(x.dtype())) Reject(inst, "operand must be floats, got {}", x.ToString());
  const int64_t f = inst.attrs.feature_index;
  if (f < 0 || f >= x.rank()) {
    Reject(inst, "feature_index {} is out of range for operand {}", f, x.ToString());
  }
  const Shape vector(x.dtype(), {x.dim(f)});
  for (int64_t i = vectors_from; i < vectors_to; ++i) {
    if (inst.operand_shape(i) != vector) {
      Reject(inst, "operand {} must be {} (the operand's features), got {}", i, vector.ToString(),
             inst.operand_shape(i).ToString());
    }
  }
  return vector;
}

Shape MapShape(const View& inst) {
  if (inst.operand_count() < 1) Reject(inst, "expected at least one operand");
  if (inst.attrs.called.size() != 1) Reject(inst, "expected one to_apply computation");
  const Shape& first = ArrayOperand(inst, 0);
  std::vector<Shape> scalars;
  for (int64_t i = 0; i < inst.operand_count(); ++i) {
    const Shape& s = ArrayOperand(inst, i);
    if (s.dims() != first.dims()) {
      Reject(inst, "operand {} has dimensions {}; every operand must have operand 0's {}", i,
             DimsToString(s.dims()), DimsToString(first.dims()));
    }
    scalars.push_back(Shape::Scalar(s.dtype()));
  }
  // XLA maps over every dimension, in order: dimensions={0,...,rank-1} (or none written).
  const std::vector<int64_t>& dims = inst.attrs.dimensions;
  for (size_t d = 0; d < dims.size(); ++d) {
    if (dims.size() != static_cast<size_t>(first.rank()) || dims[d] != static_cast<int64_t>(d)) {
      Reject(inst, "dimensions={} must list every dimension of rank {} in order",
             DimsToString(dims), first.rank());
    }
  }
  const Shape r = CheckCalledSignature(inst, *inst.attrs.called[0], scalars, "to_apply");
  if (!r.is_array() || r.rank() != 0) {
    Reject(inst, "to_apply {} must return a scalar, returns {}", inst.attrs.called[0]->name(),
           r.ToString());
  }
  return Shape(r.dtype(), first.dims());
}

}  // namespace

Shape ExpandedShape(const View& inst) {
  switch (inst.op) {
    case Opcode::kBatchNormTraining: {  // (operand, scale, offset) -> (out, mean, variance)
      ExpectOperands(inst, 3);
      Shape v = BatchNormVectors(inst, 1, 3);
      return Shape::Tuple({inst.operand_shape(0), v, v});
    }
    case Opcode::kBatchNormInference:  // (operand, scale, offset, mean, variance) -> out
      ExpectOperands(inst, 5);
      BatchNormVectors(inst, 1, 5);
      return inst.operand_shape(0);
    case Opcode::kBatchNormGrad: {  // (operand, scale, mean, variance, grad) -> (dx, dscale,
                                    // doffset)
      ExpectOperands(inst, 5);
      Shape v = BatchNormVectors(inst, 1, 4);
      if (inst.operand_shape(4) != inst.operand_shape(0)) {
        Reject(inst, "grad_output must be the operand's {}, got {}",
               inst.operand_shape(0).ToString(), inst.operand_shape(4).ToString());
      }
      return Shape::Tuple({inst.operand_shape(0), v, v});
    }
    case Opcode::kMap:
      return MapShape(inst);
    case Opcode::kReducePrecision: {  // a float array, rounded to a narrower format
      ExpectOperands(inst, 1);
      const Shape& x = ArrayOperand(inst, 0);
      if (!IsFloating(x.dtype())) Reject(inst, "operand must be floats, got {}", x.ToString());
      if (inst.attrs.exponent_bits < 1) {
        Reject(inst, "exponent_bits must be at least 1, got {}", inst.attrs.exponent_bits);
      }
      if (inst.attrs.mantissa_bits < 0) {
        Reject(inst, "mantissa_bits must be at least 0, got {}", inst.attrs.mantissa_bits);
      }
      return x;
    }
    case Opcode::kCopyStart: {  // (destination, source, context)
      ExpectOperands(inst, 1);
      const Shape& x = ArrayOperand(inst, 0);
      return Shape::Tuple({x, x, Shape::Scalar(DType::kU32)});
    }
    case Opcode::kCopyDone: {
      ExpectOperands(inst, 1);
      const Shape& started = inst.operand_shape(0);
      if (!started.is_tuple() || started.tuple_size() < 2 || !started.tuple_shape(0).is_array()) {
        Reject(inst, "expects copy-start's tuple (destination, source, context), got {}",
               started.ToString());
      }
      return started.tuple_shape(0);
    }
    default:
      Reject(inst, "not an op strata expands");
  }
}

}  // namespace strata::hlo::shape_rules
