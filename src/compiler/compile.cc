#include "strata/compiler/compile.h"

#include "kernels/kernels.h"
#include "planner.h"
#include "strata/compiler/passes.h"
#include "strata/core/config.h"
#include "strata/hlo/expand.h"
#include "strata/hlo/verifier.h"
#include "strata/runtime/trace.h"

namespace strata::compiler {

namespace {

// A fusion the fused loop cannot run (FusedKernelRuns) becomes a call of
// its computation, so it runs op by op, or is fused again by the passes,
// after InlineCalls flattens it: the same values as XLA's fusion of any kind.
void CallUnrunnableFusions(hlo::Module& module, runtime::ThreadPool& pool) {
  for (const auto& computation : module.computations()) {
    std::vector<hlo::Instruction*> unrunnable;
    for (const auto& inst : computation->instructions()) {
      if (inst->opcode() == hlo::Opcode::kFusion && !runtime::FusedKernelRuns(*inst, pool)) {
        unrunnable.push_back(inst.get());
      }
    }
    for (hlo::Instruction* fusion : unrunnable) {
      auto call = std::make_unique<hlo::Instruction>(hlo::Opcode::kCall, fusion->shape(),
                                                     fusion->operands());
      call->called = fusion->called;
      call->sharding = fusion->sharding;
      call->set_name(fusion->name());
      hlo::Instruction* added = computation->AddInstruction(std::move(call));
      computation->ReplaceAllUsesWith(fusion, added);
    }
    if (!unrunnable.empty()) {
      computation->RemoveDeadInstructions();
      computation->SortTopologically();
    }
  }
}

void RunFusionPasses(hlo::Module& m, const CompileOptions& options) {
  trace::Span span("compile", "fusion");
  // One span each: where a large graph's compile time goes.
  auto pass = [&m](const char* name, auto run) {
    trace::Span pass_span("compile", name);
    run(m);
  };
  pass("sink index maps", SinkIndexMaps);
  pass("fuse elementwise", FuseElementwise);
  if (options.merge_sibling_fusions) pass("merge sibling fusions", MergeSiblingFusions);
  pass("fuse producers", FuseProducers);
  pass("sink updates", SinkUpdatesIntoLoops);
}

}  // namespace

bool EnvironmentDisablesFusion() { return !GetConfig().fusion; }

std::unique_ptr<runtime::Executable> Compile(const hlo::Module& module,
                                             const CompileOptions& options) {
  if (options.verify_input) {
    trace::Span span("compile", "verify");
    hlo::Verify(module);
  }
  const runtime::Client* client = options.client ? options.client : &runtime::Client::Default();
  std::unique_ptr<hlo::Module> m = module.Clone();
  // XLA's batch norms and maps; the asynchronous collectives the runtime
  // runs as such stay (hlo/expand.h).
  hlo::ExpandXlaOps(*m, /*keep_async_collectives=*/true);
  CallUnrunnableFusions(*m, client->thread_pool());
  InlineCalls(*m);  // so no called function calls another when it is widened
  WidenHalfArithmetic(*m);
  if (options.run_passes) {
    {
      trace::Span span("compile", "passes");
      RunPasses(*m);
    }
    if (options.fuse && !EnvironmentDisablesFusion()) RunFusionPasses(*m, options);
  }
  Schedule(*m);
  if (GetConfig().overlap_collectives) {
    trace::Span span("compile", "overlap collectives");
    OverlapCollectives(*m);
  }
  {
    trace::Span span("compile", "verify");
    hlo::Verify(*m);
  }
  std::unique_ptr<runtime::Program> program;
  {
    trace::Span span("compile", "kernels and buffers");
    program =
        PlanProgram(*m->entry(), runtime::StorageKind::kParameter, true, client->thread_pool());
  }
  return std::make_unique<runtime::Executable>(std::move(m), std::move(program), client);
}

}  // namespace strata::compiler
