// The graph executor: compile cache hits and misses, parameter mapping,
// scalars as parameters, sharding and hashes, metrics, dumps.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdlib>

#include <filesystem>
#include <thread>

#include "strata/core/config.h"
#include "strata/lazy/context.h"
#include "strata/lazy/ops.h"

namespace strata {
namespace {

using lazy::Context;

class Executor : public ::testing::Test {
 protected:
  void SetUp() override {
    Context::Get().ClearCache();
    Context::Get().ResetMetrics();
  }
  static int64_t compiles() { return Context::Get().metrics().compiles.load(); }
  static int64_t hits() { return Context::Get().metrics().cache_hits.load(); }
  static Tensor Vec(std::vector<float> v, std::vector<int64_t> dims) {
    return Tensor::FromVector(v, dims);
  }
};

ir::Mesh TwoDevices() { return ir::Mesh({0, 1}, {2}, {"x"}); }

TEST_F(Executor, SameComputationTwiceCompilesOnce) {
  Tensor a = Vec({1, 2, 3}, {3}), b = Vec({4, 5, 6}, {3});
  Tensor c = a * b + a;
  EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{5, 12, 21}));
  EXPECT_EQ(compiles(), 1);
  Tensor d = a * b + a;
  EXPECT_EQ(d.to_vector<float>(), (std::vector<float>{5, 12, 21}));
  EXPECT_EQ(compiles(), 1) << Context::Get().last_miss_explanation();
  EXPECT_EQ(hits(), 1);
  // New data, same shapes: a hit.
  Tensor x = Vec({1, 1, 1}, {3}), y = Vec({2, 2, 2}, {3});
  Tensor e = x * y + x;
  EXPECT_EQ(e.to_vector<float>(), (std::vector<float>{3, 3, 3}));
  EXPECT_EQ(compiles(), 1);
  // New shape: a miss.
  Tensor x2 = Vec({1, 2}, {2});
  Tensor f = x2 * Vec({3, 4}, {2}) + x2;
  EXPECT_EQ(f.to_vector<float>(), (std::vector<float>{4, 10}));
  EXPECT_EQ(compiles(), 2);
  EXPECT_NE(Context::Get().last_miss_explanation().find("shape f32[2]"), std::string::npos)
      << Context::Get().last_miss_explanation();
}

TEST_F(Executor, TheFusionSwitchIsPartOfTheKey) {
  // The same graph compiled with loop fusion, then with STRATA_NO_FUSION set,
  // must compile again (a program fused before the switch is not reused
  // after it), and both give exp(2x) + 1.
  Tensor x = Vec({0.5f, -1, 2}, {3});
  auto run = [&] { return (exp(x * 2.0) + 1.0).to_vector<float>(); };
  const std::vector<float> expected = {std::exp(1.0f) + 1, std::exp(-2.0f) + 1, std::exp(4.0f) + 1};
  auto expect_values = [&](const std::vector<float>& got) {
    ASSERT_EQ(got.size(), 3u);
    for (int i = 0; i < 3; ++i) EXPECT_NEAR(got[i], expected[i], 1e-5f * expected[i]) << i;
  };
  expect_values(run());
  EXPECT_EQ(compiles(), 1);
  const Config saved = GetConfig();
  Config unfused = saved;
  unfused.fusion = false;  // STRATA_NO_FUSION
  SetConfig(unfused);
  expect_values(run());
  EXPECT_EQ(compiles(), 2);
  SetConfig(saved);
  expect_values(run());
  EXPECT_EQ(compiles(), 2);  // the fused program again, from the cache
}

TEST_F(Executor, ScalarsAreParametersAndLiteralsAreNot) {
  Tensor x = Vec({2, 4}, {2});
  EXPECT_EQ((x * 0.5).to_vector<float>(), (std::vector<float>{1, 2}));
  EXPECT_EQ((x * 0.25).to_vector<float>(), (std::vector<float>{0.5f, 1}));
  EXPECT_EQ(compiles(), 1);  // a learning rate that changes never recompiles
  Tensor y = Vec({1, 1}, {2});
  EXPECT_EQ((x * 0.5 + y * 0.5).to_vector<float>(), (std::vector<float>{1.5f, 2.5f}));
  EXPECT_EQ((x * 0.5 + y * 0.25).to_vector<float>(), (std::vector<float>{1.25f, 2.25f}));
  EXPECT_EQ(compiles(), 2);  // equal or unequal scalars: the same program
  // Literal constants are part of the program.
  EXPECT_EQ((x * constant(3.0)).to_vector<float>(), (std::vector<float>{6, 12}));
  EXPECT_EQ((x * constant(5.0)).to_vector<float>(), (std::vector<float>{10, 20}));
  EXPECT_EQ(compiles(), 4);
  EXPECT_NE(Context::Get().last_miss_explanation().find("constant"), std::string::npos)
      << Context::Get().last_miss_explanation();
}

TEST_F(Executor, UnderBakeScalarsEveryScalarIsALiteral) {
  Tensor x = Vec({2, 4}, {2});
  {
    BakeScalars bake;
    EXPECT_EQ((x * 0.5).to_vector<float>(), (std::vector<float>{1, 2}));
    EXPECT_EQ((x * scalar(0.25)).to_vector<float>(), (std::vector<float>{0.5f, 1}));
    EXPECT_EQ((x + full({2}, 3.0)).to_vector<float>(), (std::vector<float>{5, 7}));
    // Exact beyond 2^53, as integer_scalar is.
    const int64_t big = (int64_t{1} << 53) + 1;
    EXPECT_EQ(integer_scalar(big).to_vector<int64_t>(), (std::vector<int64_t>{big}));
    {
      BakeScalars off(false);
      EXPECT_EQ((x * 0.75).to_vector<float>(), (std::vector<float>{1.5f, 3}));
    }
    EXPECT_TRUE(BakeScalars::active());
  }
  EXPECT_FALSE(BakeScalars::active());
  EXPECT_EQ(compiles(), 5);  // each value its own program, the parameter one aside
  EXPECT_EQ((x * 0.5).to_vector<float>(), (std::vector<float>{1, 2}));
  EXPECT_EQ(compiles(), 5);  // a parameter again: x * 0.75's program
  lazy::LoweringContext lowering({x * 0.5});
  EXPECT_EQ(lowering.hlo_text().find("constant(0.5)"), std::string::npos) << lowering.hlo_text();
  BakeScalars bake;
  lazy::LoweringContext baked({x * 0.5});
  EXPECT_NE(baked.hlo_text().find("constant(0.5)"), std::string::npos) << baked.hlo_text();
}

TEST_F(Executor, ParameterMappingIsPartOfTheKey) {
  // PyTorch/XLA #8353: (t0*t1)+t0 and (t0*t1)+t1 must be different programs.
  Tensor t0 = Vec({1, 2}, {2}), t1 = Vec({10, 20}, {2});
  Tensor first = t0 * t1 + t0, second = t0 * t1 + t1;
  EXPECT_EQ(first.to_vector<float>(), (std::vector<float>{11, 42}));
  EXPECT_EQ(second.to_vector<float>(), (std::vector<float>{20, 60}));
  EXPECT_EQ(compiles(), 2);
  EXPECT_NE(Context::Get().last_miss_explanation().find("parameter mapping"), std::string::npos)
      << Context::Get().last_miss_explanation();
  // One buffer used twice is one parameter.
  lazy::LoweringContext lowering({t0 * t0 + t1});
  EXPECT_EQ(lowering.parameter_count(), 2);
  EXPECT_EQ(lowering.tensor_parameter_id(t0), 0);
  EXPECT_EQ(lowering.tensor_parameter_id(t1), 1);
  EXPECT_EQ(lowering.tensor_parameter_id(t0 * t1), -1);
}

TEST_F(Executor, MaterializingOneTensorRunsOnlyItsGraph) {
  Tensor x = Vec({1, 2}, {2});
  Tensor a = x + x, b = x * x * x;
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{2, 4}));
  EXPECT_TRUE(a.is_materialized());
  EXPECT_FALSE(b.is_materialized());
  sync();  // everything pending
  EXPECT_TRUE(b.is_materialized());
  EXPECT_EQ(b.to_vector<float>(), (std::vector<float>{1, 8}));
}

TEST_F(Executor, InPlaceUpdatesRebindOnlyThatHandle) {
  Tensor a = Vec({1, 2}, {2});
  Tensor b = a;
  a += Vec({10, 10}, {2});
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{11, 12}));
  EXPECT_EQ(b.to_vector<float>(), (std::vector<float>{1, 2}));
  Tensor c = b * 2.0;
  b.copy_(Vec({7, 7}, {2}));
  EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{2, 4}));
  EXPECT_EQ(b.to_vector<float>(), (std::vector<float>{7, 7}));
  EXPECT_THROW(b.copy_(Vec({1, 2, 3}, {3})), Error);
}

TEST_F(Executor, ShardingChangesTheHashAndClearingRestoresIt) {
  Tensor x = Vec({1, 2, 3, 4}, {2, 2});
  Tensor y = x + x;
  ir::Hash128 plain = y.value().hash();
  Tensor shared = y;  // another handle on the same node
  mark_sharding(y, TwoDevices(), {{"x"}, {}});
  EXPECT_NE(y.value().hash(), plain);
  ASSERT_TRUE(y.value().node->sharding().has_value());
  EXPECT_EQ(y.value().node->sharding()->hlo_text(), "{devices=[2,1]0,1}");
  // PyTorch/XLA PR #4555: the other handle's node and hash are untouched.
  EXPECT_EQ(shared.value().hash(), plain);
  EXPECT_FALSE(shared.value().node->sharding().has_value());
  EXPECT_FALSE(shared.sharding().has_value());
  clear_sharding(y);
  EXPECT_EQ(y.value().hash(), plain);
  EXPECT_THROW(mark_sharding(y, TwoDevices(), {{"x"}}), Error);  // spec length != rank
}

TEST_F(Executor, ShardingIsPartOfTheKeyAndExplained) {
  Tensor x = Vec({1, 2, 3, 4}, {2, 2});
  Tensor plain = x * x;
  EXPECT_EQ(plain.to_vector<float>(), (std::vector<float>{1, 4, 9, 16}));
  Tensor sharded = x * x;
  mark_sharding(sharded, TwoDevices(), {{"x"}, {}});
  EXPECT_EQ(sharded.to_vector<float>(), (std::vector<float>{1, 4, 9, 16}));  // same numbers
  EXPECT_EQ(compiles(), 2);
  EXPECT_NE(Context::Get().last_miss_explanation().find("sharding {devices=[2,1]0,1}"),
            std::string::npos)
      << Context::Get().last_miss_explanation();
  // The synced tensor keeps its spec on the materialized data.
  ASSERT_TRUE(sharded.value().node->sharding().has_value());
  EXPECT_EQ(sharded.value().node->sharding()->hlo_text(), "{devices=[2,1]0,1}");
}

TEST_F(Executor, MarkedDeviceDataKeepsItsParameterAndTheNumbers) {
  Tensor x = Vec({1, 2, 3, 4}, {2, 2});
  Tensor z = x + 1.0;  // built before marking: reads the unmarked node
  Tensor unsharded = (x * z).sync();
  mark_sharding(x, TwoDevices(), {{"x"}, {}});
  Tensor w = x * z;
  lazy::LoweringContext lowering({w});
  EXPECT_EQ(lowering.parameter_count(), 1);  // x: one buffer behind two nodes (1 is a literal)
  EXPECT_EQ(lowering.tensor_parameter_id(x), 0);
  EXPECT_NE(lowering.hlo_text().find("sharding={devices=[2,1]0,1}"), std::string::npos)
      << lowering.hlo_text();
  EXPECT_EQ(w.to_vector<float>(), unsharded.to_vector<float>());
  EXPECT_TRUE(w.sharding() == std::nullopt);
  EXPECT_EQ(x.sharding()->hlo_text(), "{devices=[2,1]0,1}");
}

TEST_F(Executor, MetricsReportAndDumps) {
  auto dir = std::filesystem::temp_directory_path() / ("strata_dump_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  Context::Get().set_dump_dir(dir.string());
  Tensor r = Vec({1, 2}, {2}) * Vec({3, 4}, {2});
  EXPECT_EQ(r.to_vector<float>(), (std::vector<float>{3, 8}));
  Context::Get().set_dump_dir("");
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    ++files;
    EXPECT_GT(std::filesystem::file_size(entry.path()), 20u) << entry.path();
  }
  EXPECT_EQ(files, 4);  // .ir.txt, .dot, .hlo.txt, .optimized.hlo.txt
  std::filesystem::remove_all(dir);
  std::string report = Context::Get().MetricsReport();
  EXPECT_NE(report.find("Metric: Compiles 1"), std::string::npos) << report;
  EXPECT_NE(report.find("Metric: CacheMisses 1"), std::string::npos) << report;
  EXPECT_GT(Context::Get().metrics().bytes_from_device.load(), 0);
}

TEST_F(Executor, SyncFromSeveralThreads) {
  std::vector<std::thread> threads;
  std::vector<std::vector<float>> results(4);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t, &results] {
      for (int i = 0; i < 20; ++i) {
        Tensor a = Tensor::FromVector<float>({float(t), float(i)}, {2});
        results[t] = (a * a + a).to_vector<float>();
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t)
    EXPECT_EQ(results[t], (std::vector<float>{float(t * t + t), 19 * 19 + 19}));
  EXPECT_EQ(compiles(), 1);  // one program: threads that miss at once wait for one compile
}

TEST_F(Executor, ThreadsSyncingDistinctAndIdenticalGraphsCompileEachOnce) {
  // 6 threads: threads t and t + 3 trace the same graph (t + 1 elements), so
  // 3 distinct graphs, each synced 30 times by two threads at once.
  std::vector<std::thread> threads;
  std::vector<int> wrong(6, 0);
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([t, &wrong] {
      const int n = t % 3 + 1;
      for (int i = 0; i < 30; ++i) {
        std::vector<float> x(n);
        for (int k = 0; k < n; ++k) x[k] = static_cast<float>(i + k);
        Tensor a = Tensor::FromVector<float>(x, {n});
        std::vector<float> y = (a * 3.0 - 1.0).to_vector<float>();
        for (int k = 0; k < n; ++k) wrong[t] += y[k] != 3.0f * x[k] - 1.0f;
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 6; ++t) EXPECT_EQ(wrong[t], 0) << "thread " << t;
  EXPECT_EQ(compiles(), 3);
}

TEST_F(Executor, AGlobalSyncWhileAnotherThreadTracesLeavesItsTensorsAlone) {
  // Issue 14: a global sync() rebound other threads' tensors while they read
  // them (heap-use-after-free, bogus shape errors in 14 of 20 runs). Now it
  // materializes the calling thread's tensors only.
  std::atomic<bool> done{false};
  std::atomic<int> wrong{0};
  std::thread builder([&] {
    for (int i = 0; i < 4000; ++i) {
      Tensor x = full({8}, i % 1000) * 2.0 + 1.0;
      std::vector<float> v = x.to_vector<float>();
      for (float f : v) wrong += f != 2.0f * (i % 1000) + 1.0f;
    }
    done = true;
  });
  Tensor mine = Tensor::FromVector<float>({1, 2}, {2});
  int syncs = 0;
  while (!done) {
    mine = mine + 1.0;
    sync();
    ++syncs;
  }
  builder.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GT(syncs, 0);
  EXPECT_EQ(mine.to_vector<float>(), (std::vector<float>{1.0f + syncs, 2.0f + syncs}));
  EXPECT_TRUE(mine.value().node->is_leaf());  // the global sync did run this thread's tensor
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

TEST(BoolTensors, RoundTripThroughStdVectorBool) {
  Tensor flags = Tensor::FromVector<bool>({true, false, true}, {3});
  EXPECT_EQ(flags.dtype(), DType::kPred);
  EXPECT_EQ(logical_not(flags).to_vector<bool>(), (std::vector<bool>{false, true, false}));
  Tensor x = Tensor::FromVector<float>({1, 5, 3}, {3});
  EXPECT_EQ(gt(x, Tensor::FromVector<float>({2, 2, 2}, {3})).to_vector<bool>(),
            (std::vector<bool>{false, true, true}));
}

}  // namespace
}  // namespace strata
