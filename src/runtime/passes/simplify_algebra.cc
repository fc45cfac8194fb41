// Algebraic simplification: rewrites that remove work without changing
// results (x+0, x*1, identity reshapes/transposes/broadcasts/converts/slices,
// nested reshapes and transposes, get-tuple-element of a tuple, copies).
#include <numeric>

#include "strata/runtime/passes.h"

namespace strata::runtime {
namespace {

using hlo::Instruction;
using hlo::Opcode;

// Whether every element of `inst` is `value` (a small constant or a
// broadcast of one).
bool IsConstantValue(const Instruction* inst, double value) {
  if (inst->opcode() == Opcode::kBroadcast) return IsConstantValue(inst->operand(0), value);
  if (inst->opcode() != Opcode::kConstant || inst->literal.shape().num_elements() > 1024)
    return false;
  for (int64_t i = 0; i < inst->literal.shape().num_elements(); ++i) {
    if (inst->literal.GetAsDouble(i) != value) return false;
  }
  return true;
}

bool IsIdentityPermutation(const std::vector<int64_t>& p) {
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] != static_cast<int64_t>(i)) return false;
  }
  return true;
}

// The instruction `inst` can be replaced by, or null.
Instruction* Simplify(hlo::Computation& c, Instruction* inst) {
  const Shape& shape = inst->shape();
  auto same_shape = [&](Instruction* x) { return x->shape() == shape ? x : nullptr; };
  switch (inst->opcode()) {
    case Opcode::kAdd:
      if (IsConstantValue(inst->operand(1), 0)) return same_shape(inst->operand(0));
      if (IsConstantValue(inst->operand(0), 0)) return same_shape(inst->operand(1));
      return nullptr;
    case Opcode::kSubtract:
      return IsConstantValue(inst->operand(1), 0) ? same_shape(inst->operand(0)) : nullptr;
    case Opcode::kMultiply:
      if (IsConstantValue(inst->operand(1), 1)) return same_shape(inst->operand(0));
      if (IsConstantValue(inst->operand(0), 1)) return same_shape(inst->operand(1));
      return nullptr;
    case Opcode::kDivide:
      return IsConstantValue(inst->operand(1), 1) ? same_shape(inst->operand(0)) : nullptr;
    case Opcode::kCopy:
      return inst->operand(0);
    case Opcode::kConvert:
    case Opcode::kBitcastConvert:
    case Opcode::kReshape:
      if (inst->operand(0)->shape() == shape) return inst->operand(0);
      if (inst->opcode() == Opcode::kReshape && inst->operand(0)->opcode() == Opcode::kReshape) {
        inst->set_operand(0, inst->operand(0)->operand(0));  // reshape(reshape(x)) -> reshape(x)
      }
      return nullptr;
    case Opcode::kTranspose:
      if (IsIdentityPermutation(inst->dimensions)) return inst->operand(0);
      if (inst->operand(0)->opcode() == Opcode::kTranspose) {  // compose permutations
        const auto& inner = inst->operand(0)->dimensions;
        std::vector<int64_t> composed;
        for (int64_t p : inst->dimensions) composed.push_back(inner[p]);
        inst->set_operand(0, inst->operand(0)->operand(0));
        inst->dimensions = composed;
        if (IsIdentityPermutation(composed)) return inst->operand(0);
      }
      return nullptr;
    case Opcode::kBroadcast:
      if (inst->operand(0)->shape() == shape && IsIdentityPermutation(inst->dimensions)) {
        return inst->operand(0);
      }
      return nullptr;
    case Opcode::kSlice: {
      const Shape& in = inst->operand(0)->shape();
      for (size_t i = 0; i < inst->slice.size(); ++i) {
        const hlo::SliceRange& r = inst->slice[i];
        if (r.start != 0 || r.limit != in.dim(i) || r.stride != 1) return nullptr;
      }
      return inst->operand(0);
    }
    case Opcode::kConcatenate:
      return inst->operand_count() == 1 ? inst->operand(0) : nullptr;
    case Opcode::kReverse:
      return inst->dimensions.empty() ? inst->operand(0) : nullptr;
    case Opcode::kPad:
      for (const hlo::PadRange& p : inst->padding) {
        if (p.low || p.high || p.interior) return nullptr;
      }
      return inst->operand(0);
    case Opcode::kGetTupleElement:
      if (inst->operand(0)->opcode() == Opcode::kTuple)
        return inst->operand(0)->operand(inst->tuple_index);
      return nullptr;
    default:
      return nullptr;
  }
}

}  // namespace

bool SimplifyAlgebra(hlo::Module& module) {
  bool changed = false;
  for (const auto& c : module.computations()) {
    std::vector<Instruction*> order;
    for (const auto& inst : c->instructions()) order.push_back(inst.get());
    hlo::Computation::Replacements replaced;
    for (Instruction* inst : order) {
      hlo::Computation::UpdateOperands(inst, replaced);  // operands come first
      if (Instruction* replacement = Simplify(*c, inst)) replaced[inst] = replacement;
    }
    bool local = !replaced.empty();
    if (local) {
      c->ApplyReplacements(replaced);
      c->RemoveDeadInstructions();
    }
    changed |= local;
  }
  return changed;
}

}  // namespace strata::runtime
