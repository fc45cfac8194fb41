// Checks the shape rules share (shape_rules.h).
#include <fmt/ranges.h>

#include <algorithm>
#include <set>

#include "shape_rules.h"

namespace strata::hlo::shape_rules {

void ExpectOperands(const View& inst, int64_t n) {
  if (inst.operand_count() != n) {
    Reject(inst, "expected {} operand(s), got {}", n, inst.operand_count());
  }
}

const Shape& ArrayOperand(const View& inst, int64_t i) {
  const Shape& s = inst.operand_shape(i);
  if (!s.is_array()) Reject(inst, "operand {} must be an array, got tuple {}", i, s.ToString());
  return s;
}

// Dimension numbers must be unique and in [0, rank).
void CheckDimensions(const View& inst, const std::vector<int64_t>& dims, int64_t rank,
                     std::string_view what) {
  std::set<int64_t> seen;
  for (int64_t d : dims) {
    if (d < 0 || d >= rank) Reject(inst, "{} {} out of range for rank {}", what, d, rank);
    if (!seen.insert(d).second) Reject(inst, "{} {} repeated in {}", what, d, fmt::join(dims, ","));
  }
}

void CheckSorted(const View& inst, const std::vector<int64_t>& dims, std::string_view what) {
  if (!std::is_sorted(dims.begin(), dims.end())) {
    Reject(inst, "{} must be sorted, got {{{}}}", what, fmt::join(dims, ","));
  }
}

Shape CheckCalledSignature(const View& inst, const Computation& f, const std::vector<Shape>& args,
                           std::string_view role) {
  auto params = f.parameters();
  if (params.size() != args.size()) {
    Reject(inst, "{} {} takes {} parameters, given {}", role, f.name(), params.size(), args.size());
  }
  for (size_t i = 0; i < args.size(); ++i) {
    if (params[i]->shape() != args[i]) {
      Reject(inst, "{} {} parameter {} is {}, given {}", role, f.name(), i,
             params[i]->shape().ToString(), args[i].ToString());
    }
  }
  if (!f.root()) Reject(inst, "{} {} has no root", role, f.name());
  return f.root()->shape();
}

void CheckStartIndices(const View& inst, int64_t first, int64_t rank) {
  if (inst.operand_count() != first + rank) {
    Reject(inst, "expected {} start indices (one per dimension), got {}", rank,
           inst.operand_count() - first);
  }
  for (int64_t i = first; i < inst.operand_count(); ++i) {
    const Shape& s = ArrayOperand(inst, i);
    if (!s.is_scalar() || !IsInteger(s.dtype())) {
      Reject(inst, "start index {} must be an integer scalar, got {}", i - first, s.ToString());
    }
  }
}

DType AccumulationType(const View& inst, DType operands, const std::vector<int64_t>& dims) {
  const Shape& declared = inst.declared;
  if (!declared.is_array() || declared.dims() != dims) return operands;
  const DType wanted = declared.dtype();
  const bool floats = IsFloating(operands) && IsFloating(wanted);
  const bool integers = (IsSignedInteger(operands) && IsSignedInteger(wanted)) ||
                        (IsUnsignedInteger(operands) && IsUnsignedInteger(wanted));
  // Anything else (a narrower type, another kind) is the operands' type: a
  // declared shape that differs is then an error naming both.
  return (floats || integers) && DTypeSize(wanted) > DTypeSize(operands) ? wanted : operands;
}

}  // namespace strata::hlo::shape_rules
