// An elementwise fusion that reads a stack a loop writes slice by slice runs
// in the loop, on each slice as the loop makes it.
//
// A training step's backward loop writes each layer's weight gradient into a
// stacked gradient; AdamW then reads the whole stack beside the stacked
// weights and both moments and writes the new weights and moments. The
// stacked gradient is whole at the step's peak, beside the weights, the
// moments and the activations the forward saved. When the loop writes every
// slice exactly once (a counter from 0 up by 1 to the stack's length, the
// slice at the counter or at length - 1 - counter) and only an elementwise
// fusion reads the stack after the loop, the loop can carry what that
// fusion reads (the weights, the moments, its scalars) and write the
// fusion's results into those arrays, slice by slice: each layer's
// gradient is used while it is fresh and the stack is never made. A weight
// the body already reads only at the slice it updates (the backward's own
// read of layer i's weights) is updated in its own state element: iteration
// i reads slice i before it writes it, and no later iteration reads it.
//
// Not possible when something needs the whole stack first: a global-norm
// gradient clip reads every gradient before any update.
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "kernels/kernels.h"
#include "passes/loop_state.h"
#include "strata/compiler/passes.h"

namespace strata::compiler {

using runtime::FusionOutputShape;
using runtime::IsPlainLoopFusion;
namespace {

using hlo::Computation;
using hlo::Instruction;
using hlo::Opcode;

std::optional<int64_t> IntegerConstant(const Instruction* inst) {
  if (inst->opcode() != Opcode::kConstant || inst->shape().rank() != 0 ||
      !IsInteger(inst->shape().dtype())) {
    return std::nullopt;
  }
  return static_cast<int64_t>(inst->literal.GetAsDouble(0));
}

bool IsElement(const Instruction* inst, const Instruction* tuple, int64_t k) {
  return inst->opcode() == Opcode::kGetTupleElement && inst->operand(0) == tuple &&
         inst->tuple_index == k;
}

// The loop's counter: state element `element` starts at 0, the body adds 1
// and the condition runs while it is below `trips`.
struct Counter {
  int64_t element = -1;
  int64_t trips = 0;
};

std::optional<Counter> FindCounter(const Instruction& loop) {
  const Computation& condition = *loop.called[0];
  const Computation& body = *loop.called[1];
  const Instruction* compare = condition.root();
  if (compare->opcode() != Opcode::kCompare || compare->direction != hlo::Comparison::kLt ||
      compare->operand(0)->opcode() != Opcode::kGetTupleElement ||
      compare->operand(0)->operand(0) != condition.parameter(0)) {
    return std::nullopt;
  }
  const int64_t k = compare->operand(0)->tuple_index;
  const std::optional<int64_t> trips = IntegerConstant(compare->operand(1));
  const std::optional<int64_t> start = IntegerConstant(loop.operand(0)->operand(k));
  const Instruction* root = body.root();
  if (!trips || start != 0 || root->opcode() != Opcode::kTuple) return std::nullopt;
  const Instruction* next = root->operand(k);
  if (next->opcode() != Opcode::kAdd) return std::nullopt;
  for (int side = 0; side < 2; ++side) {
    if (IsElement(next->operand(side), body.parameter(0), k) &&
        IntegerConstant(next->operand(1 - side)) == 1) {
      return Counter{k, *trips};
    }
  }
  return std::nullopt;
}

// Whether `start` is the counter or trips - 1 - counter: over the loop's
// iterations, each of 0 .. trips - 1 once.
bool VisitsEverySlice(const Instruction* start, const Computation& body, const Counter& counter) {
  if (IsElement(start, body.parameter(0), counter.element)) return true;
  return start->opcode() == Opcode::kSubtract &&
         IntegerConstant(start->operand(0)) == counter.trips - 1 &&
         IsElement(start->operand(1), body.parameter(0), counter.element);
}

// Two starts that name the same slice in every iteration.
bool SameStart(const Instruction* a, const Instruction* b, const Computation& body,
               const Counter& counter) {
  if (a == b) return true;
  auto counter_read = [&](const Instruction* i) {
    return IsElement(i, body.parameter(0), counter.element);
  };
  if (counter_read(a) && counter_read(b)) return true;
  return a->opcode() == Opcode::kSubtract && b->opcode() == Opcode::kSubtract &&
         IntegerConstant(a->operand(0)) &&
         IntegerConstant(a->operand(0)) == IntegerConstant(b->operand(0)) &&
         counter_read(a->operand(1)) && counter_read(b->operand(1));
}

// Whether a fusion's computation is elementwise over `dims`: parameters and
// values of those dims or scalars, scalar constants, broadcasts of scalars
// and elementwise ops; nothing that depends on where an element is.
bool ElementwiseOver(const Computation& fused, const std::vector<int64_t>& dims) {
  for (const auto& inst : fused.instructions()) {
    const Shape& s = inst->shape();
    if (inst->opcode() == Opcode::kTuple) {
      if (inst.get() != fused.root()) return false;
      continue;
    }
    if (!s.is_array() || (s.rank() != 0 && s.dims() != dims)) return false;
    switch (inst->opcode()) {
      case Opcode::kParameter:
        continue;
      case Opcode::kConstant:
        if (s.rank() != 0) return false;
        continue;
      case Opcode::kBroadcast:
        if (inst->operand(0)->shape().rank() != 0) return false;
        continue;
      case Opcode::kSelect:
      case Opcode::kClamp:
      case Opcode::kCompare:
      case Opcode::kConvert:  // a bf16 gradient read by the f32 update
        continue;
      default:
        if (!hlo::IsElementwiseUnary(inst->opcode()) && !hlo::IsElementwiseBinary(inst->opcode()))
          return false;
    }
  }
  return true;
}

// Whether `value` is computed from `from`.
bool Reads(const Instruction* value, const Instruction* from) {
  std::vector<const Instruction*> stack{value};
  std::unordered_set<const Instruction*> seen{value};
  while (!stack.empty()) {
    const Instruction* i = stack.back();
    stack.pop_back();
    if (i == from) return true;
    for (const Instruction* op : i->operands()) {
      if (seen.insert(op).second) stack.push_back(op);
    }
  }
  return false;
}

// One stack the loop writes slice by slice (state element `element`) and
// the fusion that alone reads it after the loop.
struct Sinkable {
  int64_t element = -1;
  Instruction* update = nullptr;  // the loop's dynamic-update-slice of it
  Instruction* fusion = nullptr;
};

class Sinker {
 public:
  Sinker(hlo::Module& module, Computation& c, Instruction* loop, const Counter& counter)
      : module_(module),
        c_(c),
        loop_(loop),
        condition_(*loop->called[0]),
        body_(*loop->called[1]),
        counter_(counter) {}

  bool Run() {
    std::vector<Sinkable> found;
    std::unordered_set<const Instruction*> fusions;
    for (int64_t k = 0; k < loop_->shape().tuple_size(); ++k) {
      std::optional<Sinkable> s = Find(k);
      // One stack per fusion; a fusion reading two of this loop's stacks stays.
      if (s && fusions.insert(s->fusion).second) found.push_back(*s);
    }
    if (found.empty()) return false;
    Rebuild(found);
    return true;
  }

 private:
  // Element k as a stack written slice by slice and read by one fusion.
  std::optional<Sinkable> Find(int64_t k) {
    const Instruction* root = body_.root();
    Instruction* dus = root->operand(k);
    const Shape& stack = loop_->shape().tuple_shape(k);
    if (dus->opcode() != Opcode::kDynamicUpdateSlice || !stack.is_array() || stack.rank() == 0 ||
        stack.dims()[0] != counter_.trips || k == counter_.element ||
        !IsElement(dus->operand(0), body_.parameter(0), k) ||
        !ElementReads(condition_, condition_.parameter(0), k).empty()) {
      return std::nullopt;
    }
    std::vector<int64_t> slice = stack.dims();
    slice[0] = 1;
    if (dus->operand(1)->shape().dims() != slice || dus->operand_count() != 2 + stack.rank() ||
        !VisitsEverySlice(dus->operand(2), body_, counter_)) {
      return std::nullopt;
    }
    for (int64_t d = 3; d < dus->operand_count(); ++d) {
      if (IntegerConstant(dus->operand(d)) != 0) return std::nullopt;
    }
    // The body reads the stack only to update it.
    for (Instruction* read : ElementReads(body_, body_.parameter(0), k)) {
      for (Instruction* user : UsersOf(body_, read)) {
        if (user != dus) return std::nullopt;
        for (int64_t i = 1; i < dus->operand_count(); ++i) {
          if (dus->operand(i) == read) return std::nullopt;
        }
      }
    }
    Instruction* fusion = nullptr;
    std::vector<Instruction*> reads = ElementReads(c_, loop_, k);
    if (reads.empty()) return std::nullopt;
    for (Instruction* read : reads) {
      for (Instruction* user : UsersOf(c_, read)) {
        if (fusion && user != fusion) return std::nullopt;
        fusion = user;
      }
    }
    if (!fusion || !IsPlainLoopFusion(*fusion) ||
        FusionOutputShape(*fusion)->dims() != stack.dims() ||
        !ElementwiseOver(*fusion->called[0], stack.dims())) {
      return std::nullopt;
    }
    for (const Instruction* op : fusion->operands()) {
      const bool this_stack = IsElement(op, loop_, k);
      if (!this_stack &&
          (!op->shape().is_array() ||
           (op->shape().rank() != 0 && op->shape().dims() != stack.dims()) || Reads(op, loop_))) {
        return std::nullopt;
      }
    }
    // Every result goes back into an array the fusion reads (its weights,
    // its moments): one of its own dtype, each taken once.
    std::vector<bool> taken(fusion->operand_count(), false);
    for (const Shape& result : fusion->shape().Leaves()) {
      bool carried = false;
      for (int64_t i = 0; i < fusion->operand_count() && !carried; ++i) {
        const Instruction* op = fusion->operand(i);
        if (taken[i] || IsElement(op, loop_, k) || op->shape() != result) continue;
        taken[i] = carried = true;
      }
      if (!carried) return std::nullopt;
    }
    return Sinkable{k, dus, fusion};
  }

  // Whether state element e holds `value`, which the body reads only as
  // whole slices at `start` and hands on unchanged, the condition never
  // reads and nothing after the loop reads: then the loop may update it in
  // place, slice by slice.
  bool UpdatableInPlace(int64_t e, const Instruction* value, const Instruction* start) {
    const Instruction* root = body_.root();
    if (loop_->operand(0)->operand(e) != value ||
        !IsElement(root->operand(e), body_.parameter(0), e) ||
        !ElementReads(condition_, condition_.parameter(0), e).empty() ||
        !ElementReads(c_, loop_, e).empty()) {
      return false;
    }
    std::vector<int64_t> slice = value->shape().dims();
    slice[0] = 1;
    for (Instruction* read : ElementReads(body_, body_.parameter(0), e)) {
      for (Instruction* user : UsersOf(body_, read)) {
        if (user == root) {
          for (int64_t i = 0; i < root->operand_count(); ++i) {
            if (root->operand(i) == read && i != e) return false;
          }
          continue;
        }
        if (user->opcode() != Opcode::kDynamicSlice || user->operand(0) != read ||
            user->dynamic_slice_sizes != slice ||
            !SameStart(user->operand(1), start, body_, counter_))
          return false;
        for (int64_t d = 2; d < user->operand_count(); ++d) {
          if (IntegerConstant(user->operand(d)) != 0) return false;
        }
      }
    }
    return true;
  }

  Instruction* Add(Computation& into, std::unique_ptr<Instruction> inst, std::string name) {
    inst->set_name(std::move(name));
    return into.AddInstruction(std::move(inst));
  }

  Instruction* ElementOf(Computation& into, Instruction* tuple, int64_t index) {
    return into.AddTupleElement(tuple, index, fmt::format("{}.{}", tuple->name(), index));
  }

  // The fusion's computation over one slice: each value of the stack's
  // dims gets the slice's.
  Computation* SliceComputation(const Computation& fused, const std::vector<int64_t>& slice) {
    auto out = std::make_unique<Computation>(fmt::format("{}_slice", fused.name()));
    std::unordered_map<const Instruction*, Instruction*> inside;
    auto sliced = [&](const Shape& s) { return s.rank() == 0 ? s : Shape(s.dtype(), slice); };
    for (const auto& inst : fused.instructions()) {
      std::vector<Instruction*> operands;
      for (const Instruction* op : inst->operands()) operands.push_back(inside.at(op));
      Shape shape = inst->shape();
      if (shape.is_tuple()) {
        std::vector<Shape> leaves;
        for (const Shape& leaf : shape.tuple_shapes()) leaves.push_back(sliced(leaf));
        shape = Shape::Tuple(std::move(leaves));
      } else {
        shape = sliced(shape);
      }
      auto clone = std::make_unique<Instruction>(inst->opcode(), shape, operands);
      static_cast<hlo::Attributes&>(*clone) = inst->attributes();
      clone->set_name(inst->name());
      inside[inst.get()] = out->AddInstruction(std::move(clone));
    }
    out->set_root(inside.at(fused.root()));
    return module_.AddComputationBefore(std::move(out), &body_);
  }

  // Long by design: one rewrite of the loop (new state, new body root, new
  // uses outside) whose steps share the maps from old values to new ones.
  void Rebuild(const std::vector<Sinkable>& found) {
    Instruction* init = loop_->operand(0);
    Instruction* state = body_.parameter(0);
    const int64_t n = loop_->shape().tuple_size();
    // The new state: the old elements but the stacks, then what the
    // fusions read that the loop does not carry yet.
    std::vector<bool> removed(n, false);
    for (const Sinkable& s : found) removed[s.element] = true;
    std::vector<int64_t> renumber(n, -1);
    std::vector<Instruction*> inits;
    for (int64_t i = 0; i < n; ++i) {
      if (removed[i]) continue;
      renumber[i] = static_cast<int64_t>(inits.size());
      inits.push_back(init->operand(i));
    }
    std::vector<Instruction*> root_operands;
    for (int64_t i = 0; i < n; ++i) {
      if (!removed[i]) root_operands.push_back(body_.root()->operand(i));
    }
    std::unordered_set<int64_t> updated;                      // elements some fusion writes
    std::unordered_map<const Instruction*, int64_t> carried;  // outer value -> element
    auto carry = [&](Instruction* value) {
      auto it = carried.find(value);
      if (it != carried.end()) return it->second;
      const int64_t e = static_cast<int64_t>(inits.size());
      inits.push_back(value);
      root_operands.push_back(nullptr);  // passed on, filled in below
      carried[value] = e;
      return e;
    };
    struct Plan {
      const Sinkable* sink;
      std::vector<int64_t> operand_element;  // per fusion operand; -1: the stack's slice
      std::vector<int64_t> result_element;
    };
    std::vector<Plan> plans;
    for (const Sinkable& s : found) {
      Plan plan{&s, {}, {}};
      const Instruction* start = s.update->operand(2);
      std::vector<bool> may_write(s.fusion->operand_count(), false);
      for (int64_t i = 0; i < s.fusion->operand_count(); ++i) {
        Instruction* op = s.fusion->operand(i);
        if (IsElement(op, loop_, s.element)) {
          plan.operand_element.push_back(-1);
          continue;
        }
        int64_t e = -1;
        if (op->shape().rank() > 0) {
          for (int64_t j = 0; j < n && e < 0; ++j) {
            if (!removed[j] && !updated.count(renumber[j]) && UpdatableInPlace(j, op, start))
              e = renumber[j];
          }
          if (e >= 0) {
            updated.insert(e);
            may_write[i] = true;
          }
        } else {
          for (int64_t j = 0; j < n && e < 0; ++j) {
            if (!removed[j] && init->operand(j) == op &&
                IsElement(body_.root()->operand(j), state, j))
              e = renumber[j];
          }
        }
        if (e < 0) {
          const bool fresh = !carried.count(op);
          e = carry(op);
          if (op->shape().rank() > 0 && fresh && !updated.count(e)) {
            updated.insert(e);
            may_write[i] = true;
          }
        }
        plan.operand_element.push_back(e);
      }
      std::vector<bool> taken(s.fusion->operand_count(), false);
      for (const Shape& result : s.fusion->shape().Leaves()) {
        int64_t e = -1;
        for (int64_t i = 0; i < s.fusion->operand_count() && e < 0; ++i) {
          if (taken[i] || !may_write[i] || s.fusion->operand(i)->shape() != result) continue;
          taken[i] = true;
          e = plan.operand_element[i];
        }
        if (e < 0) {
          // The array is also read elsewhere in the loop: a copy of it
          // carries the result.
          for (int64_t i = 0; i < s.fusion->operand_count() && e < 0; ++i) {
            Instruction* op = s.fusion->operand(i);
            if (taken[i] || plan.operand_element[i] < 0 || op->shape() != result) continue;
            taken[i] = true;
            e = static_cast<int64_t>(inits.size());
            inits.push_back(op);
            root_operands.push_back(nullptr);
          }
        }
        plan.result_element.push_back(e);
      }
      plans.push_back(std::move(plan));
    }

    std::vector<Shape> shapes;
    for (const Instruction* v : inits) shapes.push_back(v->shape());
    const Shape state_shape = Shape::Tuple(shapes);
    loop_->set_shape(state_shape);
    condition_.parameter(0)->set_shape(state_shape);
    state->set_shape(state_shape);
    for (Computation* in : {&condition_, &body_}) {
      for (const auto& inst : in->instructions()) {
        if (inst->opcode() == Opcode::kGetTupleElement && inst->operand(0) == in->parameter(0) &&
            renumber[inst->tuple_index] >= 0)
          inst->tuple_index = renumber[inst->tuple_index];
      }
    }
    std::unordered_map<int64_t, Instruction*> reads;  // element -> its read in the body
    auto read = [&](int64_t e) {
      auto it = reads.find(e);
      if (it == reads.end()) it = reads.emplace(e, ElementOf(body_, state, e)).first;
      return it->second;
    };
    for (size_t e = 0; e < root_operands.size(); ++e) {
      if (!root_operands[e]) root_operands[e] = read(static_cast<int64_t>(e));
    }
    hlo::Computation::Replacements after;  // the fusions' results after the loop
    for (const Plan& plan : plans) {
      const Sinkable& s = *plan.sink;
      std::vector<Instruction*> starts(s.update->operands().begin() + 2,
                                       s.update->operands().end());
      std::vector<int64_t> slice = s.update->operand(0)->shape().dims();
      slice[0] = 1;
      std::vector<Instruction*> operands;
      for (size_t i = 0; i < plan.operand_element.size(); ++i) {
        const int64_t e = plan.operand_element[i];
        if (e < 0) {
          operands.push_back(s.update->operand(1));
        } else if (inits[e]->shape().rank() == 0) {
          operands.push_back(read(e));
        } else {
          std::vector<Instruction*> ds_operands{read(e)};
          ds_operands.insert(ds_operands.end(), starts.begin(), starts.end());
          auto ds = std::make_unique<Instruction>(
              Opcode::kDynamicSlice, Shape(inits[e]->shape().dtype(), slice), ds_operands);
          ds->dynamic_slice_sizes = slice;
          operands.push_back(Add(body_, std::move(ds), fmt::format("{}.slice", inits[e]->name())));
        }
      }
      Computation* fused = SliceComputation(*s.fusion->called[0], slice);
      auto f = std::make_unique<Instruction>(Opcode::kFusion, fused->root()->shape(), operands);
      static_cast<hlo::Attributes&>(*f) = s.fusion->attributes();
      f->called = {fused};
      Instruction* fusion = Add(body_, std::move(f), fmt::format("{}.sunk", s.fusion->name()));
      const bool tuple = fusion->shape().is_tuple();
      for (size_t r = 0; r < plan.result_element.size(); ++r) {
        const int64_t e = plan.result_element[r];
        Instruction* value = tuple ? ElementOf(body_, fusion, static_cast<int64_t>(r)) : fusion;
        std::vector<Instruction*> dus_operands{read(e), value};
        dus_operands.insert(dus_operands.end(), starts.begin(), starts.end());
        root_operands[e] = Add(body_,
                               std::make_unique<Instruction>(Opcode::kDynamicUpdateSlice,
                                                             inits[e]->shape(), dus_operands),
                               fmt::format("{}.update", inits[e]->name()));
      }
      // After the loop, the fusion's results are the loop's elements.
      std::vector<Instruction*> results;
      for (int64_t e : plan.result_element) results.push_back(ElementOf(c_, loop_, e));
      if (tuple) {
        for (Instruction* user : UsersOf(c_, s.fusion)) {
          after[user] = results.at(user->tuple_index);
        }
      } else {
        after[s.fusion] = results[0];
      }
    }
    auto root = std::make_unique<Instruction>(Opcode::kTuple, state_shape, root_operands);
    Instruction* old_root = body_.root();
    body_.set_root(Add(body_, std::move(root), old_root->name()));
    // Reads of the old state after the loop: renumbered (the stacks' reads
    // die with the fusions; the new reads already point at new elements).
    std::unordered_set<const Instruction*> fresh;
    for (const auto& [old, now] : after) fresh.insert(now);
    for (const auto& inst : c_.instructions()) {
      if (inst->opcode() != Opcode::kGetTupleElement || inst->operand(0) != loop_ ||
          fresh.count(inst.get()))
        continue;
      if (renumber[inst->tuple_index] >= 0) inst->tuple_index = renumber[inst->tuple_index];
    }
    c_.ApplyReplacements(after);
    auto tuple = std::make_unique<Instruction>(Opcode::kTuple, state_shape, inits);
    loop_->set_operand(0, Add(c_, std::move(tuple), init->name() + ".sunk"));
    body_.SortTopologically();
    body_.RemoveDeadInstructions();
  }

  hlo::Module& module_;
  Computation& c_;
  Instruction* loop_;
  Computation& condition_;
  Computation& body_;
  Counter counter_;
};

}  // namespace

bool SinkUpdatesIntoLoops(hlo::Module& module) {
  bool changed = ForEachLoop(module, [&](Computation& c, Instruction* loop, const auto& callers) {
    if (!StateMayChange(c, loop, callers)) return false;
    const std::optional<Counter> counter = FindCounter(*loop);
    return counter && Sinker(module, c, loop, *counter).Run();
  });
  if (changed) module.RemoveUnreachableComputations();
  return changed;
}

}  // namespace strata::compiler
