// Compiling a program-IR module for the CPU runtime.
//
// Compile = verify -> passes (inline calls, algebraic simplification,
// constant folding, CSE, DCE, fusion) -> schedule -> buffer plan -> kernels.
// The result is a runtime::Executable: immutable, so Run may be called from
// several threads at once.
#pragma once

#include <memory>

#include "strata/hlo/module.h"
#include "strata/runtime/device.h"
#include "strata/runtime/executable.h"

namespace strata::compiler {

// Config::fusion off (STRATA_NO_FUSION, read at each compile): loop fusion
// off everywhere, for comparisons. The lazy context's cache key includes it,
// so a program compiled before the switch is not reused after it.
bool EnvironmentDisablesFusion();

struct CompileOptions {
  bool run_passes = true;
  // Loop fusion of elementwise chains (with the passes), unless
  // EnvironmentDisablesFusion().
  bool fuse = true;
  // With `fuse`: loop fusions over the same dims that read a common array
  // become one multi-output fusion (MergeSiblingFusions).
  bool merge_sibling_fusions = true;
  // Verify the module before compiling it. The module after the passes is
  // always verified; a caller whose module comes from a verified source
  // (the lazy lowering: every shape computed by the shape rules when its
  // node was built) skips the first check.
  bool verify_input = true;
  const runtime::Client* client = nullptr;  // default: Client::Default()
};

std::unique_ptr<runtime::Executable> Compile(const hlo::Module& module,
                                             const CompileOptions& options = {});

}  // namespace strata::compiler
