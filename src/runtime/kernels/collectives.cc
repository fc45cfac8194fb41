// partition-id, replica-id and the collectives of SPMD programs. Each kernel
// hands its operand and result to the run's Communicator; collectives whose
// dimension is not the outermost reorder blocks through scratch first, since
// the communicator exchanges contiguous blocks.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstring>
#include <memory>
#include <numeric>

#include "async_collectives.h"
#include "kernels.h"
#include "strata/hlo/builder.h"
#include "strata/runtime/communicator.h"

namespace strata::runtime {
namespace {

using hlo::Instruction;
using hlo::Opcode;

const RunContext& ContextOf(const Instruction& inst, const KernelArgs& args) {
  if (!args.context || !args.context->communicator) {
    Fail(
        "[runtime] {} ({}) needs an SPMD run (Executable::RunPartitioned): this run has no "
        "communicator",
        hlo::OpcodeName(inst.opcode()), inst.name());
  }
  return *args.context;
}

// A synchronous collective first waits for the run's started ones: every
// member then issues its collectives in one order.
const RunContext& SynchronousContextOf(const Instruction& inst, const KernelArgs& args) {
  const RunContext& context = ContextOf(inst, args);
  if (context.async) context.async->WaitAll();
  return context;
}

// The group `self` belongs to: its replica group, or every partition.
std::vector<int64_t> GroupOf(const Instruction& inst, const RunContext& context) {
  if (inst.replica_groups.empty()) {
    std::vector<int64_t> all(context.num_partitions);
    std::iota(all.begin(), all.end(), 0);
    return all;
  }
  for (const auto& g : inst.replica_groups) {
    if (std::find(g.begin(), g.end(), context.partition) != g.end()) return g;
  }
  Fail("[runtime] {} ({}): partition {} is in none of its replica_groups",
       hlo::OpcodeName(inst.opcode()), inst.name(), context.partition);
}

// The reduction a to_apply computes: (a, b) -> a op b of its two parameters.
ReduceKind ReduceKindOf(const Instruction& inst) {
  const hlo::Computation& f = *inst.called.at(0);
  switch (hlo::SimpleReducer(f).value_or(Opcode::kParameter)) {
    case Opcode::kAdd:
      return ReduceKind::kSum;
    case Opcode::kMultiply:
      return ReduceKind::kProduct;
    case Opcode::kMaximum:
      return ReduceKind::kMax;
    case Opcode::kMinimum:
      return ReduceKind::kMin;
    case Opcode::kAnd:
      return ReduceKind::kAnd;
    case Opcode::kOr:
      return ReduceKind::kOr;
    default:
      break;
  }
  Fail(
      "[runtime] {} ({}): to_apply {} must be add, multiply, maximum, minimum, and or or of its "
      "two parameters",
      hlo::OpcodeName(inst.opcode()), inst.name(), f.name());
}

// A shape seen as [outer, middle, inner] around dimension `d`.
struct Split {
  int64_t outer = 1, middle = 1, inner = 1;
};
Split SplitAt(const Shape& s, int64_t d) {
  Split out;
  for (int64_t k = 0; k < d; ++k) out.outer *= s.dim(k);
  out.middle = s.dim(d);
  for (int64_t k = d + 1; k < s.rank(); ++k) out.inner *= s.dim(k);
  return out;
}

// [outer, n, block] <-> [n, outer, block] (bytes): moves the n blocks of each
// outer row to be contiguous per block index, or back.
void ToBlockMajor(const uint8_t* src, uint8_t* dst, int64_t outer, int64_t n, int64_t block_bytes) {
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t j = 0; j < n; ++j) {
      std::memcpy(dst + (j * outer + o) * block_bytes, src + (o * n + j) * block_bytes,
                  block_bytes);
    }
  }
}
void FromBlockMajor(const uint8_t* src, uint8_t* dst, int64_t outer, int64_t n,
                    int64_t block_bytes) {
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t j = 0; j < n; ++j) {
      std::memcpy(dst + (o * n + j) * block_bytes, src + (j * outer + o) * block_bytes,
                  block_bytes);
    }
  }
}

}  // namespace

KernelInfo MakeCollectiveKernel(const Instruction& inst, ThreadPool& pool) {
  const Instruction* instp = &inst;
  switch (inst.opcode()) {
    case Opcode::kPartitionId:
      return {[](const KernelArgs& a) {
        uint32_t id = static_cast<uint32_t>(a.context ? a.context->partition : 0);
        std::memcpy(a.outputs[0], &id, sizeof(id));
      }};
    case Opcode::kReplicaId:  // one replica: every partition is replica 0
      return {[](const KernelArgs& a) {
        uint32_t id = 0;
        std::memcpy(a.outputs[0], &id, sizeof(id));
      }};
    case Opcode::kAllReduce: {
      ReduceKind kind = ReduceKindOf(inst);
      std::vector<Shape> leaves;
      for (const Instruction* op : inst.operands()) leaves.push_back(op->shape());
      return {[instp, kind, leaves](const KernelArgs& a) {
        const RunContext& c = SynchronousContextOf(*instp, a);
        std::vector<int64_t> group = GroupOf(*instp, c);
        for (size_t i = 0; i < leaves.size(); ++i) {
          c.communicator->AllReduce(c.partition, group, leaves[i].dtype(), kind, a.operands[i],
                                    a.outputs[i], leaves[i].num_elements());
        }
      }};
    }
    case Opcode::kAllGather: {
      const Shape& in = inst.operand(0)->shape();
      Split split = SplitAt(in, inst.dimensions.at(0));
      int64_t block = split.middle * split.inner * DTypeSize(in.dtype());
      int64_t bytes = in.byte_size();
      int64_t scratch = split.outer > 1 ? inst.shape().byte_size() : 0;
      return {[instp, split, block, bytes](const KernelArgs& a) {
                const RunContext& c = SynchronousContextOf(*instp, a);
                std::vector<int64_t> group = GroupOf(*instp, c);
                int64_t n = static_cast<int64_t>(group.size());
                if (split.outer == 1) {
                  c.communicator->AllGather(c.partition, group, a.operands[0], a.outputs[0], bytes);
                  return;
                }
                // Members' whole inputs arrive one after another: [n, outer, block].
                c.communicator->AllGather(c.partition, group, a.operands[0], a.scratch, bytes);
                FromBlockMajor(a.scratch, a.outputs[0], split.outer, n, block);
              },
              scratch};
    }
    case Opcode::kReduceScatter: {
      ReduceKind kind = ReduceKindOf(inst);
      const Shape& in = inst.operand(0)->shape();
      const Shape& out = inst.shape();
      Split split = SplitAt(out, inst.dimensions.at(0));
      int64_t block = split.middle * split.inner * DTypeSize(out.dtype());
      int64_t scratch = split.outer > 1 ? in.byte_size() : 0;
      DType dtype = out.dtype();
      int64_t count = out.num_elements();
      return {[instp, kind, split, block, scratch, dtype, count](const KernelArgs& a) {
                const RunContext& c = SynchronousContextOf(*instp, a);
                std::vector<int64_t> group = GroupOf(*instp, c);
                int64_t n = static_cast<int64_t>(group.size());
                const uint8_t* src = a.operands[0];
                if (scratch) {  // member j's block of every outer row, together
                  ToBlockMajor(src, a.scratch, split.outer, n, block);
                  src = a.scratch;
                }
                c.communicator->ReduceScatter(c.partition, group, dtype, kind, src, a.outputs[0],
                                              count);
              },
              scratch};
    }
    case Opcode::kAllToAll: {
      const Shape& in = inst.operand(0)->shape();
      int64_t d = inst.dimensions.at(0);
      Split split = SplitAt(in, d);
      int64_t bytes = in.byte_size();
      DType dtype = in.dtype();
      return {[instp, split, bytes, dtype](const KernelArgs& a) {
                const RunContext& c = SynchronousContextOf(*instp, a);
                std::vector<int64_t> group = GroupOf(*instp, c);
                int64_t n = static_cast<int64_t>(group.size());
                // Dimension d holds n blocks; block j goes to member j, and
                // member j's block for us lands at position j.
                int64_t block = split.middle / n * split.inner * DTypeSize(dtype);
                uint8_t* send = a.scratch;
                uint8_t* receive = a.scratch + bytes;
                ToBlockMajor(a.operands[0], send, split.outer, n, block);
                c.communicator->AllToAll(c.partition, group, send, receive, split.outer * block);
                FromBlockMajor(receive, a.outputs[0], split.outer, n, block);
              },
              2 * ((bytes + 63) / 64 * 64)};
    }
    case Opcode::kCollectivePermute: {
      int64_t bytes = inst.shape().byte_size();
      return {[instp, bytes](const KernelArgs& a) {
        const RunContext& c = SynchronousContextOf(*instp, a);
        c.communicator->CollectivePermute(c.partition, instp->source_target_pairs, a.operands[0],
                                          a.outputs[0], bytes);
      }};
    }
    case Opcode::kAllGatherStart: {
      // all-gather's work, handed to the run's collective thread: the
      // operand and the gathered result (leaf 1 of the start's tuple) stay
      // untouched until the -done, which reads both.
      const Shape& in = inst.operand(0)->shape();
      Split split = SplitAt(in, inst.dimensions.at(0));
      int64_t block = split.middle * split.inner * DTypeSize(in.dtype());
      int64_t bytes = in.byte_size();
      int64_t gathered = inst.shape().tuple_shape(1).byte_size();
      return {[instp, split, block, bytes, gathered](const KernelArgs& a) {
        const RunContext& c = ContextOf(*instp, a);
        Communicator* communicator = c.communicator;
        const int64_t self = c.partition;
        const uint8_t* input = a.operands[0];
        uint8_t* output = a.outputs[0];
        auto work = [=, group = GroupOf(*instp, c)] {
          if (split.outer == 1) {
            communicator->AllGather(self, group, input, output, bytes);
            return;
          }
          // The kernel's scratch is another step's once this one returns.
          std::unique_ptr<uint8_t[]> staged(new uint8_t[gathered]);
          communicator->AllGather(self, group, input, staged.get(), bytes);
          FromBlockMajor(staged.get(), output, split.outer, static_cast<int64_t>(group.size()),
                         block);
        };
        if (c.async) {
          c.async->Start(instp, std::move(work));
        } else {
          work();
        }
      }};
    }
    case Opcode::kAllReduceStart: {
      // Reduced in place in the result (the planner gives it a dying
      // operand's bytes when it can, else the operand is copied there).
      ReduceKind kind = ReduceKindOf(inst);
      std::vector<Shape> leaves;
      for (const Instruction* op : inst.operands()) leaves.push_back(op->shape());
      return {[instp, kind, leaves](const KernelArgs& a) {
        const RunContext& c = ContextOf(*instp, a);
        Communicator* communicator = c.communicator;
        const int64_t self = c.partition;
        std::vector<uint8_t*> outputs;
        for (size_t i = 0; i < leaves.size(); ++i) {
          if (a.outputs[i] != a.operands[i]) {
            std::memcpy(a.outputs[i], a.operands[i], leaves[i].byte_size());
          }
          outputs.push_back(a.outputs[i]);
        }
        auto work = [=, group = GroupOf(*instp, c)] {
          for (size_t i = 0; i < leaves.size(); ++i) {
            communicator->AllReduce(self, group, leaves[i].dtype(), kind, outputs[i], outputs[i],
                                    leaves[i].num_elements());
          }
        };
        if (c.async) {
          c.async->Start(instp, std::move(work));
        } else {
          work();
        }
      }};
    }
    case Opcode::kAllGatherDone:
    case Opcode::kAllReduceDone: {
      // Its result is the start's (the planner gives it the start's slots).
      const Instruction* start = inst.operand(0);
      return {[instp, start](const KernelArgs& a) {
        const RunContext& c = ContextOf(*instp, a);
        if (c.async) c.async->Wait(start);
      }};
    }
    default:
      break;
  }
  Fail("[runtime] {} ({}) is not a collective", hlo::OpcodeName(inst.opcode()), inst.name());
}

}  // namespace strata::runtime
