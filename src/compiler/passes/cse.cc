// Common-subexpression elimination: two instructions with the same opcode,
// shape, operands and attributes compute the same value (every strata opcode
// is deterministic; rng-bit-generator is a pure function of its state).
#include <unordered_map>

#include "strata/compiler/passes.h"
#include "strata/hlo/text.h"

namespace strata::compiler {
namespace {

// Identity of the value an instruction computes: its text without the name.
// Constants are keyed by their raw bytes (cheap for large literals).
std::string ValueKey(const hlo::Instruction& inst) {
  if (inst.opcode() == hlo::Opcode::kConstant) {
    return "constant " + inst.shape().ToString() + " " +
           std::string(reinterpret_cast<const char*>(inst.literal.data()),
                       inst.literal.size_bytes());
  }
  std::string text = hlo::ToText(inst);
  return text.substr(text.find(" = ") + 3);
}

}  // namespace

bool EliminateCommonSubexpressions(hlo::Module& module) {
  bool changed = false;
  for (const auto& c : module.computations()) {
    std::unordered_map<std::string, hlo::Instruction*> seen;
    hlo::Computation::Replacements replaced;
    for (const auto& inst : c->instructions()) {
      if (inst->opcode() == hlo::Opcode::kParameter) continue;
      hlo::Computation::UpdateOperands(inst.get(), replaced);  // operands come first
      auto [it, inserted] = seen.emplace(ValueKey(*inst), inst.get());
      if (!inserted) replaced[inst.get()] = it->second;
    }
    if (!replaced.empty()) {
      c->ApplyReplacements(replaced);
      c->RemoveDeadInstructions();
      changed = true;
    }
  }
  return changed;
}

}  // namespace strata::compiler
