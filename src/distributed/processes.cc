// The job's processes: MPI initialized once, when an MPI launcher started us.
#include <mpi.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "mpi_internal.h"
#include "strata/core/config.h"
#include "strata/core/error.h"
#include "strata/distributed/mpi.h"

namespace strata::distributed {
namespace {

MPI_Comm strata_comm = MPI_COMM_NULL;
MPI_Comm liveness_comm = MPI_COMM_NULL;
std::vector<std::string> hosts = {"this host"};

bool LaunchedByMpi() { return strata::LaunchedByMpi(); }

void FinalizeAtExit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  StopLiveness();
  MPI_Finalize();
}

std::string ThisHost() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "unknown";
  return name;
}

// While MPI_Init waits for the job's other processes: a process that never
// starts, or hangs before it joins, would hold every other one there forever
// (MPI_Init has no timeout, and the launcher sees nothing wrong). After
// `timeout` this process ends with an error instead, and the launcher ends
// the job. Which process is missing, MPI does not say until it is up.
class JoinWatch {
 public:
  explicit JoinWatch(std::chrono::milliseconds timeout) {
    if (timeout.count() <= 0) return;
    thread_ = std::thread([this, timeout] {
      std::unique_lock<std::mutex> lock(mutex_);
      if (wake_.wait_for(lock, timeout, [&] { return joined_; })) return;
      const std::string rank = GetConfig().launcher_rank;
      std::fprintf(stderr,
                   "strata: error: [mpi] process %s (on host '%s') waited %lld ms for the job's "
                   "other processes to join (MPI_Init did not return): one of them never "
                   "started, hangs before joining, or cannot reach this host; raise "
                   "STRATA_JOIN_TIMEOUT_MS if the job only starts slowly\n",
                   rank.empty() ? "?" : rank.c_str(), ThisHost().c_str(),
                   static_cast<long long>(timeout.count()));
      std::fflush(stderr);
      std::_Exit(1);
    });
  }
  ~JoinWatch() {
    if (!thread_.joinable()) return;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      joined_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }

 private:
  std::mutex mutex_;
  std::condition_variable wake_;
  bool joined_ = false;
  std::thread thread_;
};

// Every process's host name, by rank.
std::vector<std::string> GatherHosts(int size) {
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  MPI_Get_processor_name(name, &length);
  std::vector<char> all(static_cast<size_t>(size) * MPI_MAX_PROCESSOR_NAME);
  MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(), MPI_MAX_PROCESSOR_NAME,
                MPI_CHAR, strata_comm);
  std::vector<std::string> names;
  for (int r = 0; r < size; ++r) {
    const char* at = all.data() + static_cast<size_t>(r) * MPI_MAX_PROCESSOR_NAME;
    names.emplace_back(at, strnlen(at, MPI_MAX_PROCESSOR_NAME));
  }
  return names;
}

ProcessGroup Start() {
  ProcessGroup group;
  if (!LaunchedByMpi()) return group;
  const Config config = GetConfig();
  JoinWatch watch(config.join_timeout);
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
  // The only blocking collectives strata makes, once, while every process
  // starts (under the join watch); communicators made later block on nothing.
  MPI_Comm_dup(MPI_COMM_WORLD, &strata_comm);
  MPI_Comm_set_errhandler(strata_comm, MPI_ERRORS_RETURN);
  MPI_Comm_dup(MPI_COMM_WORLD, &liveness_comm);
  MPI_Comm_set_errhandler(liveness_comm, MPI_ERRORS_RETURN);
  hosts = GatherHosts(group.size);
  StartLiveness(liveness_comm, group.rank, hosts, config.peer_timeout);
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

const std::vector<std::string>& Hosts() {
  Processes();
  return hosts;
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
