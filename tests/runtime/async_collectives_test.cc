// Collectives that run while the program computes: compiler::
// OverlapCollectives splits all-gathers and all-reduces into -start / -done
// pairs and moves them apart; the runtime runs each -start on the run's
// collective thread (async_collectives.h). Values are checked against plain
// loops over the partitions' inputs; the schedule against what the pass
// promises.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <future>

#include "kernels/async_collectives.h"
#include "strata/compiler/compile.h"
#include "strata/core/config.h"
#include "strata/core/error.h"
#include "strata/hlo/text.h"
#include "strata/runtime/communicator.h"

namespace strata::runtime {
namespace {

using ::testing::HasSubstr;

// Compiles with OverlapCollectives on or off.
std::unique_ptr<Executable> CompileWith(const std::string& text, const Client& client,
                                        bool overlap) {
  Config saved = GetConfig();
  Config c = saved;
  c.overlap_collectives = overlap;
  SetConfig(c);
  compiler::CompileOptions options;
  options.client = &client;
  auto exe = compiler::Compile(*hlo::ParseModule(text), options);
  SetConfig(saved);
  return exe;
}

std::vector<std::vector<std::vector<float>>> RunOn2(const Executable& exe, const Client& client,
                                                    const std::vector<std::vector<Buffer>>& args) {
  auto comm = MakeInProcessCommunicator(2);
  auto results = exe.RunPartitioned(args, {client.device(0), client.device(1)}, *comm);
  std::vector<std::vector<std::vector<float>>> out(2);
  for (int p = 0; p < 2; ++p) {
    for (const Buffer& b : results[p]) out[p].push_back(b.ToVector<float>());
  }
  return out;
}

// Position of each named instruction of the entry in its schedule.
int64_t PositionOf(const hlo::Computation& c, hlo::Opcode op, int64_t nth = 0) {
  int64_t k = 0, seen = 0;
  for (const auto& inst : c.instructions()) {
    if (inst->opcode() == op && seen++ == nth) return k;
    ++k;
  }
  return -1;
}

constexpr const char* kAdd = R"(add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
)";

TEST(OverlapCollectives, GathersAndReductionsRunBesideTheComputeAndGiveTheLoopsValues) {
  // Per partition p: x (2x4), w (2x4, its half of the rows of a 4x4 weight).
  // out0 = dot(exp(x*x), all-gather(w) on rows) + out1 (2x4), out1 = all-reduce(x),
  // out2 = all-gather(w) on columns (2x8): the block-reordered path.
  const std::string text = std::string("HloModule m, num_partitions=2\n") + kAdd + R"(
ENTRY main {
  x = f32[2,4] parameter(0)
  w = f32[2,4] parameter(1)
  sq = f32[2,4] multiply(x, x)
  ex = f32[2,4] exponential(sq)
  wt = f32[4,2] transpose(w), dimensions={1,0}
  g = f32[4,4] all-gather(w), channel_id=1, replica_groups={{0,1}}, dimensions={0}
  d = f32[2,4] dot(ex, g), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  r = f32[2,4] all-reduce(x), channel_id=2, replica_groups={{0,1}}, to_apply=add
  c = f32[2,8] all-gather(w), channel_id=3, replica_groups={{0,1}}, dimensions={1}
  s = f32[2,4] add(d, r)
  ROOT out = (f32[2,4], f32[2,4], f32[2,8], f32[4,2]) tuple(s, r, c, wt)
}
)";
  Client client(2, 1);
  std::vector<std::vector<float>> x(2, std::vector<float>(8)), w(2, std::vector<float>(8));
  for (int p = 0; p < 2; ++p) {
    for (int i = 0; i < 8; ++i) {
      x[p][i] = 0.1f * static_cast<float>(i + 3 * p) - 0.4f;
      w[p][i] = 0.25f * static_cast<float>(i - 2 * p);
    }
  }
  std::vector<std::vector<Buffer>> args(2);
  for (int p = 0; p < 2; ++p) {
    args[p] = {Buffer::FromVector<float>(x[p], {2, 4}, client.device(p)),
               Buffer::FromVector<float>(w[p], {2, 4}, client.device(p))};
  }
  auto overlapped = CompileWith(text, client, true);
  auto plain = CompileWith(text, client, false);

  // The schedule: each -start comes before its -done with work between.
  const hlo::Computation& entry = *overlapped->module().entry();
  EXPECT_EQ(PositionOf(entry, hlo::Opcode::kAllGather), -1);
  EXPECT_EQ(PositionOf(entry, hlo::Opcode::kAllReduce), -1);
  for (auto [start, done] :
       {std::pair{hlo::Opcode::kAllGatherStart, hlo::Opcode::kAllGatherDone},
        std::pair{hlo::Opcode::kAllReduceStart, hlo::Opcode::kAllReduceDone}}) {
    const int64_t s = PositionOf(entry, start), d = PositionOf(entry, done);
    ASSERT_GE(s, 0) << hlo::OpcodeName(start);
    EXPECT_GT(d, s + 1) << hlo::OpcodeName(start) << " has no work beside it\n"
                        << hlo::ToText(overlapped->module());
  }

  auto got = RunOn2(*overlapped, client, args);
  auto sync = RunOn2(*plain, client, args);
  EXPECT_EQ(got, sync);
  for (int p = 0; p < 2; ++p) {
    SCOPED_TRACE(p);
    for (int i = 0; i < 2; ++i) {
      for (int j = 0; j < 4; ++j) {
        double reduced = 0, dot = 0;
        for (int q = 0; q < 2; ++q) reduced += x[q][i * 4 + j];
        for (int k = 0; k < 4; ++k) {  // row k of the gathered weight is w[k / 2] row k % 2
          const double xk = x[p][i * 4 + k];
          dot += std::exp(float(xk * xk)) * double(w[k / 2][(k % 2) * 4 + j]);
        }
        EXPECT_NEAR(got[p][1][i * 4 + j], reduced, 1e-6);
        EXPECT_NEAR(got[p][0][i * 4 + j], dot + reduced, 1e-5 * (1 + std::abs(dot)));
      }
      for (int j = 0; j < 8; ++j) EXPECT_EQ(got[p][2][i * 8 + j], w[j / 4][i * 4 + j % 4]);
    }
  }
}

TEST(OverlapCollectives, AnFsdpLoopGathersTheNextLayersWeightsWhileThisLayerComputes) {
  // Three layers of 2x4 weight halves stacked per partition; each step
  // gathers its layer's 4x4 weight and multiplies the carry by it (then
  // tanh): the loop an FSDP model runs.
  const std::string text = R"(HloModule m, num_partitions=2
cond {
  s = (s32[], f32[2,4], f32[3,2,4]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(3)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  s = (s32[], f32[2,4], f32[3,2,4]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  h = f32[2,4] get-tuple-element(s), index=1
  ws = f32[3,2,4] get-tuple-element(s), index=2
  z = s32[] constant(0)
  sl = f32[1,2,4] dynamic-slice(ws, i, z, z), dynamic_slice_sizes={1,2,4}
  shard = f32[2,4] reshape(sl)
  g = f32[4,4] all-gather(shard), channel_id=1, replica_groups={{0,1}}, dimensions={0}
  t = f32[2,4] tanh(h)
  d = f32[2,4] dot(t, g), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  ROOT next = (s32[], f32[2,4], f32[3,2,4]) tuple(i1, d, ws)
}
ENTRY main {
  x = f32[2,4] parameter(0)
  ws = f32[3,2,4] parameter(1)
  z = s32[] constant(0)
  init = (s32[], f32[2,4], f32[3,2,4]) tuple(z, x, ws)
  loop = (s32[], f32[2,4], f32[3,2,4]) while(init), condition=cond, body=body
  ROOT h = f32[2,4] get-tuple-element(loop), index=1
}
)";
  Client client(2, 1);
  std::vector<std::vector<float>> x(2, std::vector<float>(8)), ws(2, std::vector<float>(24));
  for (int p = 0; p < 2; ++p) {
    for (int i = 0; i < 8; ++i) x[p][i] = 0.2f * static_cast<float>(i - 4 + p);
    for (int i = 0; i < 24; ++i) ws[p][i] = 0.05f * static_cast<float>((i * 7 + 5 * p) % 13 - 6);
  }
  std::vector<std::vector<Buffer>> args(2);
  for (int p = 0; p < 2; ++p) {
    args[p] = {Buffer::FromVector<float>(x[p], {2, 4}, client.device(p)),
               Buffer::FromVector<float>(ws[p], {3, 2, 4}, client.device(p))};
  }
  auto exe = CompileWith(text, client, true);
  const hlo::Computation* body = nullptr;
  for (const auto& c : exe->module().computations()) {
    if (PositionOf(*c, hlo::Opcode::kTanh) >= 0) body = c.get();
  }
  ASSERT_NE(body, nullptr) << hlo::ToText(exe->module());
  // Pipelined: the loop carries the layer's gathered weight (a fourth
  // element); the first layer's is gathered before the loop, and each
  // iteration gathers the next layer's from its start to its end, beside
  // the tanh and the dot.
  const std::string text_out = hlo::ToText(exe->module());
  EXPECT_EQ(body->parameter(0)->shape().tuple_size(), 4) << text_out;
  EXPECT_GE(PositionOf(*exe->module().entry(), hlo::Opcode::kAllGatherStart), 0) << text_out;
  EXPECT_LT(PositionOf(*body, hlo::Opcode::kAllGatherStart), PositionOf(*body, hlo::Opcode::kTanh))
      << text_out;
  EXPECT_GT(PositionOf(*body, hlo::Opcode::kAllGatherDone), PositionOf(*body, hlo::Opcode::kDot))
      << text_out;

  auto got = RunOn2(*exe, client, args);
  for (int p = 0; p < 2; ++p) {
    SCOPED_TRACE(p);
    std::vector<double> h(x[p].begin(), x[p].end());
    for (int layer = 0; layer < 3; ++layer) {
      std::vector<double> next(8, 0.0);
      for (int i = 0; i < 2; ++i) {
        for (int j = 0; j < 4; ++j) {
          for (int k = 0; k < 4; ++k) {  // weight row k: partition k / 2's row k % 2
            next[i * 4 + j] += std::tanh(h[i * 4 + k]) * ws[k / 2][layer * 8 + (k % 2) * 4 + j];
          }
        }
      }
      h = next;
    }
    for (int i = 0; i < 8; ++i) EXPECT_NEAR(got[p][0][i], h[i], 1e-5) << i;
  }
}

TEST(OverlapCollectives, XlasOwnPairsKeepTheirPlaceInAStoredModule) {
  // A module that already holds pairs (XLA's text, or strata's compile
  // cache) is scheduled the same way: the -start moves ahead of the
  // exponential the schedule would put first.
  const std::string text = R"(HloModule m, num_partitions=2
ENTRY main {
  x = f32[4] parameter(0)
  e = f32[4] exponential(x)
  ags = (f32[4], f32[8]) all-gather-start(x), channel_id=1, replica_groups={{0,1}}, dimensions={0}
  agd = f32[8] all-gather-done(ags)
  s = f32[8] slice(agd), slice={[0:8]}
  ROOT out = (f32[4], f32[8]) tuple(e, s)
}
)";
  Client client(2, 1);
  auto exe = CompileWith(text, client, true);
  const hlo::Computation& entry = *exe->module().entry();
  EXPECT_LT(PositionOf(entry, hlo::Opcode::kAllGatherStart), PositionOf(entry, hlo::Opcode::kExp));
  std::vector<std::vector<Buffer>> args(2);
  for (int p = 0; p < 2; ++p) {
    args[p] = {Buffer::FromVector<float>({1.0f + p, 2, 3, 4}, {4}, client.device(p))};
  }
  auto got = RunOn2(*exe, client, args);
  for (int p = 0; p < 2; ++p) {
    EXPECT_EQ(got[p][1], (std::vector<float>{1, 2, 3, 4, 2, 2, 3, 4}));
    EXPECT_FLOAT_EQ(got[p][0][0], std::exp(1.0f + p));
  }
}

TEST(OverlapCollectives, AStartWithoutItsDoneIsAVerifierError) {
  const std::string text = R"(HloModule m, num_partitions=2
ENTRY main {
  x = f32[4] parameter(0)
  ags = (f32[4], f32[8]) all-gather-start(x), channel_id=1, replica_groups={{0,1}}, dimensions={0}
  ROOT g = f32[8] get-tuple-element(ags), index=1
}
)";
  Client client(2, 1);
  try {
    CompileWith(text, client, true);
    FAIL() << "compiled";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("all-gather-start must have one user, a all-gather-done"));
  }
}

const hlo::Instruction& SomeInstruction() {
  static const auto module =
      hlo::ParseModule("HloModule m\nENTRY e {\n  ROOT x = f32[] parameter(0)\n}\n");
  return *module->entry()->root();
}

TEST(AsyncCollectivesRun, AnErrorOfTheWorkComesBackAtItsWait) {
  auto comm = MakeInProcessCommunicator(1);
  AsyncCollectives async(comm.get(), 0);
  async.Start(&SomeInstruction(), [] { Fail("[test] the link went down"); });
  try {
    async.Wait(&SomeInstruction());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("the link went down"));
  }
  EXPECT_THROW(async.Wait(&SomeInstruction()), Error);  // waited for already
}

TEST(AsyncCollectivesRun, ARunThatStopsWithWorkInFlightAbortsTheGroupInsteadOfHanging) {
  // Partition 0 starts an all-gather partition 1 never joins, then its run
  // fails: the collective thread must stop, and the group be told.
  auto comm = MakeInProcessCommunicator(2);
  std::vector<float> in(4, 1.0f), out(8);
  auto finished = std::async(std::launch::async, [&] {
    AsyncCollectives async(comm.get(), 0);
    std::vector<int64_t> group = {0, 1};
    async.Start(&SomeInstruction(), [&, group] {
      comm->AllGather(0, group, in.data(), out.data(), 4 * sizeof(float));
    });
  });
  ASSERT_EQ(finished.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  std::vector<int64_t> group = {0, 1};
  try {
    comm->AllGather(1, group, in.data(), out.data(), 4 * sizeof(float));
    FAIL() << "partition 1's all-gather went through a group that was aborted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("stopped with collectives in flight"));
  }
}

}  // namespace
}  // namespace strata::runtime
