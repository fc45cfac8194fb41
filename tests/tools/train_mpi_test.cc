// `strata train` as an MPI job (mpirun -np 2 and -np 4 on this machine):
// the same losses and the same weights, bit for bit, as one process running
// the same mesh's devices in-process, and within 1e-5 of one device; each
// process writes its own part of a checkpoint, exported as one Hugging Face
// directory; resumes with another number of processes; a stop asked of one
// process stops all after the same step; a process killed or hung stops the
// job within a bounded time, with an error naming it (and a stopped one
// within the peer timeout, long before the collectives'), and a job killed at a
// random moment resumes from its last complete checkpoint and loses nothing.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/core.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "mpi_job.h"

extern char** environ;
namespace fs = std::filesystem;

namespace strata {
namespace {

using TrainMpi = testing::MpiJobTest;
using testing::Job;
using testing::kModel;
using testing::kMpirun;
using testing::StartJob;
using testing::WaitForJob;

struct Plan {
  const char* sharding;
  const char* mesh;
  int processes;
};

TEST_F(TrainMpi, ProcessesTrainAsOneProcessRunningTheSameMeshDoes) {
  ASSERT_EQ(Train("", "one", "--steps 20"), 0) << Stderr("one");
  const std::vector<double> one_device = Losses("one", "step-0000020");
  ASSERT_EQ(one_device.size(), 20u);
  for (Plan p : {Plan{"dp", "data=2", 2}, Plan{"fsdp", "data=2", 2}, Plan{"tp", "model=2", 2},
                 Plan{"dp", "data=4", 4}, Plan{"fsdp", "data=4", 4},
                 Plan{"tp", "data=2,model=2", 4}, Plan{"fsdp+tp", "data=2,model=2", 4}}) {
    SCOPED_TRACE(::testing::Message()
                 << p.sharding << " on " << p.mesh << ", " << p.processes << " processes");
    const std::string args =
        std::string("--steps 20 --mesh ") + p.mesh + " --sharding " + p.sharding;
    const std::string in_process = std::string(p.sharding) + "_threads";
    const std::string mpi = std::string(p.sharding) + "_mpi" + std::to_string(p.processes);
    ASSERT_EQ(Train("", in_process, args), 0) << Stderr(in_process);
    ASSERT_EQ(Train(kMpirun + " -np " + std::to_string(p.processes), mpi, args), 0) << Stderr(mpi);
    const std::vector<double> threads = Losses(in_process, "step-0000020");
    const std::vector<double> processes = Losses(mpi, "step-0000020");
    EXPECT_EQ(processes, threads);  // bit for bit
    const std::string weights = Weights(mpi, "step-0000020");
    EXPECT_FALSE(weights.empty());
    EXPECT_TRUE(weights == Weights(in_process, "step-0000020"));
    // Each process wrote its part; the index, written last, names them all.
    const fs::path step = Path(mpi) / "checkpoints" / "step-0000020";
    auto index = nlohmann::json::parse(Read(step / "shards.json"));
    EXPECT_EQ(index["processes"], p.processes);
    ASSERT_EQ(index["files"].size(), static_cast<size_t>(p.processes));
    for (int r = 0; r < p.processes; ++r) {
      const fs::path file = step / index["files"][r]["name"].get<std::string>();
      EXPECT_EQ(fs::file_size(file), index["files"][r]["bytes"].get<uintmax_t>()) << file;
    }
    EXPECT_FALSE(fs::exists(step / "model.safetensors"));
    ASSERT_EQ(processes.size(), one_device.size());
    for (size_t i = 0; i < processes.size(); ++i) {
      EXPECT_NEAR(processes[i], one_device[i], 1e-5 * std::abs(one_device[i])) << "step " << i + 1;
    }
    // Only process 0 prints and writes.
    const std::string printed = Read(Path(mpi + ".stdout"));
    EXPECT_NE(printed.find("over " + std::to_string(p.processes) + " processes"), std::string::npos)
        << printed;
    size_t summaries = 0;
    for (size_t at = printed.find("summary:"); at != std::string::npos;
         at = printed.find("summary:", at + 1))
      ++summaries;
    EXPECT_EQ(summaries, 1u) << printed;
    EXPECT_FALSE(fs::exists(Path(mpi) / ".process-1"));
  }
}

TEST_F(TrainMpi, ResumesWithAnotherNumberOfProcesses) {
  const std::string args = "--steps 20 --mesh data=4 --sharding fsdp";
  ASSERT_EQ(Train("", "whole", args), 0) << Stderr("whole");
  auto launcher = [&](int processes) {
    return processes == 1 ? std::string() : kMpirun + " -np " + std::to_string(processes);
  };
  // 4 -> 2 and 2 -> 4 re-split each process's tiles; 4 -> 1 reads every
  // file into one process's in-process devices, 1 -> 2 splits a one-process
  // (Hugging Face) checkpoint.
  for (auto [before, after] :
       {std::pair{4, 2}, std::pair{2, 4}, std::pair{4, 1}, std::pair{1, 2}}) {
    SCOPED_TRACE(::testing::Message() << before << " processes, then " << after);
    const std::string out = "resumed" + std::to_string(before) + std::to_string(after);
    ASSERT_EQ(Train(launcher(before), out, args + " --checkpoint-every 10"), 0) << Stderr(out);
    // Back to step 10, as if the run had stopped there.
    fs::remove_all(Path(out) / "checkpoints" / "step-0000020");
    std::ofstream(Path(out) / "checkpoints" / "latest") << "step-0000010\n";
    ASSERT_EQ(Train(launcher(after), out, args + " --resume"), 0) << Stderr(out);
    EXPECT_NE(Read(Path(out + ".stdout")).find("resumed from step 10"), std::string::npos);
    EXPECT_EQ(Losses(out, "step-0000020"), Losses("whole", "step-0000020"));
    EXPECT_TRUE(Weights(out, "step-0000020") == Weights("whole", "step-0000020"));
  }
}

TEST_F(TrainMpi, ADamagedPartOfTheNewestCheckpointIsFoundAndFallenBackPastByEveryProcess) {
  // A flipped byte in process 1's part of step 20: only process 1 reads that
  // tile, yet both processes name the damage, and with --fall-back both
  // resume from step 10 and end as the uninterrupted run.
  const std::string args = "--steps 20 --mesh data=2 --sharding fsdp --checkpoint-every 10";
  ASSERT_EQ(Train("", "whole", args), 0) << Stderr("whole");
  ASSERT_EQ(Train(kMpirun + " -np 2", "job", args), 0) << Stderr("job");
  const fs::path part =
      Path("job") / "checkpoints" / "step-0000020" / "shards-00001-of-00002.safetensors";
  {
    std::fstream f(part, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-5, std::ios::end);
    f.put('\x7f');
  }
  EXPECT_NE(Train(kMpirun + " -np 2", "job", args + " --resume"), 0);
  const std::string err = Stderr("job");
  EXPECT_NE(err.find("step-0000020' is damaged"), std::string::npos) << err;
  EXPECT_NE(err.find("does not match its checksum"), std::string::npos) << err;
  EXPECT_NE(err.find("The newest intact one is '" +
                     (Path("job") / "checkpoints" / "step-0000010").string()),
            std::string::npos)
      << err;
  ASSERT_EQ(Train(kMpirun + " -np 2", "job", args + " --resume --fall-back"), 0) << Stderr("job");
  EXPECT_NE(Read(Path("job.stdout")).find("resumed from step 10"), std::string::npos);
  EXPECT_EQ(Losses("job", "step-0000020"), Losses("whole", "step-0000020"));
  EXPECT_TRUE(Weights("job", "step-0000020") == Weights("whole", "step-0000020"));
}

// Starts a long job of 2 processes, waits until both run, sends `signal` to
// process 1, and returns mpirun's exit status and the seconds it took to end.
std::pair<int, double> SignalProcessOne(const fs::path& dir, int signal, const std::string& env) {
  Job job = StartJob(dir, "job", "--steps 1000000", env);
  if (job.ranks.empty()) return {-2, 0};
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  kill(job.ranks[1], signal);
  auto result = WaitForJob(job);
  if (signal == SIGSTOP) kill(job.ranks[1], SIGKILL);
  return result;
}

TEST_F(TrainMpi, AStopAskedOfOneProcessStopsEveryProcessAfterTheSameStep) {
  // SIGUSR1 (what mpirun forwards as it is) to process 1 alone: both
  // processes finish the same step, write a complete checkpoint and stop;
  // resumed, the run ends as the uninterrupted one does, bit for bit. 300
  // steps take seconds; the stop comes 300 ms after the start.
  const std::string args =
      "--steps 300 --checkpoint-every 0 --eval-every 0 --mesh data=2 "
      "--sharding fsdp";
  ASSERT_EQ(Train("", "whole", args), 0) << Stderr("whole");
  Job job = StartJob(dir_, "stopped", args, "");
  ASSERT_FALSE(job.ranks.empty()) << "the job did not start";
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  kill(job.ranks[1], SIGUSR1);
  auto [status, seconds] = WaitForJob(job);
  ASSERT_EQ(status, 130) << Stderr("stopped");
  const std::string printed = Read(Path("stopped.stdout"));
  const size_t at = printed.find("interrupted after step ");
  ASSERT_NE(at, std::string::npos) << printed;
  const int64_t step = std::atoll(printed.c_str() + at + 23);
  ASSERT_GT(step, 0);
  ASSERT_LT(step, 300) << "the run ended before the stop reached it";
  const std::string name = fmt::format("step-{:07d}", step);
  EXPECT_EQ(Read(Path("stopped") / "checkpoints" / "latest"), name + "\n");
  EXPECT_EQ(Losses("stopped", name).size(), static_cast<size_t>(step));
  ASSERT_EQ(Train(kMpirun + " -np 2", "stopped", args + " --resume"), 0) << Stderr("stopped");
  EXPECT_EQ(Losses("stopped", "step-0000300"), Losses("whole", "step-0000300"));
  EXPECT_TRUE(Weights("stopped", "step-0000300") == Weights("whole", "step-0000300"));
}

TEST_F(TrainMpi, AJobKilledAtARandomMomentResumesFromItsLastCompleteCheckpoint) {
  // A checkpoint every step, and one process killed at a random moment: in
  // a step, in its own write, in process 0's commit. What resumes is the last
  // checkpoint every process finished, and the run then ends as the
  // uninterrupted one does, bit for bit: nothing is lost or torn.
  const std::string args =
      "--steps 400 --checkpoint-every 1 --eval-every 0 --mesh data=2 "
      "--sharding fsdp";
  ASSERT_EQ(Train("", "whole", args), 0) << Stderr("whole");
  std::random_device device;
  const unsigned seed = device();
  std::mt19937 rng(seed);
  const int victim = static_cast<int>(rng() % 2);
  const int delay_ms = static_cast<int>(rng() % 1500);
  SCOPED_TRACE(::testing::Message() << "process " << victim << " killed " << delay_ms
                                    << " ms after the steps began (seed " << seed << ")");
  Job job = StartJob(dir_, "killed", args, "");
  ASSERT_FALSE(job.ranks.empty()) << "the job did not start";
  std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
  kill(job.ranks[victim], SIGKILL);
  auto [status, seconds] = WaitForJob(job);
  ASSERT_GE(status, 0) << "the job did not end";
  if (status == 0) GTEST_SKIP() << "the run ended before the kill reached it";
  const bool resumable = fs::exists(Path("killed") / "checkpoints" / "latest");
  ASSERT_EQ(Train(kMpirun + " -np 2", "killed", args + (resumable ? " --resume" : "")), 0)
      << Stderr("killed");
  EXPECT_EQ(Losses("killed", "step-0000400"), Losses("whole", "step-0000400"));
  EXPECT_TRUE(Weights("killed", "step-0000400") == Weights("whole", "step-0000400"));
}

TEST_F(TrainMpi, ProcessesThatShareNoDirectoryGetAnErrorAndNoCheckpoint) {
  // Process 1 writes its part under another --out (as on machines without a
  // shared filesystem): process 0 cannot see it, so no checkpoint is made.
  const std::string common = std::string(STRATA_BINARY) + kModel + "--steps 4 --mesh data=2";
  const std::string command = kMpirun + " -np 1 " + common + " --out " + Path("a").string() +
                              " : -np 1 " + common + " --out " + Path("b").string() + " > " +
                              Path("ab.stdout").string() + " 2> " + Path("ab.stderr").string();
  EXPECT_NE(std::system(command.c_str()), 0);
  const std::string err = Read(Path("ab.stderr"));
  EXPECT_NE(err.find("is not in '" + (Path("a") / "checkpoints" / "step-0000004.tmp").string() +
                     "' as process 0 sees it"),
            std::string::npos)
      << err;
  EXPECT_FALSE(fs::exists(Path("a") / "checkpoints" / "latest"));
  EXPECT_FALSE(fs::exists(Path("a") / "checkpoints" / "step-0000004"));
  EXPECT_FALSE(fs::exists(Path("a") / "checkpoints" / "step-0000004.tmp"));
}

TEST_F(TrainMpi, AKilledProcessEndsTheJobNamingIt) {
  auto [status, seconds] = SignalProcessOne(dir_, SIGKILL, "");
  ASSERT_GE(status, 0) << "the job did not start or did not end (" << status << ")";
  EXPECT_NE(status, 0);
  EXPECT_LT(seconds, 30);
  const std::string err = Read(Path("job.stderr"));
  EXPECT_NE(err.find("rank 1"), std::string::npos) << err;
}

TEST_F(TrainMpi, AHungProcessIsATimeoutNamingIt) {
  // Process 1 stops (SIGSTOP): process 0's next collective waits 3 s, then
  // fails naming it, and the job ends.
  auto [status, seconds] = SignalProcessOne(dir_, SIGSTOP, "STRATA_COLLECTIVE_TIMEOUT_MS=3000");
  ASSERT_GE(status, 0) << "the job did not start or did not end (" << status << ")";
  EXPECT_NE(status, 0);
  EXPECT_LT(seconds, 30);
  const std::string err = Read(Path("job.stderr"));
  EXPECT_NE(err.find("timed out after 3000 ms waiting for process(es) 1"), std::string::npos)
      << err;
}

TEST_F(TrainMpi, AStoppedProcessIsLostWithinThePeerTimeoutAndNamedWithItsHost) {
  // Process 1 stops (SIGSTOP) while the collectives would wait 5 minutes:
  // its heartbeats stop too, and after 3 s of silence process 0's next or
  // waiting collective fails naming it and its host.
  auto [status, seconds] = SignalProcessOne(dir_, SIGSTOP, "STRATA_PEER_TIMEOUT_MS=3000");
  ASSERT_GE(status, 0) << "the job did not start or did not end (" << status << ")";
  EXPECT_NE(status, 0);
  EXPECT_LT(seconds, 30);
  const std::string err = Read(Path("job.stderr"));
  EXPECT_NE(err.find("lost process 1 (on host '"), std::string::npos) << err;
  EXPECT_NE(err.find("nothing heard from it for 3"), std::string::npos) << err;
}

}  // namespace
}  // namespace strata
