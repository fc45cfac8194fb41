// MergeSiblingFusions: two loop fusions over the same dims that read the same
// full-size array, neither reading (even through other ops) what the other
// computes, become one multi-output fusion (XLA's sibling multi-output
// fusion). The shared arrays are then read once per block instead of once
// per fusion: a SwiGLU backward's three fusions over gate, up, their
// logistic and the incoming gradient read those four arrays once, not ten
// times.
//
// Only plain elementwise fusions merge (no reduction inside: a row fusion
// runs a row per block, a reduce fusion writes one value per row), of one
// compute type (kernels.h's FusionComputeType), at most kMaxOutputs
// outputs in all.
#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>
#include <vector>

#include "kernels/kernels.h"
#include "strata/compiler/passes.h"

namespace strata::compiler {

using runtime::FusionComputeType;
using runtime::FusionOutputShape;
using runtime::IsPlainLoopFusion;
namespace {

using hlo::Instruction;
using hlo::Opcode;

constexpr int64_t kMaxOutputs = 4;

int64_t Outputs(const Instruction& fusion) {
  return fusion.shape().is_tuple() ? fusion.shape().tuple_size() : 1;
}

// Which instructions each one reads, directly or not: a bit per
// instruction, in the computation's (topological) order.
class Ancestors {
 public:
  explicit Ancestors(const hlo::Computation& c) {
    const auto& all = c.instructions();
    words_ = (all.size() + 63) / 64;
    for (size_t i = 0; i < all.size(); ++i) index_[all[i].get()] = i;
    bits_.assign(all.size() * words_, 0);
    for (size_t i = 0; i < all.size(); ++i) {
      for (const Instruction* op : all[i]->operands()) {
        const size_t j = index_.at(op);
        uint64_t* mine = &bits_[i * words_];
        const uint64_t* theirs = &bits_[j * words_];
        for (size_t w = 0; w < words_; ++w) mine[w] |= theirs[w];
        mine[j / 64] |= uint64_t{1} << (j % 64);
      }
    }
  }
  // Whether `a` reads `b`, directly or not.
  bool Reads(const Instruction* a, const Instruction* b) const {
    const size_t i = index_.at(a), j = index_.at(b);
    return (bits_[i * words_ + j / 64] >> (j % 64)) & 1;
  }

 private:
  size_t words_ = 0;
  std::unordered_map<const Instruction*, size_t> index_;
  std::vector<uint64_t> bits_;
};

// Whether a and b read one array with their loop's dims.
bool ShareAFullOperand(const Instruction& a, const Instruction& b) {
  const std::vector<int64_t> dims = FusionOutputShape(a)->dims();
  for (const Instruction* x : a.operands()) {
    if (!x->shape().is_array() || x->shape().dims() != dims) continue;
    if (std::find(b.operands().begin(), b.operands().end(), x) != b.operands().end()) return true;
  }
  return false;
}

class Merger {
 public:
  Merger(hlo::Module& module, hlo::Computation& c) : module_(module), c_(c) {}

  // Merges one pair at a time (each merge changes what reads what) until
  // no pair is left. Returns whether any merged.
  bool Run() {
    bool changed = false;
    while (MergeOnePair()) changed = true;
    return changed;
  }

 private:
  bool MergeOnePair() {
    std::vector<Instruction*> fusions;
    for (const auto& inst : c_.instructions()) {
      if (IsPlainLoopFusion(*inst)) fusions.push_back(inst.get());
    }
    if (fusions.size() < 2) return false;
    const Ancestors ancestors(c_);
    for (size_t i = 0; i < fusions.size(); ++i) {
      Instruction* a = fusions[i];
      for (size_t j = i + 1; j < fusions.size(); ++j) {
        Instruction* b = fusions[j];
        if (FusionOutputShape(*a)->dims() != FusionOutputShape(*b)->dims() ||
            FusionComputeType(*a) != FusionComputeType(*b) ||
            Outputs(*a) + Outputs(*b) > kMaxOutputs || !ShareAFullOperand(*a, *b) ||
            ancestors.Reads(a, b) || ancestors.Reads(b, a)) {
          continue;
        }
        Merge(a, b);
        return true;
      }
    }
    return false;
  }

  // One fusion computing a's outputs, then b's; their readers read its
  // tuple's elements.
  void Merge(Instruction* a, Instruction* b) {
    auto fused = std::make_unique<hlo::Computation>(
        fmt::format("{}_siblings{}", a->called[0]->name(), count_++));
    std::vector<Instruction*> arguments;
    std::unordered_map<const Instruction*, Instruction*> parameter_of;  // outer -> inside
    std::vector<Instruction*> roots;
    for (Instruction* fusion : {a, b}) {
      const hlo::Computation& callee = *fusion->called[0];
      std::unordered_map<const Instruction*, Instruction*> inside;
      for (const auto& inst : callee.instructions()) {
        if (inst->opcode() == Opcode::kParameter) {
          Instruction* outer = fusion->operand(inst->parameter_number);
          auto it = parameter_of.find(outer);
          if (it == parameter_of.end()) {
            auto p = std::make_unique<Instruction>(Opcode::kParameter, outer->shape(),
                                                   std::vector<Instruction*>{});
            p->parameter_number = static_cast<int64_t>(arguments.size());
            p->set_name(fmt::format("p{}", arguments.size()));
            arguments.push_back(outer);
            it = parameter_of.emplace(outer, fused->AddInstruction(std::move(p))).first;
          }
          inside[inst.get()] = it->second;
          continue;
        }
        std::vector<Instruction*> operands;
        for (const Instruction* op : inst->operands()) operands.push_back(inside.at(op));
        auto clone = std::make_unique<Instruction>(inst->opcode(), inst->shape(), operands);
        static_cast<hlo::Attributes&>(*clone) = inst->attributes();
        clone->set_name(fmt::format("{}.{}", inst->name(), fusion == a ? "a" : "b"));
        inside[inst.get()] = fused->AddInstruction(std::move(clone));
      }
      Instruction* root = inside.at(callee.root());
      if (callee.root()->opcode() == Opcode::kTuple) {
        roots.insert(roots.end(), root->operands().begin(), root->operands().end());
      } else {
        roots.push_back(root);
      }
    }
    std::vector<Shape> shapes;
    for (const Instruction* r : roots) shapes.push_back(r->shape());
    const Shape shape = Shape::Tuple(shapes);
    auto tuple = std::make_unique<Instruction>(Opcode::kTuple, shape, roots);
    tuple->set_name("outputs");
    fused->set_root(fused->AddInstruction(std::move(tuple)));
    fused->RemoveDeadInstructions();  // a tuple root of a or b, now unread
    hlo::Computation* callee = module_.AddComputationBefore(std::move(fused), &c_);
    auto merged = std::make_unique<Instruction>(Opcode::kFusion, shape, arguments);
    merged->called = {callee};
    merged->set_name(fmt::format("{}.siblings", a->name()));
    Instruction* fusion = c_.AddInstruction(std::move(merged));
    // Readers of a tuple result read its elements: those become elements of
    // the merged tuple; an array result becomes one element.
    std::vector<std::pair<Instruction*, int64_t>> readers;  // what reads which merged element
    int64_t first = 0;
    for (Instruction* old : {a, b}) {
      if (old->shape().is_tuple()) {
        for (const auto& inst : c_.instructions()) {
          if (inst->opcode() == Opcode::kGetTupleElement && inst->operand(0) == old) {
            readers.emplace_back(inst.get(), first + inst->tuple_index);
          }
        }
      } else {
        readers.emplace_back(old, first);
      }
      first += Outputs(*old);
    }
    hlo::Computation::Replacements replacements;
    for (const auto& [old, index] : readers) replacements[old] = Element(fusion, index);
    c_.ApplyReplacements(replacements);
    c_.SortTopologically();
    c_.RemoveDeadInstructions();
  }

  Instruction* Element(Instruction* tuple, int64_t index) {
    return c_.AddTupleElement(tuple, index, fmt::format("{}.{}", tuple->name(), index));
  }

  hlo::Module& module_;
  hlo::Computation& c_;
  int64_t count_ = 0;
};

}  // namespace

bool MergeSiblingFusions(hlo::Module& module) {
  bool changed = false;
  for (hlo::Computation* c : ProgramComputations(module)) changed |= Merger(module, *c).Run();
  if (changed) {
    module.RemoveUnreachableComputations();
    // A cheap op both fusions computed again (fuse_elementwise.cc repeats
    // them) is computed once in the merged one.
    EliminateCommonSubexpressions(module);
  }
  return changed;
}

}  // namespace strata::compiler
