// Devices, buffers and the thread pool.
#include <gtest/gtest.h>

#include <atomic>
#include <numeric>
#include <thread>

#include "strata/hlo/builder.h"
#include "strata/runtime/executable.h"
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
  auto exe = Executable::Compile(m, {.client = &client});
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
