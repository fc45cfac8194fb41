// Converts of a loop's scanned operands move into the loop body. A scan over
// convert(W) (mixed precision: f32 master weights stacked over the layers,
// cast to bf16 for the products) makes the whole converted stack before the
// loop, and a training step's forward and backward loops both read it, so it
// lives from the first layer's forward to the last layer's backward. When the
// body reads that state element only through slices (one layer at a time)
// and hands it on unchanged, the loop can carry W itself and convert each
// slice it takes: the same values, no converted stack.
//
// Only where that holds no more bytes: W is a parameter (alive anyway), or
// the convert does not narrow (a narrowing convert of a temporary lets the
// wide temporary die before the loop; carrying it would hold more).
//
// The other way, a loop state element the body hands on unchanged and
// reads only whole, through converts to one type (a rotary table computed
// in f64 and cast for each layer), is converted once before the loop and
// carried converted (HoistConvertsOutOfLoops).
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "passes/loop_state.h"
#include "strata/compiler/passes.h"

namespace strata::compiler {
namespace {

using hlo::Computation;
using hlo::Instruction;
using hlo::Opcode;

Shape WithElement(const Shape& tuple, int64_t k, const Shape& element) {
  std::vector<Shape> elements = tuple.tuple_shapes();
  elements[k] = element;
  return Shape::Tuple(std::move(elements));
}

bool IsSliceOf(const Instruction& user, const Instruction* of) {
  if (user.opcode() != Opcode::kSlice && user.opcode() != Opcode::kDynamicSlice) return false;
  for (int64_t i = 1; i < user.operand_count(); ++i) {
    if (user.operand(i) == of) return false;
  }
  return user.operand(0) == of;
}

// Whether element k of the loop state may carry the convert's operand: the
// condition never reads it, the body hands it on unchanged and otherwise
// only slices it.
bool Sinkable(const Computation& condition, const Computation& body, int64_t k) {
  if (!ElementReads(condition, condition.parameter(0), k).empty()) return false;
  const Instruction* root = body.root();
  if (root->opcode() != Opcode::kTuple) return false;
  const Instruction* passed = root->operand(k);
  bool handed_on = false;
  for (Instruction* read : ElementReads(body, body.parameter(0), k)) {
    handed_on |= read == passed;
    for (const Instruction* user : UsersOf(body, read)) {
      if (user == root) {
        for (int64_t i = 0; i < root->operand_count(); ++i) {
          if (root->operand(i) == read && i != k) return false;
        }
        continue;
      }
      if (!IsSliceOf(*user, read)) return false;
    }
  }
  return handed_on;
}

// Gives `value` the dtype `from` and puts a convert back to its old shape
// between it and every reader of it in `c`.
void ConvertAfter(Computation& c, Instruction* value, DType from) {
  const Shape old = value->shape();
  value->set_shape(old.WithDType(from));
  Instruction* convert = c.AddInstruction(
      std::make_unique<Instruction>(Opcode::kConvert, old, std::vector<Instruction*>{value}));
  convert->set_name(value->name() + ".convert");
  Computation::Replacements replacements{{value, convert}};
  for (const auto& inst : c.instructions()) {
    if (inst.get() != convert) Computation::UpdateOperands(inst.get(), replacements);
  }
  if (c.root() == value) c.set_root(convert);
}

// Element k of the loop's state becomes `element`: the loop, the
// condition's and body's parameters and the body's root all change shape.
void SetElementShape(Instruction* loop, int64_t k, const Shape& element) {
  const Shape state = WithElement(loop->shape(), k, element);
  loop->set_shape(state);
  loop->called[0]->parameter(0)->set_shape(state);
  loop->called[1]->parameter(0)->set_shape(state);
  loop->called[1]->root()->set_shape(state);
}

// A loop's condition and body, and the elements of the tuple it starts from.
struct LoopParts {
  Computation& condition;
  Computation& body;
  std::vector<Instruction*> elements;
};

LoopParts PartsOf(Instruction* loop) {
  return {*loop->called[0], *loop->called[1], loop->operand(0)->operands()};
}

// The loop starts from a new tuple of `elements`, named after the old one.
void SetInit(Computation& c, Instruction* loop, std::vector<Instruction*> elements,
             const std::string& suffix) {
  const std::string name = loop->operand(0)->name() + suffix;
  Instruction* tuple = c.AddInstruction(
      std::make_unique<Instruction>(Opcode::kTuple, loop->shape(), std::move(elements)));
  tuple->set_name(name);
  loop->set_operand(0, tuple);
}

bool SinkInto(Computation& c, Instruction* loop,
              const std::unordered_map<const Computation*, int>& callers) {
  if (!StateMayChange(c, loop, callers)) return false;
  auto [condition, body, elements] = PartsOf(loop);
  bool changed = false;
  for (int64_t k = 0; k < static_cast<int64_t>(elements.size()); ++k) {
    Instruction* convert = elements[k];
    if (convert->opcode() != Opcode::kConvert) continue;
    Instruction* source = convert->operand(0);
    const DType from = source->shape().dtype();
    const DType to = convert->shape().dtype();
    if (source->opcode() != Opcode::kParameter && DTypeSize(to) < DTypeSize(from)) continue;
    if (!Sinkable(condition, body, k)) continue;

    elements[k] = source;
    SetElementShape(loop, k, source->shape());
    for (Instruction* read : ElementReads(body, body.parameter(0), k)) {
      read->set_shape(source->shape());
      for (Instruction* user : UsersOf(body, read)) {
        if (user != body.root()) ConvertAfter(body, user, from);
      }
    }
    for (Instruction* read : ElementReads(c, loop, k)) ConvertAfter(c, read, from);
    changed = true;
  }
  if (!changed) return false;
  SetInit(c, loop, std::move(elements), ".sunk");
  body.SortTopologically();
  return true;
}

// The type every reader of element k in the body but the hand-on converts
// it to, where the condition never reads it and nothing after the loop does.
std::optional<DType> ReadOnlyConverted(const Computation& c, const Instruction* loop,
                                       const Computation& condition, const Computation& body,
                                       int64_t k) {
  if (!ElementReads(condition, condition.parameter(0), k).empty() ||
      !ElementReads(c, loop, k).empty()) {
    return std::nullopt;
  }
  const Instruction* root = body.root();
  if (root->opcode() != Opcode::kTuple) return std::nullopt;
  std::optional<DType> to;
  bool handed_on = false;
  for (Instruction* read : ElementReads(body, body.parameter(0), k)) {
    handed_on |= read == root->operand(k);
    for (const Instruction* user : UsersOf(body, read)) {
      if (user == root) {
        for (int64_t i = 0; i < root->operand_count(); ++i) {
          if (root->operand(i) == read && i != k) return std::nullopt;
        }
        continue;
      }
      if (user->opcode() != Opcode::kConvert || (to && user->shape().dtype() != *to))
        return std::nullopt;
      to = user->shape().dtype();
    }
  }
  if (!handed_on) return std::nullopt;
  return to;
}

bool HoistFrom(Computation& c, Instruction* loop,
               const std::unordered_map<const Computation*, int>& callers) {
  if (!StateMayChange(c, loop, callers)) return false;
  auto [condition, body, elements] = PartsOf(loop);
  bool changed = false;
  for (int64_t k = 0; k < static_cast<int64_t>(elements.size()); ++k) {
    if (!elements[k]->shape().is_array()) continue;
    const std::optional<DType> to = ReadOnlyConverted(c, loop, condition, body, k);
    if (!to) continue;
    const Shape converted = elements[k]->shape().WithDType(*to);
    auto convert = std::make_unique<Instruction>(Opcode::kConvert, converted,
                                                 std::vector<Instruction*>{elements[k]});
    convert->set_name(elements[k]->name() + ".hoisted");
    elements[k] = c.AddInstruction(std::move(convert));
    SetElementShape(loop, k, converted);
    Computation::Replacements replacements;
    for (Instruction* read : ElementReads(body, body.parameter(0), k)) {
      read->set_shape(converted);
      for (Instruction* user : UsersOf(body, read)) {
        if (user != body.root()) replacements[user] = read;
      }
    }
    body.ApplyReplacements(replacements);
    body.RemoveDeadInstructions();
    changed = true;
  }
  if (!changed) return false;
  SetInit(c, loop, std::move(elements), ".hoisted");
  return true;
}

}  // namespace

bool HoistConvertsOutOfLoops(hlo::Module& module) { return ForEachLoop(module, HoistFrom); }

bool SinkConvertsIntoLoops(hlo::Module& module) { return ForEachLoop(module, SinkInto); }

}  // namespace strata::compiler
