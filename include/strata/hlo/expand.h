// XLA's ops that strata runs as other ops: the batch norms, map, the
// asynchronous collectives (*-start / *-done) and copy-start / copy-done.
// They parse, verify and print as XLA writes them; before a module is
// compiled or partitioned, ExpandXlaOps rewrites each into the ops that
// compute it (the row's kernel column is Kernel::kExpanded).
#pragma once

#include "strata/hlo/module.h"

namespace strata::hlo {

// Rewrites every such op of `module`; returns whether it found one. An op
// it cannot rewrite (a map whose function is not elementwise) is an Error
// naming it.
bool ExpandXlaOps(Module& module);
// Whether `module` holds such an op.
bool HasOpsToExpand(const Module& module);

}  // namespace strata::hlo
