// The MPI backend of runtime::Communicator. A call's members in this
// process first meet through an in-process communicator (each publishes its
// buffers and the call's signature); the first of them in group order, the
// leader, exchanges the process's share of the data with the other
// processes in the group and writes every local member's output; then they
// meet again, so no member returns while the leader still reads its input.
//
// Between two processes each exchange is one message per direction (split
// into pieces of at most 1 GiB), prefixed with a hash of the call's
// signature, which the receiver checks. Messages of one member set carry
// one tag (a hash of the set and of the communicator's generation): its
// calls run in the same order on every member, and MPI keeps the order of
// messages with one tag between two processes, so the k-th calls meet. No
// call blocks inside MPI: sends and receives are posted, then tested.
#include <mpi.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "mpi_internal.h"
#include "strata/core/error.h"
#include "strata/distributed/mpi.h"

namespace strata::distributed {
namespace {

using runtime::Collective;
using runtime::CollectiveCall;
using runtime::CollectiveName;

constexpr int64_t kPiece = int64_t{1} << 30;  // bytes per MPI message at most

uint64_t Mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h;
}

// What every member of a call must agree on.
uint64_t SignatureOf(const CollectiveCall& c) {
  uint64_t h = Mix(0, static_cast<uint64_t>(c.collective));
  for (int64_t m : c.group) h = Mix(h, static_cast<uint64_t>(m));
  bool reduces =
      c.collective == Collective::kAllReduce || c.collective == Collective::kReduceScatter;
  if (reduces) {
    h = Mix(h, static_cast<uint64_t>(c.dtype));
    h = Mix(h, static_cast<uint64_t>(c.reduce));
  }
  h = Mix(h, static_cast<uint64_t>(c.count));
  for (auto [s, t] : c.source_target_pairs) h = Mix(Mix(h, s), t);
  return h;
}

std::string Describe(const CollectiveCall& c) {
  return fmt::format("{}(count {}) over {{{}}}", CollectiveName(c.collective), c.count,
                     fmt::join(c.group, ","));
}

// One local member's buffers and signature, as the others of its process see them.
struct Published {
  const void* input;
  void* output;
  uint64_t signature;
  int64_t self;
};

// Receive buffers for reductions, kept between calls (and communicators):
// a fresh allocation of a large one costs more in page faults than the
// exchange. Uninitialized: every byte is received before it is read.
class Scratch {
 public:
  explicit Scratch(int64_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second >= bytes) {
        data_ = std::move(it->first);
        capacity_ = it->second;
        free_.erase(it);
        return;
      }
    }
    data_.reset(new uint8_t[std::max<int64_t>(bytes, 1)]);
    capacity_ = bytes;
  }
  ~Scratch() {
    std::lock_guard<std::mutex> lock(mutex_);
    free_.emplace_back(std::move(data_), capacity_);
    if (free_.size() > 8) {  // drop the smallest
      auto smallest = std::min_element(free_.begin(), free_.end(),
                                       [](auto& a, auto& b) { return a.second < b.second; });
      free_.erase(smallest);
    }
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  uint8_t* data() { return data_.get(); }

 private:
  std::unique_ptr<uint8_t[]> data_;
  int64_t capacity_ = 0;
  static inline std::mutex mutex_;
  static inline std::vector<std::pair<std::unique_ptr<uint8_t[]>, int64_t>> free_;
};

class MpiCommunicator final : public runtime::Communicator {
 public:
  MpiCommunicator(int64_t participants, std::chrono::milliseconds timeout)
      : Communicator(participants),
        timeout_(timeout),
        me_(Processes().rank),
        processes_(Processes().size),
        local_(ParticipantsOf(participants, me_, processes_)),
        // The local members wait for their leader while it waits for the other
        // processes: their timeout comes later, so the leader's names who is late.
        local_comm_(runtime::MakeInProcessCommunicator(local_.count,
                                                       2 * timeout + std::chrono::seconds(1))) {
    if (!Processes().mpi && processes_ > 1) Fail("[mpi] no MPI job");
    if (Processes().mpi) {
      comm_ = StrataComm();
      int* upper = nullptr;
      int found = 0;
      MPI_Comm_get_attr(comm_, MPI_TAG_UB, &upper, &found);
      tag_limit_ = found && upper ? *upper : 32767;
    }
  }

  void Abort(const std::string& reason) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!abort_reason_.empty()) return;
      abort_reason_ = reason;
    }
    local_comm_->Abort(reason);
  }

 protected:
  void Execute(const CollectiveCall& call) override {
    if (call.self < local_.first || call.self >= local_.first + local_.count) {
      Fail("[{}] participant {} belongs to process {}, not to this one (process {})",
           CollectiveName(call.collective), call.self, ProcessOf(call.self), me_);
    }
    ThrowIfAborted(call);
    // The members of this call in this process, in group order.
    std::vector<int64_t> locals, local_group;
    for (int64_t m : call.group) {
      if (ProcessOf(m) == me_) {
        locals.push_back(m);
        local_group.push_back(m - local_.first);
      }
    }
    const int64_t self_local = call.self - local_.first;
    Published mine{call.input, call.output, SignatureOf(call), call.self};
    std::vector<Published> published(locals.size());
    if (locals.size() > 1) {
      local_comm_->AllGather(self_local, local_group, &mine, published.data(), sizeof(Published));
      for (const Published& p : published) {
        if (p.signature != mine.signature) {
          std::string message = fmt::format(
              "[{}] participants disagree: participant {} and participant {} (both in process {}) "
              "made different calls; participant {} called {}",
              CollectiveName(call.collective), p.self, call.self, me_, call.self, Describe(call));
          Abort(message);
          throw Error(message);
        }
      }
    } else {
      published[0] = mine;
    }
    if (call.self == locals[0]) {
      try {
        Lead(call, published);
      } catch (const std::exception& e) {
        Abort(e.what());
        throw;
      }
    }
    if (locals.size() > 1) local_comm_->Barrier(self_local, local_group);
  }

 private:
  int ProcessOf(int64_t participant) const { return static_cast<int>(participant / local_.count); }

  void ThrowIfAborted(const CollectiveCall& call) {
    if (const std::string lost = LostPeer(); !lost.empty()) {
      Fail("[{}] {}", CollectiveName(call.collective), lost);
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (!abort_reason_.empty()) {
      Fail("[{}] aborted: {}", CollectiveName(call.collective), abort_reason_);
    }
  }

  // The tag of a member set: a hash of its sorted members and of this
  // communicator's generation, checked against the sets seen so far so that
  // two sets never share one.
  int TagOf(std::span<const int64_t> group) {
    // Groups come sorted as a rule: then no copy.
    std::vector<int64_t> sorted;
    std::span<const int64_t> members = group;
    if (!std::is_sorted(group.begin(), group.end())) {
      sorted.assign(group.begin(), group.end());
      std::sort(sorted.begin(), sorted.end());
      members = sorted;
    }
    uint64_t h = Mix(0, generation_);
    for (int64_t m : members) h = Mix(h, static_cast<uint64_t>(m));
    const int tag = static_cast<int>(h % static_cast<uint64_t>(tag_limit_));
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = tags_.find(tag);
    if (it == tags_.end()) {
      tags_.emplace(tag, std::vector<int64_t>(members.begin(), members.end()));
    } else if (!std::equal(it->second.begin(), it->second.end(), members.begin(), members.end())) {
      Fail("[mpi] member sets {{{}}} and {{{}}} hash to one MPI tag ({}); use other groups",
           fmt::join(it->second, ","), fmt::join(members, ","), tag);
    }
    return tag;
  }

  // One message to or from `peer`, straight from or into a buffer. The
  // messages for one peer go in the order given, and the two sides list
  // the same pieces in the same order: each send meets one receive.
  struct Piece {
    int peer;
    uint8_t* data;
    int64_t bytes;
  };

  // Sends and receives the pieces, each peer's led by the call's signature
  // (checked on arrival), runs `meanwhile` (this process's own share of the
  // work, which then overlaps the transfer), and waits for all, polling and
  // sleeping, within the timeout. `peers` are the processes to exchange
  // with (each sends and receives at least the signature).
  void Exchange(const CollectiveCall& call, const std::vector<int>& peers,
                const std::vector<Piece>& sends, const std::vector<Piece>& receives,
                const std::function<void()>& meanwhile = {}) {
    if (peers.empty()) {  // every member is in this process
      if (meanwhile) meanwhile();
      return;
    }
    const int tag = TagOf(call.group);
    uint64_t signature = SignatureOf(call);
    std::vector<MPI_Request> requests;
    requests.reserve(2 * peers.size() + sends.size() + receives.size());
    std::vector<size_t> arrival;                          // per peer: its signature's receive
    std::vector<uint64_t> their_signature(peers.size());  // by peer's position
    auto post = [&](bool send, int peer, uint8_t* data, int64_t bytes) {
      for (int64_t at = 0; at < bytes; at += kPiece) {
        const int n = static_cast<int>(std::min(kPiece, bytes - at));
        MPI_Request r;
        int rc = send ? MPI_Isend(data + at, n, MPI_BYTE, peer, tag, comm_, &r)
                      : MPI_Irecv(data + at, n, MPI_BYTE, peer, tag, comm_, &r);
        if (rc != MPI_SUCCESS) {
          Fail("[{}] MPI_{} to process {} failed (error {})", CollectiveName(call.collective),
               send ? "Isend" : "Irecv", peer, rc);
        }
        requests.push_back(r);
      }
    };
    for (size_t k = 0; k < peers.size(); ++k) {
      const int peer = peers[k];
      arrival.push_back(requests.size());
      post(false, peer, reinterpret_cast<uint8_t*>(&their_signature[k]), 8);
      for (const Piece& p : receives)
        if (p.peer == peer) post(false, peer, p.data, p.bytes);
    }
    for (int peer : peers) {
      post(true, peer, reinterpret_cast<uint8_t*>(&signature), 8);
      for (const Piece& p : sends)
        if (p.peer == peer) post(true, peer, p.data, p.bytes);
    }
    if (meanwhile) meanwhile();
    Wait(call, requests, peers, arrival);
    for (size_t k = 0; k < peers.size(); ++k) {
      const int peer = peers[k];
      if (their_signature[k] != signature) {
        Fail(
            "[{}] participants disagree: process {} made a different call on the member set of "
            "this call, {}",
            CollectiveName(call.collective), peer, Describe(call));
      }
    }
  }

  // Waits for every request. The first 20 us only test, without yielding
  // the core: a message already in flight lands in them (a yield is a
  // system call, about a microsecond in a VM, and a small collective takes
  // a few). Then `arrival[k]` (the index of the receive of peer k's
  // signature, its first message) tells whether peer k is still computing:
  // until it arrives the wait sleeps (after 100 us of yielding, longer and
  // longer, to 250 us) so it does not hold a core the peer may need; once
  // every peer has arrived, data is moving (a rendezvous needs each side
  // to test) and the wait only yields.
  void Wait(const CollectiveCall& call, std::vector<MPI_Request>& requests,
            const std::vector<int>& peers, const std::vector<size_t>& arrival) {
    const auto start = std::chrono::steady_clock::now();
    const auto deadline = start + timeout_;
    auto pause = std::chrono::microseconds(10);
    std::vector<bool> arrived(peers.size(), false);
    while (true) {
      int done = 0;
      int rc = MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done,
                           MPI_STATUSES_IGNORE);
      if (rc != MPI_SUCCESS) {
        Fail(
            "[{}] MPI failed while exchanging {} (error {}): the processes' messages disagree in "
            "size",
            CollectiveName(call.collective), Describe(call), rc);
      }
      if (done) return;
      // The first microseconds only test: a message in flight lands in them.
      const auto now = std::chrono::steady_clock::now();
      if (now - start < std::chrono::microseconds(20)) continue;
      bool everyone = true;
      for (size_t k = 0; k < peers.size(); ++k) {
        if (!arrived[k]) {
          int flag = 0;
          MPI_Test(&requests[arrival[k]], &flag, MPI_STATUS_IGNORE);
          arrived[k] = flag != 0;
        }
        everyone = everyone && arrived[k];
      }
      std::string aborted;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        aborted = abort_reason_;
      }
      const std::string lost = LostPeer();
      if (!aborted.empty() || !lost.empty() || now >= deadline) {
        std::vector<int> silent;
        for (size_t k = 0; k < peers.size(); ++k) {
          if (!arrived[k] || everyone) silent.push_back(peers[k]);
        }
        for (MPI_Request& r : requests) {
          if (r != MPI_REQUEST_NULL) MPI_Cancel(&r);
        }
        if (!lost.empty()) Fail("[{}] {}", CollectiveName(call.collective), lost);
        if (!aborted.empty()) Fail("[{}] aborted: {}", CollectiveName(call.collective), aborted);
        const std::vector<std::string>& hosts = Hosts();
        std::vector<std::string> where;
        for (int p : silent) where.push_back(fmt::format("{} on '{}'", p, hosts[p]));
        Fail(
            "[{}] timed out after {} ms waiting for process(es) {} in {} (this is process {} on "
            "'{}'): they died, hang, or are still busy; raise STRATA_COLLECTIVE_TIMEOUT_MS if "
            "they are just slow",
            CollectiveName(call.collective), timeout_.count(), fmt::join(where, ", "),
            Describe(call), me_, hosts[me_]);
      }
      if (everyone || now - start < std::chrono::microseconds(100)) {
        std::this_thread::yield();
        continue;
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(std::chrono::microseconds(250), pause * 2);
    }
  }

  // The other processes of the group, in order of their first member.
  std::vector<int> PeersOf(std::span<const int64_t> group) const {
    std::vector<int> peers;
    for (int64_t m : group) {
      int q = ProcessOf(m);
      if (q != me_ && std::find(peers.begin(), peers.end(), q) == peers.end()) peers.push_back(q);
    }
    return peers;
  }

  // The leader's part: every local member's output from everyone's input.
  // Long by design: one exchange (gather the group's inputs, combine, hand
  // each member its output) whose cases per collective share its buffers.
  void Lead(const CollectiveCall& call, const std::vector<Published>& locals) {
    const int64_t n = static_cast<int64_t>(call.group.size());
    std::vector<uint8_t*> input(n, nullptr);   // by rank: local inputs
    std::vector<uint8_t*> output(n, nullptr);  // by rank: local outputs
    {
      size_t k = 0;
      for (int64_t r = 0; r < n; ++r) {
        if (ProcessOf(call.group[r]) != me_) continue;
        // MPI_Isend takes a non-const pointer; the inputs are only read.
        input[r] = const_cast<uint8_t*>(static_cast<const uint8_t*>(locals[k].input));
        output[r] = static_cast<uint8_t*>(locals[k].output);
        ++k;
      }
    }
    const std::vector<int> peers = PeersOf(call.group);
    auto members_of = [&](int q) {
      std::vector<int64_t> ranks;
      for (int64_t r = 0; r < n; ++r)
        if (ProcessOf(call.group[r]) == q) ranks.push_back(r);
      return ranks;
    };
    const std::vector<int64_t> mine = members_of(me_);
    const int64_t first = mine[0];  // its output is filled first, then copied to the others
    auto copy_to_others = [&](int64_t bytes) {
      for (int64_t m : mine)
        if (m != first && bytes > 0) std::memcpy(output[m], output[first], bytes);
    };
    std::vector<Piece> sends, receives;

    switch (call.collective) {
      case Collective::kBarrier:
        Exchange(call, peers, sends, receives);
        return;

      case Collective::kAllGather: {
        const int64_t b = call.count;  // bytes per member
        if (b == 0) return Exchange(call, peers, sends, receives);
        for (int q : peers) {
          for (int64_t r : mine) sends.push_back({q, input[r], b});
          for (int64_t j : members_of(q)) receives.push_back({q, output[first] + j * b, b});
        }
        Exchange(call, peers, sends, receives, [&] {
          for (int64_t r : mine) std::memcpy(output[first] + r * b, input[r], b);
        });
        copy_to_others(n * b);
        return;
      }

      case Collective::kAllToAll: {
        // Block r of member j goes to member r.
        const int64_t b = call.count;
        if (b == 0) return Exchange(call, peers, sends, receives);
        for (int q : peers) {
          const std::vector<int64_t> theirs = members_of(q);
          for (int64_t j : mine)
            for (int64_t r : theirs) sends.push_back({q, input[j] + r * b, b});
          for (int64_t j : theirs)
            for (int64_t r : mine) receives.push_back({q, output[r] + j * b, b});
        }
        Exchange(call, peers, sends, receives, [&] {
          for (int64_t j : mine)
            for (int64_t r : mine) std::memcpy(output[r] + j * b, input[j] + r * b, b);
        });
        return;
      }

      case Collective::kReduceScatter: {
        // Member r takes the reduction of every member's block r: the other
        // processes' blocks for this process's members arrive in scratch.
        const int64_t element = DTypeSize(call.dtype);
        const int64_t b = call.count * element;
        std::map<int, std::unique_ptr<Scratch>> scratch;
        for (int q : peers) {
          const std::vector<int64_t> theirs = members_of(q);
          for (int64_t j : mine)
            for (int64_t r : theirs)
              if (b > 0) sends.push_back({q, input[j] + r * b, b});
          const int64_t blocks = static_cast<int64_t>(theirs.size() * mine.size());
          scratch[q] = std::make_unique<Scratch>(blocks * b);
          for (int64_t k = 0; b > 0 && k < blocks; ++k)
            receives.push_back({q, scratch[q]->data() + k * b, b});
        }
        Exchange(call, peers, sends, receives);
        std::vector<std::vector<const uint8_t*>> block(n, std::vector<const uint8_t*>(n, nullptr));
        for (int64_t j : mine)
          for (int64_t r : mine) block[j][r] = input[j] + r * b;
        for (int q : peers) {
          int64_t k = 0;
          for (int64_t j : members_of(q))
            for (int64_t r : mine) block[j][r] = scratch[q]->data() + (k++) * b;
        }
        for (int64_t r : mine) {
          std::vector<const void*> parts;
          for (int64_t j = 0; j < n; ++j) parts.push_back(block[j][r]);
          runtime::ReduceInOrder(call.dtype, call.reduce, parts, 0, output[r], call.count);
        }
        return;
      }

      case Collective::kAllReduce: {
        // Each process of the group reduces one share of the elements (in
        // group order, over every member) and sends it to the others.
        const int64_t element = DTypeSize(call.dtype);
        std::vector<int> order;  // the group's processes, in order of their first member
        for (int64_t r = 0; r < n; ++r) {
          int q = ProcessOf(call.group[r]);
          if (std::find(order.begin(), order.end(), q) == order.end()) order.push_back(q);
        }
        const int64_t shares = static_cast<int64_t>(order.size());
        const int64_t share = (call.count + shares - 1) / shares;
        auto range = [&](int q) {
          int64_t i = std::find(order.begin(), order.end(), q) - order.begin();
          int64_t begin = std::min(call.count, i * share);
          return std::make_pair(begin * element, std::min(call.count, begin + share) * element);
        };
        auto [my_begin, my_end] = range(me_);
        const int64_t my_bytes = my_end - my_begin;
        std::map<int, std::unique_ptr<Scratch>> scratch;  // the peers' members' slices of my share
        for (int q : peers) {
          auto [qb, qe] = range(q);
          for (int64_t r : mine)
            if (qe > qb) sends.push_back({q, input[r] + qb, qe - qb});
          const int64_t slices = static_cast<int64_t>(members_of(q).size());
          scratch[q] = std::make_unique<Scratch>(slices * my_bytes);
          for (int64_t k = 0; my_bytes > 0 && k < slices; ++k)
            receives.push_back({q, scratch[q]->data() + k * my_bytes, my_bytes});
        }
        Exchange(call, peers, sends, receives);
        std::vector<const void*> parts(n);
        for (int64_t r : mine) parts[r] = input[r] + my_begin;
        for (int q : peers) {
          int64_t k = 0;
          for (int64_t r : members_of(q)) parts[r] = scratch[q]->data() + (k++) * my_bytes;
        }
        // Into the first member's output (it may be its input: the fold
        // reads each tile before writing it).
        runtime::ReduceInOrder(call.dtype, call.reduce, parts, 0, output[first] + my_begin,
                               my_bytes / element);
        // Second round: every process's reduced share to the others, into
        // place.
        sends.clear();
        receives.clear();
        for (int q : peers) {
          auto [qb, qe] = range(q);
          if (my_bytes > 0) sends.push_back({q, output[first] + my_begin, my_bytes});
          if (qe > qb) receives.push_back({q, output[first] + qb, qe - qb});
        }
        Exchange(call, peers, sends, receives);
        copy_to_others(call.count * element);
        return;
      }

      case Collective::kCollectivePermute: {
        // The group is every participant in id order: rank == id.
        const int64_t b = call.count;
        std::vector<bool> received(n, false);
        for (auto [s, t] : call.source_target_pairs) {
          const bool s_here = ProcessOf(s) == me_, t_here = ProcessOf(t) == me_;
          if (s_here && t_here) {
            if (b > 0) std::memcpy(output[t], input[s], b);
            received[t] = true;
          } else if (s_here) {
            if (b > 0) sends.push_back({ProcessOf(t), input[s], b});
          } else if (t_here) {
            if (b > 0) receives.push_back({ProcessOf(s), output[t], b});
            received[t] = true;
          }
        }
        // Every process takes part (the group is everyone): the signatures
        // keep the peers' calls matched even when no data moves.
        Exchange(call, peers, sends, receives);
        for (int64_t m : mine) {
          if (!received[m] && b > 0) std::memset(output[m], 0, b);
        }
        return;
      }
    }
  }

  // Every process makes its communicators in the same order (the same SPMD
  // program), so the k-th has generation k everywhere: messages a failed
  // communicator left unreceived never meet a later one's.
  static inline std::atomic<uint64_t> next_generation_{0};
  const uint64_t generation_ = next_generation_++;
  const std::chrono::milliseconds timeout_;
  const int me_, processes_;
  const LocalParticipants local_;
  std::unique_ptr<runtime::Communicator> local_comm_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int tag_limit_ = 32767;
  std::mutex mutex_;
  std::string abort_reason_;
  std::map<int, std::vector<int64_t>> tags_;
};

}  // namespace

std::unique_ptr<runtime::Communicator> MakeMpiCommunicator(
    int64_t participants, std::optional<std::chrono::milliseconds> timeout) {
  std::chrono::milliseconds t = timeout ? *timeout : runtime::DefaultCollectiveTimeout();
  if (t.count() < 1) Fail("[communicator] the timeout must be positive, got {} ms", t.count());
  return std::make_unique<MpiCommunicator>(participants, t);
}

}  // namespace strata::distributed
