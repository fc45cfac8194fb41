// Shape rules of leaves, tuples, calls, loops and random bits.
#include <fmt/ranges.h>

#include <algorithm>
#include <set>

#include "shape_rules.h"
#include "strata/hlo/attention.h"
#include "strata/hlo/library_calls.h"

namespace strata::hlo::shape_rules {

// Long by design: one case per opcode of this shape rule (ShapeRule::kControl).
Shape ControlShape(const View& inst) {
  [[maybe_unused]] const Shape& declared = inst.declared;
  switch (inst.op) {
    case Opcode::kParameter:
      ExpectOperands(inst, 0);
      if (inst.attrs.parameter_number < 0) Reject(inst, "parameter number must be >= 0");
      return declared;
    case Opcode::kConstant:
      ExpectOperands(inst, 0);
      if (inst.attrs.literal.shape() != declared) {
        Reject(inst, "literal has shape {}, instruction declares {}",
               inst.attrs.literal.shape().ToString(), declared.ToString());
      }
      return declared;
    case Opcode::kIota:
      ExpectOperands(inst, 0);
      if (!declared.is_array() || declared.rank() == 0 || declared.dtype() == DType::kPred) {
        Reject(inst, "iota needs a numeric array shape of rank >= 1, got {}", declared.ToString());
      }
      if (inst.attrs.dimensions.size() != 1 || inst.attrs.dimensions[0] < 0 ||
          inst.attrs.dimensions[0] >= declared.rank()) {
        Reject(inst, "iota_dimension must be in [0, {})", declared.rank());
      }
      return declared;
    case Opcode::kTuple: {
      std::vector<Shape> elements;
      for (const Shape* s : inst.operands) elements.push_back(*s);
      return Shape::Tuple(std::move(elements));
    }
    case Opcode::kGetTupleElement: {
      ExpectOperands(inst, 1);
      const Shape& t = inst.operand_shape(0);
      if (!t.is_tuple()) Reject(inst, "operand must be a tuple, got {}", t.ToString());
      if (inst.attrs.tuple_index < 0 || inst.attrs.tuple_index >= t.tuple_size()) {
        Reject(inst, "index {} out of range for {}", inst.attrs.tuple_index, t.ToString());
      }
      return t.tuple_shape(inst.attrs.tuple_index);
    }
    case Opcode::kWhile: {
      ExpectOperands(inst, 1);
      if (inst.attrs.called.size() != 2) Reject(inst, "expected condition and body computations");
      const Shape& state = inst.operand_shape(0);
      Shape cond = CheckCalledSignature(inst, *inst.attrs.called[0], {state}, "condition");
      if (cond != Shape::Scalar(DType::kPred)) {
        Reject(inst, "condition {} must return pred[], returns {}", inst.attrs.called[0]->name(),
               cond.ToString());
      }
      Shape body = CheckCalledSignature(inst, *inst.attrs.called[1], {state}, "body");
      if (body != state) {
        Reject(inst, "body {} must return the loop state {}, returns {}",
               inst.attrs.called[1]->name(), state.ToString(), body.ToString());
      }
      return state;
    }
    case Opcode::kConditional: {
      // conditional(selector, operand_0, ..): a pred selector runs branch 0
      // (true) or 1 (false); an s32 index runs that branch, the last when out
      // of range. Branch i takes operand i and every branch returns one shape.
      const int64_t branches = static_cast<int64_t>(inst.attrs.called.size());
      if (inst.operand_count() < 1) Reject(inst, "expected a branch selector");
      const Shape& selector = inst.operand_shape(0);
      const bool predicated = selector == Shape::Scalar(DType::kPred);
      if (!predicated && selector != Shape::Scalar(DType::kS32)) {
        Reject(inst, "the branch selector must be pred[] or s32[], got {}", selector.ToString());
      }
      if (predicated && branches != 2) {
        Reject(inst,
               "a pred selector needs true_computation and false_computation, got {} "
               "computations",
               branches);
      }
      if (branches < 1) Reject(inst, "expected branch_computations");
      if (inst.operand_count() != branches + 1) {
        Reject(inst, "expected one operand per branch ({}) after the selector, got {}", branches,
               inst.operand_count() - 1);
      }
      Shape result;
      for (int64_t i = 0; i < branches; ++i) {
        const Computation& branch = *inst.attrs.called[i];
        Shape r = CheckCalledSignature(inst, branch, {inst.operand_shape(i + 1)},
                                       fmt::format("branch {}", i));
        if (i == 0) {
          result = r;
        } else if (r != result) {
          Reject(inst, "branch {} ({}) returns {}, branch 0 ({}) returns {}", i, branch.name(),
                 r.ToString(), inst.attrs.called[0]->name(), result.ToString());
        }
      }
      return result;
    }
    case Opcode::kCustomCall: {
      if (auto call = LibraryCallOf(inst.attrs.custom_call_target)) {
        return LibraryCallShape(inst, *call);
      }
      if (IsAttentionTarget(inst.attrs.custom_call_target)) {
        return AttentionResultShape(inst.attrs.custom_call_target,
                                    ParseAttentionConfig(inst.attrs.backend_config), inst.operands);
      }
      // A manual-sharding boundary: one array in, the same element type and
      // rank out; into the manual region each dim shrinks to its shard's
      // size (or stays), out of it each grows back. The partitioner checks
      // the sizes against the sharding.
      ExpectOperands(inst, 1);
      const Shape& in = inst.operand_shape(0);
      const std::string& target = inst.attrs.custom_call_target;
      const bool into = target == "SPMDFullToShardShape";
      if (!into && target != "SPMDShardToFullShape") {
        Reject(inst, "custom_call_target \"{}\" is not one strata runs", target);
      }
      if (!declared.is_array() || !in.is_array() || declared.dtype() != in.dtype() ||
          declared.rank() != in.rank()) {
        Reject(inst, "{} takes and gives arrays of one element type and rank, got {} -> {}", target,
               in.ToString(), declared.ToString());
      }
      for (int64_t d = 0; d < in.rank(); ++d) {
        if (into ? declared.dim(d) > in.dim(d) : declared.dim(d) < in.dim(d)) {
          Reject(inst, "{} {} dimension {} from {} to {}", target, into ? "grows" : "shrinks", d,
                 in.dim(d), declared.dim(d));
        }
      }
      return declared;
    }
    case Opcode::kAfterAll:
      // Joins tokens into one that comes after all of them (none: a fresh one).
      for (int64_t i = 0; i < inst.operand_count(); ++i) {
        if (inst.operand_shape(i) != Shape::Scalar(DType::kToken))
          Reject(inst, "operand {} must be a token, got {}", i, inst.operand_shape(i).ToString());
      }
      return Shape::Scalar(DType::kToken);
    case Opcode::kAddDependency:
      // Its first operand, ordered after the token it is given.
      ExpectOperands(inst, 2);
      if (inst.operand_shape(1) != Shape::Scalar(DType::kToken))
        Reject(inst, "operand 1 must be a token, got {}", inst.operand_shape(1).ToString());
      return inst.operand_shape(0);
    case Opcode::kOptimizationBarrier:
      // The identity, opaque to the passes (recomputation is not CSE'd away).
      ExpectOperands(inst, 1);
      return inst.operand_shape(0);
    case Opcode::kCall:
    case Opcode::kFusion: {
      if (inst.attrs.called.size() != 1) Reject(inst, "expected one called computation");
      std::vector<Shape> args;
      for (const Shape* s : inst.operands) args.push_back(*s);
      return CheckCalledSignature(inst, *inst.attrs.called[0], args, "callee");
    }
    case Opcode::kRngBitGenerator: {
      ExpectOperands(inst, 1);
      const Shape& state = inst.operand_shape(0);
      if (state != Shape(DType::kU64, {2})) {
        Reject(inst, "state must be u64[2] (key, counter), got {}", state.ToString());
      }
      if (!declared.is_tuple() || declared.tuple_size() != 2 || declared.tuple_shape(0) != state ||
          !declared.tuple_shape(1).is_array() ||
          (declared.tuple_shape(1).dtype() != DType::kU32 &&
           declared.tuple_shape(1).dtype() != DType::kU64)) {
        Reject(inst, "result must be (u64[2], u32[...] or u64[...]), got {}", declared.ToString());
      }
      return declared;
    }
    default:
      Reject(inst, "is not a control op");
  }
}

}  // namespace strata::hlo::shape_rules
