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

// A loop's all-gather whose operand is made from the loop's counter and
// state the loop hands on unchanged (an FSDP layer's weight shard: a
// dynamic-slice of the stacked weights at the layer's index): the loop
// carries the gathered value, gathers the next iteration's in this one and
// gathers the first before it starts (XLA's collective pipeliner). The
// last iteration's gather reads a clamped index and is never used.
class Pipeliner {
 public:
  Pipeliner(hlo::Module& module, hlo::Computation& parent, Instruction& loop)
      : module_(module), parent_(parent), loop_(loop) {}

  // The gathers it moved into the next iteration (their new copies).
  std::vector<Instruction*> Run();

 private:
  bool Invariant(const Instruction& inst);
  // A copy of `inst`'s chain in `into`: the state's elements read through
  // `element(k)`.
  Instruction* Copy(const Instruction* inst, hlo::Computation& into,
                    const std::function<Instruction*(int64_t)>& element,
                    std::unordered_map<const Instruction*, Instruction*>& copied);

  hlo::Module& module_;
  hlo::Computation& parent_;
  Instruction& loop_;
  hlo::Computation* body_ = nullptr;
  Instruction* state_ = nullptr;
  int64_t counter_ = -1;
  std::unordered_map<const Instruction*, bool> invariant_;
};

// Whether `inst` is computed from constants, the counter and state the body
// hands on unchanged, with data movement and scalar arithmetic only.
bool Pipeliner::Invariant(const Instruction& inst) {
  auto known = invariant_.find(&inst);
  if (known != invariant_.end()) return known->second;
  bool ok = false;
  if (inst.opcode() == Opcode::kConstant) {
    ok = true;
  } else if (inst.opcode() == Opcode::kGetTupleElement && inst.operand(0) == state_) {
    const Instruction* passed = body_->root()->operand(inst.tuple_index);
    ok = inst.tuple_index == counter_ ||
         (passed->opcode() == Opcode::kGetTupleElement && passed->operand(0) == state_ &&
          passed->tuple_index == inst.tuple_index);
  } else if (inst.opcode() != Opcode::kParameter &&
             (Cheap(inst) || (inst.shape().is_array() && inst.shape().rank() == 0 &&
                              hlo::KernelOf(inst.opcode()) == hlo::Kernel::kElementwise))) {
    ok = true;
    for (const Instruction* op : inst.operands()) ok = ok && Invariant(*op);
  }
  invariant_[&inst] = ok;
  return ok;
}

Instruction* Pipeliner::Copy(const Instruction* inst, hlo::Computation& into,
                             const std::function<Instruction*(int64_t)>& element,
                             std::unordered_map<const Instruction*, Instruction*>& copied) {
  auto it = copied.find(inst);
  if (it != copied.end()) return it->second;
  Instruction* made;
  if (inst->opcode() == Opcode::kGetTupleElement && inst->operand(0) == state_) {
    made = element(inst->tuple_index);
  } else {
    std::vector<Instruction*> operands;
    for (const Instruction* op : inst->operands())
      operands.push_back(Copy(op, into, element, copied));
    auto copy = std::make_unique<Instruction>(inst->opcode(), inst->shape(), operands);
    static_cast<hlo::Attributes&>(*copy) = inst->attributes();
    copy->literal = inst->literal;
    copy->set_name(fmt::format("{}.next", inst->name()));
    made = into.AddInstruction(std::move(copy));
  }
  copied[inst] = made;
  return made;
}

std::vector<Instruction*> Pipeliner::Run() {
  if (loop_.called.size() != 2 || loop_.operand_count() != 1) return {};
  hlo::Computation* condition = loop_.called[0];
  body_ = loop_.called[1];
  // The body and condition must be this loop's alone, its state a tuple
  // the body rebuilds, and every reader of the loop an element of it.
  int64_t callers = 0;
  for (const auto& c : module_.computations()) {
    for (const auto& inst : c->instructions()) {
      for (const hlo::Computation* called : inst->called) {
        callers += called == body_ || called == condition;
      }
    }
  }
  if (callers != 2 || body_->parameter_count() != 1 || condition->parameter_count() != 1) return {};
  state_ = body_->parameter(0);
  Instruction* root = body_->root();
  if (!state_->shape().is_tuple() || root->opcode() != Opcode::kTuple || root == state_) return {};
  for (const auto& inst : parent_.instructions()) {
    for (const Instruction* op : inst->operands()) {
      if (op == &loop_ && inst->opcode() != Opcode::kGetTupleElement) return {};
    }
  }
  if (parent_.root() == &loop_) return {};
  // The counter: an element the body adds a constant to.
  for (int64_t k = 0; k < root->operand_count() && counter_ < 0; ++k) {
    const Instruction* next = root->operand(k);
    if (next->opcode() != Opcode::kAdd || next->shape().rank() != 0) continue;
    for (int64_t i = 0; i < 2; ++i) {
      const Instruction* a = next->operand(i);
      if (a->opcode() == Opcode::kGetTupleElement && a->operand(0) == state_ &&
          a->tuple_index == k && next->operand(1 - i)->opcode() == Opcode::kConstant) {
        counter_ = k;
      }
    }
  }
  if (counter_ < 0) return {};
  std::vector<Instruction*> gathers;
  for (const auto& inst : body_->instructions()) {
    if (inst->opcode() == Opcode::kAllGather && Splits(*inst) && Invariant(*inst->operand(0))) {
      gathers.push_back(inst.get());
    }
  }
  if (gathers.empty()) return {};
  // Before the loop: each gather for the first iteration, from the initial state.
  Instruction* init = loop_.operand(0);
  const int64_t n = state_->shape().tuple_size();
  std::vector<Instruction*> elements;
  for (int64_t k = 0; k < n; ++k) {
    elements.push_back(
        init->opcode() == Opcode::kTuple
            ? init->operand(k)
            : parent_.AddTupleElement(init, k, fmt::format("{}.{}", init->name(), k)));
  }
  std::unordered_map<const Instruction*, Instruction*> outside, inside;
  Instruction* counter_next = root->operand(counter_);
  std::vector<Shape> shapes = state_->shape().tuple_shapes();
  std::vector<Instruction*> next_gathers;
  std::vector<std::pair<Instruction*, int64_t>> carried;  // gather, its state element
  for (Instruction* gather : gathers) {
    auto first = std::make_unique<Instruction>(
        Opcode::kAllGather, gather->shape(),
        std::vector{Copy(
            gather->operand(0), parent_, [&](int64_t k) { return elements[k]; }, outside)});
    static_cast<hlo::Attributes&>(*first) = gather->attributes();
    first->set_name(fmt::format("{}.first", gather->name()));
    elements.push_back(parent_.AddInstruction(std::move(first)));
    // In the body: the carried value for this iteration, the next one's gather.
    const int64_t slot = static_cast<int64_t>(shapes.size());
    shapes.push_back(gather->shape());
    auto next = std::make_unique<Instruction>(
        Opcode::kAllGather, gather->shape(),
        std::vector{Copy(
            gather->operand(0), *body_,
            [&](int64_t k) {
              return k == counter_ ? counter_next
                                   : body_->AddTupleElement(
                                         state_, k, fmt::format("{}.{}", state_->name(), k));
            },
            inside)});
    static_cast<hlo::Attributes&>(*next) = gather->attributes();
    next->set_name(fmt::format("{}.next", gather->name()));
    Instruction* made = body_->AddInstruction(std::move(next));
    next_gathers.push_back(made);
    carried.push_back({gather, slot});
    std::vector<Instruction*> ops = root->operands();
    ops.push_back(made);
    root->set_operands(ops);
  }
  const Shape state = Shape::Tuple(shapes);
  // The new elements' shapes, wherever the state's shape is written.
  state_->set_shape(state);
  root->set_shape(state);
  condition->parameter(0)->set_shape(state);
  for (auto [gather, slot] : carried) {
    body_->ReplaceAllUsesWith(
        gather, body_->AddTupleElement(state_, slot, fmt::format("{}.carried", gather->name())));
  }
  auto tuple = std::make_unique<Instruction>(Opcode::kTuple, state, elements);
  tuple->set_name(fmt::format("{}.pipelined", init->name()));
  loop_.set_operand(0, parent_.AddInstruction(std::move(tuple)));
  loop_.set_shape(state);
  for (hlo::Computation* c : {&parent_, body_}) {
    c->RemoveDeadInstructions();
    c->SortTopologically();
  }
  return next_gathers;
}

bool Overlap(hlo::Computation& c, const std::unordered_set<const Instruction*>& pipelined) {
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
  // The next iteration's gathers: started first, waited for last, and not
  // counted against kInFlight.
  std::unordered_set<const Instruction*> eager;
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
    if (pipelined.count(inst)) {
      eager.insert(s);
      eager.insert(d);
    }
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
      if (eager.count(ready)) continue;
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
  for (Instruction* start : starts) {
    if (eager.count(start)) emit(start);
  }
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
  std::unordered_set<const Instruction*> pipelined;
  for (hlo::Computation* c : ProgramComputations(module)) {
    std::vector<Instruction*> loops;
    for (const auto& inst : c->instructions()) {
      if (inst->opcode() == Opcode::kWhile) loops.push_back(inst.get());
    }
    for (Instruction* loop : loops) {
      for (Instruction* next : Pipeliner(module, *c, *loop).Run()) pipelined.insert(next);
    }
  }
  bool changed = !pipelined.empty();
  for (hlo::Computation* c : ProgramComputations(module)) changed |= Overlap(*c, pipelined);
  return changed;
}

}  // namespace strata::compiler
