// The MPI communicator, run as one job of 1, 2 and 4 processes (CTest
// starts it under mpirun). Every collective, over groups inside a process,
// across processes and in scrambled orders, with 1 and 2 participants per
// process, gives the bits the in-process communicator gives for the same
// participants (each process runs that reference for every participant
// itself: the inputs come from seeds); so does a partitioned program. A
// process that never joins a call makes the others time out naming it.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstring>
#include <functional>
#include <random>
#include <thread>

#include "strata/compiler/compile.h"
#include "strata/core/error.h"
#include "strata/distributed/mpi.h"
#include "strata/hlo/text.h"
#include "strata/runtime/sharded_buffer.h"
#include "strata/spmd/partitioner.h"

namespace strata::distributed {
namespace {

using runtime::Collective;
using runtime::Communicator;
using runtime::ReduceKind;
using Bytes = std::vector<uint8_t>;

// One collective every participant calls, with inputs made from seeds.
struct Step {
  Collective collective;
  std::vector<std::vector<int64_t>> groups;  // every participant is in one (permute: unused)
  DType dtype = DType::kF32;
  ReduceKind reduce = ReduceKind::kSum;
  int64_t count = 0;  // elements (all-reduce, reduce-scatter per member) or bytes
  std::vector<std::pair<int64_t, int64_t>> pairs = {};
};

const std::vector<int64_t>& GroupOf(const Step& s, int64_t p) {
  for (const auto& g : s.groups) {
    if (std::find(g.begin(), g.end(), p) != g.end()) return g;
  }
  ADD_FAILURE() << "participant " << p << " in no group";
  return s.groups.at(0);
}

int64_t InputBytes(const Step& s, int64_t group_size) {
  switch (s.collective) {
    case Collective::kAllReduce:
      return s.count * DTypeSize(s.dtype);
    case Collective::kReduceScatter:
      return s.count * group_size * DTypeSize(s.dtype);
    case Collective::kAllGather:
    case Collective::kCollectivePermute:
      return s.count;
    case Collective::kAllToAll:
      return s.count * group_size;
    case Collective::kBarrier:
      return 0;
  }
  return 0;
}
int64_t OutputBytes(const Step& s, int64_t group_size) {
  switch (s.collective) {
    case Collective::kAllReduce:
      return s.count * DTypeSize(s.dtype);
    case Collective::kReduceScatter:
      return s.count * DTypeSize(s.dtype);
    case Collective::kAllGather:
      return s.count * group_size;
    case Collective::kCollectivePermute:
      return s.count;
    case Collective::kAllToAll:
      return s.count * group_size;
    case Collective::kBarrier:
      return 0;
  }
  return 0;
}

// Random bytes for participant p's input of step i; floats are finite and
// of mixed magnitudes, so the summation order shows in the bits.
Bytes InputOf(const Step& s, int64_t step, int64_t p, int64_t bytes) {
  std::mt19937 rng(static_cast<uint32_t>(1000 * step + p + 7));
  Bytes b(bytes);
  if (s.dtype == DType::kF32 && s.collective != Collective::kAllGather &&
      s.collective != Collective::kAllToAll && s.collective != Collective::kCollectivePermute) {
    std::uniform_real_distribution<float> u(-1, 1);
    std::uniform_int_distribution<int> e(-20, 20);
    for (int64_t i = 0; i + 4 <= bytes; i += 4) {
      float x = std::ldexp(u(rng), e(rng));
      std::memcpy(&b[i], &x, 4);
    }
  } else if (s.dtype == DType::kBF16) {
    for (int64_t i = 0; i + 2 <= bytes; i += 2) {
      uint16_t v = static_cast<uint16_t>(0x3c00 + rng() % 0x0800);  // finite, around 1e-2..1e2
      if (rng() & 1) v |= 0x8000;
      std::memcpy(&b[i], &v, 2);
    }
  } else {
    for (auto& x : b) x = static_cast<uint8_t>(rng());
  }
  return b;
}

void Call(Communicator& c, const Step& s, int64_t p, const Bytes& in, Bytes& out) {
  switch (s.collective) {
    case Collective::kAllReduce:
      c.AllReduce(p, GroupOf(s, p), s.dtype, s.reduce, in.data(), out.data(), s.count);
      return;
    case Collective::kAllGather:
      c.AllGather(p, GroupOf(s, p), in.data(), out.data(), s.count);
      return;
    case Collective::kReduceScatter:
      c.ReduceScatter(p, GroupOf(s, p), s.dtype, s.reduce, in.data(), out.data(), s.count);
      return;
    case Collective::kAllToAll:
      c.AllToAll(p, GroupOf(s, p), in.data(), out.data(), s.count);
      return;
    case Collective::kCollectivePermute:
      c.CollectivePermute(p, s.pairs, in.data(), out.data(), s.count);
      return;
    case Collective::kBarrier:
      c.Barrier(p, GroupOf(s, p));
      return;
  }
}

// Every step on participants [first, first + count) of `c`, one thread
// each; returns outputs[participant - first][step].
std::vector<std::vector<Bytes>> RunScript(Communicator& c, const std::vector<Step>& script,
                                          int64_t first, int64_t count) {
  std::vector<std::vector<Bytes>> outputs(count, std::vector<Bytes>(script.size()));
  std::vector<std::string> errors(count);
  std::vector<std::thread> threads;
  for (int64_t k = 0; k < count; ++k) {
    threads.emplace_back([&, k] {
      const int64_t p = first + k;
      try {
        for (size_t i = 0; i < script.size(); ++i) {
          const Step& s = script[i];
          const int64_t n = s.collective == Collective::kCollectivePermute
                                ? c.size()
                                : static_cast<int64_t>(GroupOf(s, p).size());
          Bytes in = InputOf(s, static_cast<int64_t>(i), p, InputBytes(s, n));
          Bytes& out = outputs[k][i];
          out.assign(OutputBytes(s, n), 0xAB);
          if (s.collective == Collective::kAllReduce && i % 2 == 1) {  // in place, sometimes
            out = in;
            Call(c, s, p, out, out);
          } else {
            Call(c, s, p, in, out);
          }
        }
      } catch (const std::exception& e) {
        errors[k] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int64_t k = 0; k < count; ++k) EXPECT_EQ(errors[k], "") << "participant " << first + k;
  return outputs;
}

// Groups of participants 0..n-1 (n a multiple of the process count).
std::vector<std::vector<int64_t>> Everyone(int64_t n, bool reversed = false) {
  std::vector<int64_t> g(n);
  for (int64_t i = 0; i < n; ++i) g[i] = reversed ? n - 1 - i : i;
  return {g};
}
std::vector<std::vector<int64_t>> Pairs(int64_t n, int64_t stride) {  // {i, i + stride}
  std::vector<std::vector<int64_t>> groups;
  std::vector<bool> used(n, false);
  for (int64_t i = 0; i < n; ++i) {
    if (used[i]) continue;
    int64_t j = (i + stride) % n;
    if (used[j] || j == i) return Everyone(n);
    groups.push_back({j, i});  // the second member first: rank order is not id order
    used[i] = used[j] = true;
  }
  return groups;
}

std::vector<Step> ScriptFor(int64_t n) {
  std::vector<Step> s;
  const int64_t half = n / 2;
  for (auto groups : {Everyone(n), Everyone(n, true), Pairs(n, half > 0 ? half : 1), Pairs(n, 1)}) {
    s.push_back({Collective::kAllReduce, groups, DType::kF32, ReduceKind::kSum, 1001});
    s.push_back({Collective::kAllReduce, groups, DType::kBF16, ReduceKind::kSum, 333});
    s.push_back({Collective::kAllReduce, groups, DType::kS32, ReduceKind::kMax, 64});
    s.push_back({Collective::kAllReduce, groups, DType::kF32, ReduceKind::kSum, 0});
    s.push_back({Collective::kAllGather, groups, DType::kU8, ReduceKind::kSum, 100});
    s.push_back({Collective::kReduceScatter, groups, DType::kF32, ReduceKind::kSum, 37});
    s.push_back({Collective::kReduceScatter, groups, DType::kS32, ReduceKind::kProduct, 5});
    s.push_back({Collective::kAllToAll, groups, DType::kU8, ReduceKind::kSum, 24});
    s.push_back({Collective::kBarrier, groups});
  }
  Step rotate{Collective::kCollectivePermute, Everyone(n), DType::kU8, ReduceKind::kSum, 40};
  for (int64_t p = 0; p < n; ++p) rotate.pairs.push_back({p, (p + 1) % n});
  s.push_back(rotate);
  Step some{Collective::kCollectivePermute, Everyone(n), DType::kU8, ReduceKind::kSum, 16};
  some.pairs.push_back({n - 1, 0});  // every other target gets zeros
  s.push_back(some);
  return s;
}

class MpiCommunicatorTest : public ::testing::TestWithParam<int64_t> {};

TEST_P(MpiCommunicatorTest, EveryCollectiveGivesTheInProcessBits) {
  const ProcessGroup& job = Processes();
  const int64_t n = GetParam() * job.size;  // participants per process x processes
  const std::vector<Step> script = ScriptFor(n);
  auto reference_comm = runtime::MakeInProcessCommunicator(n);
  std::vector<std::vector<Bytes>> reference = RunScript(*reference_comm, script, 0, n);
  LocalParticipants local = ParticipantsOf(n, job.rank, job.size);
  auto mpi = MakeMpiCommunicator(n);
  std::vector<std::vector<Bytes>> got = RunScript(*mpi, script, local.first, local.count);
  for (int64_t k = 0; k < local.count; ++k) {
    for (size_t i = 0; i < script.size(); ++i) {
      EXPECT_TRUE(got[k][i] == reference[local.first + k][i])
          << "participant " << local.first + k << ", step " << i << " ("
          << runtime::CollectiveName(script[i].collective) << ")";
    }
    // The byte count is the backend-independent formula.
    EXPECT_EQ(mpi->bytes_sent(local.first + k), reference_comm->bytes_sent(local.first + k));
  }
}

INSTANTIATE_TEST_SUITE_P(Mpi, MpiCommunicatorTest, ::testing::Values(1, 2), [](const auto& info) {
  return std::to_string(info.param) + "_per_process";
});

// A row-parallel dot, its all-reduce, an all-gather and an all-to-all: the
// partitioned program run as this process's partitions equals the run of
// every partition in one process, bit for bit.
TEST(MpiProgram, PartitionedProgramGivesTheInProcessBits) {
  const ProcessGroup& job = Processes();
  for (int64_t per : {1, 2}) {
    const int64_t n = per * job.size;
    auto module = hlo::ParseModule(fmt::format(R"(
HloModule m
ENTRY main {{
  x = f32[8,{0}] parameter(0), sharding={{devices=[1,{1}]<=[{1}]}}
  w = f32[{0},16] parameter(1), sharding={{devices=[{1},1]<=[{1}]}}
  y = f32[8,16] dot(x, w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  t = f32[8,16] tanh(y), sharding={{devices=[{1},1]<=[{1}]}}
  ROOT u = f32[8,16] negate(t), sharding={{devices=[1,{1}]<=[{1}]}}
}})",
                                               12 * n, n));
    spmd::Mesh mesh = spmd::Mesh::Line(n);
    spmd::PartitionedModule partitioned = spmd::Partition(*module, mesh);
    runtime::Client client(static_cast<int>(n), 1);
    compiler::CompileOptions options;
    options.client = &client;
    auto exe = compiler::Compile(*partitioned.module, options);
    std::vector<const runtime::Device*> devices;
    for (int64_t p = 0; p < n; ++p) devices.push_back(client.device(static_cast<int>(p)));
    std::vector<std::vector<runtime::Buffer>> arguments(n);
    uint32_t seed = 3;
    for (size_t i = 0; i < module->entry()->parameters().size(); ++i) {
      const Shape& shape = module->entry()->parameters()[i]->shape();
      std::mt19937 rng(seed++);
      std::uniform_real_distribution<float> u(-1, 1);
      std::vector<float> values(shape.num_elements());
      for (float& v : values) v = u(rng);
      auto full = runtime::Buffer::FromVector<float>(values, shape.dims(), devices[0]);
      auto shards =
          runtime::SplitIntoShards(full, mesh, partitioned.parameter_shardings[i], devices);
      for (int64_t p = 0; p < n; ++p) arguments[p].push_back(shards[p]);
    }
    auto reference_comm = runtime::MakeInProcessCommunicator(n);
    auto reference = exe->RunPartitioned(arguments, devices, *reference_comm);
    LocalParticipants local = ParticipantsOf(n, job.rank, job.size);
    std::vector<std::vector<runtime::Buffer>> mine(arguments.begin() + local.first,
                                                   arguments.begin() + local.first + local.count);
    std::vector<const runtime::Device*> my_devices(devices.begin() + local.first,
                                                   devices.begin() + local.first + local.count);
    auto mpi = MakeMpiCommunicator(n);
    auto got = exe->RunPartitions(local.first, mine, my_devices, *mpi);
    ASSERT_EQ(got.size(), static_cast<size_t>(local.count));
    for (int64_t k = 0; k < local.count; ++k) {
      ASSERT_EQ(got[k].size(), 1u);
      const runtime::Buffer& a = got[k][0];
      const runtime::Buffer& b = reference[local.first + k][0];
      ASSERT_EQ(a.shape(), b.shape());
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size_bytes()), 0)
          << "partition " << local.first + k << " of " << n;
    }
    if (n > 1) {
      EXPECT_GT(mpi->bytes_sent(local.first), 0);
    }
  }
}

// Process 1 never joins: process 0 times out with an error naming it.
TEST(MpiFaults, AMissingProcessIsNamedInATimeout) {
  const ProcessGroup& job = Processes();
  if (job.size < 2) GTEST_SKIP() << "needs two processes";
  const int64_t n = job.size;
  auto mpi = MakeMpiCommunicator(n, std::chrono::milliseconds(400));
  if (job.rank == 0) {
    std::vector<float> in(10, 1.0f), out(10);
    std::vector<int64_t> group = {0, 1};
    try {
      mpi->AllReduce(0, group, DType::kF32, ReduceKind::kSum, in.data(), out.data(), 10);
      FAIL() << "expected a timeout";
    } catch (const Error& e) {
      std::string message = e.what();
      EXPECT_NE(message.find("timed out"), std::string::npos) << message;
      EXPECT_NE(message.find("process(es) 1"), std::string::npos) << message;
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(MpiProcesses, DevicesSplitEvenlyOverProcesses) {
  EXPECT_EQ(ParticipantsOf(8, 1, 4).first, 2);
  EXPECT_EQ(ParticipantsOf(8, 1, 4).count, 2);
  EXPECT_THROW(ParticipantsOf(6, 0, 4), Error);
  EXPECT_THROW(ParticipantsOf(4, 4, 4), Error);
}

// Failures on processes other than 0 are printed too, with their rank.
class RankPrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankPrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (r.failed()) {
      std::fprintf(stderr, "[process %d] %s:%d: %s\n", rank_, r.file_name() ? r.file_name() : "?",
                   r.line_number(), r.summary());
    }
  }

 private:
  int rank_;
};

}  // namespace
}  // namespace strata::distributed

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const strata::distributed::ProcessGroup& job = strata::distributed::Processes();
  if (job.rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new strata::distributed::RankPrinter(job.rank));
  }
  int failed = RUN_ALL_TESTS();
  // Every process's verdict: the job fails if any process failed.
  int any = failed;
  if (job.mpi) MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return any;
}
