// `strata train` end to end, as separate processes: the run's outputs, the
// same losses bit for bit from the same seed, and a run killed after a
// checkpoint and resumed giving the losses of the run that never stopped.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

namespace fs = std::filesystem;

extern char** environ;

namespace strata {
namespace {

class TrainCommand : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("strata_train_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path Path(const std::string& name) const { return dir_ / name; }

  // Runs `strata train` with a tiny model; returns the exit status and
  // fills stdout / stderr.
  int Run(const std::string& args, std::string* out, std::string* err) const {
    std::string command = std::string(STRATA_BINARY) +
                          " train --corpus " STRATA_SOURCE_DIR
                          "/data/corpus.txt --hidden 16 --num-layers 2 --heads 2 --kv-heads 1 "
                          "--intermediate 32 --batch 2 --seq 8 --steps 6 --warmup 2 "
                          "--eval-every 3 --eval-batches 2 --checkpoint-every 3 --seed 5 " +
                          args + " > " + Path("stdout.txt").string() + " 2> " +
                          Path("stderr.txt").string();
    int status = std::system(command.c_str());
    *out = Read(Path("stdout.txt"));
    *err = Read(Path("stderr.txt"));
    return WEXITSTATUS(status);
  }

  static std::string Read(const fs::path& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  static nlohmann::json State(const fs::path& out, const std::string& step) {
    return nlohmann::json::parse(Read(out / "checkpoints" / step / "trainer_state.json"));
  }

  fs::path dir_;
};

TEST_F(TrainCommand, RunsEvaluatesCheckpointsSamplesAndSummarizes) {
  std::string out, err;
  ASSERT_EQ(Run("--out " + Path("a").string() + " --sample-tokens 20", &out, &err), 0) << err;
  for (const char* part :
       {"strata train: Llama, 2 layers (apply_layers)", "step 3: held-out loss", "--- greedy ---",
        "--- temperature 0.8 ---", "summary: 6 steps", "graphs:", "time: trace", "execute"}) {
    EXPECT_NE(out.find(part), std::string::npos) << part << "\n" << out;
  }
  std::string svg = Read(Path("a") / "loss.svg");
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_EQ(Read(Path("a") / "checkpoints" / "latest"), "step-0000006\n");
  EXPECT_TRUE(fs::exists(Path("a") / "checkpoints" / "step-0000003" / "model.safetensors"));
  nlohmann::json state = State(Path("a"), "step-0000006");
  EXPECT_EQ(state["step"], 6);
  EXPECT_EQ(state["history"].size(), 6u);
  EXPECT_EQ(state["evals"].size(), 2u);  // step 3, and the end
  // Every step's weights and moments were written over the old ones.
  size_t at = out.find("MiB per step donated");
  ASSERT_NE(at, std::string::npos) << out;
  size_t open = out.rfind('(', at);
  EXPECT_GT(std::stod(out.substr(open + 1)), 0.0) << out;
  // Sampling compiles one graph for all 40 positions.
  EXPECT_NE(out.find("(1 compiled while sampling 20 tokens twice)"), std::string::npos) << out;
}

TEST_F(TrainCommand, SameSeedSameLossesAcrossProcesses) {
  std::string out, err;
  ASSERT_EQ(Run("--quiet --sample-tokens 0 --out " + Path("a").string(), &out, &err), 0) << err;
  ASSERT_EQ(Run("--quiet --sample-tokens 0 --out " + Path("b").string(), &out, &err), 0) << err;
  EXPECT_TRUE(out.empty()) << out;  // --quiet
  nlohmann::json a = State(Path("a"), "step-0000006"), b = State(Path("b"), "step-0000006");
  for (size_t i = 0; i < 6; ++i) {
    // [step, loss, grad_norm, lr, seconds]: all but the time must agree exactly.
    for (size_t k = 0; k < 4; ++k) EXPECT_EQ(a["history"][i][k], b["history"][i][k]) << i;
  }
  EXPECT_EQ(a["evals"], b["evals"]);
  ASSERT_EQ(Run("--quiet --sample-tokens 0 --seed 6 --out " + Path("c").string(), &out, &err), 0);
  EXPECT_NE(State(Path("c"), "step-0000006")["history"][0][1], a["history"][0][1]);
}

TEST_F(TrainCommand, ResumeAfterAKillGivesTheUninterruptedLosses) {
  std::string out, err;
  ASSERT_EQ(Run("--quiet --sample-tokens 0 --out " + Path("whole").string(), &out, &err), 0) << err;
  // The run that died after its step-3 checkpoint: what it left on disk.
  fs::create_directories(Path("killed") / "checkpoints");
  fs::copy(Path("whole") / "checkpoints" / "step-0000003",
           Path("killed") / "checkpoints" / "step-0000003", fs::copy_options::recursive);
  std::ofstream(Path("killed") / "checkpoints" / "latest") << "step-0000003\n";
  ASSERT_EQ(Run("--sample-tokens 0 --resume --out " + Path("killed").string(), &out, &err), 0)
      << err;
  EXPECT_NE(out.find("resumed from step 3"), std::string::npos) << out;
  EXPECT_NE(out.find("summary: 3 steps"), std::string::npos) << out;
  nlohmann::json whole = State(Path("whole"), "step-0000006");
  nlohmann::json resumed = State(Path("killed"), "step-0000006");
  for (size_t i = 0; i < 6; ++i) {
    for (size_t k = 0; k < 4; ++k)
      EXPECT_EQ(whole["history"][i][k], resumed["history"][i][k]) << "step " << i + 1;
  }
  EXPECT_EQ(whole["evals"], resumed["evals"]);
  // The weights too.
  EXPECT_EQ(Read(Path("whole") / "checkpoints" / "step-0000006" / "model.safetensors"),
            Read(Path("killed") / "checkpoints" / "step-0000006" / "model.safetensors"));
}

TEST_F(TrainCommand, CtrlCCheckpointsAndResumeFinishes) {
  // A long run interrupted by SIGINT finishes its step, writes a checkpoint
  // and exits 130; --resume continues from there.
  const std::string out_dir = Path("run").string(), log = Path("log.txt").string();
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    execl(STRATA_BINARY, STRATA_BINARY, "train", "--corpus", STRATA_SOURCE_DIR "/data/corpus.txt",
          "--hidden", "16", "--num-layers", "1", "--heads", "2", "--kv-heads", "1", "--batch", "2",
          "--seq", "8", "--steps", "1000000", "--eval-every", "0", "--checkpoint-every", "0",
          "--sample-tokens", "0", "--out", out_dir.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  // Wait until it is training (its header is printed before the first step).
  for (int i = 0; i < 600 && Read(log).find("AdamW lr") == std::string::npos; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  kill(pid, SIGINT);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << Read(log);
  EXPECT_EQ(WEXITSTATUS(status), 130) << Read(log);
  std::string text = Read(log);
  size_t at = text.find("interrupted after step ");
  ASSERT_NE(at, std::string::npos) << text;
  const int64_t step = std::stoll(text.substr(at + 23));
  EXPECT_GT(step, 0);
  nlohmann::json state = nlohmann::json::parse(
      Read(Path("run") / "checkpoints" /
           Read(Path("run") / "checkpoints" / "latest").substr(0, 12) / "trainer_state.json"));
  EXPECT_EQ(state["step"], step);
  // Resume with the same options for two more steps.
  std::string resume_out, err;
  std::string command = std::string(STRATA_BINARY) +
                        " train --corpus " STRATA_SOURCE_DIR
                        "/data/corpus.txt --hidden 16 --num-layers 1 --heads 2 --kv-heads 1 "
                        "--batch 2 --seq 8 --eval-every 0 --checkpoint-every 0 --sample-tokens 0 "
                        "--resume --out " +
                        out_dir + " --steps " + std::to_string(step + 2) + " > " +
                        Path("resume.txt").string() + " 2>&1";
  ASSERT_EQ(WEXITSTATUS(std::system(command.c_str())), 0) << Read(Path("resume.txt"));
  EXPECT_NE(Read(Path("resume.txt")).find("summary: 2 steps"), std::string::npos)
      << Read(Path("resume.txt"));
}

TEST_F(TrainCommand, BadInputIsAnErrorThatSaysWhat) {
  std::string out, err;
  EXPECT_EQ(Run("--resume --out " + Path("none").string(), &out, &err), 1);
  EXPECT_NE(err.find("no checkpoint"), std::string::npos) << err;
  EXPECT_EQ(Run("--seq 1 --out " + Path("x").string(), &out, &err), 1);
  EXPECT_NE(err.find("--seq must be at least 2"), std::string::npos) << err;
  EXPECT_EQ(Run("--heads 3 --out " + Path("x").string(), &out, &err), 1);
  EXPECT_NE(err.find("--heads must divide --hidden"), std::string::npos) << err;
  std::ofstream(Path("tiny.txt")) << "too short";
  EXPECT_EQ(
      Run("--corpus " + Path("tiny.txt").string() + " --out " + Path("x").string(), &out, &err), 1);
  EXPECT_NE(err.find("has 9 bytes"), std::string::npos) << err;
}

// Numbers no run can use are refused while the command line is read: an
// integer beyond 64 bits once saturated (99999999999999999999999 steps ran
// forever), a negative seed wrapped, --devices 0 was taken as "not given".
TEST_F(TrainCommand, IntegersOutOfRangeAreRefusedBeforeAnyWork) {
  std::string out, err;
  const std::string rest = " --out " + Path("x").string();
  for (const char* bad :
       {"--steps 99999999999999999999999", "--steps 1e3", "--batch 100000000000", "--seed -1",
        "--devices 0", "--devices -1", "--hidden 2x", "--eval-every -5"}) {
    EXPECT_NE(Run(std::string(bad) + rest, &out, &err), 0) << bad;
    EXPECT_NE(err.find("must be an integer in ["), std::string::npos) << bad << ": " << err;
    EXPECT_EQ(out.find("step "), std::string::npos) << bad << ": " << out;
  }
  EXPECT_FALSE(std::filesystem::exists(Path("x"))) << "a refused run made its --out";
}

// Tensor parallelism keeps whole heads on each device.
TEST_F(TrainCommand, TensorParallelismOverMoreDevicesThanHeadsIsRefused) {
  std::string out, err;
  EXPECT_EQ(Run("--sharding tp --mesh model=4 --heads 2 --kv-heads 2 --hidden 64 --out " +
                    Path("x").string(),
                &out, &err),
            1);
  EXPECT_NE(err.find("--heads (2) and --kv-heads (2) must both be multiples of its size 4"),
            std::string::npos)
      << err;
}

// An --out that cannot hold the run is refused before the first step, not
// at the first checkpoint with the steps before it lost.
TEST_F(TrainCommand, AnUnwritableOutIsRefusedBeforeTheFirstStep) {
  std::string out, err;
  std::ofstream(Path("file")) << "not a directory";
  EXPECT_EQ(Run("--out " + Path("file").string(), &out, &err), 1);
  EXPECT_NE(err.find("is a file, not a directory"), std::string::npos) << err;
  EXPECT_EQ(out.find("step "), std::string::npos) << out;
  EXPECT_EQ(Run("--out " + (Path("file") / "below").string(), &out, &err), 1);
  EXPECT_NE(err.find("is a file, not a directory"), std::string::npos) << err;
}

// `strata export --out` names the directory it cannot make and why, as a
// strata error (exit 1), not the standard library's "filesystem error".
TEST_F(TrainCommand, ExportToADirectoryThatCannotBeMadeNamesIt) {
  std::ofstream(Path("file")) << "not a directory";
  std::filesystem::create_directories(Path("ckpt"));  // whole as far as its files go
  std::ofstream(Path("ckpt") / "trainer_state.json") << "{}";
  std::ofstream(Path("ckpt") / "model.safetensors") << "";
  for (const std::string& bad :
       {(Path("file") / "below").string(), std::string("/proc/strata-no-such/out")}) {
    const std::string command = std::string(STRATA_BINARY) + " export " + Path("ckpt").string() +
                                " --out " + bad + " 2> " + Path("export.stderr").string();
    EXPECT_EQ(WEXITSTATUS(std::system(command.c_str())), 1) << bad;
    const std::string err = Read(Path("export.stderr"));
    EXPECT_NE(err.find("strata: error: [export] --out: cannot make '" + bad + "'"),
              std::string::npos)
        << err;
    EXPECT_EQ(err.find("unexpected"), std::string::npos) << err;
  }
}

TEST_F(TrainCommand, VersionSaysWhichStrata) {
  const std::string command =
      std::string(STRATA_BINARY) + " --version > " + Path("version.txt").string();
  ASSERT_EQ(WEXITSTATUS(std::system(command.c_str())), 0);
  EXPECT_EQ(Read(Path("version.txt")).rfind("strata 0.", 0), 0u) << Read(Path("version.txt"));
}

// --dtype bf16 says so, trains (the loss falls) and writes an f32 checkpoint
// whose options name the dtype; a dtype the trainer does not have is refused
// by the command line, naming the choices.
TEST_F(TrainCommand, MixedPrecisionRunsAndAnUnknownDtypeIsRefused) {
  std::string out, err;
  ASSERT_EQ(Run("--dtype bf16 --sample-tokens 0 --out " + Path("bf16").string(), &out, &err), 0)
      << err;
  EXPECT_NE(out.find("mixed precision: bf16"), std::string::npos) << out;
  const size_t arrow = out.find(" -> ");
  ASSERT_NE(arrow, std::string::npos) << out;
  const double first = std::stod(out.substr(out.rfind("loss ", arrow) + 5));
  const double last = std::stod(out.substr(arrow + 4));
  EXPECT_LT(last, first) << out;
  std::ifstream state(Path("bf16") / "checkpoints" / "latest");
  std::string latest;
  std::getline(state, latest);
  std::ifstream options(Path("bf16") / "checkpoints" / latest / "trainer_state.json");
  const std::string text((std::istreambuf_iterator<char>(options)),
                         std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("\"dtype\": \"bf16\""), std::string::npos) << text;
  EXPECT_NE(Run("--dtype f16 --out " + Path("x").string(), &out, &err), 0);
  EXPECT_NE(err.find("--dtype"), std::string::npos) << err;
  EXPECT_NE(err.find("bf16"), std::string::npos) << err;
}

TEST_F(TrainCommand, AFullDiskWhileCheckpointingIsAClearErrorAndKeepsThePreviousCheckpoint) {
  // Issue 14: RLIMIT_FSIZE killed the trainer with SIGXFSZ and no message,
  // and a failed save left a partial step-N.tmp behind.
  std::string out, err;
  ASSERT_EQ(Run("--out " + Path("a").string() + " --steps 3 --sample-tokens 0", &out, &err), 0)
      << err;
  const fs::path checkpoints = Path("a") / "checkpoints";
  ASSERT_TRUE(fs::exists(checkpoints / "step-0000003" / "trainer_state.json"));
  // 20 KiB files at most: the next checkpoint's weights do not fit.
  std::string command = "ulimit -f 20; " + std::string(STRATA_BINARY) +
                        " train --corpus " STRATA_SOURCE_DIR
                        "/data/corpus.txt --hidden 16 --num-layers 2 --heads 2 --kv-heads 1 "
                        "--intermediate 32 --batch 2 --seq 8 --steps 6 --warmup 2 "
                        "--eval-every 3 --eval-batches 2 --checkpoint-every 3 --seed 5 "
                        "--sample-tokens 0 --resume --out " +
                        Path("a").string() + " > " + Path("stdout.txt").string() + " 2> " +
                        Path("stderr.txt").string();
  int status = std::system(("bash -c '" + command + "'").c_str());
  err = Read(Path("stderr.txt"));
  EXPECT_TRUE(WIFEXITED(status)) << "killed by a signal: " << err;
  EXPECT_NE(WEXITSTATUS(status), 0);
  EXPECT_NE(err.find("File too large"), std::string::npos) << err;
  EXPECT_NE(err.find("step-0000006"), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(checkpoints / "step-0000006.tmp"));
  EXPECT_FALSE(fs::exists(checkpoints / "step-0000006"));
  EXPECT_EQ(Read(checkpoints / "latest"), "step-0000003\n");
  // The previous checkpoint still resumes and finishes the run.
  ASSERT_EQ(Run("--out " + Path("a").string() + " --resume --sample-tokens 0", &out, &err), 0)
      << err;
  EXPECT_EQ(Read(checkpoints / "latest"), "step-0000006\n");
}

TEST_F(TrainCommand, ADamagedLatestCheckpointIsAnErrorAndFallBackResumesFromTheIntactOne) {
  // Checkpoints at steps 3 and 6; the moments of step 6 are cut short.
  std::string out, err;
  ASSERT_EQ(Run("--out " + Path("a").string() + " --sample-tokens 0", &out, &err), 0) << err;
  const fs::path moments = Path("a") / "checkpoints" / "step-0000006" / "optimizer.safetensors";
  fs::resize_file(moments, fs::file_size(moments) / 2);
  const std::string resume = "--out " + Path("a").string() + " --sample-tokens 0 --resume";
  EXPECT_EQ(Run(resume, &out, &err), 1);
  EXPECT_NE(err.find("the newest checkpoint '" +
                     (Path("a") / "checkpoints" / "step-0000006").string() + "' is damaged"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("step-0000003"), std::string::npos) << err;
  ASSERT_EQ(Run(resume + " --fall-back", &out, &err), 0) << err;
  EXPECT_NE(out.find("resumed from step 3"), std::string::npos) << out;
  EXPECT_NE(err.find("warning: the newest checkpoint"), std::string::npos) << err;
  EXPECT_EQ(Run("--out " + Path("b").string() + " --fall-back", &out, &err), 1);
  EXPECT_NE(err.find("--fall-back goes with --resume"), std::string::npos) << err;
}

TEST_F(TrainCommand, KilledAtRandomMomentsItAlwaysResumesToTheUninterruptedRun) {
  // A checkpoint every step, and SIGKILL at 5 random moments (in a step, in
  // a checkpoint's writes, between its renames): --resume always finds the
  // newest complete checkpoint, and the run ends as the one never killed,
  // bit for bit.
  const std::string model = std::string(STRATA_BINARY) +
                            " train --corpus " STRATA_SOURCE_DIR
                            "/data/corpus.txt --hidden 16 --num-layers 2 --heads 2 --kv-heads 1 "
                            "--intermediate 32 --batch 2 --seq 8 --steps 300 --warmup 2 "
                            "--eval-every 100 --eval-batches 2 --checkpoint-every 1 --seed 5 "
                            "--sample-tokens 0 --quiet --out ";
  // Each step's loss, gradient norm and rate, and the evaluations (not the
  // wall times the state also records).
  auto final_state = [&](const std::string& out) {
    nlohmann::json state = State(Path(out), "step-0000300");
    for (auto& row : state["history"]) row.erase(4);
    return nlohmann::json{state["history"], state["evals"]}.dump();
  };
  ASSERT_EQ(WEXITSTATUS(std::system((model + Path("whole").string()).c_str())), 0);
  const std::string whole = final_state("whole");
  const std::string weights =
      Read(Path("whole") / "checkpoints" / "step-0000300" / "model.safetensors");
  std::random_device device;
  const unsigned seed = device();
  std::mt19937 rng(seed);
  for (int trial = 0; trial < 5; ++trial) {
    const int delay_ms = 100 + static_cast<int>(rng() % 1500);
    SCOPED_TRACE(::testing::Message() << "trial " << trial << ": killed after " << delay_ms
                                      << " ms (seed " << seed << ")");
    const std::string out = "killed" + std::to_string(trial);
    const std::string command = "exec " + model + Path(out).string() + " 2> /dev/null";
    pid_t pid = 0;
    const char* argv[] = {"/bin/sh", "-c", command.c_str(), nullptr};
    ASSERT_EQ(posix_spawn(&pid, "/bin/sh", nullptr, nullptr, const_cast<char**>(argv), environ), 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFSIGNALED(status)) continue;  // it finished first: nothing to resume
    const bool resumable = fs::exists(Path(out) / "checkpoints" / "latest");
    ASSERT_EQ(WEXITSTATUS(std::system(
                  (model + Path(out).string() + (resumable ? " --resume" : "")).c_str())),
              0);
    EXPECT_TRUE(final_state(out) == whole);
    EXPECT_TRUE(Read(Path(out) / "checkpoints" / "step-0000300" / "model.safetensors") == weights);
  }
}

}  // namespace
}  // namespace strata
