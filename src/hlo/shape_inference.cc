#include "strata/hlo/shape_inference.h"

#include "shape_rules.h"

namespace strata::hlo {

using shape_rules::View;

Shape InferShape(const Instruction& instruction) {
  std::vector<const Shape*> operands;
  operands.reserve(instruction.operand_count());
  for (const Instruction* op : instruction.operands()) operands.push_back(&op->shape());
  return InferShape(instruction.opcode(), operands, instruction.attributes(), instruction.shape());
}

namespace {

bool Holds(const Shape& s, bool (*type)(DType)) {
  if (s.is_tuple()) {
    for (const Shape& e : s.tuple_shapes())
      if (Holds(e, type)) return true;
    return false;
  }
  return type(s.dtype());
}
bool IsToken(DType t) { return t == DType::kToken; }

// Tokens and complex numbers reach only the ops that take them.
void CheckSpecialTypes(const View& inst) {
  for (int64_t i = 0; i < inst.operand_count(); ++i) {
    const Shape& s = inst.operand_shape(i);
    if (Holds(s, IsToken) && !TakesTokens(inst.op)) {
      shape_rules::Reject(inst, "operand {} is or holds a token, which only orders side effects",
                          i);
    }
    if (Holds(s, IsComplex) && !TakesComplex(inst.op)) {
      shape_rules::Reject(inst, "operand {} ({}) is complex, which {} does not take", i,
                          s.ToString(), OpcodeName(inst.op));
    }
  }
  const bool made = inst.op == Opcode::kParameter || inst.op == Opcode::kConstant ||
                    inst.op == Opcode::kIota || inst.op == Opcode::kRngBitGenerator ||
                    inst.op == Opcode::kConvert || inst.op == Opcode::kBitcastConvert;
  if (made && Holds(inst.declared, IsComplex) && !TakesComplex(inst.op))
    shape_rules::Reject(inst, "cannot make {}", inst.declared.ToString());
  if (made && inst.op != Opcode::kParameter && Holds(inst.declared, IsToken))
    shape_rules::Reject(inst, "cannot make {} (after-all makes tokens)", inst.declared.ToString());
}

}  // namespace

// The opcode's row names its shape rule; every rule is listed here (a new
// one without a case is a compile error).
#pragma GCC diagnostic push
#pragma GCC diagnostic error "-Wswitch"
Shape InferShape(Opcode opcode, std::span<const Shape* const> operand_shapes,
                 const Attributes& attributes, const Shape& declared) {
  const View inst{opcode, operand_shapes, attributes, declared};
  CheckSpecialTypes(inst);
  switch (ShapeRuleOf(opcode)) {
    case ShapeRule::kElementwise:
      return ElementwiseShape(inst);
    case ShapeRule::kDataMovement:
      return DataMovementShape(inst);
    case ShapeRule::kReduction:
      return ReductionShape(inst);
    case ShapeRule::kConvolution:
      return ConvolutionShape(inst);
    case ShapeRule::kSort:
      return SortShape(inst);
    case ShapeRule::kTopK:
      return TopKShape(inst);
    case ShapeRule::kIndexing:
      return IndexingShape(inst);
    case ShapeRule::kControl:
      return ControlShape(inst);
    case ShapeRule::kCollective:
      return CollectiveShape(inst);
    case ShapeRule::kLinalg:
      return LinalgShape(inst);
    case ShapeRule::kExpanded:
      return ExpandedShape(inst);
  }
  shape_rules::Reject(inst, "unknown opcode {}", static_cast<int>(opcode));
}
#pragma GCC diagnostic pop

}  // namespace strata::hlo
