// Devices, buffers and the thread pool.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <numeric>
#include <thread>

#include "strata/compiler/compile.h"
#include "strata/hlo/builder.h"
#include "strata/runtime/thread_pool.h"

namespace strata::runtime {
namespace {

TEST(Client, HasTheRequestedVirtualDevices) {
  Client client(4, 2);
  ASSERT_EQ(client.device_count(), 4);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(client.device(i)->id(), i);
    EXPECT_EQ(client.device(i)->ToString(), "cpu:" + std::to_string(i));
  }
  EXPECT_THROW(client.device(4), Error);
  EXPECT_THROW(Client(0), Error);
}

TEST(Executable, RunsOnTheArgumentsDeviceAndRejectsMixedDevices) {
  Client client(3, 2);
  hlo::Module m("add");
  hlo::Builder b("main");
  Shape s(DType::kF32, {3});
  auto* x = b.Parameter(0, s, "x");
  auto* y = b.Parameter(1, s, "y");
  m.AddEntryComputation(b.Build(b.Add(x, y)));
  auto exe = compiler::Compile(m, {.client = &client});
  auto on = [&](int d, std::vector<float> v) {
    return Buffer::FromVector(v, {3}, client.device(d));
  };
  auto out = exe->Run({on(2, {1, 2, 3}), on(2, {10, 20, 30})});
  EXPECT_EQ(out[0].device(), client.device(2));
  EXPECT_EQ(out[0].ToVector<float>(), (std::vector<float>{11, 22, 33}));
  try {
    exe->Run({on(1, {1, 2, 3}), on(2, {1, 2, 3})});
    FAIL() << "mixed devices accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("lives on cpu:2"), std::string::npos) << e.what();
  }
}

TEST(ThreadPool, CoversEveryIndexOnceAndPropagatesErrors) {
  ThreadPool pool(4);
  std::vector<std::atomic<int>> hits(100003);
  pool.ParallelFor(static_cast<int64_t>(hits.size()), 1000, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) hits[i]++;
  });
  for (auto& h : hits) ASSERT_EQ(h.load(), 1);
  EXPECT_THROW(pool.ParallelFor(1000, 10,
                                [&](int64_t lo, int64_t) {
                                  if (lo > 0) throw Error("chunk failed");
                                }),
               Error);
  // Several callers at once.
  std::vector<std::thread> callers;
  std::atomic<int64_t> total{0};
  for (int t = 0; t < 4; ++t) {
    callers.emplace_back(
        [&] { pool.ParallelFor(10000, 100, [&](int64_t lo, int64_t hi) { total += hi - lo; }); });
  }
  for (auto& c : callers) c.join();
  EXPECT_EQ(total.load(), 40000);
}

}  // namespace
}  // namespace strata::runtime

namespace strata::runtime {
namespace {

// (tanh(x) * sin(x)) + x over n floats, compiled without passes so the two
// intermediates live in the arena.
std::unique_ptr<Executable> TanhSinProgram(int64_t n, const Client& client) {
  hlo::Module m("tanh_sin");
  hlo::Builder b("main");
  auto* x = b.Parameter(0, Shape(DType::kF32, {n}), "x");
  m.AddEntryComputation(
      b.Build(b.Add(b.Multiply(b.Unary(hlo::Opcode::kTanh, x), b.Unary(hlo::Opcode::kSin, x)), x)));
  return compiler::Compile(m, {.run_passes = false, .client = &client});
}

TEST(Client, ProgramsShareOnePoolOfArenas) {
  Client client(1, 2);
  auto small = TanhSinProgram(1 << 12, client), big = TanhSinProgram(1 << 16, client);
  const int64_t small_arena = small->stats().temp_bytes, big_arena = big->stats().temp_bytes;
  ASSERT_GE(small_arena, int64_t{4} << 12);  // an intermediate of 16 KiB at least
  ASSERT_GT(big_arena, small_arena);
  auto run = [&](const Executable& exe, int64_t n, uint32_t seed) {
    std::vector<float> x(n);
    for (int64_t i = 0; i < n; ++i) x[i] = std::sin(0.37f * float(i + seed)) * 3.0f;
    std::vector<float> got =
        exe.Run({Buffer::FromVector(x, {n}, client.device(0))})[0].ToVector<float>();
    for (int64_t i = 0; i < n; ++i) {
      const double want = std::tanh(double(x[i])) * std::sin(double(x[i])) + x[i];
      if (std::abs(got[i] - want) > 1e-5 * (1 + std::abs(want)))
        return ::testing::AssertionFailure() << "element " << i << ": " << got[i] << " != " << want;
    }
    return ::testing::AssertionSuccess();
  };
  EXPECT_EQ(client.idle_arena_bytes(), 0);
  EXPECT_TRUE(run(*small, 1 << 12, 1));
  EXPECT_EQ(client.idle_arena_bytes(), small_arena);
  EXPECT_EQ(client.arenas_allocated(), 1);
  // The small arena cannot serve the big program: it goes back to the OS,
  // and the pool holds the big one alone, not both.
  EXPECT_TRUE(run(*big, 1 << 16, 2));
  EXPECT_EQ(client.idle_arena_bytes(), big_arena);
  EXPECT_EQ(client.arenas_allocated(), 2);
  // Both programs now run in the big arena, dirty from the other's run.
  for (uint32_t seed = 3; seed < 6; ++seed) {
    EXPECT_TRUE(run(*small, 1 << 12, seed));
    EXPECT_TRUE(run(*big, 1 << 16, seed));
  }
  EXPECT_EQ(client.idle_arena_bytes(), big_arena);
  EXPECT_EQ(client.arenas_allocated(), 2);
  // While a run holds the big arena, another needs one of its own; both
  // wait in the pool afterwards, and the smallest that fits serves a run.
  {
    std::shared_ptr<uint8_t> held = client.Arena(big_arena);
    EXPECT_EQ(client.idle_arena_bytes(), 0);
    EXPECT_TRUE(run(*small, 1 << 12, 7));
    EXPECT_EQ(client.arenas_allocated(), 3);
    EXPECT_EQ(client.idle_arena_bytes(), small_arena);
  }
  EXPECT_EQ(client.idle_arena_bytes(), small_arena + big_arena);
  std::shared_ptr<uint8_t> fits_small = client.Arena(small_arena);
  EXPECT_EQ(client.idle_arena_bytes(), big_arena);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(fits_small.get()) % 64, 0u);
}

TEST(Device, ReusesLargeFreedBlocksOfTheSameSize) {
  Client client(1, 1);
  const Device* d = client.device(0);
  Shape big(DType::kF32, {1 << 20});  // 4 MiB
  uint8_t* first;
  {
    Buffer a = Buffer::Allocate(big, d);
    first = a.data();
    a.data_as<float>()[0] = 1.0f;
  }
  EXPECT_EQ(d->cached_bytes(), big.byte_size());
  Buffer b = Buffer::Allocate(big, d);
  EXPECT_EQ(b.data(), first);  // the cached block came back
  EXPECT_EQ(d->cached_bytes(), 0);
  Buffer c = Buffer::Allocate(Shape(DType::kF32, {1 << 19}), d);  // other size: fresh block
  EXPECT_NE(c.data(), first);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(c.data()) % 64, 0u);
}

}  // namespace
}  // namespace strata::runtime
