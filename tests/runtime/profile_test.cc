// The kernel profile belongs to a client: a test makes a client and a
// profile, runs programs compiled for that client, and reads, resets and
// drops the profile without touching any other client's. Counts are the
// number of runs times the kernels each run has, worked out from the
// program's text.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "strata/compiler/compile.h"
#include "strata/hlo/module.h"
#include "strata/hlo/text.h"
#include "strata/runtime/communicator.h"
#include "strata/runtime/profile.h"

namespace strata::runtime {
namespace {

// A dot and, after it, a tanh: two kernels per run, unfused (a dot is never
// fused with what follows it, and fusion is off).
constexpr char kProgram[] = R"(HloModule profiled
ENTRY main {
  a = f32[8,16] parameter(0)
  b = f32[16,4] parameter(1)
  d = f32[8,4] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT t = f32[8,4] tanh(d)
}
)";

std::unique_ptr<Executable> CompileFor(const Client& client, const char* text = kProgram) {
  std::unique_ptr<hlo::Module> module = hlo::ParseModule(text);
  compiler::CompileOptions options;
  options.client = &client;
  options.fuse = false;
  return compiler::Compile(*module, options);
}

std::vector<Buffer> Arguments(const Client& client) {
  return {Buffer::FromVector(std::vector<float>(8 * 16, 0.5f), {8, 16}, client.device(0)),
          Buffer::FromVector(std::vector<float>(16 * 4, 0.25f), {16, 4}, client.device(0))};
}

// The row of `opcode`, by value (Rows() returns a fresh vector).
std::optional<KernelProfile::Row> Find(const std::vector<KernelProfile::Row>& rows,
                                       const std::string& opcode) {
  for (const KernelProfile::Row& r : rows) {
    if (r.opcode == opcode) return r;
  }
  return std::nullopt;
}

TEST(KernelProfile, CountsEveryKernelOfEveryRunPerOpcodeAndShape) {
  Client client(1, 1);
  KernelProfile profile;
  client.set_profile(&profile);
  std::unique_ptr<Executable> exe = CompileFor(client);
  for (int i = 0; i < 3; ++i) {
    std::vector<Buffer> out = exe->Run(Arguments(client));
    // 16 products of 0.5 * 0.25 sum to 2; the result is tanh(2).
    EXPECT_NEAR(out[0].ToVector<float>()[0], std::tanh(2.0f), 1e-6f);
  }
  const std::vector<KernelProfile::Row> rows = profile.Rows();
  ASSERT_EQ(rows.size(), 2u) << profile.Report();
  const std::optional<KernelProfile::Row> dot = Find(rows, "dot");
  const std::optional<KernelProfile::Row> tanh = Find(rows, "tanh");
  ASSERT_TRUE(dot && tanh) << profile.Report();
  EXPECT_EQ(dot->count, 3);
  EXPECT_EQ(tanh->count, 3);
  EXPECT_EQ(dot->shape, "f32[8,4]");
  EXPECT_EQ(tanh->shape, "f32[8,4]");
  EXPECT_GE(rows[0].ns, rows[1].ns) << "rows come largest first";
  EXPECT_EQ(profile.total_ns(), rows[0].ns + rows[1].ns);
  const std::string report = profile.Report();
  EXPECT_NE(report.find("strata kernel profile"), std::string::npos) << report;
  EXPECT_NE(report.find("dot"), std::string::npos) << report;
  EXPECT_NE(report.find("f32[8,4]"), std::string::npos) << report;
}

TEST(KernelProfile, ResetEmptiesItAndLaterRunsCountAfresh) {
  Client client(1, 1);
  KernelProfile profile;
  client.set_profile(&profile);
  std::unique_ptr<Executable> exe = CompileFor(client);
  exe->Run(Arguments(client));
  ASSERT_EQ(profile.Rows().size(), 2u);
  profile.Reset();
  EXPECT_TRUE(profile.Rows().empty());
  EXPECT_EQ(profile.total_ns(), 0);
  exe->Run(Arguments(client));
  exe->Run(Arguments(client));
  const std::optional<KernelProfile::Row> dot = Find(profile.Rows(), "dot");
  ASSERT_TRUE(dot);
  EXPECT_EQ(dot->count, 2);
}

TEST(KernelProfile, EachClientAddsOnlyToItsOwnProfileAndNoneWithout) {
  Client first(1, 1), second(1, 1), unprofiled(1, 1);
  KernelProfile a, b;
  first.set_profile(&a);
  second.set_profile(&b);
  std::unique_ptr<Executable> on_first = CompileFor(first);
  std::unique_ptr<Executable> on_second = CompileFor(second);
  std::unique_ptr<Executable> on_unprofiled = CompileFor(unprofiled);
  on_first->Run(Arguments(first));
  on_second->Run(Arguments(second));
  on_second->Run(Arguments(second));
  on_unprofiled->Run(Arguments(unprofiled));
  ASSERT_TRUE(Find(a.Rows(), "dot") && Find(b.Rows(), "dot"));
  EXPECT_EQ(Find(a.Rows(), "dot")->count, 1);
  EXPECT_EQ(Find(b.Rows(), "dot")->count, 2);
  // Detaching stops the counting; the profile keeps what it has.
  first.set_profile(nullptr);
  on_first->Run(Arguments(first));
  EXPECT_EQ(Find(a.Rows(), "dot")->count, 1);
  EXPECT_EQ(first.profile(), nullptr);
  EXPECT_EQ(unprofiled.profile(), nullptr);
}

// Loop bodies and every partition of an SPMD program add to the profile:
// a While of four iterations over two partitions runs its body's multiply
// 4 * 2 times.
constexpr char kLoop[] = R"(HloModule loop, num_partitions=2

cond {
  p = (s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(4)
  ROOT lt = pred[] compare(i, n), direction=LT
}

body {
  p = (s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[4] get-tuple-element(p), index=1
  one = s32[] constant(1)
  next = s32[] add(i, one)
  m = f32[4] multiply(x, x)
  ROOT t = (s32[], f32[4]) tuple(next, m)
}

ENTRY main {
  x = f32[4] parameter(0)
  zero = s32[] constant(0)
  init = (s32[], f32[4]) tuple(zero, x)
  w = (s32[], f32[4]) while(init), condition=cond, body=body
  ROOT r = f32[4] get-tuple-element(w), index=1
}
)";

TEST(KernelProfile, CountsLoopBodiesOnEveryPartition) {
  Client client(2, 2);
  KernelProfile profile;
  client.set_profile(&profile);
  std::unique_ptr<Executable> exe = CompileFor(client, kLoop);
  auto communicator = MakeInProcessCommunicator(2, std::chrono::milliseconds(10000));
  std::vector<std::vector<Buffer>> args;
  for (int p = 0; p < 2; ++p) {
    args.push_back({Buffer::FromVector(std::vector<float>{1, 2, 1, 1}, {4}, client.device(p))});
  }
  auto out = exe->RunPartitioned(args, {client.device(0), client.device(1)}, *communicator);
  EXPECT_EQ(out[1][0].ToVector<float>(), (std::vector<float>{1, 65536, 1, 1}));  // 2^(2^4)
  const std::optional<KernelProfile::Row> multiply = Find(profile.Rows(), "multiply");
  ASSERT_TRUE(multiply) << profile.Report();
  EXPECT_EQ(multiply->count, 8) << profile.Report();
}

}  // namespace
}  // namespace strata::runtime
