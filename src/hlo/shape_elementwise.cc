// Shape rules of elementwise ops: arithmetic, comparisons, select, clamp, conversions.
#include <fmt/ranges.h>

#include <algorithm>
#include <set>

#include "shape_rules.h"

namespace strata::hlo::shape_rules {
namespace {

// The unary and binary ops take the element types of their row in the
// opcode list (opcode.h).
Shape InferElementwise(const View& inst) {
  const bool unary = IsElementwiseUnary(inst.op);
  ExpectOperands(inst, unary ? 1 : 2);
  const Shape& a = ArrayOperand(inst, 0);
  if (!unary) {
    const Shape& b = ArrayOperand(inst, 1);
    if (a != b)
      Reject(inst, "operands must have equal shapes, got {} and {}", a.ToString(), b.ToString());
  }
  const DType t = a.dtype();
  const ElementTypes types = ElementTypesOf(inst.op);
  const bool ok = t == DType::kPred ? TakesPred(types)
                  : IsFloating(t)   ? TakesFloats(types)
                  : IsComplex(t)    ? TakesComplex(inst.op)
                                    : TakesIntegers(types);
  if (!ok) Reject(inst, "unsupported element type {}", DTypeName(t));
  // The magnitude of a complex number is real.
  if (inst.op == Opcode::kAbs && IsComplex(t)) return Shape(ComplexPartType(t), a.dims());
  return a;
}

}  // namespace

Shape ElementwiseShape(const View& inst) {
  [[maybe_unused]] const Shape& declared = inst.declared;
  switch (inst.op) {
    case Opcode::kConvert:
    case Opcode::kBitcastConvert: {
      ExpectOperands(inst, 1);
      const Shape& x = ArrayOperand(inst, 0);
      if (!declared.is_array()) Reject(inst, "result must be an array");
      // pred is one bit wide in XLA (a byte here): bitcasting a byte to it
      // would make pred bytes other than 0 and 1.
      const int64_t from = DTypeSize(x.dtype()), to = DTypeSize(declared.dtype());
      if (inst.op == Opcode::kBitcastConvert &&
          (x.dtype() == DType::kPred) != (declared.dtype() == DType::kPred)) {
        Reject(inst, "{} and {} differ in bit width", DTypeName(x.dtype()),
               DTypeName(declared.dtype()));
      }
      if (inst.op == Opcode::kConvert && IsComplex(x.dtype()) && !IsComplex(declared.dtype())) {
        Reject(inst, "convert from {} to {} would drop the imaginary part; take real() or imag()",
               DTypeName(x.dtype()), DTypeName(declared.dtype()));
      }
      if (inst.op == Opcode::kConvert || from == to) return Shape(declared.dtype(), x.dims());
      // Between widths, as XLA: to a narrower type each element becomes a
      // new minor dimension of from / to elements (in memory order, little
      // endian here); to a wider one the minor dimension, of to / from
      // elements, becomes one element.
      std::vector<int64_t> dims = x.dims();
      if (to < from) {
        dims.push_back(from / to);
      } else if (dims.empty() || dims.back() != to / from) {
        Reject(inst, "bitcast-convert from {} to {} needs a minor dimension of {} elements, got {}",
               x.ToString(), DTypeName(declared.dtype()), to / from, x.ToString());
      } else {
        dims.pop_back();
      }
      return Shape(declared.dtype(), std::move(dims));
    }
    case Opcode::kSelect: {
      ExpectOperands(inst, 3);
      const Shape& p = ArrayOperand(inst, 0);
      const Shape& a = ArrayOperand(inst, 1);
      const Shape& b = ArrayOperand(inst, 2);
      if (a != b)
        Reject(inst, "branches must have equal shapes, got {} and {}", a.ToString(), b.ToString());
      if (p.dtype() != DType::kPred || (!p.is_scalar() && p.dims() != a.dims())) {
        Reject(inst, "predicate must be pred{} or a pred scalar, got {}", DimsToString(a.dims()),
               p.ToString());
      }
      return a;
    }
    case Opcode::kCompare: {
      ExpectOperands(inst, 2);
      const Shape& a = ArrayOperand(inst, 0);
      const Shape& b = ArrayOperand(inst, 1);
      if (a != b)
        Reject(inst, "operands must have equal shapes, got {} and {}", a.ToString(), b.ToString());
      if (IsComplex(a.dtype()) && inst.attrs.direction != Comparison::kEq &&
          inst.attrs.direction != Comparison::kNe) {
        Reject(inst, "{} numbers are unordered: only EQ and NE compare them, got {}",
               DTypeName(a.dtype()), ComparisonName(inst.attrs.direction));
      }
      return Shape(DType::kPred, a.dims());
    }
    case Opcode::kReal:
    case Opcode::kImag: {
      ExpectOperands(inst, 1);
      const Shape& x = ArrayOperand(inst, 0);
      // XLA's real / imag of a real number are the number and 0.
      if (!IsComplex(x.dtype()) && !IsFloating(x.dtype()))
        Reject(inst, "operand must be complex or floating point, got {}", x.ToString());
      return IsComplex(x.dtype()) ? Shape(ComplexPartType(x.dtype()), x.dims()) : x;
    }
    case Opcode::kComplex: {
      ExpectOperands(inst, 2);
      const Shape& re = ArrayOperand(inst, 0);
      const Shape& im = ArrayOperand(inst, 1);
      if (re != im || (re.dtype() != DType::kF32 && re.dtype() != DType::kF64)) {
        Reject(inst, "takes two f32 or two f64 arrays of one shape, got {} and {}", re.ToString(),
               im.ToString());
      }
      return Shape(re.dtype() == DType::kF32 ? DType::kC64 : DType::kC128, re.dims());
    }
    case Opcode::kClamp: {
      ExpectOperands(inst, 3);
      const Shape& lo = ArrayOperand(inst, 0);
      const Shape& x = ArrayOperand(inst, 1);
      const Shape& hi = ArrayOperand(inst, 2);
      for (const Shape* bound : {&lo, &hi}) {
        if (bound->dtype() != x.dtype() || (!bound->is_scalar() && bound->dims() != x.dims())) {
          Reject(inst, "bounds must be {} or {} scalars, got {}", x.ToString(),
                 DTypeName(x.dtype()), bound->ToString());
        }
      }
      return x;
    }
    case Opcode::kIsFinite: {
      ExpectOperands(inst, 1);
      const Shape& x = ArrayOperand(inst, 0);
      if (!IsFloating(x.dtype())) Reject(inst, "operand must be floating point");
      return Shape(DType::kPred, x.dims());
    }
    default:
      return InferElementwise(inst);  // the unary and binary ops
  }
}

}  // namespace strata::hlo::shape_rules
