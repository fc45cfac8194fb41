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

// Collectives name partitions of this module: every id below num_partitions,
// and groups that cover all partitions (a partition outside every group would
// wait for a collective no group runs).
void VerifyPartitionIds(const Module& module, const Computation& c, const Instruction& inst) {
  if (!IsCollective(inst.opcode())) return;
  int64_t n = module.num_partitions();
  std::vector<int64_t> ids;
  for (const auto& g : inst.replica_groups) ids.insert(ids.end(), g.begin(), g.end());
  for (auto [source, target] : inst.source_target_pairs) {
    ids.push_back(source);
    ids.push_back(target);
  }
  for (int64_t id : ids) {
    if (id >= n) {
      Fail(
          "[verifier] computation {}, instruction {}: partition {} is out of range for a module of "
          "{} partition(s) (num_partitions)",
          c.name(), inst.name(), id, n);
    }
  }
  int64_t covered = 0;
  for (const auto& g : inst.replica_groups) covered += static_cast<int64_t>(g.size());
  if (!inst.replica_groups.empty() && covered != n) {
    Fail(
        "[verifier] computation {}, instruction {}: replica_groups cover {} of the module's {} "
        "partitions",
        c.name(), inst.name(), covered, n);
  }
  int64_t group =
      inst.replica_groups.empty() ? n : static_cast<int64_t>(inst.replica_groups[0].size());
  if (inst.replica_groups.empty() &&
      (inst.opcode() == Opcode::kAllGather || inst.opcode() == Opcode::kReduceScatter)) {
    int64_t d = inst.dimensions.at(0);
    int64_t in = inst.operand(0)->shape().dim(d), out = inst.shape().dim(d);
    if ((inst.opcode() == Opcode::kAllGather ? in * n != out : out * n != in)) {
      Fail(
          "[verifier] computation {}, instruction {}: dimension {} goes from {} to {}, which a "
          "group of all {} partitions does not give",
          c.name(), inst.name(), d, in, out, n);
    }
  }
  if (inst.opcode() == Opcode::kAllToAll &&
      inst.operand(0)->shape().dim(inst.dimensions.at(0)) % group) {
    Fail("[verifier] computation {}, instruction {}: dimension {} does not split into {} blocks",
         c.name(), inst.name(), inst.dimensions.at(0), group);
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
    for (const auto& inst : c->instructions()) VerifyPartitionIds(module, *c, *inst);
  }
}

}  // namespace strata::hlo
