#include <algorithm>
#include <unordered_map>
#include <unordered_set>
#include <vector>

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

namespace {

// Each instruction's height: the longest chain of instructions from a
// parameter or constant up to it, itself included.
std::unordered_map<const hlo::Instruction*, int64_t> Heights(const hlo::Computation& c) {
  std::unordered_map<const hlo::Instruction*, int64_t> height;
  height.reserve(c.instructions().size());
  for (const auto& inst : c.instructions()) {  // operands come first
    int64_t h = 0;
    for (const hlo::Instruction* op : inst->operands()) h = std::max(h, height[op]);
    height[inst.get()] = h + 1;
  }
  return height;
}

// The instructions that are the computation's results: each user is the
// root, or a one-operand op (a transpose, a convert) that is such an
// instruction itself (a weight's gradient, say).
std::unordered_set<const hlo::Instruction*> Results(const hlo::Computation& c) {
  std::unordered_map<const hlo::Instruction*, std::vector<const hlo::Instruction*>> users;
  for (const auto& inst : c.instructions()) {
    for (const hlo::Instruction* op : inst->operands()) users[op].push_back(inst.get());
  }
  std::unordered_set<const hlo::Instruction*> results;
  const auto& insts = c.instructions();
  for (auto it = insts.rbegin(); it != insts.rend(); ++it) {  // users come first
    const hlo::Instruction* inst = it->get();
    if (inst == c.root() || inst->opcode() == hlo::Opcode::kParameter) continue;
    auto found = users.find(inst);
    if (found == users.end()) continue;
    bool result = true;
    for (const hlo::Instruction* u : found->second) {
      result = result && (u == c.root() || (u->operand_count() == 1 && results.count(u)));
    }
    if (result) results.insert(inst);
  }
  return results;
}

}  // namespace

void Schedule(hlo::Module& module) {
  for (const auto& c : module.computations()) {
    // Parameters and constants first, then a depth-first post-order from
    // the root. In the entry computation the walk visits an instruction's
    // operands tallest first (XLA's DFS scheduler does the same by subtree
    // size): a short chain, such as a backward pass's recomputation of one
    // layer's softmax, then runs right before its user instead of ahead of
    // the long chain beside it, which it would stay live through. And a
    // result (a weight's gradient; see Results) runs as soon as its
    // operands are out, not when the walk reaches it last of all: what it
    // reads (each layer's output gradient) dies there, and a result costs
    // no arena whenever it runs. A loop body keeps the plain walk: its
    // results are its next state, whose in-place updates want every other
    // read of the state first, and its order is tuned with its placed
    // updates (measured: the tallest-first walk there made the 8-layer
    // apply_layers step 7 % slower). The iterative walk keeps deep graphs
    // off the call stack.
    c->SortTopologically();
    const bool entry = c.get() == module.entry();
    const std::unordered_map<const hlo::Instruction*, int64_t> height =
        entry ? Heights(*c) : std::unordered_map<const hlo::Instruction*, int64_t>{};
    const std::unordered_set<const hlo::Instruction*> results =
        entry ? Results(*c) : std::unordered_set<const hlo::Instruction*>{};
    // Per result: its operands not yet out (each counted once); per
    // operand, the results waiting for it. A result is ready at zero, so
    // readiness costs one step per operand edge, however wide the result
    // (a fusion may read every parameter).
    std::unordered_map<const hlo::Instruction*, int64_t> waiting;
    std::unordered_map<const hlo::Instruction*, std::vector<hlo::Instruction*>> early_users;
    for (const auto& inst : c->instructions()) {
      if (!results.count(inst.get())) continue;
      std::unordered_set<const hlo::Instruction*> distinct(inst->operands().begin(),
                                                           inst->operands().end());
      waiting[inst.get()] = static_cast<int64_t>(distinct.size());
      for (const hlo::Instruction* op : distinct) early_users[op].push_back(inst.get());
    }
    std::vector<hlo::Instruction*> order;
    std::unordered_set<const hlo::Instruction*> visited;
    // Emits `inst`, then every result whose operands are then all out.
    std::vector<hlo::Instruction*> ready;
    auto emit = [&](hlo::Instruction* inst) {
      ready.push_back(inst);
      while (!ready.empty()) {
        hlo::Instruction* next = ready.back();
        ready.pop_back();
        order.push_back(next);
        visited.insert(next);
        auto found = early_users.find(next);
        if (found == early_users.end()) continue;
        for (hlo::Instruction* u : found->second) {
          if (--waiting[u] == 0 && visited.insert(u).second) ready.push_back(u);
        }
      }
    };
    for (hlo::Instruction* p : c->parameters()) {
      visited.insert(p);
      emit(p);
    }
    // Constants too (they take no arena): a result reading one (a reduction's
    // initial value) can then run as soon as its computed operands are there.
    for (const auto& inst : c->instructions()) {
      if (inst->opcode() == hlo::Opcode::kConstant && visited.insert(inst.get()).second) {
        emit(inst.get());
      }
    }
    // Per instruction on the stack: its operands in visiting order, and the next.
    struct Frame {
      hlo::Instruction* inst;
      std::vector<hlo::Instruction*> operands;
      size_t next = 0;
    };
    std::vector<Frame> stack;
    auto push = [&](hlo::Instruction* inst) {
      Frame f{inst, inst->operands()};
      // (A dynamic-update-slice keeps its order: the block it writes comes
      // first, so the update's value can be computed straight into it.)
      if (entry && inst->opcode() != hlo::Opcode::kDynamicUpdateSlice) {
        std::stable_sort(f.operands.begin(), f.operands.end(),
                         [&](const hlo::Instruction* a, const hlo::Instruction* b) {
                           return height.at(a) > height.at(b);
                         });
      }
      stack.push_back(std::move(f));
    };
    auto visit_from = [&](hlo::Instruction* start) {
      if (!visited.insert(start).second) return;
      push(start);
      while (!stack.empty()) {
        Frame& top = stack.back();
        if (top.next < top.operands.size()) {
          hlo::Instruction* op = top.operands[top.next++];
          if (visited.insert(op).second) push(op);
        } else {
          hlo::Instruction* done = top.inst;
          stack.pop_back();
          emit(done);
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
