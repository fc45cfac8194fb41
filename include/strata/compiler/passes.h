// Program-IR passes run by Compile. Each returns whether it changed anything.
#pragma once

#include <vector>

#include "strata/hlo/module.h"

namespace strata::compiler {

bool InlineCalls(hlo::Module& module);
// f16 / bf16 arithmetic run in f32: converts around each op that computes on
// half-precision values, f32 copies of the functions reductions and
// scatters call (widen_half.cc). Compile runs it first, passes or not.
bool WidenHalfArithmetic(hlo::Module& module);
bool SimplifyAlgebra(hlo::Module& module);
bool FoldConstants(hlo::Module& module);
bool EliminateCommonSubexpressions(hlo::Module& module);
bool EliminateDeadCode(hlo::Module& module);
// A loop state element that is convert(W), which the body only slices and
// hands on, becomes W with each slice converted in the body: no converted
// copy of a whole stack of weights (sink_converts.cc).
bool SinkConvertsIntoLoops(hlo::Module& module);
// A loop state element the body hands on unchanged and only converts (to
// one type, whole) is converted once before the loop instead (the same
// file).
bool HoistConvertsOutOfLoops(hlo::Module& module);
// Runs all of the above to a fixed point (a few rounds at most).
void RunPasses(hlo::Module& module);
// A transpose, reshape or reverse of an elementwise op nothing else reads
// moves to that op's operands, towards where a loop fusion reads it as a
// strided view (sink_index_maps.cc). Before FuseElementwise.
bool SinkIndexMaps(hlo::Module& module);
// Groups chains of f32 / f64 elementwise ops (and the broadcasts they read)
// into loop fusions, run block by block by the CPU runtime. After RunPasses.
bool FuseElementwise(hlo::Module& module);
// Two loop fusions over the same dims that read a common array, neither
// reading the other, become one multi-output fusion (merge_sibling_fusions.cc).
// After FuseElementwise.
bool MergeSiblingFusions(hlo::Module& module);
// A loop fusion takes in an elementwise producer (a loop fusion or one op
// over the same dims) that only it reads (fuse_producers.cc). After
// MergeSiblingFusions, which leaves such producers.
bool FuseProducers(hlo::Module& module);
// An elementwise fusion that alone reads a stack a loop writes slice by
// slice (a layer's gradients, which AdamW reads with the stacked weights
// and moments) runs in the loop on each slice, writing its results into
// the arrays it reads: the stack is never made (sink_updates.cc). After
// FuseProducers.
bool SinkUpdatesIntoLoops(hlo::Module& module);
// The computations that run as programs: the entry, the while loops'
// conditions and bodies and the conditionals' branches (not the functions
// reduce / scatter call). What the fusion passes work on.
std::vector<hlo::Computation*> ProgramComputations(const hlo::Module& module);
// Reorders each computation into a depth-first post-order from its root, so
// values are consumed soon after they are made.
void Schedule(hlo::Module& module);
// On a schedule: each all-gather of one array and all-reduce of arrays
// becomes its -start / -done pair, the -done just before the first reader
// and up to two -starts ahead of their place, with the data movement that
// makes their operands, so collectives run while the program computes
// (overlap_collectives.cc). Config::overlap_collectives turns it off.
bool OverlapCollectives(hlo::Module& module);

}  // namespace strata::compiler
