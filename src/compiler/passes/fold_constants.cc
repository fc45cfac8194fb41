// Constant folding: an instruction whose operands are all constants is
// evaluated at compile time with the runtime's own kernels. Broadcasts and
// iotas are left alone (folding them only makes big literals), and so is
// anything larger than kMaxFoldedElements.
#include <fmt/format.h>

#include "strata/compiler/compile.h"
#include "strata/compiler/passes.h"
#include "strata/hlo/builder.h"

namespace strata::compiler {

using runtime::Buffer;
namespace {

constexpr int64_t kMaxFoldedElements = 1 << 16;

bool Foldable(const hlo::Instruction& inst) {
  switch (inst.opcode()) {
    case hlo::Opcode::kParameter:
    case hlo::Opcode::kConstant:
    case hlo::Opcode::kBroadcast:
    case hlo::Opcode::kIota:
    case hlo::Opcode::kTuple:
    case hlo::Opcode::kGetTupleElement:
    case hlo::Opcode::kWhile:
    case hlo::Opcode::kCall:
    case hlo::Opcode::kOptimizationBarrier:
    case hlo::Opcode::kRngBitGenerator:
    case hlo::Opcode::kCustomCall:
      return false;
    default:
      break;
  }
  if (hlo::IsCollective(inst.opcode())) return false;  // its value depends on the partition
  if (!inst.called.empty() || !inst.shape().is_array() || inst.operand_count() == 0) return false;
  if (inst.shape().num_elements() > kMaxFoldedElements) return false;
  for (const hlo::Instruction* op : inst.operands()) {
    if (op->opcode() != hlo::Opcode::kConstant) return false;
  }
  return true;
}

hlo::Literal Evaluate(const hlo::Instruction& inst) {
  hlo::Module m("fold");
  hlo::Builder b("fold");
  std::vector<hlo::Instruction*> operands;
  for (const hlo::Instruction* op : inst.operands()) operands.push_back(b.Constant(op->literal));
  auto copy = std::make_unique<hlo::Instruction>(inst);
  copy->set_operands(operands);
  copy->set_name("");
  m.AddEntryComputation(b.Build(b.Add(std::move(copy))));
  CompileOptions options;
  options.run_passes = false;
  auto exe = Compile(m, options);
  std::vector<Buffer> out = exe->Run({});
  const uint8_t* data = out[0].data();
  return hlo::Literal(inst.shape(), std::vector<uint8_t>(data, data + inst.shape().byte_size()));
}

}  // namespace

bool FoldConstants(hlo::Module& module) {
  bool changed = false;
  for (const auto& c : module.computations()) {
    // Instructions are in operand-before-user order and each fold is visible
    // to the users visited after it, so a whole constant chain folds in one
    // pass (RunPasses gives up after a few rounds).
    std::vector<hlo::Instruction*> order;
    for (const auto& inst : c->instructions()) order.push_back(inst.get());
    bool folded = false;
    hlo::Computation::Replacements replaced;
    for (hlo::Instruction* inst : order) {
      hlo::Computation::UpdateOperands(inst, replaced);  // operands come first
      if (!Foldable(*inst)) continue;
      folded = true;
      auto constant = std::make_unique<hlo::Instruction>(hlo::Opcode::kConstant, inst->shape(),
                                                         std::vector<hlo::Instruction*>{});
      constant->literal = Evaluate(*inst);
      constant->set_name(inst->name() + ".folded");
      replaced[inst] = c->AddInstruction(std::move(constant));
      changed = true;
    }
    if (folded) {
      c->ApplyReplacements(replaced);
      c->RemoveDeadInstructions();
      c->SortTopologically();
    }
  }
  return changed;
}

}  // namespace strata::compiler
