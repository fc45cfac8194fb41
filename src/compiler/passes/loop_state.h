// What the loop passes (sink_converts.cc, sink_updates.cc) ask of a
// computation and its while loops.
#pragma once

#include <unordered_map>
#include <vector>

#include "strata/hlo/module.h"

namespace strata::compiler {

// The instructions of `c` that read `of`, each once.
std::vector<hlo::Instruction*> UsersOf(const hlo::Computation& c, const hlo::Instruction* of);
// The get-tuple-elements reading element k of `tuple` in `c`.
std::vector<hlo::Instruction*> ElementReads(const hlo::Computation& c,
                                            const hlo::Instruction* tuple, int64_t k);
// How many instructions call each computation of the module.
std::unordered_map<const hlo::Computation*, int> Callers(const hlo::Module& module);
// Whether a loop's state may change shape: its init is a tuple, its
// condition and body are called by it alone and only get-tuple-elements
// read its result.
bool StateMayChange(const hlo::Computation& c, const hlo::Instruction* loop,
                    const std::unordered_map<const hlo::Computation*, int>& callers);
// Runs move(c, loop, callers) on every loop of every computation; a
// computation where one moved is sorted and cleared of dead code.
template <typename Move>
bool ForEachLoop(hlo::Module& module, Move move) {
  const std::unordered_map<const hlo::Computation*, int> callers = Callers(module);
  bool changed = false;
  // (A move may add computations: walk the ones there were.)
  std::vector<hlo::Computation*> computations;
  for (const auto& c : module.computations()) computations.push_back(c.get());
  for (hlo::Computation* c : computations) {
    std::vector<hlo::Instruction*> loops;
    for (const auto& inst : c->instructions()) {
      if (inst->opcode() == hlo::Opcode::kWhile) loops.push_back(inst.get());
    }
    bool here = false;
    for (hlo::Instruction* loop : loops) here |= move(*c, loop, callers);
    if (here) {
      c->SortTopologically();
      c->RemoveDeadInstructions();
    }
    changed |= here;
  }
  return changed;
}

}  // namespace strata::compiler
