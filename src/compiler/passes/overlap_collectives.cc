// Splits each all-gather and all-reduce into its asynchronous pair and
// moves the pair apart in the schedule, so the data moves while the
// program computes (XLA's latency-hiding scheduler does this on GPUs and
// TPUs; strata's CPU runtime runs a -start on the run's collective thread,
// runtime/async_collectives.h).
//
// On a schedule (after Schedule), in each program computation:
// - a -done waits for the first instruction that reads it: whatever the
//   schedule put between the collective and its user runs while the data
//   moves;
// - up to kInFlight collectives are started ahead of where the schedule
//   needs them, each as soon as a -done frees a place, with the chain of
//   data movement that makes its operand (an FSDP layer's weight shard:
//   a dynamic-slice of the stacked weights, a transpose); one whose operand
//   needs arithmetic starts once that has run.
#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "strata/compiler/passes.h"
#include "strata/hlo/expand.h"

namespace strata::compiler {

namespace {

using hlo::Instruction;
using hlo::Opcode;

// Collectives started ahead of their place at one time: each holds its
// gathered result that much longer.
constexpr int64_t kInFlight = 2;

bool Splits(const Instruction& inst) {
  if (inst.opcode() == Opcode::kAllGather) {
    return inst.operand_count() == 1 && inst.operand(0)->shape().is_array() &&
           inst.shape().is_array();
  }
  if (inst.opcode() != Opcode::kAllReduce || inst.operand_count() == 0) return false;
  for (const Instruction* op : inst.operands()) {
    if (!op->shape().is_array()) return false;
  }
  return true;
}

// Work cheap enough to run early for a collective's operand: no arithmetic.
bool Cheap(const Instruction& inst) {
  switch (hlo::KernelOf(inst.opcode())) {
    case hlo::Kernel::kStorage:
    case hlo::Kernel::kDataMovement:
      return true;
    default:
      return inst.opcode() == Opcode::kPartitionId || inst.opcode() == Opcode::kReplicaId;
  }
}

// "all-gather.7" -> "all-gather-start.7"; another name gets a suffix.
std::string PairName(const std::string& name, std::string_view opcode, std::string_view part,
                     std::unordered_set<std::string>& taken) {
  std::string base =
      name.rfind(opcode, 0) == 0 && name.size() > opcode.size() && name[opcode.size()] == '.'
          ? fmt::format("{}-{}{}", opcode, part, name.substr(opcode.size()))
          : fmt::format("{}.{}", name, part);
  std::string out = base;
  for (int64_t k = 1; !taken.insert(out).second; ++k) out = fmt::format("{}.{}", base, k);
  return out;
}

bool Overlap(hlo::Computation& c) {
  std::vector<Instruction*> found;
  std::unordered_set<std::string> names;
  bool paired = false;  // pairs already there (XLA's, or a cached module's)
  for (const auto& inst : c.instructions()) {
    names.insert(inst->name());
    if (Splits(*inst)) found.push_back(inst.get());
    paired = paired || hlo::RunsAsynchronously(*inst);
  }
  if (found.empty() && !paired) return false;
  // The schedule, each collective replaced by its pair.
  std::vector<Instruction*> order;
  for (const auto& inst : c.instructions()) order.push_back(inst.get());
  std::unordered_map<Instruction*, std::pair<Instruction*, Instruction*>> pairs;
  hlo::Computation::Replacements replacements;
  for (Instruction* inst : found) {
    const bool gather = inst->opcode() == Opcode::kAllGather;
    const Opcode start_op = gather ? Opcode::kAllGatherStart : Opcode::kAllReduceStart;
    const Opcode done_op = gather ? Opcode::kAllGatherDone : Opcode::kAllReduceDone;
    const Shape started =
        gather ? Shape::Tuple({inst->operand(0)->shape(), inst->shape()}) : inst->shape();
    auto start = std::make_unique<Instruction>(start_op, started, inst->operands());
    static_cast<hlo::Attributes&>(*start) = inst->attributes();
    const std::string_view opcode = hlo::OpcodeName(inst->opcode());
    start->set_name(PairName(inst->name(), opcode, "start", names));
    Instruction* s = c.AddInstruction(std::move(start));
    auto done = std::make_unique<Instruction>(done_op, inst->shape(), std::vector{s});
    done->sharding = inst->sharding;
    done->set_name(PairName(inst->name(), opcode, "done", names));
    Instruction* d = c.AddInstruction(std::move(done));
    replacements[inst] = d;
    pairs[inst] = {s, d};
  }
  c.ApplyReplacements(replacements);
  std::vector<Instruction*> scheduled;
  std::vector<Instruction*> starts;
  std::unordered_set<const Instruction*> dones;
  for (Instruction* inst : order) {
    auto it = pairs.find(inst);
    if (it == pairs.end()) {
      scheduled.push_back(inst);
      if (!hlo::RunsAsynchronously(*inst)) continue;
      if (inst->opcode() == Opcode::kAllGatherStart || inst->opcode() == Opcode::kAllReduceStart) {
        starts.push_back(inst);
      } else {
        dones.insert(inst);
      }
      continue;
    }
    scheduled.push_back(it->second.first);
    scheduled.push_back(it->second.second);
    starts.push_back(it->second.first);
    dones.insert(it->second.second);
  }
  std::vector<Instruction*> out;
  std::unordered_set<const Instruction*> emitted;
  int64_t in_flight = 0;
  size_t next_start = 0;
  // Emits `root` after whatever it reads that is not out yet; a -done it
  // emits lets the next collective start right there.
  std::function<void()> prefetch;
  auto emit = [&](Instruction* root) {
    if (emitted.count(root)) return;
    std::vector<std::pair<Instruction*, size_t>> stack = {{root, 0}};
    while (!stack.empty()) {
      auto& [inst, k] = stack.back();
      if (k < static_cast<size_t>(inst->operand_count())) {
        Instruction* op = inst->operand(static_cast<int64_t>(k++));
        if (!emitted.count(op)) stack.push_back({op, 0});
        continue;
      }
      Instruction* ready = inst;
      stack.pop_back();
      if (!emitted.insert(ready).second) continue;
      out.push_back(ready);
      if (ready->opcode() == Opcode::kAllGatherStart || ready->opcode() == Opcode::kAllReduceStart)
        ++in_flight;
      if (dones.count(ready)) {
        --in_flight;
        prefetch();
      }
    }
  };
  // Whether everything `start` still waits for is cheap.
  auto cheap_chain = [&](const Instruction* start) {
    std::vector<const Instruction*> todo(start->operands().begin(), start->operands().end());
    std::unordered_set<const Instruction*> seen;
    while (!todo.empty()) {
      const Instruction* inst = todo.back();
      todo.pop_back();
      if (emitted.count(inst) || !seen.insert(inst).second) continue;
      if (!Cheap(*inst)) return false;
      todo.insert(todo.end(), inst->operands().begin(), inst->operands().end());
    }
    return true;
  };
  // Starts, in schedule order, whenever a place is free and what each
  // still needs is cheap (a start whose operand needs arithmetic waits
  // until that has run).
  prefetch = [&] {
    while (next_start < starts.size() && emitted.count(starts[next_start])) ++next_start;
    for (size_t k = next_start; k < starts.size() && in_flight < kInFlight; ++k) {
      if (!emitted.count(starts[k]) && cheap_chain(starts[k])) emit(starts[k]);
    }
  };
  prefetch();
  for (Instruction* inst : scheduled) {
    if (dones.count(inst) || emitted.count(inst)) continue;  // a -done waits for its reader
    emit(inst);
    prefetch();
  }
  for (Instruction* inst : scheduled) emit(inst);              // a -done only the root reads
  for (const auto& [inst, pair] : pairs) out.push_back(inst);  // dead now
  c.SetInstructionOrder(out);
  if (!pairs.empty()) c.RemoveDeadInstructions();
  return true;
}

}  // namespace

bool OverlapCollectives(hlo::Module& module) {
  bool changed = false;
  for (hlo::Computation* c : ProgramComputations(module)) changed |= Overlap(*c);
  return changed;
}

}  // namespace strata::compiler
