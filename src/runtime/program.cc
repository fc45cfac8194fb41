#include "program.h"

#include "strata/hlo/attention.h"
#include "strata/hlo/library_calls.h"
#include "strata/runtime/profile.h"
#include "strata/runtime/trace.h"

#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <unordered_map>
#include <unordered_set>

namespace strata::runtime {

using hlo::Instruction;
using hlo::Opcode;

namespace {

ScalarFunction CompileScalar(const hlo::Computation& c, const ComputationCompiler& compile) {
  std::shared_ptr<const Program> program = compile(c);
  ScalarFunction f;
  f.arena_bytes = program->arena_bytes();
  f.bind = [program](uint8_t* arena) -> ScalarCall {
    auto frame = std::make_shared<Frame>();
    return [program, frame, arena](const uint8_t* const* args, uint8_t* const* results) {
      program->Bind(*frame, arena, args, nullptr);
      program->Execute(*frame, arena);
      const auto& roots = program->root_slots();
      for (size_t k = 0; k < roots.size(); ++k) {
        std::memcpy(results[k], frame->slot[roots[k]], program->slot_size(roots[k]));
      }
    };
  };
  return f;
}

// conditional: each branch compiled as a program of its own; a run picks
// one by the selector and runs it on that branch's operand leaves, in the
// kernel's scratch (the largest branch arena), with the caller's context.
KernelInfo MakeConditionalKernel(const Instruction& inst, const ComputationCompiler& compile) {
  const int64_t branches = static_cast<int64_t>(inst.called.size());
  std::vector<std::shared_ptr<const Program>> programs;
  std::vector<int64_t> first_leaf;
  int64_t scratch = 0, leaf = 1;
  for (int64_t b = 0; b < branches; ++b) {
    programs.push_back(compile(*inst.called[b]));
    scratch = std::max(scratch, programs.back()->arena_bytes());
    first_leaf.push_back(leaf);
    leaf += static_cast<int64_t>(inst.operand(b + 1)->shape().Leaves().size());
  }
  const bool predicated = inst.operand(0)->shape().dtype() == DType::kPred;
  return {[=](const KernelArgs& a) {
            int64_t b = 0;
            if (predicated) {
              b = a.operands[0][0] ? 0 : 1;
            } else {
              int32_t index;
              std::memcpy(&index, a.operands[0], sizeof index);
              b = index < 0 || index >= branches ? branches - 1 : index;
            }
            const Program& program = *programs[b];
            Frame frame;
            frame.context = a.context;
            program.Bind(frame, a.scratch, a.operands + first_leaf[b], nullptr);
            program.Execute(frame, a.scratch);
            const auto& roots = program.root_slots();
            for (size_t k = 0; k < roots.size(); ++k) {
              std::memcpy(a.outputs[k], frame.slot[roots[k]], program.slot_size(roots[k]));
            }
          },
          scratch};
}

// The opcode's row names its kernel family; every family is listed here (a
// new one without a case is a compile error).
#pragma GCC diagnostic push
#pragma GCC diagnostic error "-Wswitch"
}  // namespace

KernelInfo MakeKernel(const Instruction& inst, ThreadPool& pool,
                      const ComputationCompiler& compile) {
  Opcode op = inst.opcode();
  if (RunsOnComplexKernels(inst)) return MakeComplexKernel(inst, pool);
  switch (hlo::KernelOf(op)) {
    case hlo::Kernel::kElementwise:
      return MakeElementwiseKernel(inst, pool);
    case hlo::Kernel::kConvert:
      return MakeConvertKernel(inst, pool);
    case hlo::Kernel::kComplex:
      return MakeComplexKernel(inst, pool);
    case hlo::Kernel::kDataMovement:
      return MakeDataMovementKernel(inst, pool);
    case hlo::Kernel::kReduce:
      return MakeReduceKernel(inst, pool, CompileScalar(*inst.called[0], compile));
    case hlo::Kernel::kDot:
      return MakeDotKernel(inst, pool);
    case hlo::Kernel::kConvolution:
      return MakeConvolutionKernel(inst, pool);
    case hlo::Kernel::kReduceWindow:
      return MakeReduceWindowKernel(inst, pool, CompileScalar(*inst.called[0], compile));
    case hlo::Kernel::kSelectAndScatter:
      return MakeSelectAndScatterKernel(inst, pool, CompileScalar(*inst.called[0], compile),
                                        CompileScalar(*inst.called[1], compile));
    case hlo::Kernel::kConditional:
      return MakeConditionalKernel(inst, compile);
    case hlo::Kernel::kTopK:
      return MakeTopKKernel(inst, pool);
    case hlo::Kernel::kSort:
      return MakeSortKernel(inst, pool, [&] { return CompileScalar(*inst.called[0], compile); });
    case hlo::Kernel::kGather:
      return MakeGatherKernel(inst, pool);
    case hlo::Kernel::kScatter:
      return MakeScatterKernel(inst, pool, CompileScalar(*inst.called[0], compile));
    case hlo::Kernel::kRng:
      return MakeRngKernel(inst, pool);
    case hlo::Kernel::kFusion:
      return MakeFusionKernel(inst, pool);
    case hlo::Kernel::kCustomCall:
      if (hlo::IsAttentionTarget(inst.custom_call_target)) return MakeAttentionKernel(inst, pool);
      if (hlo::LibraryCallOf(inst.custom_call_target)) return MakeLibraryCallKernel(inst, pool);
      // A manual region's boundary in a program that was not partitioned:
      // the identity where the region spans one device, else meaningless.
      if (inst.shape() != inst.operand(0)->shape()) {
        Fail(
            "[runtime] custom-call {} ({}) turns {} into {}: a manual region runs only in a "
            "program partitioned over the devices of its sharding (spmd::Partition)",
            inst.custom_call_target, inst.name(), inst.operand(0)->shape().ToString(),
            inst.shape().ToString());
      }
      return MakeDataMovementKernel(inst, pool);
    case hlo::Kernel::kToken:  // a token holds nothing: ordering is all it does
      return {[](const KernelArgs&) {}};
    case hlo::Kernel::kCollective:
      return MakeCollectiveKernel(inst, pool);
    case hlo::Kernel::kLinalg:
      return MakeLinalgKernel(inst, pool);
    case hlo::Kernel::kStorage:  // placed by Build, run by Execute, inlined by the passes
    case hlo::Kernel::kLoop:
    case hlo::Kernel::kInlined:
    case hlo::Kernel::kExpanded:  // rewritten by hlo::ExpandXlaOps, which Compile runs
      break;
  }
  Fail("[runtime] {} ({}) cannot be executed directly; was the module compiled with passes?",
       hlo::OpcodeName(op), inst.name());
}
#pragma GCC diagnostic pop

void Program::Bind(Frame& frame, uint8_t* arena, const uint8_t* const* parameters,
                   uint8_t* const* outputs) const {
  frame.slot.resize(slot_storage_.size());
  for (size_t s = 0; s < slot_storage_.size(); ++s) {
    const Storage& st = storages_[slot_storage_[s]];
    switch (st.kind) {
      case StorageKind::kArena:
        frame.slot[s] = arena + st.offset;
        break;
      case StorageKind::kParameter:
      case StorageKind::kLoopState:
        frame.slot[s] = const_cast<uint8_t*>(parameters[st.index]);
        break;
      case StorageKind::kConstant:
        frame.slot[s] = const_cast<uint8_t*>(st.constant);
        break;
      case StorageKind::kOutput:
        frame.slot[s] = outputs[st.index];
        break;
    }
  }
  if (frame.operand_begin.size() != steps_.size()) {
    frame.operands.clear();
    frame.outputs.clear();
    frame.operand_begin.clear();
    frame.output_begin.clear();
    for (const Step& step : steps_) {
      frame.operand_begin.push_back(frame.operands.size());
      frame.output_begin.push_back(frame.outputs.size());
      frame.operands.resize(frame.operands.size() + step.operand_slots.size());
      frame.outputs.resize(frame.outputs.size() + step.output_slots.size());
    }
  }
  for (size_t k = 0; k < steps_.size(); ++k) {
    const Step& step = steps_[k];
    for (size_t i = 0; i < step.operand_slots.size(); ++i) {
      frame.operands[frame.operand_begin[k] + i] = frame.slot[step.operand_slots[i]];
    }
    for (size_t i = 0; i < step.output_slots.size(); ++i) {
      frame.outputs[frame.output_begin[k] + i] = frame.slot[step.output_slots[i]];
    }
  }
}

void Program::Execute(Frame& frame, uint8_t* arena) const {
  KernelProfile* profile = frame.context ? frame.context->profile : nullptr;
  const bool tracing = trace::Enabled();
  for (size_t k = 0; k < steps_.size(); ++k) {
    const Step& step = steps_[k];
    if (step.view) {
      RunView(step, frame, k);
      continue;
    }
    if (!step.kernel) {
      RunWhile(step, frame, arena, k);
      continue;
    }
    for (const Placement& place : step.places) Place(place, frame);
    if (tracing) {
      ExecuteTraced(step, frame, arena, k);
      continue;
    }
    auto t0 = profile ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point();
    step.kernel(KernelArgs{frame.operands.data() + frame.operand_begin[k],
                           frame.outputs.data() + frame.output_begin[k],
                           arena + step.scratch_offset, frame.context});
    if (profile) {
      profile->Add(hlo::OpcodeName(step.inst->opcode()), step.inst->shape(),
                   std::chrono::duration_cast<std::chrono::nanoseconds>(
                       std::chrono::steady_clock::now() - t0)
                       .count());
    }
  }
}

// One kernel as a trace event named by its opcode, with the result's shape.
void Program::ExecuteTraced(const Step& step, Frame& frame, uint8_t* arena, size_t index) const {
  trace::Span span("kernel", hlo::OpcodeName(step.inst->opcode()));
  if (span.active()) {
    span.set_args(fmt::format(R"("instruction": "{}", "shape": "{}")",
                              trace::Escape(step.inst->name()), step.inst->shape().ToString()));
  }
  step.kernel(KernelArgs{frame.operands.data() + frame.operand_begin[index],
                         frame.outputs.data() + frame.output_begin[index],
                         arena + step.scratch_offset, frame.context});
}

// dynamic-slice's semantics: each start clamped so the slice fits.
void Program::RunView(const Step& step, Frame& frame, size_t index) const {
  const Instruction& inst = *step.inst;
  const uint8_t* const* operands = frame.operands.data() + frame.operand_begin[index];
  const std::vector<int64_t>& dims = inst.operand(0)->shape().dims();
  int64_t offset = 0, stride = DTypeSize(inst.shape().dtype());
  for (int64_t d = static_cast<int64_t>(dims.size()) - 1; d >= 0; --d) {
    const int64_t limit = dims[d] - inst.dynamic_slice_sizes[d];
    if (limit > 0) {
      const int64_t start = ReadIndex(operands[1 + d], inst.operand(1 + d)->shape().dtype());
      offset += std::clamp<int64_t>(start, 0, limit) * stride;
    }
    stride *= dims[d];
  }
  uint8_t* at = const_cast<uint8_t*>(operands[0]) + offset;
  frame.slot[step.output_slots[0]] = at;
  for (size_t reader : step.view_readers) frame.operands[reader] = at;
}

// Points the result of `step` at the block its dynamic-update-slice writes.
void Program::Place(const Placement& place, Frame& frame) const {
  const Instruction& inst = *steps_[place.update].inst;
  const uint8_t* const* operands = frame.operands.data() + frame.operand_begin[place.update];
  const std::vector<int64_t>& dims = inst.shape().dims();
  const std::vector<int64_t>& sizes = inst.operand(1)->shape().dims();
  int64_t offset = 0, stride = DTypeSize(inst.shape().dtype());
  for (int64_t d = static_cast<int64_t>(dims.size()) - 1; d >= 0; --d) {
    const int64_t limit = dims[d] - sizes[d];
    if (limit > 0) {
      const int64_t start = ReadIndex(operands[2 + d], inst.operand(2 + d)->shape().dtype());
      offset += std::clamp<int64_t>(start, 0, limit) * stride;
    }
    stride *= dims[d];
  }
  uint8_t* at = const_cast<uint8_t*>(operands[0]) + offset;
  frame.slot[place.slot] = at;
  frame.outputs[place.output] = at;
  for (size_t reader : place.readers) frame.operands[reader] = at;
}

void Program::RunWhile(const Step& step, Frame& frame, uint8_t* arena, size_t index) const {
  trace::Span loop("while", step.inst->name());
  size_t n = step.output_slots.size();
  uint8_t* const* state = frame.outputs.data() + frame.output_begin[index];
  const uint8_t* const* init = frame.operands.data() + frame.operand_begin[index];
  for (size_t i = 0; i < n; ++i) {
    if (state[i] != init[i]) std::memcpy(state[i], init[i], slot_size(step.output_slots[i]));
  }
  uint8_t* body_arena = arena + step.scratch_offset;
  uint8_t* condition_arena = body_arena + step.condition_offset;
  uint8_t* swap = body_arena + step.swap_offset;
  Frame condition_frame, body_frame;
  condition_frame.context = body_frame.context = frame.context;
  step.condition->Bind(condition_frame, condition_arena, state, nullptr);
  step.body->Bind(body_frame, body_arena, state, nullptr);
  const int64_t condition_root = step.condition->root_slots()[0];
  const auto& body_roots = step.body->root_slots();
  for (int64_t iteration = 0;; ++iteration) {
    step.condition->Execute(condition_frame, condition_arena);
    if (!*reinterpret_cast<const bool*>(condition_frame.slot[condition_root])) break;
    std::optional<trace::Span> span;  // one event per iteration that runs the body
    if (loop.active()) {
      span.emplace("while", "iteration");
      if (span->active()) span->set_args(fmt::format(R"("i": {})", iteration));
    }
    step.body->Execute(body_frame, body_arena);
    // New state: values computed in another leaf's storage go through the
    // swap area first, so no leaf is overwritten before it is read.
    int64_t swap_used = 0;
    std::vector<std::pair<size_t, int64_t>> swapped;
    for (size_t i = 0; i < n; ++i) {
      uint8_t* src = body_frame.slot[body_roots[i]];
      if (src == state[i]) continue;
      const Storage& st = step.body->storage_of(body_roots[i]);
      if (st.kind == StorageKind::kLoopState) {
        std::memcpy(swap + swap_used, src, st.size);
        swapped.push_back({i, swap_used});
        swap_used += AlignUp(st.size);
      }
    }
    for (size_t i = 0; i < n; ++i) {
      uint8_t* src = body_frame.slot[body_roots[i]];
      if (src == state[i] || step.body->storage_of(body_roots[i]).kind == StorageKind::kLoopState)
        continue;
      std::memcpy(state[i], src, step.body->slot_size(body_roots[i]));
    }
    for (auto [i, offset] : swapped)
      std::memcpy(state[i], swap + offset, step.body->slot_size(body_roots[i]));
  }
}

bool Program::CanWriteResultInto(int64_t result, int64_t parameter) const {
  if (result < 0 || result >= static_cast<int64_t>(root_first_write_.size()) ||
      root_first_write_[result] < 0) {
    return false;
  }
  const int64_t last_read = parameter < static_cast<int64_t>(parameter_last_read_.size())
                                ? parameter_last_read_[parameter]
                                : -1;
  return last_read < root_first_write_[result] ||
         (last_read == root_first_write_[result] &&
          (root_writer_elementwise_[result] || root_carried_parameter_[result] == parameter));
}

void Program::CopyOutputs(const Frame& frame, uint8_t* const* outputs) const {
  for (size_t k = 0; k < root_slots_.size(); ++k) {
    if (root_needs_copy_[k])
      std::memcpy(outputs[k], frame.slot[root_slots_[k]], slot_size(root_slots_[k]));
  }
}

}  // namespace strata::runtime
