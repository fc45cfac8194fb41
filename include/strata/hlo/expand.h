// XLA's ops that strata runs as other ops: the batch norms, map, the
// asynchronous collectives strata does not run as such (*-start / *-done)
// and copy-start / copy-done. They parse, verify and print as XLA writes
// them; before a module is compiled or partitioned, ExpandXlaOps rewrites
// each into the ops that compute it (the row's kernel column is
// Kernel::kExpanded).
//
// all-gather-start / -done of one array and all-reduce-start / -done of
// arrays run as they are when a module is compiled (RunsAsynchronously):
// the -start hands the data to the run's collective thread and the -done
// waits for it. The partitioner, which knows the synchronous ops only,
// has them expanded too.
#pragma once

#include "strata/hlo/module.h"

namespace strata::hlo {

// Rewrites every such op of `module`; returns whether it found one. An op
// it cannot rewrite (a map whose function is not elementwise) is an Error
// naming it.
// `keep_async_collectives` leaves the pairs RunsAsynchronously names.
bool ExpandXlaOps(Module& module, bool keep_async_collectives = false);
// Whether `module` holds such an op.
bool HasOpsToExpand(const Module& module, bool keep_async_collectives = false);
// An all-gather-start of one array, an all-reduce-start of arrays, or the
// -done of one: the pairs the runtime runs asynchronously.
bool RunsAsynchronously(const Instruction& inst);

}  // namespace strata::hlo
