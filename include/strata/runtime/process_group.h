// The processes of a job that run one SPMD program together (an MPI job):
// each owns a contiguous block of every mesh's devices, runs only those
// partitions, and reaches the others through a communicator. One process
// alone is the default and needs none of this.
#pragma once

#include <cstdint>
#include <memory>

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

}  // namespace strata::runtime
