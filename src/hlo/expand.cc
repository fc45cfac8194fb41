// ExpandXlaOps: XLA's ops that strata computes with other ops.
#include "strata/hlo/expand.h"

#include <fmt/format.h>

#include <algorithm>
#include <unordered_set>

#include "strata/core/error.h"
#include "strata/hlo/builder.h"

namespace strata::hlo {
namespace {

bool Expanded(Opcode op) { return KernelOf(op) == Kernel::kExpanded; }

// Builds the replacement of one instruction inside its computation.
class Expansion {
 public:
  Expansion(Module& module, Computation& computation, Instruction& inst)
      : module_(module), computation_(computation), inst_(inst), b_(&computation) {}

  Instruction* Run();

 private:
  Instruction* BatchNormTraining();
  Instruction* BatchNormInference();
  Instruction* BatchNormGrad();
  Instruction* Map();

  Instruction* operand(int64_t i) const { return inst_.operand(i); }
  const Shape& x_shape() const { return operand(0)->shape(); }
  DType dtype() const { return x_shape().dtype(); }
  // A scalar of the operand's type, broadcast to the operand's dims.
  Instruction* Splat(double value) {
    return b_.Broadcast(b_.Constant(Literal::ScalarOf(dtype(), value)), x_shape().dims(), {});
  }
  // A [C] vector broadcast along the feature dimension.
  Instruction* AlongFeatures(Instruction* v) {
    return b_.Broadcast(v, x_shape().dims(), {inst_.feature_index});
  }
  // Sum over every dimension but the feature one: [C].
  Instruction* SumOverFeatures(Instruction* x);
  // The number of elements per feature, as a [C] vector.
  Instruction* CountPerFeature() {
    double n = static_cast<double>(x_shape().num_elements()) /
               static_cast<double>(x_shape().dim(inst_.feature_index));
    return b_.Broadcast(b_.Constant(Literal::ScalarOf(dtype(), n)),
                        {x_shape().dim(inst_.feature_index)}, {});
  }
  Instruction* InverseDeviation(Instruction* variance) {  // rsqrt(variance + epsilon)
    Instruction* eps = b_.Broadcast(b_.Constant(Literal::ScalarOf(dtype(), inst_.epsilon)),
                                    variance->shape().dims(), {});
    return b_.Unary(Opcode::kRsqrt, b_.Add(variance, eps));
  }

  Module& module_;
  Computation& computation_;
  Instruction& inst_;
  Builder b_;
  Computation* add_ = nullptr;
};

Instruction* Expansion::SumOverFeatures(Instruction* x) {
  if (!add_) {
    std::string name = inst_.name() + ".add";
    while (module_.FindComputation(name)) name += "_";
    add_ = module_.AddComputationBefore(MakeScalarBinaryComputation(name, Opcode::kAdd, dtype()),
                                        &computation_);
  }
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < x->shape().rank(); ++d) {
    if (d != inst_.feature_index) dims.push_back(d);
  }
  return b_.Reduce(x, b_.Constant(Literal::ScalarOf(dtype(), 0)), dims, add_);
}

// The batch's mean and (biased) variance per feature; the output normalized,
// scaled and offset with them.
Instruction* Expansion::BatchNormTraining() {
  Instruction* n = CountPerFeature();
  Instruction* mean = b_.Divide(SumOverFeatures(operand(0)), n);
  Instruction* centered = b_.Subtract(operand(0), AlongFeatures(mean));
  Instruction* variance = b_.Divide(SumOverFeatures(b_.Multiply(centered, centered)), n);
  Instruction* scale = b_.Multiply(InverseDeviation(variance), operand(1));
  Instruction* out =
      b_.Add(b_.Multiply(centered, AlongFeatures(scale)), AlongFeatures(operand(2)));
  return b_.Tuple({out, mean, variance});
}

// (operand, scale, offset, mean, variance): normalized with the given statistics.
Instruction* Expansion::BatchNormInference() {
  Instruction* centered = b_.Subtract(operand(0), AlongFeatures(operand(3)));
  Instruction* scale = b_.Multiply(InverseDeviation(operand(4)), operand(1));
  return b_.Add(b_.Multiply(centered, AlongFeatures(scale)), AlongFeatures(operand(2)));
}

// (operand, scale, mean, variance, grad_output) -> (grad_operand, grad_scale,
// grad_offset), the statistics being the batch's own:
//   xhat = (x - mean) * inv,  inv = rsqrt(variance + epsilon)
//   grad_offset = sum(dy),  grad_scale = sum(dy * xhat)
//   grad_operand = scale * inv * (dy - grad_offset / N - xhat * grad_scale / N)
Instruction* Expansion::BatchNormGrad() {
  Instruction* dy = operand(4);
  Instruction* inv = InverseDeviation(operand(3));
  Instruction* xhat =
      b_.Multiply(b_.Subtract(operand(0), AlongFeatures(operand(2))), AlongFeatures(inv));
  Instruction* grad_offset = SumOverFeatures(dy);
  Instruction* grad_scale = SumOverFeatures(b_.Multiply(dy, xhat));
  Instruction* n = CountPerFeature();
  Instruction* mean_dy = AlongFeatures(b_.Divide(grad_offset, n));
  Instruction* mean_dy_xhat = AlongFeatures(b_.Divide(grad_scale, n));
  Instruction* inner = b_.Subtract(b_.Subtract(dy, mean_dy), b_.Multiply(xhat, mean_dy_xhat));
  Instruction* grad_operand = b_.Multiply(inner, AlongFeatures(b_.Multiply(operand(1), inv)));
  return b_.Tuple({grad_operand, grad_scale, grad_offset});
}

// map(x_0, ..., x_{n-1}), to_apply=f: f's scalar ops applied to whole arrays
// (f's parameters become the operands, its constants broadcasts of them).
Instruction* Expansion::Map() {
  const Computation& f = *inst_.called.at(0);
  const std::vector<int64_t>& dims = x_shape().dims();
  std::unordered_map<const Instruction*, Instruction*> made;
  for (const auto& scalar : f.instructions()) {
    const Opcode op = scalar->opcode();
    Instruction* array = nullptr;
    if (op == Opcode::kParameter) {
      array = operand(scalar->parameter_number);
    } else if (op == Opcode::kConstant) {
      array = b_.Broadcast(b_.Constant(scalar->literal), dims, {});
    } else if (IsElementwiseUnary(op) || IsElementwiseBinary(op) || op == Opcode::kCompare ||
               op == Opcode::kSelect || op == Opcode::kClamp || op == Opcode::kConvert ||
               op == Opcode::kBitcastConvert || op == Opcode::kIsFinite || op == Opcode::kCopy) {
      std::vector<Instruction*> operands;
      for (const Instruction* o : scalar->operands()) operands.push_back(made.at(o));
      auto copy = std::make_unique<Instruction>(op, Shape(scalar->shape().dtype(), dims),
                                                std::move(operands));
      static_cast<Attributes&>(*copy) = scalar->attributes();
      array = b_.Add(std::move(copy));
    } else {
      Fail("[map] {} applies {}, whose instruction {} ({}) is not elementwise: strata runs a "
           "map of elementwise scalar functions",
           inst_.name(), f.name(), scalar->name(), OpcodeName(op));
    }
    made[scalar.get()] = array;
  }
  return made.at(f.root());
}

Instruction* Expansion::Run() {
  switch (inst_.opcode()) {
    case Opcode::kBatchNormTraining:
      return BatchNormTraining();
    case Opcode::kBatchNormInference:
      return BatchNormInference();
    case Opcode::kBatchNormGrad:
      return BatchNormGrad();
    case Opcode::kMap:
      return Map();
    case Opcode::kAllReduceStart:
    case Opcode::kAllGatherStart:
    case Opcode::kCollectivePermuteStart: {
      // The collective itself, then the tuple its -done reads.
      const Opcode op = inst_.opcode() == Opcode::kAllReduceStart    ? Opcode::kAllReduce
                        : inst_.opcode() == Opcode::kAllGatherStart ? Opcode::kAllGather
                                                                     : Opcode::kCollectivePermute;
      const Shape& shape = inst_.shape();
      const bool tupled = op != Opcode::kAllReduce;
      auto sync = std::make_unique<Instruction>(op, tupled ? shape.tuple_shape(1) : shape,
                                                inst_.operands());
      static_cast<Attributes&>(*sync) = inst_.attributes();
      Instruction* result = b_.AddShaped(std::move(sync));
      if (!tupled) return result;
      std::vector<Instruction*> elements = {operand(0), result};
      for (int64_t i = 2; i < shape.tuple_size(); ++i) {
        elements.push_back(b_.Constant(Literal::IntegerOf(DType::kU32, 0)));
      }
      return b_.Tuple(elements);
    }
    case Opcode::kCopyStart:
      return b_.Tuple({b_.Copy(operand(0)), operand(0),
                       b_.Constant(Literal::IntegerOf(DType::kU32, 0))});
    case Opcode::kAllReduceDone:
      return operand(0);
    case Opcode::kAllGatherDone:
    case Opcode::kCollectivePermuteDone:
      return b_.GetTupleElement(operand(0), 1);
    case Opcode::kCopyDone:
      return b_.GetTupleElement(operand(0), 0);
    default:
      Fail("[expand] {} ({}) has no expansion", OpcodeName(inst_.opcode()), inst_.name());
  }
}

// Names the instructions an expansion added after the one they replace.
void NameAdded(Computation& c, size_t first, const std::string& base,
               std::unordered_set<std::string>& names) {
  int64_t k = 0;
  for (size_t i = first; i < c.instructions().size(); ++i) {
    std::string name;
    do {
      name = fmt::format("{}.{}", base, k++);
    } while (names.count(name));
    names.insert(name);
    c.instructions()[i]->set_name(std::move(name));
  }
}

}  // namespace

bool HasOpsToExpand(const Module& module) {
  for (const auto& c : module.computations()) {
    for (const auto& inst : c->instructions()) {
      if (Expanded(inst->opcode())) return true;
    }
  }
  return false;
}

bool ExpandXlaOps(Module& module) {
  bool changed = false;
  std::vector<Computation*> computations;
  for (const auto& c : module.computations()) computations.push_back(c.get());
  for (Computation* c : computations) {
    std::vector<Instruction*> found;
    std::unordered_set<std::string> names;
    for (const auto& inst : c->instructions()) {
      names.insert(inst->name());
      if (Expanded(inst->opcode())) found.push_back(inst.get());
    }
    if (found.empty()) continue;
    for (Instruction* inst : found) {  // operands come first: a -done sees its -start replaced
      const size_t first = c->instructions().size();
      Instruction* replacement = Expansion(module, *c, *inst).Run();
      NameAdded(*c, first, inst->name(), names);
      c->ReplaceAllUsesWith(inst, replacement);
      const bool made = std::any_of(c->instructions().begin() + first, c->instructions().end(),
                                    [&](const auto& added) { return added.get() == replacement; });
      if (made && replacement->sharding.empty()) replacement->sharding = inst->sharding;
    }
    c->RemoveDeadInstructions();
    c->SortTopologically();
    changed = true;
  }
  return changed;
}

}  // namespace strata::hlo
