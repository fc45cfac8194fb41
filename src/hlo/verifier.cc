#include "strata/hlo/verifier.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <set>
#include <unordered_map>
#include <unordered_set>
#include <vector>

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

// A -start the runtime runs asynchronously hands its result to exactly one
// -done of its own kind in the same computation (as XLA's verifier asks):
// the -done is where the run waits for the data, so none may be missing.
void VerifyAsyncPairs(const Computation& c) {
  std::unordered_map<const Instruction*, std::vector<const Instruction*>> users;
  for (const auto& inst : c.instructions()) {
    for (const Instruction* op : inst->operands()) users[op].push_back(inst.get());
  }
  for (const auto& inst : c.instructions()) {
    const Opcode op = inst->opcode();
    if (op != Opcode::kAllGatherStart && op != Opcode::kAllReduceStart) continue;
    const Opcode done =
        op == Opcode::kAllGatherStart ? Opcode::kAllGatherDone : Opcode::kAllReduceDone;
    const auto& found = users[inst.get()];
    if (found.size() != 1 || found[0]->opcode() != done) {
      std::vector<std::string> names;
      for (const Instruction* u : found) names.push_back(u->name());
      Fail("[verifier] computation {}, instruction {}: {} must have one user, a {}; it has {}{}",
           c.name(), inst->name(), OpcodeName(op), OpcodeName(done), found.size(),
           names.empty() ? "" : fmt::format(" ({})", fmt::join(names, ", ")));
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
    for (const auto& inst : c->instructions()) VerifyPartitionIds(module, *c, *inst);
    VerifyAsyncPairs(*c);
  }
}

}  // namespace strata::hlo
