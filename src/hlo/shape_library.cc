// Shape rules of the client-library custom calls (hlo/library_calls.h).
#include <algorithm>
#include <map>

#include "shape_rules.h"
#include "strata/hlo/library_calls.h"

namespace strata::hlo::shape_rules {

Shape LibraryCallShape(const View& inst, LibraryCall call) {
  const std::string& target = inst.attrs.custom_call_target;
  ExpectOperands(inst, LibraryCallOperands(call));
  if (IsElementwiseLibraryCall(call)) {
    const Shape& x = ArrayOperand(inst, 0);
    const bool kernel = IsKernelLibraryCall(call);
    if (kernel ? x.dtype() != DType::kF32 && x.dtype() != DType::kF64 : !IsFloating(x.dtype())) {
      Reject(inst, "{} takes {}, got {}", target, kernel ? "f32 or f64" : "floats", x.ToString());
    }
    for (int64_t i = 1; i < inst.operand_count(); ++i) {
      if (ArrayOperand(inst, i) != x) {
        Reject(inst, "{} takes operands of one shape: operand {} is {}, operand 0 {}", target, i,
               inst.operand_shape(i).ToString(), x.ToString());
      }
    }
    return x;
  }
  if (call == LibraryCall::kMatrixDiagonal) {  // [..., m, n] -> [..., min(m, n)]
    const Shape& x = ArrayOperand(inst, 0);
    if (x.rank() < 2 || !IsNumeric(x.dtype())) {
      Reject(inst, "{} takes numeric matrices [..., m, n], got {}", target, x.ToString());
    }
    std::vector<int64_t> dims(x.dims().begin(), x.dims().end() - 2);
    dims.push_back(std::min(x.dim(x.rank() - 2), x.dim(x.rank() - 1)));
    return Shape(x.dtype(), dims);
  }
  // Einsum: each letter's size from the operands, which must agree.
  EinsumSpec spec;
  try {
    spec = ParseEinsumConfig(inst.attrs.backend_config);
  } catch (const Error& e) {
    Reject(inst, "{}", e.what());
  }
  const Shape& a = ArrayOperand(inst, 0);
  const Shape& b = ArrayOperand(inst, 1);
  if (a.dtype() != b.dtype() || !IsNumeric(a.dtype())) {
    Reject(inst, "einsum takes two numeric operands of one type, got {} and {}", a.ToString(),
           b.ToString());
  }
  std::map<char, int64_t> size;
  for (const auto& [labels, shape] : {std::pair{spec.a, a}, std::pair{spec.b, b}}) {
    if (static_cast<int64_t>(labels.size()) != shape.rank()) {
      Reject(inst, "einsum config \"{}\" names {} dimensions for an operand of rank {}",
             inst.attrs.backend_config, labels.size(), shape.rank());
    }
    for (size_t d = 0; d < labels.size(); ++d) {
      auto [it, fresh] = size.emplace(labels[d], shape.dim(static_cast<int64_t>(d)));
      if (!fresh && it->second != shape.dim(static_cast<int64_t>(d))) {
        Reject(inst, "einsum dimension '{}' is {} in one operand and {} in the other", labels[d],
               it->second, shape.dim(static_cast<int64_t>(d)));
      }
    }
  }
  std::vector<int64_t> dims;
  for (char c : spec.out) dims.push_back(size.at(c));
  return Shape(a.dtype(), dims);
}

}  // namespace strata::hlo::shape_rules
