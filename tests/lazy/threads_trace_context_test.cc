// Traces and contexts with several threads at once (this suite also runs
// under ThreadSanitizer): each thread records on its own track while others
// sync, and a thread's ContextScope changes only that thread's context.
#include <gtest/gtest.h>

#include <atomic>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>
#include <vector>

#include "strata/lazy/context.h"
#include "strata/lazy/ops.h"
#include "strata/runtime/trace.h"

namespace strata {
namespace {

using json = nlohmann::json;
using lazy::Context;
using lazy::ContextScope;

// x * scale + 1 over n elements, synced: the value of element 0 is 1.
float Step(int64_t n, double scale) {
  Tensor x = Tensor::FromVector(std::vector<float>(n, 0.0f), {n});
  Tensor y = x * scale + 1.0;
  return y.to_vector<float>()[0];
}

TEST(ThreadsTrace, ConcurrentSyncsRecordOnTheirOwnTracks) {
  constexpr int kThreads = 3, kSteps = 20;
  trace::Start();
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t, &wrong] {
      trace::SetThreadName("worker " + std::to_string(t));
      for (int s = 0; s < kSteps; ++s) wrong += Step(16 + t, 2.0 + s) != 1.0f;
    });
  }
  for (std::thread& t : threads) t.join();
  const json trace = json::parse(trace::StopToString());
  EXPECT_EQ(wrong.load(), 0);
  std::set<int64_t> tids;
  int executes = 0;
  for (const json& e : trace["traceEvents"]) {
    if (e["ph"] == "X" && e["cat"] == "execute" && e["name"] == "execute") {
      ++executes;
      tids.insert(e["tid"].get<int64_t>());
    }
  }
  EXPECT_EQ(executes, kThreads * kSteps);
  EXPECT_EQ(tids.size(), static_cast<size_t>(kThreads));
}

TEST(ThreadsContexts, AScopeChangesOnlyItsOwnThreadsContext) {
  Context mine;
  const int64_t default_before = Context::Default().metrics().executions;
  std::atomic<bool> scoped{false}, done{false};
  std::thread worker([&] {
    ContextScope scope(mine);
    scoped = true;
    for (int s = 0; s < 5; ++s) EXPECT_EQ(Step(8, s), 1.0f);
    EXPECT_EQ(&Context::Get(), &mine);
    while (!done) std::this_thread::yield();
  });
  while (!scoped) std::this_thread::yield();
  EXPECT_EQ(&Context::Get(), &Context::Default());  // this thread is unaffected
  for (int s = 0; s < 3; ++s) EXPECT_EQ(Step(9, s), 1.0f);
  done = true;
  worker.join();
  EXPECT_EQ(mine.metrics().executions.load(), 5);
  EXPECT_EQ(Context::Default().metrics().executions.load() - default_before, 3);
}

}  // namespace
}  // namespace strata
