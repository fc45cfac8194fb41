// FuseProducers: a loop fusion takes in the elementwise producers only it
// reads (XLA's producer-consumer fusion, run again after the sibling merge).
// FuseElementwise leaves a value outside every fusion when two fusions
// read it and it is too costly to compute in both (a logistic) or must be
// written rounded once (a convert to bf16); once MergeSiblingFusions has
// made those two readers one fusion, the value has a single reader and
// needs no memory: the producer (a loop fusion or one elementwise op over
// the same dims) joins its reader, which then reads the producer's
// operands instead of its result.
//
// Only plain elementwise fusions of one compute type on both sides (no
// reduction inside), where the reader reads the value element by element
// (not through a broadcast or a view).
#include <fmt/format.h>

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels/kernels.h"
#include "strata/compiler/passes.h"

namespace strata::compiler {

using runtime::FusionComputeType;
using runtime::FusionElementwiseOperands;
using runtime::FusionOutputShape;
using runtime::IsPlainLoopFusion;
namespace {

using hlo::Instruction;
using hlo::Opcode;

// One elementwise op a fused loop of `type` computes: on floats of that
// type, or a convert between it and bf16.
bool IsFusibleOp(const Instruction& x, DType type) {
  if (!x.shape().is_array()) return false;
  const Opcode op = x.opcode();
  const DType t = x.shape().dtype();
  if (op == Opcode::kConvert) {
    const DType from = x.operand(0)->shape().dtype();
    return type == DType::kF32 && ((from == DType::kF32 && t == DType::kBF16) ||
                                   (from == DType::kBF16 && t == DType::kF32));
  }
  if (!(hlo::IsElementwiseUnary(op) || hlo::IsElementwiseBinary(op)) || t != type) return false;
  for (const Instruction* o : x.operands()) {
    if (o->shape().dims() != x.shape().dims() || o->shape().dtype() != type) return false;
  }
  return true;
}

class Absorber {
 public:
  Absorber(hlo::Module& module, hlo::Computation& c) : module_(module), c_(c) {}

  bool Run() {
    bool changed = false;
    while (AbsorbOne()) changed = true;
    return changed;
  }

 private:
  bool AbsorbOne() {
    std::unordered_map<const Instruction*, std::vector<const Instruction*>> users;
    for (const auto& inst : c_.instructions()) {
      for (const Instruction* op : inst->operands()) users[op].push_back(inst.get());
    }
    for (const auto& inst : c_.instructions()) {
      Instruction* reader = inst.get();
      if (!IsPlainLoopFusion(*reader)) continue;
      const std::vector<int64_t> dims = FusionOutputShape(*reader)->dims();
      const DType type = *FusionComputeType(*reader);
      std::optional<std::vector<bool>> reads;  // FusionElementwiseOperands, once asked
      for (int64_t i = 0; i < reader->operand_count(); ++i) {
        Instruction* x = reader->operand(i);
        if (x == c_.root() || !x->shape().is_array() || x->shape().dims() != dims) continue;
        bool only_reader = true;
        for (const Instruction* u : users.at(x)) only_reader = only_reader && u == reader;
        if (!only_reader) continue;
        const bool fusion = IsPlainLoopFusion(*x) && FusionComputeType(*x) == type;
        if (!fusion && !IsFusibleOp(*x, type)) continue;
        bool elementwise = true;
        for (int64_t k = 0; k < reader->operand_count(); ++k) {
          if (reader->operand(k) != x) continue;
          if (!reads) reads = FusionElementwiseOperands(*reader);
          elementwise = elementwise && (*reads)[static_cast<size_t>(k)];
        }
        if (!elementwise) continue;
        Absorb(reader, x);
        return true;
      }
    }
    return false;
  }

  // The reader's computation with the producer computed where it read it.
  void Absorb(Instruction* reader, Instruction* x) {
    auto fused = std::make_unique<hlo::Computation>(
        fmt::format("{}_with_{}", reader->called[0]->name(), count_++));
    std::vector<Instruction*> arguments;
    std::unordered_map<const Instruction*, Instruction*> parameter_of;  // outer -> inside
    auto parameter = [&](Instruction* outer) {
      auto it = parameter_of.find(outer);
      if (it != parameter_of.end()) return it->second;
      auto p = std::make_unique<Instruction>(Opcode::kParameter, outer->shape(),
                                             std::vector<Instruction*>{});
      p->parameter_number = static_cast<int64_t>(arguments.size());
      p->set_name(fmt::format("p{}", arguments.size()));
      arguments.push_back(outer);
      return parameter_of[outer] = fused->AddInstruction(std::move(p));
    };
    // (The producer's names get a suffix: both computations may hold one.)
    const std::string suffix = fmt::format(".in{}", count_ - 1);
    auto clone = [&](const Instruction& inst, std::vector<Instruction*> operands, bool producer) {
      auto copy = std::make_unique<Instruction>(inst.opcode(), inst.shape(), std::move(operands));
      static_cast<hlo::Attributes&>(*copy) = inst.attributes();
      copy->set_name(producer ? inst.name() + suffix : inst.name());
      return fused->AddInstruction(std::move(copy));
    };
    // The producer first: its operands become the reader's parameters.
    Instruction* produced = nullptr;
    if (x->opcode() == Opcode::kFusion) {
      std::unordered_map<const Instruction*, Instruction*> inside;
      for (const auto& inst : x->called[0]->instructions()) {
        if (inst->opcode() == Opcode::kParameter) {
          inside[inst.get()] = parameter(x->operand(inst->parameter_number));
          continue;
        }
        std::vector<Instruction*> operands;
        for (const Instruction* op : inst->operands()) operands.push_back(inside.at(op));
        inside[inst.get()] = clone(*inst, std::move(operands), true);
      }
      produced = inside.at(x->called[0]->root());
    } else {
      std::vector<Instruction*> operands;
      for (Instruction* op : x->operands()) operands.push_back(parameter(op));
      produced = clone(*x, std::move(operands), true);
    }
    std::unordered_map<const Instruction*, Instruction*> inside;
    for (const auto& inst : reader->called[0]->instructions()) {
      if (inst->opcode() == Opcode::kParameter) {
        Instruction* outer = reader->operand(inst->parameter_number);
        inside[inst.get()] = outer == x ? produced : parameter(outer);
        continue;
      }
      std::vector<Instruction*> operands;
      for (const Instruction* op : inst->operands()) operands.push_back(inside.at(op));
      inside[inst.get()] = clone(*inst, std::move(operands), false);
    }
    fused->set_root(inside.at(reader->called[0]->root()));
    fused->RemoveDeadInstructions();
    hlo::Computation* callee = module_.AddComputationBefore(std::move(fused), &c_);
    auto merged = std::make_unique<Instruction>(Opcode::kFusion, reader->shape(), arguments);
    merged->called = {callee};
    merged->set_name(reader->name());
    c_.ApplyReplacements({{reader, c_.AddInstruction(std::move(merged))}});
    c_.SortTopologically();
    c_.RemoveDeadInstructions();
  }

  hlo::Module& module_;
  hlo::Computation& c_;
  int64_t count_ = 0;
};

}  // namespace

bool FuseProducers(hlo::Module& module) {
  bool changed = false;
  for (hlo::Computation* c : ProgramComputations(module)) changed |= Absorber(module, *c).Run();
  if (changed) {
    module.RemoveUnreachableComputations();
    EliminateCommonSubexpressions(module);
  }
  return changed;
}

}  // namespace strata::compiler
