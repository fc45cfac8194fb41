#include "strata/hlo/verifier.h"

#include <fmt/format.h>

#include <set>
#include <unordered_set>

#include "strata/core/error.h"
#include "strata/hlo/shape_inference.h"

namespace strata::hlo {

void VerifyComputation(const Computation& computation) {
  const std::string& cname = computation.name();
  if (!computation.root()) Fail("[verifier] computation {} has no ROOT", cname);
  std::unordered_set<const Instruction*> defined;
  std::set<int64_t> parameter_numbers;
  std::set<std::string> names;
  for (const auto& inst : computation.instructions()) {
    if (!names.insert(inst->name()).second) {
      Fail("[verifier] computation {}: instruction name {} is used twice", cname, inst->name());
    }
    for (const Instruction* op : inst->operands()) {
      if (!defined.count(op)) {
        Fail(
            "[verifier] computation {}: instruction {} uses {} before it is defined or from "
            "another computation",
            cname, inst->name(), op ? op->name() : "null");
      }
    }
    if (inst->opcode() == Opcode::kParameter &&
        !parameter_numbers.insert(inst->parameter_number).second) {
      Fail("[verifier] computation {}: parameter number {} appears twice", cname,
           inst->parameter_number);
    }
    Shape expected;
    try {
      expected = InferShape(*inst);
    } catch (const Error& e) {
      Fail("[verifier] computation {}, instruction {}: {}", cname, inst->name(), e.what());
    }
    if (expected != inst->shape()) {
      Fail(
          "[verifier] computation {}, instruction {}: {} declares shape {} but its operands give "
          "{}",
          cname, inst->name(), OpcodeName(inst->opcode()), inst->shape().ToString(),
          expected.ToString());
    }
    defined.insert(inst.get());
  }
  if (!defined.count(computation.root())) {
    Fail("[verifier] computation {}: ROOT is not one of its instructions", cname);
  }
  int64_t expected_number = 0;
  for (int64_t n : parameter_numbers) {
    if (n != expected_number++) {
      Fail("[verifier] computation {}: parameters must be numbered 0..{} without gaps", cname,
           parameter_numbers.size() - 1);
    }
  }
}

void Verify(const Module& module) {
  if (!module.entry()) Fail("[verifier] module {} has no ENTRY computation", module.name());
  std::set<std::string> names;
  for (const auto& c : module.computations()) {
    if (!names.insert(c->name()).second) {
      Fail("[verifier] module {}: computation name {} is used twice", module.name(), c->name());
    }
    VerifyComputation(*c);
  }
}

}  // namespace strata::hlo
