// Shape rules of the linear-algebra ops: cholesky and triangular-solve, on
// batches of square matrices in the last two dimensions (XLA's semantics).
#include "shape_rules.h"

namespace strata::hlo::shape_rules {
namespace {

// A batch of square f32 / f64 matrices [..., m, m]; returns m.
int64_t SquareMatrices(const View& inst, int64_t i, std::string_view what) {
  const Shape& a = ArrayOperand(inst, i);
  if (a.dtype() != DType::kF32 && a.dtype() != DType::kF64) {
    Reject(inst, "{} must be f32 or f64, got {}", what, a.ToString());
  }
  if (a.rank() < 2 || a.dim(a.rank() - 1) != a.dim(a.rank() - 2)) {
    Reject(inst, "{} must be square matrices [..., m, m], got {}", what, a.ToString());
  }
  return a.dim(a.rank() - 1);
}

}  // namespace

Shape LinalgShape(const View& inst) {
  if (inst.op == Opcode::kCholesky) {
    ExpectOperands(inst, 1);
    SquareMatrices(inst, 0, "cholesky's operand");
    return inst.operand_shape(0);
  }
  if (inst.op != Opcode::kTriangularSolve) Reject(inst, "not a linear-algebra op");
  // triangular-solve(a, b): op(a) x = b (left_side) or x op(a) = b.
  ExpectOperands(inst, 2);
  const int64_t m = SquareMatrices(inst, 0, "a");
  const Shape& a = inst.operand_shape(0);
  const Shape& b = ArrayOperand(inst, 1);
  if (b.dtype() != a.dtype() || b.rank() != a.rank()) {
    Reject(inst, "b must be {} matrices of a's rank {}, got {}", DTypeName(a.dtype()), a.rank(),
           b.ToString());
  }
  for (int64_t d = 0; d + 2 < a.rank(); ++d) {
    if (a.dim(d) != b.dim(d)) {
      Reject(inst, "batch dimension {} is {} in a and {} in b", d, a.dim(d), b.dim(d));
    }
  }
  const bool left = inst.attrs.linalg.left_side;
  const int64_t shared = b.dim(b.rank() - (left ? 2 : 1));
  if (shared != m) {
    Reject(inst, "with left_side={} b's {} dimension must be a's {}, got {}", left,
           left ? "second-to-last" : "last", m, shared);
  }
  return b;
}

}  // namespace strata::hlo::shape_rules
