#include "async_collectives.h"

#include <fmt/format.h>

#include "strata/core/error.h"
#include "strata/runtime/communicator.h"
#include "strata/runtime/trace.h"

namespace strata::runtime {

AsyncCollectives::AsyncCollectives(Communicator* communicator, int64_t partition)
    : communicator_(communicator), partition_(partition) {}

AsyncCollectives::~AsyncCollectives() {
  {
    std::unique_lock lock(mutex_);
    bool in_flight = false;
    for (const auto& [start, p] : pending_) in_flight = in_flight || !p.done;
    if (in_flight && communicator_) {
      lock.unlock();
      communicator_->Abort(
          fmt::format("partition {} stopped with collectives in flight", partition_));
      lock.lock();
    }
    stop_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void AsyncCollectives::Start(const hlo::Instruction* start, std::function<void()> work) {
  {
    std::lock_guard lock(mutex_);
    auto [it, added] = pending_.try_emplace(start);
    if (!added) {
      Fail("[runtime] {} started again before its -done waited for it", start->name());
    }
    queue_.emplace_back(start, std::move(work));
    if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
  }
  changed_.notify_all();
}

void AsyncCollectives::Wait(const hlo::Instruction* start) {
  std::unique_lock lock(mutex_);
  auto it = pending_.find(start);
  if (it == pending_.end()) {
    Fail("[runtime] {}: its -done waits for a collective that was not started", start->name());
  }
  changed_.wait(lock, [&] { return it->second.done; });
  std::exception_ptr error = it->second.error;
  pending_.erase(it);
  if (error) std::rethrow_exception(error);
}

void AsyncCollectives::WaitAll() {
  std::unique_lock lock(mutex_);
  if (pending_.empty()) return;
  changed_.wait(lock, [&] {
    for (const auto& [start, p] : pending_) {
      if (!p.done) return false;
    }
    return true;
  });
  // Each stays for its -done, which then returns at once.
  for (const auto& [start, p] : pending_) {
    if (p.error) std::rethrow_exception(p.error);
  }
}

void AsyncCollectives::Loop() {
  if (trace::Enabled()) trace::SetThreadName(fmt::format("partition {} collectives", partition_));
  std::unique_lock lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopped, nothing left
    auto [start, work] = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    std::exception_ptr error;
    try {
      trace::Span span("collective", start->name());
      work();
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    Pending& p = pending_[start];
    p.done = true;
    p.error = error;
    changed_.notify_all();
  }
}

}  // namespace strata::runtime
