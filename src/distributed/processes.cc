// The job's processes: MPI initialized once, when an MPI launcher started us.
#include <mpi.h>

#include <cstdio>
#include <cstdlib>

#include "mpi_internal.h"
#include "strata/core/config.h"
#include "strata/core/error.h"
#include "strata/distributed/mpi.h"

namespace strata::distributed {
namespace {

MPI_Comm strata_comm = MPI_COMM_NULL;

bool LaunchedByMpi() { return strata::LaunchedByMpi(); }

void FinalizeAtExit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

ProcessGroup Start() {
  ProcessGroup group;
  if (!LaunchedByMpi()) return group;
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
    if (provided < MPI_THREAD_MULTIPLE) {
      Fail(
          "[mpi] the MPI library gives thread level {}, strata needs MPI_THREAD_MULTIPLE ({}): "
          "each device's thread exchanges its own data",
          provided, MPI_THREAD_MULTIPLE);
    }
    std::atexit(FinalizeAtExit);
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &group.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &group.size);
  // The only blocking collective strata makes, once, while every process
  // starts; communicators made later block on nothing.
  MPI_Comm_dup(MPI_COMM_WORLD, &strata_comm);
  MPI_Comm_set_errhandler(strata_comm, MPI_ERRORS_RETURN);
  group.mpi = true;
  return group;
}

}  // namespace

#if defined(__SANITIZE_ADDRESS__)  // g++
#define STRATA_LEAK_CHECKED 1
#elif defined(__has_feature)  // clang (the fuzz build)
#if __has_feature(address_sanitizer)
#define STRATA_LEAK_CHECKED 1
#endif
#endif
#if defined(STRATA_LEAK_CHECKED)
// LeakSanitizer's hook: no leak check at exit in a process an MPI launcher
// started. Open MPI keeps allocations for the life of the process in
// components it unloads when finalizing, where no stack names them (the
// sanitizer builds cannot suppress them by library). The same code runs
// leak-checked in the one-process tests.
extern "C" int __lsan_is_turned_off() { return LaunchedByMpi() ? 1 : 0; }
#endif

const ProcessGroup& Processes() {
  static const ProcessGroup group = Start();
  return group;
}

MPI_Comm StrataComm() {
  Processes();
  return strata_comm;
}

LocalParticipants ParticipantsOf(int64_t participants, int rank, int processes) {
  if (processes < 1 || rank < 0 || rank >= processes) {
    Fail("[mpi] process {} of {} does not exist", rank, processes);
  }
  if (participants < 1 || participants % processes != 0) {
    Fail(
        "[mpi] {} device(s) do not split evenly over {} processes: give a device count that "
        "is a multiple of the number of processes",
        participants, processes);
  }
  const int64_t per = participants / processes;
  return {rank * per, per};
}

void EndJobOnError(int code) {
  const ProcessGroup& job = Processes();
  if (!job.mpi || job.size < 2) return;
  std::fflush(stdout);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, code);
}

namespace {
class MpiGroup final : public runtime::ProcessGroup {
 public:
  int rank() const override { return Processes().rank; }
  int size() const override { return Processes().size; }
  std::unique_ptr<runtime::Communicator> MakeCommunicator(int64_t participants) const override {
    return MakeMpiCommunicator(participants);
  }
};
}  // namespace

std::shared_ptr<const runtime::ProcessGroup> MpiProcessGroup() {
  static const auto group = std::make_shared<const MpiGroup>();
  return group;
}

}  // namespace strata::distributed
