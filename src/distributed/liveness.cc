// Whether the job's other processes are still there. Each process tells
// every other one, once a second, that it is alive: one byte on a
// communicator of its own, sent and received by a thread of its own, so a
// process that computes alone for minutes (a compile, a checkpoint) is still
// heard, and a process whose host died, whose link is cut or which is
// stopped falls silent. A peer silent for the peer timeout is lost: the
// collectives waiting on it, and every later one, fail naming it and its
// host, long before their own timeout. A process that ends normally says
// so first, so its silence afterwards is not taken for a loss.
#include <mpi.h>

#include <fmt/format.h>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include "mpi_internal.h"

namespace strata::distributed {
namespace {

using Clock = std::chrono::steady_clock;

constexpr unsigned char kAlive = 1, kLeaving = 2;
constexpr auto kTick = std::chrono::milliseconds(100);
constexpr auto kBeat = std::chrono::milliseconds(1000);

class Liveness {
 public:
  Liveness(MPI_Comm comm, int me, std::vector<std::string> hosts, std::chrono::milliseconds timeout)
      : comm_(comm), me_(me), hosts_(std::move(hosts)), timeout_(timeout), thread_([this] {
          Run();
        }) {}

  ~Liveness() { Stop(); }

  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopping_) return;
      stopping_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }

  std::string Lost() {
    if (!lost_any_.load(std::memory_order_acquire)) return "";
    std::lock_guard<std::mutex> lock(mutex_);
    return lost_;
  }

 private:
  int size() const { return static_cast<int>(hosts_.size()); }

  void Run() {
    const int n = size();
    std::vector<unsigned char> inbox(n, 0);
    std::vector<MPI_Request> receives(n, MPI_REQUEST_NULL), sends(n, MPI_REQUEST_NULL);
    std::vector<Clock::time_point> heard(n, Clock::now());
    std::vector<bool> left(n, false);
    for (int p = 0; p < n; ++p) {
      if (p != me_) MPI_Irecv(&inbox[p], 1, MPI_BYTE, p, 0, comm_, &receives[p]);
    }
    Clock::time_point next_beat = Clock::now();
    while (true) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        if (wake_.wait_for(lock, kTick, [&] { return stopping_; })) break;
      }
      const Clock::time_point now = Clock::now();
      for (int p = 0; p < n; ++p) {
        if (p == me_ || left[p]) continue;
        int arrived = 0;
        MPI_Test(&receives[p], &arrived, MPI_STATUS_IGNORE);
        while (arrived && !left[p]) {
          heard[p] = now;
          left[p] = inbox[p] == kLeaving;
          if (left[p]) break;
          MPI_Irecv(&inbox[p], 1, MPI_BYTE, p, 0, comm_, &receives[p]);
          MPI_Test(&receives[p], &arrived, MPI_STATUS_IGNORE);
        }
        if (!left[p] && now - heard[p] > timeout_) Lose(p, now - heard[p]);
      }
      if (now >= next_beat) {
        Send(sends, kAlive);
        next_beat = now + kBeat;
      }
    }
    // Leaving: the peers learn it, then this process's pending receives go.
    Send(sends, kLeaving);
    const Clock::time_point give_up = Clock::now() + std::chrono::seconds(1);
    for (MPI_Request& r : sends) {
      int done = r == MPI_REQUEST_NULL;
      while (!done && Clock::now() < give_up) {
        MPI_Test(&r, &done, MPI_STATUS_IGNORE);
        if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      if (!done) MPI_Request_free(&r);  // a peer that is gone; MPI sends it or drops it
    }
    for (MPI_Request& r : receives) {
      if (r == MPI_REQUEST_NULL) continue;
      MPI_Cancel(&r);
      MPI_Wait(&r, MPI_STATUS_IGNORE);
    }
  }

  // One byte to every peer whose last one has gone (a peer that reads
  // nothing holds at most one of ours).
  void Send(std::vector<MPI_Request>& sends, unsigned char what) {
    static const unsigned char kWords[3] = {0, kAlive, kLeaving};
    for (int p = 0; p < size(); ++p) {
      if (p == me_) continue;
      int done = 1;
      if (sends[p] != MPI_REQUEST_NULL) MPI_Test(&sends[p], &done, MPI_STATUS_IGNORE);
      if (!done && what == kLeaving) {
        MPI_Request_free(&sends[p]);
        done = 1;
      }
      if (done) {
        MPI_Isend(const_cast<unsigned char*>(&kWords[what]), 1, MPI_BYTE, p, 0, comm_, &sends[p]);
      }
    }
  }

  void Lose(int peer, Clock::duration silent) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!lost_.empty()) return;
    lost_ = fmt::format(
        "lost process {} (on host '{}'): nothing heard from it for {} ms (this is process {} on "
        "host '{}'): its host went down, the network link to it is cut, or it is stopped; raise "
        "STRATA_PEER_TIMEOUT_MS if it is only slow to be scheduled",
        peer, hosts_[peer], std::chrono::duration_cast<std::chrono::milliseconds>(silent).count(),
        me_, hosts_[me_]);
    lost_any_.store(true, std::memory_order_release);
  }

  const MPI_Comm comm_;
  const int me_;
  const std::vector<std::string> hosts_;
  const std::chrono::milliseconds timeout_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::string lost_;
  std::atomic<bool> lost_any_{false};
  std::thread thread_;  // last: it starts once the rest is made
};

std::mutex liveness_mutex;
std::unique_ptr<Liveness> liveness;
std::atomic<Liveness*> watching{nullptr};  // liveness, once made (read without the mutex)

}  // namespace

void StartLiveness(MPI_Comm comm, int me, const std::vector<std::string>& hosts,
                   std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lock(liveness_mutex);
  if (liveness || hosts.size() < 2 || timeout.count() <= 0) return;
  liveness = std::make_unique<Liveness>(comm, me, hosts, timeout);
  watching.store(liveness.get(), std::memory_order_release);
}

void StopLiveness() {
  std::lock_guard<std::mutex> lock(liveness_mutex);
  if (liveness) liveness->Stop();
}

std::string LostPeer() {
  Liveness* l = watching.load(std::memory_order_acquire);
  return l ? l->Lost() : std::string();
}

}  // namespace strata::distributed
