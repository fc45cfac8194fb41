// A fixed pool of worker threads for data-parallel loops. Idle workers block
// (they never spin), so the BLAS library's own threads get the cores while a
// GEMM runs. Several threads may call ParallelFor at once.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace strata::runtime {

class ThreadPool {
 public:
  // num_threads counts the calling thread: 1 means run everything inline.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }
  // Calls fn(begin, end) over [0, n) in chunks of at least `grain` items.
  // Takes the callable by reference: no allocation per call.
  template <typename F>
  void ParallelFor(int64_t n, int64_t grain, F&& fn) {
    using Fn = std::remove_reference_t<F>;
    RangeFunction ref{const_cast<void*>(static_cast<const void*>(&fn)),
                      [](void* f, int64_t lo, int64_t hi) { (*static_cast<Fn*>(f))(lo, hi); }};
    Run(n, grain, ref);
  }

 private:
  struct RangeFunction {
    void* object;
    void (*call)(void*, int64_t, int64_t);
    void operator()(int64_t lo, int64_t hi) const { call(object, lo, hi); }
  };
  struct Job;
  void Run(int64_t n, int64_t grain, RangeFunction fn);
  void WorkerLoop();
  bool RunOneTask(std::unique_lock<std::mutex>& lock);

  int num_threads_;
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable work_available_;
  std::condition_variable job_done_;
  std::deque<std::pair<Job*, int64_t>> tasks_;
  bool stopping_ = false;
};

}  // namespace strata::runtime
