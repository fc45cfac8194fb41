// The processes of a job that run one SPMD program together (an MPI job):
// each owns a contiguous block of every mesh's devices, runs only those
// partitions, and reaches the others through a communicator. One process
// alone is the default and needs none of this.
#pragma once

#include <cstdint>
#include <exception>
#include <memory>
#include <string_view>
#include <vector>

#include "strata/runtime/communicator.h"

namespace strata::runtime {

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // A communicator over `participants` spread evenly over the processes:
  // this one owns [rank * participants / size, (rank + 1) * participants / size).
  virtual std::unique_ptr<Communicator> MakeCommunicator(int64_t participants) const = 0;
};

// Every process's `value`, in rank order, on every process: a collective
// (one participant per process) that all of the group's processes make, in
// the same order as their other collectives. How processes agree on a flag
// (stop, or whether each one's part of a checkpoint was written).
std::vector<int64_t> AllGatherFromProcesses(const ProcessGroup& group, int64_t value);

// Each process's outcome of a part of `what` that every process takes
// (`error`: what it threw, or null): a collective, after which every process
// throws when any failed: its own error where it failed, elsewhere an Error
// naming the processes that did.
void AgreeAcrossProcesses(const ProcessGroup& group, std::exception_ptr error,
                          std::string_view what);

}  // namespace strata::runtime
