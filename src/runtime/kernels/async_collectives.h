// The collectives a run has started and not yet waited for: each
// all-gather-start / all-reduce-start hands its work to a thread of the
// run's own, which runs them one after another in the order they were
// started, so the run's kernels go on while the data moves; the matching
// -done waits for it. One per run of an executable (Executable::RunWith),
// reached through RunContext::async.
//
// Every member of a group must issue its collectives in one order. A
// member's started collectives run in start order on its thread; a
// synchronous collective first waits for every started one (WaitAll), so it
// cannot overtake them.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "strata/hlo/module.h"

namespace strata::runtime {

class Communicator;

class AsyncCollectives {
 public:
  AsyncCollectives(Communicator* communicator, int64_t partition);
  // A run that ends with work still in flight failed part-way: the
  // communicator is aborted (so the other members stop waiting for it
  // too) and the thread joined before the run's buffers go.
  ~AsyncCollectives();
  AsyncCollectives(const AsyncCollectives&) = delete;
  AsyncCollectives& operator=(const AsyncCollectives&) = delete;

  // Queues `work` for `start` (its -start instruction). A -start that runs
  // again (the next iteration of a loop) must have been waited for.
  void Start(const hlo::Instruction* start, std::function<void()> work);
  // Waits for `start`'s work; rethrows its error.
  void Wait(const hlo::Instruction* start);
  // Waits for everything started (each -done then finds its work
  // finished); rethrows an error of one.
  void WaitAll();

 private:
  struct Pending {
    bool done = false;
    std::exception_ptr error;
  };
  void Loop();

  Communicator* communicator_;
  int64_t partition_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::pair<const hlo::Instruction*, std::function<void()>>> queue_;
  std::unordered_map<const hlo::Instruction*, Pending> pending_;
  bool stop_ = false;
  std::thread thread_;  // started at the first Start
};

}  // namespace strata::runtime
