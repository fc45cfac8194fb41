#include <unordered_set>

#include "strata/compiler/passes.h"

namespace strata::compiler {

void RunPasses(hlo::Module& module) {
  InlineCalls(module);
  for (int round = 0; round < 4; ++round) {
    bool changed = SimplifyAlgebra(module);
    changed |= FoldConstants(module);
    changed |= EliminateCommonSubexpressions(module);
    changed |= SinkConvertsIntoLoops(module);
    changed |= HoistConvertsOutOfLoops(module);
    changed |= EliminateDeadCode(module);
    if (!changed) break;
  }
}

void Schedule(hlo::Module& module) {
  for (const auto& c : module.computations()) {
    // Parameters first, then a depth-first post-order from the root; the
    // iterative walk keeps deep graphs off the call stack.
    std::vector<hlo::Instruction*> order;
    std::unordered_set<const hlo::Instruction*> visited;
    for (hlo::Instruction* p : c->parameters()) {
      order.push_back(p);
      visited.insert(p);
    }
    std::vector<std::pair<hlo::Instruction*, int64_t>> stack;
    auto visit_from = [&](hlo::Instruction* start) {
      if (!visited.insert(start).second) return;
      stack.push_back({start, 0});
      while (!stack.empty()) {
        auto& [inst, next] = stack.back();
        if (next < inst->operand_count()) {
          hlo::Instruction* op = inst->operand(next++);
          if (visited.insert(op).second) stack.push_back({op, 0});
        } else {
          order.push_back(inst);
          stack.pop_back();
        }
      }
    };
    visit_from(c->root());
    // Keep anything not reachable from the root (dead code when passes are off).
    for (const auto& inst : c->instructions()) visit_from(inst.get());
    c->SetInstructionOrder(order);
  }
}

}  // namespace strata::compiler
