// The buffer plan and kernel steps of one computation (planner.cc).
#pragma once

#include <memory>

#include "program.h"

namespace strata::compiler {

// Slots, liveness, storages (with in-place reuse), arena offsets, and one
// step per instruction that does work, with its kernel. `parameter_kind` is
// kParameter or kLoopState; `root_is_output` is true for the entry
// computation, whose root leaves become result buffers.
std::unique_ptr<runtime::Program> PlanProgram(const hlo::Computation& computation,
                                              runtime::StorageKind parameter_kind,
                                              bool root_is_output, runtime::ThreadPool& pool);

}  // namespace strata::compiler
