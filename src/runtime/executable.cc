#include "strata/runtime/executable.h"

#include <fmt/format.h>

#include <cstdlib>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>

#include "kernels/async_collectives.h"
#include "kernels/kernels.h"
#include "program.h"
#include "strata/runtime/communicator.h"
#include "strata/runtime/trace.h"

namespace strata::runtime {

Executable::~Executable() = default;

Executable::Executable(std::unique_ptr<hlo::Module> module, std::unique_ptr<Program> program,
                       const Client* client)
    : module_(std::move(module)), program_(std::move(program)), client_(client) {
  for (const hlo::Instruction* p : module_->entry()->parameters()) {
    for (const Shape& leaf : p->shape().Leaves()) parameter_shapes_.push_back(leaf);
  }
  result_shapes_ = module_->entry()->root()->shape().Leaves();
  for (const auto& c : module_->computations()) {
    for (const auto& inst : c->instructions()) {
      has_collectives_ = has_collectives_ || (hlo::IsCollective(inst->opcode()) &&
                                              inst->opcode() != hlo::Opcode::kPartitionId &&
                                              inst->opcode() != hlo::Opcode::kReplicaId);
    }
  }
  stats_.temp_bytes = program_->arena_bytes();
  for (const Shape& s : result_shapes_) stats_.output_bytes += s.byte_size();
  stats_.planned_peak_bytes = stats_.temp_bytes + stats_.output_bytes;
  stats_.in_place_updates = program_->in_place_updates();
  stats_.placed_updates = program_->placed_updates();
  stats_.kernels = program_->kernel_count();
}

void Executable::CheckSinglePartition() const {
  if (module_->num_partitions() > 1) {
    Fail("[execute] {} is an SPMD program of {} partitions: run it with RunPartitioned",
         module_->name(), module_->num_partitions());
  }
}

std::vector<Buffer> Executable::Run(const std::vector<Buffer>& arguments, const Device* device,
                                    const std::vector<bool>& donated) const {
  CheckSinglePartition();
  if (has_collectives_) {  // each group is this one partition
    auto alone = MakeInProcessCommunicator(1);
    return RunWith(arguments, device, donated, RunContext{0, 1, alone.get()});
  }
  return RunWith(arguments, device, donated, RunContext{});
}

std::vector<Buffer> Executable::RunInto(const std::vector<Buffer>& arguments,
                                        const std::vector<int64_t>& homes,
                                        const Device* device) const {
  CheckSinglePartition();
  if (homes.size() != result_shapes_.size())
    Fail("[execute] {} result places for {} results", homes.size(), result_shapes_.size());
  for (int64_t home : homes) {
    if (home < -1 || home >= static_cast<int64_t>(arguments.size()))
      Fail("[execute] result place {} is not an argument (0..{})", home, arguments.size());
  }
  return RunWith(arguments, device, {}, RunContext{}, homes);
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
                                        const std::vector<bool>& donated, const RunContext& context,
                                        const std::vector<int64_t>& homes) const {
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
  std::vector<bool> homes_taken(homes.empty() ? 0 : arguments.size(), false);
  std::vector<Buffer> results;
  std::vector<uint8_t*> outputs;
  for (size_t k = 0; k < result_shapes_.size(); ++k) {
    const Shape& s = result_shapes_[k];
    Buffer out;
    if (!homes.empty() && homes[k] >= 0) {
      const int64_t i = homes[k];
      if (!homes_taken[i] && arguments[i].size_bytes() == s.byte_size() &&
          program_->CanWriteResultInto(static_cast<int64_t>(k), i)) {
        homes_taken[i] = true;
        out = Buffer::Alias(s, arguments[i]);
      }
    }
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
  // After the arena: a failed run's collectives in flight stop before it goes.
  std::optional<AsyncCollectives> async;
  if (run.communicator) run.async = &async.emplace(run.communicator, run.partition);
  Frame frame;
  frame.context = &run;
  program_->Bind(frame, arena.get(), params.data(), outputs.data());
  program_->Execute(frame, arena.get());
  program_->CopyOutputs(frame, outputs.data());
  return results;
}

}  // namespace strata::runtime
