// What the MPI job tests share: `strata train` on a small model started by
// a launcher into a directory of the test's own, its checkpoints' losses and
// weights read back, and jobs run in the background to be signalled.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

extern char** environ;

namespace strata::testing {

namespace fs = std::filesystem;

inline constexpr const char* kModel =
    " train --corpus " STRATA_SOURCE_DIR
    "/data/corpus.txt --hidden 32 --num-layers 2 --heads 4 --kv-heads 2 --intermediate 64 "
    "--batch 4 --seq 8 --warmup 4 --eval-every 10 --eval-batches 2 --seed 11 --sample-tokens 0 ";

// mpirun as CI runs it: as root, more processes than cores, shared memory.
inline const std::string kMpirun = std::string(
                                       "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
                                       "OMPI_MCA_btl=self,vader ") +
                                   STRATA_MPIEXEC + " --oversubscribe --bind-to none";

class MpiJobTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("strata_train_mpi_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path Path(const std::string& name) const { return dir_ / name; }

  static std::string Read(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  // Runs `launcher strata train <model> args` into out; returns the exit status.
  int Train(const std::string& launcher, const std::string& out, const std::string& args) {
    std::string command = launcher + (launcher.empty() ? "" : " ") + STRATA_BINARY + kModel +
                          "--out " + Path(out).string() + " " + args + " > " +
                          Path(out + ".stdout").string() + " 2> " + Path(out + ".stderr").string();
    int status = std::system(command.c_str());
    return WEXITSTATUS(status);
  }
  std::string Stderr(const std::string& out) { return Read(Path(out + ".stderr")); }

  std::vector<double> Losses(const std::string& out, const std::string& step) {
    auto state =
        nlohmann::json::parse(Read(Path(out) / "checkpoints" / step / "trainer_state.json"));
    std::vector<double> losses;
    for (const auto& row : state["history"]) losses.push_back(row[1].get<double>());
    return losses;
  }
  // The weights of a checkpoint as a Hugging Face directory holds them: an
  // MPI job's tiles exported by `strata export` into one file.
  std::string Weights(const std::string& out, const std::string& step) {
    const fs::path dir = Path(out) / "checkpoints" / step;
    if (fs::exists(dir / "model.safetensors")) return Read(dir / "model.safetensors");
    const fs::path exported = Path(out + "_" + step + "_hf");
    const std::string command = std::string(STRATA_BINARY) + " export " + dir.string() + " --out " +
                                exported.string() + " 2> " + Path(out + ".export.stderr").string();
    if (std::system(command.c_str()) != 0) {
      ADD_FAILURE() << "strata export " << dir << ": " << Read(Path(out + ".export.stderr"));
      return "";
    }
    return Read(exported / "model.safetensors");
  }

  fs::path dir_;
};

// A /proc file's bytes, or "" when its process ended while it was read
// (the read then fails with ESRCH, which the stream reports by throwing).
inline std::string ReadProcFile(const fs::path& path) {
  try {
    std::ifstream in(path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), {});
  } catch (const std::exception&) {
    return "";
  }
}

// The job's processes, by rank: those whose command line holds `marker`
// (the run's output directory) and whose environment has an MPI rank.
inline std::vector<pid_t> Ranks(const std::string& marker, int processes) {
  std::vector<pid_t> ranks(processes, -1);
  std::error_code error;
  for (const auto& entry : fs::directory_iterator("/proc", error)) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string args = ReadProcFile(entry.path() / "cmdline");
    if (args.find(marker) == std::string::npos) continue;
    const std::string text = ReadProcFile(entry.path() / "environ");
    const std::string key = std::string("OMPI_COMM_WORLD_RANK=");
    size_t at = text.find(key);
    if (at == std::string::npos) continue;
    int rank = std::atoi(text.c_str() + at + key.size());
    if (rank >= 0 && rank < processes) ranks[rank] = std::stoi(name);
  }
  return ranks;
}

// A job started in the background by a shell.
struct Job {
  pid_t shell = 0;
  std::vector<pid_t> ranks;  // by rank; empty when they never ran
};

// Starts `env launcher strata train <model> args --out dir/name` (by default
// `mpirun -np 2` on this host) and waits until its `processes` run steps
// (the progress bar has begun).
inline Job StartJob(const fs::path& dir, const std::string& name, const std::string& args,
                    const std::string& env, const std::string& launcher = kMpirun + " -np 2",
                    int processes = 2) {
  const fs::path out = dir / name;
  const std::string command = env + " " + launcher + " " + STRATA_BINARY + kModel + args +
                              " --out " + out.string() + " > " + out.string() + ".stdout 2> " +
                              out.string() + ".stderr";
  Job job;
  const char* argv[] = {"/bin/sh", "-c", command.c_str(), nullptr};
  if (posix_spawn(&job.shell, "/bin/sh", nullptr, nullptr, const_cast<char**>(argv), environ) != 0)
    return job;
  const fs::path stdout_file = out.string() + ".stdout";
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < give_up) {
    std::vector<pid_t> found = Ranks(out.string(), processes);
    if (std::all_of(found.begin(), found.end(), [](pid_t p) { return p > 0; })) job.ranks = found;
    if (!job.ranks.empty() && fs::exists(stdout_file) && fs::file_size(stdout_file) > 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (job.ranks.empty()) {
    kill(job.shell, SIGKILL);
    waitpid(job.shell, nullptr, 0);
  }
  return job;
}

// Waits at most 120 s for the job to end: mpirun's exit status (-3 if it did
// not end and was killed) and the seconds it took.
inline std::pair<int, double> WaitForJob(const Job& job) {
  const auto start = std::chrono::steady_clock::now();
  int status = 0;
  const auto deadline = start + std::chrono::seconds(120);
  while (waitpid(job.shell, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      for (pid_t rank : job.ranks) kill(rank, SIGKILL);
      waitpid(job.shell, &status, 0);
      return {-3, 120};
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return {WEXITSTATUS(status), seconds};
}

}  // namespace strata::testing
