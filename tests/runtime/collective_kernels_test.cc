// The collective kernels run as a program of N partitions on N threads;
// each partition's input is its id, so every expected value is worked out
// by hand from the collective's definition.
#include <gtest/gtest.h>

#include "strata/compiler/compile.h"
#include "strata/core/error.h"
#include "strata/hlo/text.h"
#include "strata/runtime/communicator.h"

namespace strata::runtime {
namespace {

// Runs `body` (computing ROOT from x = f32[2,4] filled with 10*p + element index)
// on `n` partitions; returns each partition's f32 result.
std::vector<std::vector<float>> RunOnPartitions(const std::string& body, int n) {
  std::string text = "HloModule m, num_partitions=" + std::to_string(n) + R"(
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY main {
  x = f32[2,4] parameter(0)
)" + body + "\n}\n";
  Client client(n, 1);
  compiler::CompileOptions options;
  options.client = &client;
  auto exe = compiler::Compile(*hlo::ParseModule(text), options);
  std::vector<std::vector<Buffer>> args(n);
  std::vector<const Device*> devices;
  for (int p = 0; p < n; ++p) {
    std::vector<float> values(8);
    for (int i = 0; i < 8; ++i) values[i] = 10.0f * p + i;
    devices.push_back(client.device(p));
    args[p].push_back(Buffer::FromVector<float>(values, {2, 4}, devices[p]));
  }
  auto comm = MakeInProcessCommunicator(n);
  auto results = exe->RunPartitioned(args, devices, *comm);
  std::vector<std::vector<float>> out;
  for (auto& r : results) out.push_back(r[0].ToVector<float>());
  return out;
}

TEST(CollectiveKernels, PartitionIdIsEachCopysOwn) {
  auto out = RunOnPartitions(R"(  id = u32[] partition-id()
  ROOT f = f32[] convert(id))",
                             3);
  EXPECT_EQ(out, (std::vector<std::vector<float>>{{0}, {1}, {2}}));
}

TEST(CollectiveKernels, AllReduceSumsInGroups) {
  auto out = RunOnPartitions(
      R"(  ROOT r = f32[2,4] all-reduce(x), replica_groups={{0,2},{1,3}}, to_apply=add)", 4);
  for (int p = 0; p < 4; ++p) {
    int q = p % 2;  // group {q, q+2}: 10q + i + 10(q+2) + i
    for (int i = 0; i < 8; ++i) EXPECT_EQ(out[p][i], 20.0f * q + 20 + 2 * i) << p << " " << i;
  }
}

TEST(CollectiveKernels, AllGatherAlongTheInnerDim) {
  // [2,4] gathered on dim 1 over 2 partitions: each row is p0's row then p1's.
  auto out = RunOnPartitions(
      R"(  ROOT g = f32[2,8] all-gather(x), replica_groups={{0,1}}, dimensions={1})", 2);
  std::vector<float> expected = {0, 1, 2, 3, 10, 11, 12, 13, 4, 5, 6, 7, 14, 15, 16, 17};
  EXPECT_EQ(out[0], expected);
  EXPECT_EQ(out[1], expected);
}

TEST(CollectiveKernels, ReduceScatterAlongTheInnerDim) {
  // Sum x0 + x1 = 10 + 2i, then partition p keeps columns [2p, 2p+2) of each row.
  auto out = RunOnPartitions(
      R"(  ROOT r = f32[2,2] reduce-scatter(x), replica_groups={{0,1}}, dimensions={1}, to_apply=add)",
      2);
  EXPECT_EQ(out[0], (std::vector<float>{10, 12, 18, 20}));
  EXPECT_EQ(out[1], (std::vector<float>{14, 16, 22, 24}));
}

TEST(CollectiveKernels, AllToAllAlongTheInnerDim) {
  // Block j of dim 1 (columns [2j, 2j+2)) goes to partition j; partition r's
  // block j is partition j's block r.
  auto out = RunOnPartitions(
      R"(  ROOT a = f32[2,4] all-to-all(x), replica_groups={{0,1}}, dimensions={1})", 2);
  EXPECT_EQ(out[0], (std::vector<float>{0, 1, 10, 11, 4, 5, 14, 15}));
  EXPECT_EQ(out[1], (std::vector<float>{2, 3, 12, 13, 6, 7, 16, 17}));
}

TEST(CollectiveKernels, CollectivePermuteRingAndZerosForNoSource) {
  auto out = RunOnPartitions(
      R"(  ROOT c = f32[2,4] collective-permute(x), source_target_pairs={{0,1},{1,2}})", 3);
  EXPECT_EQ(out[0], std::vector<float>(8, 0.0f));
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(out[1][i], i);
    EXPECT_EQ(out[2][i], 10 + i);
  }
}

TEST(CollectiveKernels, ErrorsNameTheProblem) {
  auto m = hlo::ParseModule(R"(HloModule m, num_partitions=2
ENTRY main {
  ROOT id = u32[] partition-id()
})");
  auto exe = compiler::Compile(*m);
  try {
    exe->Run({});
    FAIL() << "a partitioned program needs RunPartitioned";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("RunPartitioned"), std::string::npos) << e.what();
  }
  auto comm = MakeInProcessCommunicator(3);
  EXPECT_THROW(exe->RunPartition(0, {}, Client::Default().device(0), *comm), Error);
}

}  // namespace
}  // namespace strata::runtime
