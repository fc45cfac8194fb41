// SinkIndexMaps: transposes and reverses (with the reshapes between them)
// of an elementwise op that nothing else reads become the op over moved
// operands, since moving f(a, b) is f(moved a, moved b). Repeated, the moves reach the values the
// elementwise chain starts from, where a loop fusion reads them as strided
// views (kernels/fusion_view.h) instead of a kernel writing each moved copy
// first. The attention gradient's transpose from [B, H, S, D] back to
// [B, S, H, D] after rotary's products, and rotary's reverse of the halves
// of a product, are read in place this way.
//
// Only moves a fused loop reads as runs of consecutive elements (the
// innermost dim stays innermost), and only over ops on floats (and their
// compares), which fusions run: elsewhere one moved result would become
// a moved copy of each operand. Runs before FuseElementwise.
#include <fmt/format.h>

#include <memory>
#include <unordered_map>
#include <vector>

#include "strata/compiler/passes.h"

namespace strata::compiler {
namespace {

using hlo::Instruction;
using hlo::Opcode;

bool IsFloatOrPred(DType t) {
  return t == DType::kF32 || t == DType::kF64 || t == DType::kBF16 || t == DType::kF16 ||
         t == DType::kPred;
}

// A move a fused loop reads in runs along the innermost dim.
bool IsSinkableMove(const Instruction& m) {
  if (m.operand_count() != 1 || !m.shape().is_array() || m.shape().rank() == 0 ||
      !m.operand(0)->shape().is_array()) {
    return false;
  }
  switch (m.opcode()) {
    case Opcode::kTranspose:
      return m.dimensions.back() == m.shape().rank() - 1;
    case Opcode::kReshape:
    case Opcode::kReverse:
      return true;
    default:
      return false;
  }
}

// An op computed element by element from operands of its own dims.
bool IsElementwiseOverFloats(const Instruction& e) {
  const Opcode op = e.opcode();
  if (!(hlo::IsElementwiseUnary(op) || hlo::IsElementwiseBinary(op) || op == Opcode::kSelect ||
        op == Opcode::kCompare || op == Opcode::kConvert)) {
    return false;
  }
  if (!e.shape().is_array() || !IsFloatOrPred(e.shape().dtype())) return false;
  for (const Instruction* x : e.operands()) {
    if (!x->shape().is_array() || x->shape().dims() != e.shape().dims() ||
        !IsFloatOrPred(x->shape().dtype())) {
      return false;
    }
  }
  return true;
}

bool SinkOnce(hlo::Computation& c) {
  std::unordered_map<const Instruction*, int64_t> uses;
  std::unordered_map<const Instruction*, const Instruction*> user;  // the last one seen
  for (const auto& inst : c.instructions()) {
    for (const Instruction* op : inst->operands()) {
      ++uses[op];
      user[op] = inst.get();
    }
  }
  auto only_user_is_move = [&](const Instruction* x) {
    return x != c.root() && uses[x] == 1 && IsSinkableMove(*user.at(x));
  };
  hlo::Computation::Replacements replacements;
  std::vector<Instruction*> tops;
  for (const auto& inst : c.instructions()) {
    if (IsSinkableMove(*inst) && !only_user_is_move(inst.get())) tops.push_back(inst.get());
  }
  for (Instruction* top : tops) {
    // The moves from `top` down to the elementwise op, top first. Reshapes
    // alone stay (they are free, and a reshaped broadcast is no longer one
    // a fusion reads as such); a chain with a transpose or reverse moves.
    std::vector<Instruction*> chain = {top};
    while (IsSinkableMove(*chain.back()->operand(0)) && only_user_is_move(chain.back()->operand(0)))
      chain.push_back(chain.back()->operand(0));
    bool moves = false;
    for (const Instruction* m : chain) moves = moves || m->opcode() != Opcode::kReshape;
    Instruction* e = chain.back()->operand(0);
    if (!moves || e == c.root() || uses[e] != 1 || !IsElementwiseOverFloats(*e)) continue;
    std::vector<Instruction*> moved;
    for (Instruction* x : e->operands()) {
      Instruction* at = x;
      for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
        const Instruction& m = **it;
        auto copy = std::make_unique<Instruction>(
            m.opcode(), m.shape().WithDType(x->shape().dtype()), std::vector<Instruction*>{at});
        static_cast<hlo::Attributes&>(*copy) = m.attributes();
        copy->set_name(fmt::format("{}.{}", m.name(), moved.size()));
        at = c.AddInstruction(std::move(copy));
      }
      moved.push_back(at);
    }
    auto sunk = std::make_unique<Instruction>(
        e->opcode(), top->shape().WithDType(e->shape().dtype()), std::move(moved));
    static_cast<hlo::Attributes&>(*sunk) = e->attributes();
    sunk->set_name(fmt::format("{}.moved", e->name()));
    replacements[top] = c.AddInstruction(std::move(sunk));
  }
  if (replacements.empty()) return false;
  c.ApplyReplacements(replacements);
  c.SortTopologically();
  c.RemoveDeadInstructions();
  return true;
}

}  // namespace

bool SinkIndexMaps(hlo::Module& module) {
  bool changed = false;
  for (hlo::Computation* c : ProgramComputations(module)) {
    // Each round moves every move one op deeper.
    for (int round = 0; round < 32 && SinkOnce(*c); ++round) changed = true;
  }
  return changed;
}

}  // namespace strata::compiler
