#include "strata/runtime/process_group.h"

#include <fmt/format.h>

#include <numeric>

#include "strata/core/error.h"

namespace strata::runtime {

std::vector<int64_t> AllGatherFromProcesses(const ProcessGroup& group, int64_t value) {
  const int processes = group.size();
  std::vector<int64_t> values(processes, value);
  if (processes == 1) return values;
  std::unique_ptr<Communicator> communicator = group.MakeCommunicator(processes);
  std::vector<int64_t> members(processes);
  std::iota(members.begin(), members.end(), 0);
  communicator->AllGather(group.rank(), members, &value, values.data(), sizeof(int64_t));
  return values;
}

void AgreeAcrossProcesses(const ProcessGroup& group, std::exception_ptr error,
                          std::string_view what) {
  const std::vector<int64_t> failed = AllGatherFromProcesses(group, error ? 1 : 0);
  if (error) std::rethrow_exception(error);
  std::vector<int> ranks;
  for (int r = 0; r < group.size(); ++r) {
    if (failed[r]) ranks.push_back(r);
  }
  if (!ranks.empty()) {
    Fail("[{}] process(es) {} of the job's {} failed (their errors say why)", what,
         fmt::join(ranks, ", "), group.size());
  }
}

}  // namespace strata::runtime
