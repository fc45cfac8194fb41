// The HLO shape rules, one file per op family (shape_elementwise.cc,
// shape_data_movement.cc, shape_reduction.cc, shape_indexing.cc,
// shape_control.cc, shape_collective.cc), and the checks they share.
// InferShape (shape_inference.cc) picks the family.
#pragma once

#include <fmt/format.h>

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "strata/core/error.h"
#include "strata/hlo/module.h"
#include "strata/hlo/shape_inference.h"

namespace strata::hlo {
enum class LibraryCall : uint8_t;
}

namespace strata::hlo::shape_rules {

// What the rules read: opcode, operand shapes, attributes, declared shape.
struct View {
  Opcode op;
  std::span<const Shape* const> operands;
  const Attributes& attrs;
  const Shape& declared;
  int64_t operand_count() const { return static_cast<int64_t>(operands.size()); }
  const Shape& operand_shape(int64_t i) const { return *operands[i]; }
};

// Formats "[opcode] message; operands: f32[2,3], s32[]".
template <typename... Args>
[[noreturn]] void Reject(const View& inst, fmt::format_string<Args...> format, Args&&... args) {
  std::string operands;
  for (int64_t i = 0; i < inst.operand_count(); ++i) {
    if (i) operands += ", ";
    operands += inst.operand_shape(i).ToString();
  }
  throw Error(fmt::format("[{}] {} (operands: {})", OpcodeName(inst.op),
                          fmt::format(format, std::forward<Args>(args)...),
                          operands.empty() ? "none" : operands));
}

void ExpectOperands(const View& inst, int64_t n);

const Shape& ArrayOperand(const View& inst, int64_t i);

// Dimension numbers must be unique and in [0, rank).
void CheckDimensions(const View& inst, const std::vector<int64_t>& dims, int64_t rank,
                     std::string_view what);

void CheckSorted(const View& inst, const std::vector<int64_t>& dims, std::string_view what);

Shape CheckCalledSignature(const View& inst, const Computation& f, const std::vector<Shape>& args,
                           std::string_view role);

void CheckStartIndices(const View& inst, int64_t first, int64_t rank);

inline bool IsNumeric(DType t) { return t != DType::kPred; }

// A dot's or convolution's result type: the operands' unless the declared
// shape asks for a wider one of the same kind (XLA's preferred element type:
// bf16 x bf16 -> f32, s8 x s8 -> s32), which the runtime computes in. (An
// instruction built without a shape declares its operand type: Builder and
// ir::Node pass one for dots and convolutions.)
DType AccumulationType(const View& inst, DType operands, const std::vector<int64_t>& dims);

// The families: each takes the opcodes InferShape sends it.
Shape ElementwiseShape(const View& inst);
Shape DataMovementShape(const View& inst);
Shape ReductionShape(const View& inst);
Shape IndexingShape(const View& inst);
Shape ControlShape(const View& inst);
Shape CollectiveShape(const View& inst);
Shape ConvolutionShape(const View& inst);                    // shape_convolution.cc
Shape SortShape(const View& inst);                           // shape_sort.cc
Shape TopKShape(const View& inst);                           // shape_sort.cc
Shape LinalgShape(const View& inst);                         // shape_linalg.cc
Shape ExpandedShape(const View& inst);                       // shape_expanded.cc
Shape LibraryCallShape(const View& inst, LibraryCall call);  // shape_library.cc

}  // namespace strata::hlo::shape_rules
