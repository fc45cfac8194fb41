// `strata train` across hosts: network namespaces with addresses of their
// own on a bridge (testing::NetnsHosts), mpirun launching through a hostfile
// and an rsh agent, TCP between the processes, as between machines. A job
// gives the numbers one process gives, bit for bit, also over a slow and
// lossy link. A link cut mid-step, or a host whose processes are all killed,
// ends the job within 30 s with an error naming the lost host, leaves the
// newest complete checkpoint for the newest one, and the job resumed on the
// host that remains (fewer processes) ends as an uninterrupted run does. A
// process that never joins ends the job instead of holding it forever.
#include <gtest/gtest.h>

#include <fmt/core.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>

#include "mpi_job.h"
#include "netns_hosts.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using testing::NetnsHosts;

// 4 processes, 2 on each of 2 hosts, sharing the 4 devices of an FSDP mesh.
constexpr const char* kFsdp4 = "--mesh data=4 --sharding fsdp --eval-every 0 ";

// Whether `latest` names a checkpoint every part of which is there whole:
// the index lists each process's file and its size.
::testing::AssertionResult LatestIsComplete(const fs::path& checkpoints) {
  std::ifstream latest_file(checkpoints / "latest");
  std::string latest;
  if (!std::getline(latest_file, latest)) return ::testing::AssertionFailure() << "no 'latest'";
  const fs::path step = checkpoints / latest;
  if (latest.find(".tmp") != std::string::npos || !fs::exists(step / "shards.json")) {
    return ::testing::AssertionFailure() << "'latest' names " << latest << ", not complete";
  }
  auto index = nlohmann::json::parse(std::ifstream(step / "shards.json"));
  for (const auto& file : index["files"]) {
    const fs::path part = step / file["name"].get<std::string>();
    if (!fs::exists(part) || fs::file_size(part) != file["bytes"].get<uintmax_t>()) {
      return ::testing::AssertionFailure() << part << " is missing or torn";
    }
  }
  return ::testing::AssertionSuccess();
}

class Hosts : public testing::MpiJobTest {
 protected:
  // A 4-process job over 2 hosts; once it has written its first checkpoint
  // and run a random while longer, `fault` strikes host 1. The job must end
  // within 30 s naming host 1, keep its newest complete checkpoint, and
  // resume on host 0 alone (2 processes for the 4 devices) to end as the
  // uninterrupted run does.
  void FaultHostOneThenResumeOnHostZero(const std::function<bool(NetnsHosts&)>& fault,
                                        const std::string& env) {
    NetnsHosts hosts(2, 2, dir_);
    if (!hosts.made()) GTEST_SKIP() << hosts.why_not();
    const std::string args = std::string(kFsdp4) + "--steps 400 --checkpoint-every 20";
    ASSERT_EQ(Train("", "whole", args), 0) << Stderr("whole");

    std::random_device device;
    const unsigned seed = device();
    const int delay_ms = static_cast<int>(std::mt19937(seed)() % 1500);
    SCOPED_TRACE(::testing::Message() << "the fault came " << delay_ms
                                      << " ms after the first checkpoint (seed " << seed << ")");
    testing::Job job =
        testing::StartJob(dir_, "job", args, env,
                          hosts.Mpirun(STRATA_MPIEXEC, 4, 120) + " -x STRATA_PEER_TIMEOUT_MS", 4);
    ASSERT_FALSE(job.ranks.empty()) << "the job did not start: " << Stderr("job");
    const fs::path checkpoints = Path("job") / "checkpoints";
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!fs::exists(checkpoints / "latest") && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    ASSERT_TRUE(fault(hosts)) << hosts.why_not();
    auto [status, seconds] = testing::WaitForJob(job);
    ASSERT_GE(status, 0) << "the job did not end: " << Stderr("job");
    if (status == 0) GTEST_SKIP() << "the run ended before the fault reached it";
    RecordProperty("seconds_from_fault_to_end", std::to_string(seconds));
    EXPECT_LT(seconds, 30) << Stderr("job");
    const std::string err = Stderr("job");
    EXPECT_NE(err.find(hosts.Name(1)), std::string::npos) << err;
    ASSERT_TRUE(LatestIsComplete(checkpoints));

    ASSERT_EQ(Train(hosts.Mpirun(STRATA_MPIEXEC, 2, 120, {0}), "job", args + " --resume"), 0)
        << Stderr("job");
    EXPECT_NE(Read(Path("job.stdout")).find("over 2 processes"), std::string::npos);
    EXPECT_EQ(Losses("job", "step-0000400"), Losses("whole", "step-0000400"));
    EXPECT_TRUE(Weights("job", "step-0000400") == Weights("whole", "step-0000400"));
  }
};

TEST_F(Hosts, AJobAcrossHostsTrainsAsOneProcessDoes) {
  NetnsHosts hosts(2, 2, dir_);
  if (!hosts.made()) GTEST_SKIP() << hosts.why_not();
  struct Plan {
    const char* sharding;
    const char* mesh;
    int processes;
  };
  for (Plan p : {Plan{"fsdp", "data=2", 2}, Plan{"fsdp+tp", "data=2,model=2", 4}}) {
    SCOPED_TRACE(::testing::Message()
                 << p.sharding << " on " << p.mesh << ", " << p.processes << " processes");
    const std::string args =
        std::string("--steps 12 --mesh ") + p.mesh + " --sharding " + p.sharding;
    const std::string in_process = std::string(p.sharding) + "_threads";
    const std::string job = std::string(p.sharding) + "_hosts";
    ASSERT_EQ(Train("", in_process, args), 0) << Stderr(in_process);
    // One process per host, then two.
    ASSERT_EQ(
        Train(hosts.Mpirun(STRATA_MPIEXEC, p.processes) + (p.processes > 2 ? "" : " --map-by node"),
              job, args),
        0)
        << Stderr(job);
    EXPECT_EQ(Losses(job, "step-0000012"), Losses(in_process, "step-0000012"));
    const std::string weights = Weights(job, "step-0000012");
    EXPECT_FALSE(weights.empty());
    EXPECT_TRUE(weights == Weights(in_process, "step-0000012"));
    EXPECT_NE(
        Read(Path(job + ".stdout")).find("over " + std::to_string(p.processes) + " processes"),
        std::string::npos);
  }
}

TEST_F(Hosts, ASlowLossyLinkGivesTheSameNumbers) {
  // Host 1 sends at 20 Mbit/s and drops 3 % of its TCP segments: TCP
  // resends them, the job is slower, and every number is the same.
  NetnsHosts hosts(2, 1, dir_);
  if (!hosts.made()) GTEST_SKIP() << hosts.why_not();
  if (!hosts.SlowAndLossy(1, 20, 3)) GTEST_SKIP() << hosts.why_not();
  const std::string args = "--steps 30 --mesh data=2 --sharding fsdp";
  ASSERT_EQ(Train("", "whole", args), 0) << Stderr("whole");
  ASSERT_EQ(Train(hosts.Mpirun(STRATA_MPIEXEC, 2), "lossy", args), 0) << Stderr("lossy");
  EXPECT_EQ(Losses("lossy", "step-0000030"), Losses("whole", "step-0000030"));
  EXPECT_TRUE(Weights("lossy", "step-0000030") == Weights("whole", "step-0000030"));
}

TEST_F(Hosts, ACutLinkEndsTheJobNamingTheHostAndItResumesOnTheHostLeft) {
  // The collectives would wait 5 minutes; the processes' heartbeats (5 s
  // here) and the launcher's keepalives find the cut first.
  FaultHostOneThenResumeOnHostZero([](NetnsHosts& hosts) { return hosts.CutLink(1); },
                                   "STRATA_PEER_TIMEOUT_MS=5000");
}

TEST_F(Hosts, AHostWhoseProcessesAreKilledEndsTheJobAndItResumesOnTheHostLeft) {
  FaultHostOneThenResumeOnHostZero([](NetnsHosts& hosts) { return hosts.KillHost(1); },
                                   "STRATA_PEER_TIMEOUT_MS=5000");
}

TEST_F(Hosts, AProcessThatNeverJoinsEndsTheJobInsteadOfHoldingIt) {
  // Host 1 runs a process that never joins the job (it sleeps, as a process
  // stuck before MPI starts would): process 0 would wait in MPI_Init
  // forever; after the join timeout it ends with an error naming itself and
  // its host, and the launcher ends the job.
  NetnsHosts hosts(2, 1, dir_);
  if (!hosts.made()) GTEST_SKIP() << hosts.why_not();
  const std::string command =
      "STRATA_JOIN_TIMEOUT_MS=4000 " + hosts.Mpirun(STRATA_MPIEXEC, 1, 120) +
      " -x STRATA_JOIN_TIMEOUT_MS " + STRATA_BINARY + testing::kModel + "--steps 4 --out " +
      Path("never").string() + " : -np 1 sleep 600 > " + Path("never.stdout").string() + " 2> " +
      Path("never.stderr").string();
  const auto start = std::chrono::steady_clock::now();
  const int status = std::system(command.c_str());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(WEXITSTATUS(status), 0);
  EXPECT_NE(WEXITSTATUS(status), 124) << "the launcher's timeout ended it, not strata";
  EXPECT_LT(seconds, 30);
  const std::string err = Stderr("never");
  EXPECT_NE(err.find(fmt::format("process 0 (on host '{}') waited 4000 ms for the job's other "
                                 "processes to join",
                                 hosts.Name(0))),
            std::string::npos)
      << err;
  EXPECT_FALSE(fs::exists(Path("never") / "checkpoints" / "latest"));
}

}  // namespace
}  // namespace strata
