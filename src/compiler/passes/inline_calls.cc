// Replaces each `call` by a copy of its callee's instructions, so the buffer
// planner sees one flat computation.
#include <fmt/format.h>

#include <unordered_map>

#include "strata/compiler/passes.h"

namespace strata::compiler {
namespace {

// Clones `callee` into `caller` with its parameters bound to `arguments`;
// returns the clone of the callee's root.
hlo::Instruction* CloneInto(hlo::Computation& caller, const hlo::Computation& callee,
                            const std::vector<hlo::Instruction*>& arguments, int64_t serial) {
  std::unordered_map<const hlo::Instruction*, hlo::Instruction*> map;
  for (const auto& inst : callee.instructions()) {
    if (inst->opcode() == hlo::Opcode::kParameter) {
      map[inst.get()] = arguments.at(inst->parameter_number);
      continue;
    }
    auto copy = std::make_unique<hlo::Instruction>(*inst);
    std::vector<hlo::Instruction*> operands;
    for (hlo::Instruction* op : inst->operands()) operands.push_back(map.at(op));
    copy->set_operands(std::move(operands));
    copy->set_name(fmt::format("{}.inlined{}", inst->name(), serial));
    map[inst.get()] = caller.AddInstruction(std::move(copy));
  }
  return map.at(callee.root());
}

}  // namespace

bool InlineCalls(hlo::Module& module) {
  bool changed = false;
  int64_t serial = 0;
  // Callers come after callees, so by the time a caller is processed its
  // callees are already flat.
  for (const auto& computation : module.computations()) {
    std::vector<hlo::Instruction*> calls;
    for (const auto& inst : computation->instructions()) {
      if (inst->opcode() == hlo::Opcode::kCall) calls.push_back(inst.get());
    }
    for (hlo::Instruction* call : calls) {
      hlo::Instruction* root =
          CloneInto(*computation, *call->called[0], call->operands(), serial++);
      computation->ReplaceAllUsesWith(call, root);
      changed = true;
    }
    if (!calls.empty()) {
      computation->RemoveDeadInstructions();
      computation->SortTopologically();
    }
  }
  if (changed) module.RemoveUnreachableComputations();
  return changed;
}

}  // namespace strata::compiler
