#include "strata/runtime/executable.h"

#include <fmt/format.h>

#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>

#include "kernels/kernels.h"
#include "program.h"
#include "strata/core/config.h"
#include "strata/hlo/verifier.h"
#include "strata/runtime/communicator.h"
#include "strata/runtime/passes.h"
#include "strata/runtime/trace.h"

namespace strata::runtime {

Executable::~Executable() = default;

namespace {

// A fusion the fused loop cannot run (FusedKernelRuns) becomes a call of
// its computation, so it runs op by op, or is fused again by the passes,
// after InlineCalls flattens it: the same values as XLA's fusion of any kind.
void CallUnrunnableFusions(hlo::Module& module, ThreadPool& pool) {
  for (const auto& computation : module.computations()) {
    std::vector<hlo::Instruction*> unrunnable;
    for (const auto& inst : computation->instructions()) {
      if (inst->opcode() == hlo::Opcode::kFusion && !FusedKernelRuns(*inst, pool)) {
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

}  // namespace

bool EnvironmentDisablesFusion() { return !GetConfig().fusion; }

std::unique_ptr<Executable> Executable::Compile(const hlo::Module& module,
                                                const CompileOptions& options) {
  if (options.verify_input) {
    trace::Span span("compile", "verify");
    hlo::Verify(module);
  }
  std::unique_ptr<Executable> exe(new Executable());
  exe->client_ = options.client ? options.client : &Client::Default();
  exe->module_ = module.Clone();
  hlo::Module& m = *exe->module_;
  CallUnrunnableFusions(m, exe->client_->thread_pool());
  InlineCalls(m);  // so no called function calls another when it is widened
  WidenHalfArithmetic(m);
  if (options.run_passes) {
    {
      trace::Span span("compile", "passes");
      RunPasses(m);
    }
    if (options.fuse && !EnvironmentDisablesFusion()) {
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
  }
  Schedule(m);
  {
    trace::Span span("compile", "verify");
    hlo::Verify(m);
  }
  {
    trace::Span span("compile", "kernels and buffers");
    exe->program_ =
        Program::Compile(*m.entry(), StorageKind::kParameter, true, exe->client_->thread_pool());
  }
  for (const hlo::Instruction* p : m.entry()->parameters()) {
    for (const Shape& leaf : p->shape().Leaves()) exe->parameter_shapes_.push_back(leaf);
  }
  exe->result_shapes_ = m.entry()->root()->shape().Leaves();
  exe->stats_.temp_bytes = exe->program_->arena_bytes();
  for (const Shape& s : exe->result_shapes_) exe->stats_.output_bytes += s.byte_size();
  exe->stats_.planned_peak_bytes = exe->stats_.temp_bytes + exe->stats_.output_bytes;
  exe->stats_.in_place_updates = exe->program_->in_place_updates();
  exe->stats_.placed_updates = exe->program_->placed_updates();
  exe->stats_.kernels = exe->program_->kernel_count();
  return exe;
}

std::vector<Buffer> Executable::Run(const std::vector<Buffer>& arguments, const Device* device,
                                    const std::vector<bool>& donated) const {
  if (module_->num_partitions() > 1) {
    Fail("[execute] {} is an SPMD program of {} partitions: run it with RunPartitioned",
         module_->name(), module_->num_partitions());
  }
  return RunWith(arguments, device, donated, RunContext{});
}

std::vector<Buffer> Executable::RunPartition(int64_t partition,
                                             const std::vector<Buffer>& arguments,
                                             const Device* device, Communicator& communicator,
                                             const std::vector<bool>& donated) const {
  int64_t n = module_->num_partitions();
  if (partition < 0 || partition >= n) {
    Fail("[execute] partition {} of a program of {} partitions", partition, n);
  }
  if (communicator.size() != n) {
    Fail("[execute] {} has {} partitions but the communicator has {} participants", module_->name(),
         n, communicator.size());
  }
  return RunWith(arguments, device, donated, RunContext{partition, n, &communicator});
}

std::vector<std::vector<Buffer>> Executable::RunPartitioned(
    const std::vector<std::vector<Buffer>>& arguments, const std::vector<const Device*>& devices,
    Communicator& communicator, const std::vector<bool>& donated) const {
  const int64_t n = module_->num_partitions();
  if (static_cast<int64_t>(arguments.size()) != n || static_cast<int64_t>(devices.size()) != n) {
    Fail("[execute] {} has {} partitions; given arguments for {} and {} device(s)", module_->name(),
         n, arguments.size(), devices.size());
  }
  return RunPartitions(0, arguments, devices, communicator, donated);
}

std::vector<std::vector<Buffer>> Executable::RunPartitions(
    int64_t first, const std::vector<std::vector<Buffer>>& arguments,
    const std::vector<const Device*>& devices, Communicator& communicator,
    const std::vector<bool>& donated) const {
  const int64_t n = static_cast<int64_t>(arguments.size());
  if (static_cast<int64_t>(devices.size()) != n || first < 0 ||
      first + n > module_->num_partitions()) {
    Fail("[execute] {} has {} partitions; asked to run {} from partition {} on {} device(s)",
         module_->name(), module_->num_partitions(), n, first, devices.size());
  }
  std::vector<std::vector<Buffer>> results(n);
  std::vector<std::exception_ptr> errors(n);
  auto run = [&](int64_t i) {
    if (i > 0 && trace::Enabled()) trace::SetThreadName(fmt::format("partition {}", first + i));
    trace::Span span("execute", n > 1 ? fmt::format("partition {}", first + i) : "partition");
    try {
      results[i] = RunPartition(first + i, arguments[i], devices[i], communicator, donated);
    } catch (const std::exception& e) {
      errors[i] = std::current_exception();
      communicator.Abort(fmt::format("partition {} failed: {}", first + i, e.what()));
    }
  };
  std::vector<std::thread> threads;
  for (int64_t i = 1; i < n; ++i) threads.emplace_back(run, i);
  if (n > 0) run(0);
  for (std::thread& t : threads) t.join();
  // The root cause is the first failure that is not another partition's abort.
  std::exception_ptr root;
  for (int64_t i = 0; i < n && !root; ++i) {
    if (!errors[i]) continue;
    try {
      std::rethrow_exception(errors[i]);
    } catch (const std::exception& e) {
      if (std::string_view(e.what()).find("aborted") == std::string_view::npos) root = errors[i];
    }
  }
  for (int64_t i = 0; i < n && !root; ++i) root = errors[i];
  if (root) std::rethrow_exception(root);
  return results;
}

std::vector<Buffer> Executable::RunWith(const std::vector<Buffer>& arguments, const Device* device,
                                        const std::vector<bool>& donated,
                                        const RunContext& context) const {
  if (!device) device = arguments.empty() ? client_->device(0) : arguments[0].device();
  if (arguments.size() != parameter_shapes_.size()) {
    std::string expected;
    for (const Shape& s : parameter_shapes_)
      expected += (expected.empty() ? "" : ", ") + s.ToString();
    Fail("[execute] {} takes {} argument(s) ({}), got {}", module_->name(),
         parameter_shapes_.size(), expected, arguments.size());
  }
  std::vector<const uint8_t*> params;
  for (size_t i = 0; i < arguments.size(); ++i) {
    const Buffer& b = arguments[i];
    if (!b.defined()) Fail("[execute] argument {} is an empty buffer", i);
    if (b.shape() != parameter_shapes_[i]) {
      Fail("[execute] argument {} must be {}, got {}", i, parameter_shapes_[i].ToString(),
           b.shape().ToString());
    }
    if (b.device() != device) {
      Fail("[execute] argument {} lives on {}, but the program runs on {}", i,
           b.device() ? b.device()->ToString() : "no device", device->ToString());
    }
    params.push_back(b.data());
  }
  if (!donated.empty() && donated.size() != arguments.size())
    Fail("[execute] {} donation flags for {} arguments", donated.size(), arguments.size());
  std::vector<bool> taken(donated.size(), false);
  std::vector<Buffer> results;
  std::vector<uint8_t*> outputs;
  for (size_t k = 0; k < result_shapes_.size(); ++k) {
    const Shape& s = result_shapes_[k];
    Buffer out;
    for (size_t i = 0; i < donated.size() && !out.defined(); ++i) {
      if (donated[i] && !taken[i] && arguments[i].size_bytes() == s.byte_size() &&
          program_->CanWriteResultInto(static_cast<int64_t>(k), static_cast<int64_t>(i))) {
        taken[i] = true;
        out = Buffer::Alias(s, arguments[i]);
      }
    }
    results.push_back(out.defined() ? out : Buffer::Allocate(s, device));
    outputs.push_back(results.back().data());
  }
  RunContext run = context;
  run.profile = client_->profile();
  std::shared_ptr<uint8_t> arena = client_->Arena(program_->arena_bytes());
  Frame frame;
  frame.context = &run;
  program_->Bind(frame, arena.get(), params.data(), outputs.data());
  program_->Execute(frame, arena.get());
  program_->CopyOutputs(frame, outputs.data());
  return results;
}

}  // namespace strata::runtime
