// Algebraic simplification: rewrites that remove work without changing
// results (x+0, x*1, x^1, x^2 as x*x, a select on a constant predicate, identity
// reshapes/transposes/broadcasts/converts/slices, nested reshapes and transposes, get-tuple-element
// of a tuple, copies).
#include <algorithm>
#include <numeric>

#include "strata/compiler/passes.h"

namespace strata::compiler {
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

// The dims of `side` (0 lhs, 1 rhs) of a dot that are neither batch nor
// contracting, ascending: the order they take in the dot's output.
std::vector<int64_t> FreeDims(const Instruction& dot, int side) {
  const hlo::DotDims& d = dot.dot;
  const auto& batch = side == 0 ? d.lhs_batch : d.rhs_batch;
  const auto& contracting = side == 0 ? d.lhs_contracting : d.rhs_contracting;
  std::vector<int64_t> free;
  for (int64_t i = 0; i < dot.operand(side)->shape().rank(); ++i) {
    if (std::find(batch.begin(), batch.end(), i) == batch.end() &&
        std::find(contracting.begin(), contracting.end(), i) == contracting.end()) {
      free.push_back(i);
    }
  }
  return free;
}

// dot(transpose(x), y) -> dot(x, y) with x's dims, when the transpose keeps
// the free dims in order (the output is unchanged). The dot kernel reads a
// transposed matrix directly (sgemm's 'T'), so Linear's x @ W^T copies no
// weight. Returns whether it rewrote.
bool FoldOperandTransposes(Instruction* dot) {
  bool folded = false;
  for (int side = 0; side < 2; ++side) {
    Instruction* t = dot->operand(side);
    if (t->opcode() != Opcode::kTranspose) continue;
    const std::vector<int64_t>& perm = t->dimensions;  // output dim d is input dim perm[d]
    std::vector<int64_t> mapped;
    for (int64_t f : FreeDims(*dot, side)) mapped.push_back(perm[f]);
    if (!std::is_sorted(mapped.begin(), mapped.end())) continue;
    hlo::DotDims& d = dot->dot;
    for (int64_t& b : side == 0 ? d.lhs_batch : d.rhs_batch) b = perm[b];
    for (int64_t& c : side == 0 ? d.lhs_contracting : d.rhs_contracting) c = perm[c];
    dot->set_operand(side, t->operand(0));
    folded = true;
  }
  return folded;
}

// transpose(dot(a, b)) that puts b's free dims before a's (batch dims in
// place, each block in order) is dot(b, a): the weight gradient of x @ W^T
// comes out in W's layout without a copy.
Instruction* SwapDotForTranspose(hlo::Computation& c, Instruction* transpose) {
  Instruction* dot = transpose->operand(0);
  if (dot->opcode() != Opcode::kDot) return nullptr;
  const int64_t nb = static_cast<int64_t>(dot->dot.lhs_batch.size());
  const int64_t nl = static_cast<int64_t>(FreeDims(*dot, 0).size());
  const int64_t nr = static_cast<int64_t>(FreeDims(*dot, 1).size());
  std::vector<int64_t> want;
  for (int64_t i = 0; i < nb; ++i) want.push_back(i);
  for (int64_t i = 0; i < nr; ++i) want.push_back(nb + nl + i);
  for (int64_t i = 0; i < nl; ++i) want.push_back(nb + i);
  if (transpose->dimensions != want || nl == 0 || nr == 0) return nullptr;
  hlo::DotDims swapped{dot->dot.rhs_batch, dot->dot.lhs_batch, dot->dot.rhs_contracting,
                       dot->dot.lhs_contracting};
  auto fresh =
      std::make_unique<Instruction>(Opcode::kDot, transpose->shape(),
                                    std::vector<Instruction*>{dot->operand(1), dot->operand(0)});
  fresh->dot = swapped;
  fresh->set_name(transpose->name() + ".dot");  // the transpose it replaces is gone
  return c.AddInstruction(std::move(fresh));
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
    case Opcode::kPower: {
      // pow(x, 1) = x; pow(x, 2) = x * x, one rounding of the exact square
      // either way (RMS norms square through pow: libm's powf per element
      // cost 6 % of a Llama step). Other exponents keep pow's own edge cases.
      if (IsConstantValue(inst->operand(1), 1)) return same_shape(inst->operand(0));
      if (!IsConstantValue(inst->operand(1), 2) || inst->operand(0)->shape() != shape)
        return nullptr;
      Instruction* x = inst->operand(0);
      auto square =
          std::make_unique<Instruction>(Opcode::kMultiply, shape, std::vector<Instruction*>{x, x});
      square->set_name(inst->name() + ".square");
      return c.AddInstruction(std::move(square));
    }
    case Opcode::kSelect:
      // A predicate fixed for every element (AdamW's lerp, traced with
      // torch's `where(False, ...)` for its weight), or both sides the same.
      if (IsConstantValue(inst->operand(0), 1)) return same_shape(inst->operand(1));
      if (IsConstantValue(inst->operand(0), 0)) return same_shape(inst->operand(2));
      if (inst->operand(1) == inst->operand(2)) return same_shape(inst->operand(1));
      return nullptr;
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
      if (Instruction* swapped = SwapDotForTranspose(c, inst)) return swapped;
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
    bool rewritten = false;  // an instruction changed in place
    for (Instruction* inst : order) {
      hlo::Computation::UpdateOperands(inst, replaced);  // operands come first
      if (inst->opcode() == Opcode::kDot) rewritten |= FoldOperandTransposes(inst);
      if (Instruction* replacement = Simplify(*c, inst)) replaced[inst] = replacement;
    }
    changed |= rewritten;
    bool local = !replaced.empty();
    if (local) {
      c->ApplyReplacements(replaced);
      c->RemoveDeadInstructions();
      c->SortTopologically();  // new dots were appended after their users
    }
    changed |= local;
  }
  return changed;
}

}  // namespace strata::compiler
