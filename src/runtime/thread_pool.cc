#include "strata/runtime/thread_pool.h"

#include <algorithm>
#include <exception>

namespace strata::runtime {

struct ThreadPool::Job {
  ThreadPool::RangeFunction fn;
  int64_t n, chunk;
  int64_t remaining;         // chunks not finished; guarded by the pool mutex
  std::exception_ptr error;  // the first exception a chunk threw
};

ThreadPool::ThreadPool(int num_threads) : num_threads_(std::max(1, num_threads)) {
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  work_available_.notify_all();
  for (auto& t : workers_) t.join();
}

// Runs one queued chunk with the lock released around the call.
bool ThreadPool::RunOneTask(std::unique_lock<std::mutex>& lock) {
  if (tasks_.empty()) return false;
  auto [job, index] = tasks_.front();
  tasks_.pop_front();
  lock.unlock();
  int64_t begin = index * job->chunk;
  std::exception_ptr error;
  try {
    job->fn(begin, std::min(job->n, begin + job->chunk));
  } catch (...) {
    error = std::current_exception();  // rethrown by the caller, never lost in a worker
  }
  lock.lock();
  if (error && !job->error) job->error = error;
  if (--job->remaining == 0) job_done_.notify_all();
  return true;
}

void ThreadPool::WorkerLoop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    work_available_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
    if (stopping_ && tasks_.empty()) return;
    RunOneTask(lock);
  }
}

void ThreadPool::Run(int64_t n, int64_t grain, RangeFunction fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  int64_t chunks = std::min<int64_t>(num_threads_, (n + grain - 1) / grain);
  if (chunks <= 1) {
    fn(0, n);
    return;
  }
  int64_t chunk = (n + chunks - 1) / chunks;
  chunks = (n + chunk - 1) / chunk;
  Job job{fn, n, chunk, chunks, nullptr};
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (int64_t i = 1; i < chunks; ++i) tasks_.push_back({&job, i});
  }
  work_available_.notify_all();
  std::exception_ptr error;
  try {
    fn(0, std::min(n, chunk));
  } catch (...) {
    error = std::current_exception();
  }
  std::unique_lock<std::mutex> lock(mutex_);
  --job.remaining;
  // Help with queued work (ours or another caller's) instead of idling.
  while (job.remaining > 0) {
    if (!RunOneTask(lock))
      job_done_.wait(lock, [&] { return job.remaining == 0 || !tasks_.empty(); });
  }
  if (!error) error = job.error;
  if (error) std::rethrow_exception(error);
}

}  // namespace strata::runtime
