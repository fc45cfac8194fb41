// A compiled computation: its schedule of steps and its buffer plan.
//
// Every array leaf of every instruction's value is a *slot*. Tuples,
// get-tuple-element and reshape make no data: their slots are their
// operands'. Each slot lives in a *storage*: an arena region, a caller's
// parameter, a constant, an entry output, or while-loop state. A value may
// take over a dying operand's storage (in place); arena regions whose
// lifetimes do not overlap share bytes.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "kernels/kernels.h"
#include "strata/runtime/executable.h"

namespace strata::compiler {
class Planner;  // builds programs (src/compiler/planner.cc)
}  // namespace strata::compiler

namespace strata::runtime {

// Arena regions start at multiples of 64 bytes (a cache line, an AVX-512
// vector).
constexpr int64_t kArenaAlignment = 64;
inline int64_t AlignUp(int64_t n) {
  return (n + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
}

enum class StorageKind : uint8_t {
  kArena,      // planned offset in the arena
  kParameter,  // a read-only argument (entry, condition, to_apply)
  kLoopState,  // a while body's argument: the loop state, writable once dead
  kConstant,   // literal bytes owned by the module
  kOutput,     // an entry result buffer
};

struct Storage {
  StorageKind kind;
  int64_t size = 0;
  int64_t index = -1;   // parameter leaf or output number
  int64_t offset = -1;  // arena offset
  const uint8_t* constant = nullptr;
  int64_t first = 0, last = 0;  // live range in step positions
};

class Program;

// One result of a kernel step written straight into the block a later
// in-place dynamic-update-slice (step `update`) would copy it to.
struct Placement {
  int64_t update = -1;
  int64_t slot = -1;            // the result's slot
  size_t output = 0;            // its index into Frame::outputs
  std::vector<size_t> readers;  // operands reading it, into Frame::operands
};

struct Step {
  const hlo::Instruction* inst = nullptr;
  Kernel kernel;  // empty for while
  std::vector<int64_t> operand_slots, output_slots;
  int64_t scratch_offset = 0;
  // while: condition and body programs placed at scratch_offset (body
  // first), and the swap area for loop state that moved between leaves.
  std::unique_ptr<Program> condition, body;
  int64_t condition_offset = 0, swap_offset = 0;
  // A dynamic-slice of a contiguous block of an operand nothing writes while
  // the program runs (a stacked layer's weights): no kernel and no bytes of
  // its own. At run time its slot, and each operand that reads it
  // (view_readers: indices into Frame::operands), point into the operand.
  bool view = false;
  std::vector<size_t> view_readers;
  // Results a later in-place dynamic-update-slice copies into a contiguous
  // block of its operand (Placement): just before the kernel runs, each
  // such result's slot, its output and each operand that reads it point at
  // that block, so the kernel writes the result where the update would have
  // copied it and the update copies nothing.
  std::vector<Placement> places;
};

// Pointers resolved for one execution of a program.
struct Frame {
  const RunContext* context = nullptr;  // the partition a collective runs for
  std::vector<uint8_t*> slot;
  std::vector<const uint8_t*> operands;
  std::vector<uint8_t*> outputs;
  std::vector<size_t> operand_begin, output_begin;
};

// A kernel's program: its schedule of steps and its buffer plan, made by
// the compiler (compiler::PlanProgram) and run here.
class Program {
 public:
  // Resolves every slot's address; `parameters` are the parameter leaves.
  void Bind(Frame& frame, uint8_t* arena, const uint8_t* const* parameters,
            uint8_t* const* outputs) const;
  void Execute(Frame& frame, uint8_t* arena) const;
  // Root leaves that are not already in their result buffer are copied there.
  void CopyOutputs(const Frame& frame, uint8_t* const* outputs) const;

  int64_t arena_bytes() const { return arena_bytes_; }
  const std::vector<int64_t>& root_slots() const { return root_slots_; }
  int64_t slot_size(int64_t slot) const { return storages_[slot_storage_[slot]].size; }
  const Storage& storage_of(int64_t slot) const { return storages_[slot_storage_[slot]]; }
  int64_t in_place_updates() const { return in_place_updates_; }
  int64_t placed_updates() const { return placed_updates_; }
  // Donation (entry programs): result k may be written straight into the
  // buffer of parameter leaf p when it is computed into its own result
  // storage, that storage is first written after p's last read (or by the
  // op that reads p last: an elementwise op, or a while whose state element
  // starts as p alone), and the sizes agree. The caller must then never read
  // p's old bytes again.
  bool CanWriteResultInto(int64_t result, int64_t parameter) const;
  int64_t kernel_count() const {
    int64_t n = 0;
    for (const Step& step : steps_) n += step.kernel ? 1 : 0;
    return n;
  }

 private:
  friend class compiler::Planner;
  void RunWhile(const Step& step, Frame& frame, uint8_t* arena, size_t index) const;
  void RunView(const Step& step, Frame& frame, size_t index) const;
  void Place(const Placement& place, Frame& frame) const;
  void ExecuteTraced(const Step& step, Frame& frame, uint8_t* arena, size_t index) const;

  std::vector<Storage> storages_;
  std::vector<int64_t> slot_storage_;
  std::vector<Step> steps_;
  std::vector<int64_t> root_slots_;
  std::vector<bool> root_needs_copy_;
  std::vector<int64_t> parameter_last_read_;     // per parameter leaf: instruction index, -1 unread
  std::vector<int64_t> root_first_write_;        // per result: its storage's first write, or -1
  std::vector<bool> root_writer_elementwise_;    // that first write is an elementwise op
  std::vector<int64_t> root_carried_parameter_;  // or a while carrying this parameter leaf, or -1
  int64_t arena_bytes_ = 0;
  int64_t in_place_updates_ = 0;
  int64_t placed_updates_ = 0;
};

// Compiles a computation a kernel calls (a reduction's function, a
// conditional's branches) into a program: the compiler's planner, handed down
// so the runtime builds kernels without depending on the compiler.
using ComputationCompiler = std::function<std::shared_ptr<const Program>(const hlo::Computation&)>;

// The kernel of one instruction, by its opcode row's kernel family.
KernelInfo MakeKernel(const hlo::Instruction& inst, ThreadPool& pool,
                      const ComputationCompiler& compile);

}  // namespace strata::runtime
