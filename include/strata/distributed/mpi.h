// Many processes: the participants of an SPMD program (one per device)
// spread over the processes of an MPI job (`mpirun -np 2 ...`, `srun`), each
// process owning a contiguous block of them and running each on its own
// thread. Collectives between participants of one process go through shared
// memory; between processes, through MPI point-to-point messages. Every
// reduction folds the members' values in group order with
// runtime::ReduceInOrder, so results are the bits the in-process backend
// gives for the same mesh.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "strata/runtime/communicator.h"
#include "strata/runtime/process_group.h"

namespace strata::distributed {

// This process's place in the job. The first call initializes MPI
// (MPI_THREAD_MULTIPLE) when the process was started by an MPI launcher
// (Open MPI's or PMIx's rank variables are set); otherwise the job is this
// one process. MPI is finalized at exit.
struct ProcessGroup {
  int rank = 0;
  int size = 1;
  bool mpi = false;  // started by an MPI launcher
};
const ProcessGroup& Processes();

// The participants process `rank` owns when `participants` are split evenly
// over `processes`: [first, first + count). Error unless they divide.
struct LocalParticipants {
  int64_t first = 0, count = 0;
};
LocalParticipants ParticipantsOf(int64_t participants, int rank, int processes);

// A process of a job of several that fails: ends the whole job at once
// (MPI_Abort: the launcher stops the others), since the others would wait
// for it and finalizing MPI waits for them. Returns in a job of one process.
void EndJobOnError(int code);

// A communicator over `participants` spread over the job's processes (this
// process owns ParticipantsOf(participants, rank, size)). Local calls pass
// only this process's participants as `self`; run them with
// Executable::RunPartitions(first, ...). A member that waits longer
// than `timeout` (default DefaultCollectiveTimeout()) for the others throws
// an Error naming the processes it has not heard from. Members that disagree
// on a call (collective, group, sizes) get an Error naming both calls.
// Waiting polls and sleeps: it never spins a core.
std::unique_ptr<runtime::Communicator> MakeMpiCommunicator(
    int64_t participants, std::optional<std::chrono::milliseconds> timeout = std::nullopt);

// The job's processes as a runtime::ProcessGroup, for
// lazy::Context::set_process_group: sharded graphs then run each process's
// partitions only, and exchange data through MakeMpiCommunicator.
std::shared_ptr<const runtime::ProcessGroup> MpiProcessGroup();

}  // namespace strata::distributed
