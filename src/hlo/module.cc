#include "strata/hlo/module.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "strata/core/error.h"

namespace strata::hlo {

Instruction* Computation::AddInstruction(std::unique_ptr<Instruction> instruction) {
  instruction->parent_ = this;
  instructions_.push_back(std::move(instruction));
  return instructions_.back().get();
}

Instruction* Computation::AddTupleElement(Instruction* tuple, int64_t index, std::string name) {
  auto e =
      std::make_unique<Instruction>(Opcode::kGetTupleElement, tuple->shape().tuple_shape(index),
                                    std::vector<Instruction*>{tuple});
  e->tuple_index = index;
  e->set_name(std::move(name));
  return AddInstruction(std::move(e));
}

std::vector<Instruction*> Computation::parameters() const {
  std::vector<Instruction*> params;
  for (const auto& inst : instructions_) {
    if (inst->opcode() == Opcode::kParameter) params.push_back(inst.get());
  }
  std::sort(params.begin(), params.end(), [](Instruction* a, Instruction* b) {
    return a->parameter_number < b->parameter_number;
  });
  return params;
}

int64_t Computation::parameter_count() const {
  int64_t n = 0;
  for (const auto& inst : instructions_) n += inst->opcode() == Opcode::kParameter;
  return n;
}

Instruction* Computation::parameter(int64_t number) const {
  for (const auto& inst : instructions_) {
    if (inst->opcode() == Opcode::kParameter && inst->parameter_number == number) return inst.get();
  }
  return nullptr;
}

void Computation::ReplaceAllUsesWith(Instruction* from, Instruction* to) {
  for (const auto& inst : instructions_) {
    if (inst.get() == to) continue;  // never make `to` use itself
    for (int64_t i = 0; i < inst->operand_count(); ++i) {
      if (inst->operand(i) == from) inst->set_operand(i, to);
    }
  }
  if (root_ == from) root_ = to;
}

namespace {
Instruction* Resolve(Instruction* inst, const Computation::Replacements& replacements) {
  for (auto it = replacements.find(inst); it != replacements.end(); it = replacements.find(inst)) {
    inst = it->second;
  }
  return inst;
}
}  // namespace

void Computation::UpdateOperands(Instruction* inst, const Replacements& replacements) {
  if (replacements.empty()) return;
  for (int64_t i = 0; i < inst->operand_count(); ++i) {
    Instruction* to = Resolve(inst->operand(i), replacements);
    if (to != inst) inst->set_operand(i, to);
  }
}

void Computation::ApplyReplacements(const Replacements& replacements) {
  if (replacements.empty()) return;
  for (const auto& inst : instructions_) UpdateOperands(inst.get(), replacements);
  if (root_) root_ = Resolve(root_, replacements);
}

int64_t Computation::RemoveDeadInstructions() {
  std::unordered_set<const Instruction*> live;
  std::vector<const Instruction*> stack;
  if (root_) stack.push_back(root_);
  while (!stack.empty()) {
    const Instruction* inst = stack.back();
    stack.pop_back();
    if (!live.insert(inst).second) continue;
    for (Instruction* op : inst->operands()) stack.push_back(op);
  }
  auto before = instructions_.size();
  std::erase_if(instructions_, [&](const std::unique_ptr<Instruction>& inst) {
    return inst->opcode() != Opcode::kParameter && !live.count(inst.get());
  });
  return static_cast<int64_t>(before - instructions_.size());
}

void Computation::SortTopologically() {
  std::unordered_map<const Instruction*, size_t> position;
  for (size_t i = 0; i < instructions_.size(); ++i) position[instructions_[i].get()] = i;
  std::vector<std::unique_ptr<Instruction>> sorted;
  sorted.reserve(instructions_.size());
  std::vector<uint8_t> state(instructions_.size(), 0);  // 0 new, 1 visiting, 2 done
  // Iterative DFS so deep graphs cannot overflow the stack.
  for (size_t start = 0; start < instructions_.size(); ++start) {
    if (state[start]) continue;
    std::vector<std::pair<size_t, int64_t>> stack{{start, 0}};
    state[start] = 1;
    while (!stack.empty()) {
      auto& [index, next] = stack.back();
      Instruction* inst = instructions_[index].get();
      if (next < inst->operand_count()) {
        auto found = position.find(inst->operand(next++));
        if (found == position.end()) {
          Fail("[hlo] instruction {} in computation {} uses an operand from another computation",
               inst->name(), name_);
        }
        size_t op = found->second;
        if (state[op] == 1)
          Fail("[hlo] computation {} has a cycle through {}", name_, inst->name());
        if (state[op] == 0) {
          state[op] = 1;
          stack.push_back({op, 0});
        }
      } else {
        state[index] = 2;
        stack.pop_back();
        sorted.push_back(nullptr);
        sorted.back().reset(instructions_[index].release());
        instructions_[index].reset();
      }
    }
  }
  instructions_ = std::move(sorted);
}

void Computation::SetInstructionOrder(const std::vector<Instruction*>& order) {
  STRATA_CHECK(order.size() == instructions_.size(), "order has {} of {} instructions",
               order.size(), instructions_.size());
  std::unordered_map<const Instruction*, size_t> position;
  for (size_t i = 0; i < instructions_.size(); ++i) position[instructions_[i].get()] = i;
  std::vector<std::unique_ptr<Instruction>> reordered;
  for (Instruction* inst : order)
    reordered.push_back(std::move(instructions_.at(position.at(inst))));
  for (const auto& inst : reordered) STRATA_CHECK(inst != nullptr, "order repeats an instruction");
  instructions_ = std::move(reordered);
}

Computation* Module::AddComputation(std::unique_ptr<Computation> computation) {
  computations_.push_back(std::move(computation));
  return computations_.back().get();
}

Computation* Module::AddComputationBefore(std::unique_ptr<Computation> computation,
                                          const Computation* caller) {
  auto at = std::find_if(computations_.begin(), computations_.end(),
                         [&](const auto& c) { return c.get() == caller; });
  return computations_.insert(at, std::move(computation))->get();
}

Computation* Module::AddEntryComputation(std::unique_ptr<Computation> computation) {
  entry_ = AddComputation(std::move(computation));
  return entry_;
}

Computation* Module::FindComputation(std::string_view name) const {
  for (const auto& c : computations_) {
    if (c->name() == name) return c.get();
  }
  return nullptr;
}

std::unique_ptr<Module> Module::Clone() const {
  auto clone = std::make_unique<Module>(name_);
  clone->set_num_partitions(num_partitions_);
  std::unordered_map<const Computation*, Computation*> computation_map;
  for (const auto& comp : computations_) {
    auto copy = std::make_unique<Computation>(comp->name());
    std::unordered_map<const Instruction*, Instruction*> map;
    for (const auto& inst : comp->instructions()) {
      std::vector<Instruction*> operands;
      for (Instruction* op : inst->operands()) operands.push_back(map.at(op));
      auto new_inst = std::make_unique<Instruction>(*inst);
      new_inst->set_operands(std::move(operands));
      for (Computation*& called : new_inst->called) called = computation_map.at(called);
      map[inst.get()] = copy->AddInstruction(std::move(new_inst));
    }
    if (comp->root()) copy->set_root(map.at(comp->root()));
    Computation* added = clone->AddComputation(std::move(copy));
    computation_map[comp.get()] = added;
    if (comp.get() == entry_) clone->set_entry(added);
  }
  return clone;
}

void Module::RemoveUnreachableComputations() {
  std::unordered_set<const Computation*> reachable;
  std::vector<const Computation*> stack;
  if (entry_) stack.push_back(entry_);
  while (!stack.empty()) {
    const Computation* c = stack.back();
    stack.pop_back();
    if (!reachable.insert(c).second) continue;
    for (const auto& inst : c->instructions()) {
      for (Computation* called : inst->called) stack.push_back(called);
    }
  }
  std::erase_if(computations_,
                [&](const std::unique_ptr<Computation>& c) { return !reachable.count(c.get()); });
}

}  // namespace strata::hlo
