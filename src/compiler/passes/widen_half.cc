// f16 and bf16 arithmetic computed in f32, as XLA's CPU backend does: an op
// that computes on half-precision values becomes converts of its operands to
// f32, the op in f32, and a convert of its result back, so each op rounds
// once. For +, -, *, / and sqrt that is the correctly rounded half result
// (f32 carries more than twice a half's significand bits, plus two).
// Reductions, windows, scatters and compiled sort comparators take a copy
// of their computation with every half type made f32, so they accumulate in
// f32 and round once at the end. Moving values (copies, slices, select,
// convert, gathers, collectives, a sort by one compare) keeps them as they
// are: those kernels handle half types themselves. A dot or convolution
// whose result type is wider than its operands' (bf16 x bf16 -> f32, s8 x
// s8 -> s32: XLA's preferred element type) computes in the result type,
// except a dot of two bf16 operands into bf16 or f32: the dot kernel
// multiplies bf16 values itself, summing in f32 (kernels/gemm.h's GemmBf16)
// and rounding a bf16 result once, so it stays as it is.
#include <fmt/format.h>

#include <map>
#include <set>
#include <unordered_map>
#include <utility>

#include "strata/compiler/passes.h"
#include "strata/core/error.h"
#include "strata/hlo/dot_algorithm.h"

namespace strata::compiler {
namespace {

using hlo::Computation;
using hlo::Instruction;
using hlo::Opcode;

bool IsHalf(DType t) { return t == DType::kF16 || t == DType::kBF16; }

bool HasHalf(const Shape& s) {
  for (const Shape& leaf : s.Leaves())
    if (IsHalf(leaf.dtype())) return true;
  return false;
}

Shape Widened(const Shape& s) {
  if (s.is_tuple()) {
    std::vector<Shape> elements;
    for (int64_t i = 0; i < s.tuple_size(); ++i) elements.push_back(Widened(s.tuple_shape(i)));
    return Shape::Tuple(std::move(elements));
  }
  return IsHalf(s.dtype()) ? s.WithDType(DType::kF32) : s;
}

// The comparator a sort kernel runs natively: one compare of one operand's
// two parameters (kernels/sort.cc), which orders half keys by their f32
// values itself.
bool IsNativeComparator(const Computation& c) {
  const Instruction* root = c.root();
  if (!root || root->opcode() != Opcode::kCompare) return false;
  const Instruction* a = root->operand(0);
  const Instruction* b = root->operand(1);
  return a->opcode() == Opcode::kParameter && b->opcode() == Opcode::kParameter &&
         a->parameter_number / 2 == b->parameter_number / 2 &&
         a->parameter_number != b->parameter_number;
}

// A dot of two bf16 operands into bf16 or f32: the dot kernel reads them
// as they are.
bool IsBf16Dot(const Instruction& inst) {
  const DType result = inst.shape().dtype();
  return inst.opcode() == Opcode::kDot && inst.operand(0)->shape().dtype() == DType::kBF16 &&
         inst.operand(1)->shape().dtype() == DType::kBF16 &&
         (result == DType::kF32 || result == DType::kBF16);
}

// Whether `inst` computes on half-precision values (and so runs in f32).
bool ComputesOnHalves(const Instruction& inst) {
  if (IsBf16Dot(inst)) return false;
  const Opcode op = inst.opcode();
  auto operand_half = [&](int64_t i) {
    return inst.operand(i)->shape().is_array() && IsHalf(inst.operand(i)->shape().dtype());
  };
  auto any_operand_half = [&] {
    for (int64_t i = 0; i < inst.operand_count(); ++i)
      if (operand_half(i)) return true;
    return false;
  };
  if (hlo::IsElementwiseUnary(op) || hlo::IsElementwiseBinary(op)) return any_operand_half();
  switch (op) {
    case Opcode::kCompare:
    case Opcode::kIsFinite:
    case Opcode::kClamp:
    case Opcode::kReduce:
    case Opcode::kReduceWindow:
    case Opcode::kSelectAndScatter:
      return any_operand_half();
    case Opcode::kDot:  // also a wider result than the operands (bf16 x bf16 -> f32)
    case Opcode::kConvolution:
      return any_operand_half() || inst.operand(0)->shape().dtype() != inst.shape().dtype();
    case Opcode::kScatter:  // an overwrite moves values; any other to_apply computes
      return operand_half(0) && inst.called.at(0)->root()->opcode() != Opcode::kParameter;
    case Opcode::kSort:
      return any_operand_half() && !IsNativeComparator(*inst.called.at(0));
    default:
      return false;
  }
}

class Widener {
 public:
  explicit Widener(hlo::Module& module) : module_(module) {}

  bool Run() {
    bool changed = RoundToDotAlgorithms();
    // Computations other ops call as scalar functions are never rewritten in
    // place: the ops that compute get an f32 copy, the rest keep them.
    for (const auto& c : module_.computations()) {
      for (const auto& inst : c->instructions()) {
        if (inst->opcode() == Opcode::kWhile || inst->opcode() == Opcode::kCall ||
            inst->opcode() == Opcode::kFusion || inst->opcode() == Opcode::kConditional) {
          continue;
        }
        for (const Computation* called : inst->called) scalar_functions_.insert(called);
      }
    }
    std::vector<Computation*> computations;
    for (const auto& c : module_.computations()) computations.push_back(c.get());
    for (Computation* c : computations) {
      if (!scalar_functions_.count(c)) changed |= WidenComputation(*c);
    }
    return changed;
  }

 private:
  // A dot whose algorithm multiplies f16 or bf16 values, on wider operands:
  // its operands rounded to that type first, so the dot computes on halves
  // (below: products in the result type, f32).
  bool RoundToDotAlgorithms() {
    bool changed = false;
    for (const auto& c : module_.computations()) {
      std::vector<Instruction*> dots;
      for (const auto& inst : c->instructions()) {
        if (inst->opcode() == Opcode::kDot && !inst->algorithm.empty()) dots.push_back(inst.get());
      }
      for (Instruction* dot : dots) {
        const std::optional<DType> known = hlo::DotAlgorithmInput(dot->algorithm);
        if (!known || !IsHalf(*known)) continue;  // the shape rule rejected unknown names
        const DType input = *known;
        for (int64_t i = 0; i < dot->operand_count(); ++i) {
          Instruction* op = dot->operand(i);
          if (op->shape().dtype() == input) continue;
          dot->set_operand(
              i, AddConvert(*c, op, input, fmt::format("{}.{}", op->name(), DTypeName(input))));
          changed = true;
        }
      }
      if (!dots.empty()) c->SortTopologically();
    }
    return changed;
  }

  // Rewrites every op of `c` that computes on halves.
  bool WidenComputation(Computation& c) {
    std::vector<Instruction*> targets;
    for (const auto& inst : c.instructions())
      if (ComputesOnHalves(*inst)) targets.push_back(inst.get());
    if (targets.empty()) return false;
    std::map<std::pair<const Instruction*, DType>, Instruction*> converted;
    for (Instruction* inst : targets) {
      // A dot or convolution computes in its (widened) result type; the
      // rest in f32 where they read halves.
      const bool products =
          inst->opcode() == Opcode::kDot || inst->opcode() == Opcode::kConvolution;
      const DType product_type = Widened(inst->shape()).dtype();
      std::vector<Instruction*> operands;
      for (Instruction* op : inst->operands()) {
        const Shape& s = op->shape();
        const DType to = products ? product_type : DType::kF32;
        if (!s.is_array() || (products ? s.dtype() == to : !IsHalf(s.dtype()))) {
          operands.push_back(op);
          continue;
        }
        auto [it, fresh] = converted.emplace(std::pair{op, to}, nullptr);
        if (fresh)
          it->second = AddConvert(c, op, to, fmt::format("{}.{}", op->name(), DTypeName(to)));
        operands.push_back(it->second);
      }
      auto wide = std::make_unique<Instruction>(inst->opcode(), Widened(inst->shape()), operands);
      static_cast<hlo::Attributes&>(*wide) = inst->attributes();
      for (Computation*& called : wide->called) called = F32Copy(*called, &c);
      wide->set_name(inst->name() + ".in_f32");
      Instruction* result = c.AddInstruction(std::move(wide));
      c.ReplaceAllUsesWith(inst, Narrowed(c, result, inst->shape(), inst->name()));
    }
    c.RemoveDeadInstructions();
    c.SortTopologically();
    return true;
  }

  Instruction* AddConvert(Computation& c, Instruction* x, DType to, std::string name) {
    auto convert = std::make_unique<Instruction>(Opcode::kConvert, x->shape().WithDType(to),
                                                 std::vector<Instruction*>{x});
    convert->set_name(std::move(name));
    return c.AddInstruction(std::move(convert));
  }

  // `wide` (an f32 version of a value of shape `original`) back in the
  // original's types: converts, through get-tuple-element and tuple for a
  // tuple of results.
  Instruction* Narrowed(Computation& c, Instruction* wide, const Shape& original,
                        const std::string& name) {
    if (original.is_array()) {
      return IsHalf(original.dtype()) ? AddConvert(c, wide, original.dtype(), name + ".narrow")
                                      : wide;
    }
    std::vector<Instruction*> elements;
    std::vector<Shape> shapes;
    for (int64_t i = 0; i < original.tuple_size(); ++i) {
      Instruction* e = c.AddTupleElement(wide, i, fmt::format("{}.element{}", name, i));
      elements.push_back(Narrowed(c, e, original.tuple_shape(i), e->name()));
      shapes.push_back(original.tuple_shape(i));
    }
    auto tuple = std::make_unique<Instruction>(Opcode::kTuple, Shape::Tuple(shapes), elements);
    tuple->set_name(name + ".narrow");
    return c.AddInstruction(std::move(tuple));
  }

  // A copy of scalar function `c` with every half type made f32 (constants
  // converted exactly), added before `caller`; one copy per function.
  Computation* F32Copy(const Computation& c, const Computation* caller) {
    auto it = copies_.find(&c);
    if (it != copies_.end()) return it->second;
    auto copy = std::make_unique<Computation>(c.name() + ".f32");
    std::unordered_map<const Instruction*, Instruction*> mapped;
    for (const auto& inst : c.instructions()) {
      if (!inst->called.empty()) {
        Fail(
            "[compile] {} calls {} inside {}, which computes on half-precision values; only a "
            "computation of elementwise ops can be run in f32",
            hlo::OpcodeName(inst->opcode()), inst->called[0]->name(), c.name());
      }
      std::vector<Instruction*> operands;
      for (const Instruction* op : inst->operands()) operands.push_back(mapped.at(op));
      auto wide = std::make_unique<Instruction>(inst->opcode(), Widened(inst->shape()), operands);
      static_cast<hlo::Attributes&>(*wide) = inst->attributes();
      if (inst->opcode() == Opcode::kConstant && HasHalf(inst->shape())) {
        hlo::Literal literal(wide->shape());
        for (int64_t i = 0; i < wide->shape().num_elements(); ++i)
          literal.SetFromDouble(i, inst->literal.GetAsDouble(i));
        wide->literal = std::move(literal);
      }
      wide->set_name(inst->name());
      mapped[inst.get()] = copy->AddInstruction(std::move(wide));
    }
    copy->set_root(mapped.at(c.root()));
    Computation* added = module_.AddComputationBefore(std::move(copy), caller);
    copies_[&c] = added;
    return added;
  }

  hlo::Module& module_;
  std::set<const Computation*> scalar_functions_;
  std::map<const Computation*, Computation*> copies_;
};

}  // namespace

bool WidenHalfArithmetic(hlo::Module& module) { return Widener(module).Run(); }

}  // namespace strata::compiler
