#include "passes/loop_state.h"

namespace strata::compiler {

using hlo::Computation;
using hlo::Instruction;
using hlo::Opcode;

std::vector<Instruction*> UsersOf(const Computation& c, const Instruction* of) {
  std::vector<Instruction*> users;
  for (const auto& inst : c.instructions()) {
    for (const Instruction* op : inst->operands()) {
      if (op == of) {
        users.push_back(inst.get());
        break;
      }
    }
  }
  return users;
}

std::vector<Instruction*> ElementReads(const Computation& c, const Instruction* tuple, int64_t k) {
  std::vector<Instruction*> reads;
  for (const auto& inst : c.instructions()) {
    if (inst->opcode() == Opcode::kGetTupleElement && inst->operand(0) == tuple &&
        inst->tuple_index == k)
      reads.push_back(inst.get());
  }
  return reads;
}

std::unordered_map<const Computation*, int> Callers(const hlo::Module& module) {
  std::unordered_map<const Computation*, int> callers;
  for (const auto& c : module.computations()) {
    callers.emplace(c.get(), 0);
    for (const auto& inst : c->instructions()) {
      for (const Computation* called : inst->called) ++callers[called];
    }
  }
  return callers;
}

bool StateMayChange(const Computation& c, const Instruction* loop,
                    const std::unordered_map<const Computation*, int>& callers) {
  if (loop->operand(0)->opcode() != Opcode::kTuple || callers.at(loop->called[0]) != 1 ||
      callers.at(loop->called[1]) != 1) {
    return false;
  }
  for (const Instruction* user : UsersOf(c, loop)) {
    if (user->opcode() != Opcode::kGetTupleElement) return false;
  }
  return true;
}

}  // namespace strata::compiler
