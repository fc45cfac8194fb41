// The Communicator's argument checks and byte accounting, the in-order
// reduction every backend shares, and the in-process backend: one rendezvous
// per (member set, call number) where each member publishes its buffers,
// waits for the others on a condition variable, does its part by reading
// their inputs directly, and waits again until nobody reads its input.
#include "strata/runtime/communicator.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <complex>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <type_traits>

#include "strata/core/config.h"
#include "strata/core/error.h"
#include "strata/hlo/literal.h"

namespace strata::runtime {

std::string_view ReduceKindName(ReduceKind kind) {
  switch (kind) {
    case ReduceKind::kSum:
      return "sum";
    case ReduceKind::kProduct:
      return "product";
    case ReduceKind::kMax:
      return "max";
    case ReduceKind::kMin:
      return "min";
    case ReduceKind::kAnd:
      return "and";
    case ReduceKind::kOr:
      return "or";
  }
  return "?";
}

bool IsReductionDefined(DType dtype, ReduceKind kind) {
  bool bitwise = kind == ReduceKind::kAnd || kind == ReduceKind::kOr;
  bool arithmetic = kind == ReduceKind::kSum || kind == ReduceKind::kProduct;
  if (IsFloating(dtype)) return !bitwise;
  if (IsComplex(dtype)) return arithmetic;  // complex numbers have no order
  if (dtype == DType::kPred) return !arithmetic;
  return dtype != DType::kToken;
}

std::string_view CollectiveName(Collective collective) {
  static constexpr std::string_view kNames[] = {
      "all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute", "barrier"};
  return kNames[static_cast<size_t>(collective)];
}

// ---------------------------------------------------------------------------
// The in-order reduction.

namespace {

template <typename T>
T Sum(T a, T b) {
  if constexpr (std::is_integral_v<T>) {  // wraps, as XLA's integer add; no signed-overflow UB
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return a + b;
  }
}
template <typename T>
T Product(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::common_type_t<std::make_unsigned_t<T>, unsigned>;  // no promotion to int
    return static_cast<T>(U(static_cast<std::make_unsigned_t<T>>(a)) *
                          U(static_cast<std::make_unsigned_t<T>>(b)));
  } else {
    return a * b;
  }
}
template <typename T>
T Max(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (a != a) return a;
    if (b != b) return b;
  }
  return a < b ? b : a;
}
template <typename T>
T Min(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (a != a) return a;
    if (b != b) return b;
  }
  return b < a ? b : a;
}

// Folds tiles of `Acc` on the stack: each tile of every input is read before
// the output tile is written, so the output may be one of the inputs.
template <typename Storage, typename Acc, typename Widen, typename Narrow, typename Op>
void Fold(std::span<const void* const> inputs, int64_t offset, void* output, int64_t count,
          Widen widen, Narrow narrow, Op op) {
  constexpr int64_t kTile = 512;
  Acc acc[kTile];
  Storage* out = static_cast<Storage*>(output);
  for (int64_t t = 0; t < count; t += kTile) {
    const int64_t len = std::min(kTile, count - t);
    const Storage* first = static_cast<const Storage*>(inputs[0]) + offset + t;
    for (int64_t i = 0; i < len; ++i) acc[i] = widen(first[i]);
    for (size_t j = 1; j < inputs.size(); ++j) {
      const Storage* in = static_cast<const Storage*>(inputs[j]) + offset + t;
      for (int64_t i = 0; i < len; ++i) acc[i] = op(acc[i], widen(in[i]));
    }
    for (int64_t i = 0; i < len; ++i) out[t + i] = narrow(acc[i]);
  }
}

template <typename Storage, typename Acc, typename Widen, typename Narrow>
void FoldKind(ReduceKind kind, std::span<const void* const> inputs, int64_t offset, void* output,
              int64_t count, Widen widen, Narrow narrow) {
  auto fold = [&](auto op) {
    Fold<Storage, Acc>(inputs, offset, output, count, widen, narrow, op);
  };
  switch (kind) {
    case ReduceKind::kSum:
      return fold(Sum<Acc>);
    case ReduceKind::kProduct:
      return fold(Product<Acc>);
    case ReduceKind::kMax:
    case ReduceKind::kMin:
      if constexpr (std::is_arithmetic_v<Acc>) {
        return kind == ReduceKind::kMax ? fold(Max<Acc>) : fold(Min<Acc>);
      }
      break;
    case ReduceKind::kAnd:
    case ReduceKind::kOr:
      if constexpr (std::is_integral_v<Acc>) {
        if (kind == ReduceKind::kAnd) return fold([](Acc a, Acc b) { return Acc(a & b); });
        return fold([](Acc a, Acc b) { return Acc(a | b); });
      }
      break;
  }
  STRATA_CHECK(false, "reduction {} reached an element type without it", ReduceKindName(kind));
}

template <typename T>
void FoldSame(ReduceKind kind, std::span<const void* const> inputs, int64_t offset, void* output,
              int64_t count) {
  auto same = [](T x) { return x; };
  FoldKind<T, T>(kind, inputs, offset, output, count, same, same);
}

}  // namespace

void ReduceInOrder(DType dtype, ReduceKind kind, std::span<const void* const> inputs,
                   int64_t offset, void* output, int64_t count) {
  if (!IsReductionDefined(dtype, kind)) {
    Fail("[reduce] {} is not defined on {}", ReduceKindName(kind), DTypeName(dtype));
  }
  if (inputs.empty() || count <= 0) return;
  switch (dtype) {
    case DType::kPred:  // bytes 0 / 1: and, or, max (= or) and min (= and) stay 0 / 1
    case DType::kU8:
      return FoldSame<uint8_t>(kind, inputs, offset, output, count);
    case DType::kS8:
      return FoldSame<int8_t>(kind, inputs, offset, output, count);
    case DType::kS16:
      return FoldSame<int16_t>(kind, inputs, offset, output, count);
    case DType::kU16:
      return FoldSame<uint16_t>(kind, inputs, offset, output, count);
    case DType::kC64:
      return FoldSame<std::complex<float>>(kind, inputs, offset, output, count);
    case DType::kC128:
      return FoldSame<std::complex<double>>(kind, inputs, offset, output, count);
    case DType::kToken:
      return;
    case DType::kS32:
      return FoldSame<int32_t>(kind, inputs, offset, output, count);
    case DType::kS64:
      return FoldSame<int64_t>(kind, inputs, offset, output, count);
    case DType::kU32:
      return FoldSame<uint32_t>(kind, inputs, offset, output, count);
    case DType::kU64:
      return FoldSame<uint64_t>(kind, inputs, offset, output, count);
    case DType::kF32:
      return FoldSame<float>(kind, inputs, offset, output, count);
    case DType::kF64:
      return FoldSame<double>(kind, inputs, offset, output, count);
    case DType::kF16:
      return FoldKind<uint16_t, float>(
          kind, inputs, offset, output, count, [](uint16_t h) { return hlo::HalfToFloat(h); },
          [](float f) { return hlo::FloatToHalf(f); });
    case DType::kBF16:
      return FoldKind<uint16_t, float>(
          kind, inputs, offset, output, count, [](uint16_t b) { return hlo::BFloat16ToFloat(b); },
          [](float f) { return hlo::FloatToBFloat16(f); });
  }
}

// ---------------------------------------------------------------------------
// Communicator: argument checks shared by every backend, and byte accounting.

Communicator::Communicator(int64_t size) : size_(size) {
  if (size < 1) Fail("[communicator] needs at least one participant, got {}", size);
  everyone_.resize(size);
  for (int64_t i = 0; i < size; ++i) everyone_[i] = i;
  bytes_sent_ = std::make_unique<std::atomic<int64_t>[]>(size);
  ResetBytesSent();
}

Communicator::~Communicator() = default;

int64_t Communicator::bytes_sent(int64_t participant) const {
  if (participant < 0 || participant >= size_) {
    Fail("[communicator] participant {} out of range: there are {}", participant, size_);
  }
  return bytes_sent_[participant].load(std::memory_order_relaxed);
}

void Communicator::ResetBytesSent() {
  for (int64_t i = 0; i < size_; ++i) bytes_sent_[i].store(0, std::memory_order_relaxed);
}

namespace {

std::string GroupToString(std::span<const int64_t> group) {
  return fmt::format("{{{}}}", fmt::join(group, ","));
}

int64_t BytesSent(const CollectiveCall& call) {
  const int64_t n = static_cast<int64_t>(call.group.size());
  if (n == 1) return 0;
  switch (call.collective) {
    case Collective::kAllReduce:
      return 2 * (n - 1) * call.input_bytes / n;
    case Collective::kAllGather:  // its input to each other member
      return (n - 1) * call.input_bytes;
    case Collective::kReduceScatter:  // ring: one block per step, n-1 steps
      return (n - 1) * call.output_bytes;
    case Collective::kAllToAll:  // every block but its own
      return (n - 1) * call.count;
    case Collective::kCollectivePermute:
      for (const auto& [source, target] : call.source_target_pairs) {
        if (source == call.self && target != call.self) return call.input_bytes;
      }
      return 0;
    case Collective::kBarrier:
      return 0;
  }
  return 0;
}

}  // namespace

void Communicator::Run(CollectiveCall& call) {
  const std::string_view name = CollectiveName(call.collective);
  auto fail = [&](const std::string& message) {
    Abort(message);  // the members' call sequences diverge from here
    throw Error(message);
  };
  auto check_id = [&](int64_t id) {
    if (id < 0 || id >= size_) {
      fail(fmt::format("[{}] participant {} out of range: the communicator has {}", name, id,
                       size_));
    }
  };
  check_id(call.self);
  if (call.group.empty()) fail(fmt::format("[{}] the group is empty", name));
  call.rank = -1;
  std::vector<uint8_t> seen(size_), sends(size_), receives(size_);
  for (size_t i = 0; i < call.group.size(); ++i) {
    const int64_t id = call.group[i];
    check_id(id);
    if (seen[id]++) {
      fail(fmt::format("[{}] group {} names participant {} twice", name, GroupToString(call.group),
                       id));
    }
    if (id == call.self) call.rank = static_cast<int64_t>(i);
  }
  if (call.rank < 0) {
    fail(fmt::format("[{}] participant {} is not in its group {}", name, call.self,
                     GroupToString(call.group)));
  }
  for (auto [source, target] : call.source_target_pairs) {
    check_id(source);
    check_id(target);
    if (sends[source]++)
      fail(fmt::format("[{}] participant {} is the source of two pairs", name, source));
    if (receives[target]++)
      fail(fmt::format("[{}] participant {} is the target of two pairs", name, target));
  }
  if (call.count < 0) fail(fmt::format("[{}] size {} is negative", name, call.count));
  bool reduces =
      call.collective == Collective::kAllReduce || call.collective == Collective::kReduceScatter;
  if (reduces && !IsReductionDefined(call.dtype, call.reduce)) {
    fail(fmt::format("[{}] {} is not defined on {}{}", name, ReduceKindName(call.reduce),
                     DTypeName(call.dtype),
                     call.dtype == DType::kPred ? " (use or / and)" : " (and / or need integers)"));
  }
  if ((call.input_bytes > 0 && !call.input) || (call.output_bytes > 0 && !call.output)) {
    fail(fmt::format("[{}] participant {} passed a null buffer for {} bytes", name, call.self,
                     std::max(call.input_bytes, call.output_bytes)));
  }
  auto in = reinterpret_cast<uintptr_t>(call.input), out = reinterpret_cast<uintptr_t>(call.output);
  bool overlap = call.input_bytes > 0 && call.output_bytes > 0 &&
                 in < out + static_cast<uintptr_t>(call.output_bytes) &&
                 out < in + static_cast<uintptr_t>(call.input_bytes);
  bool in_place = call.collective == Collective::kAllReduce && in == out;
  if (overlap && !in_place) {
    fail(fmt::format(
        "[{}] participant {}'s input and output overlap{}", name, call.self,
        call.collective == Collective::kAllReduce ? " (only input == output may)" : ""));
  }
  Execute(call);
  bytes_sent_[call.self].fetch_add(BytesSent(call), std::memory_order_relaxed);
}

void Communicator::AllReduce(int64_t self, std::span<const int64_t> group, DType dtype,
                             ReduceKind kind, const void* input, void* output, int64_t count) {
  int64_t bytes = count * DTypeSize(dtype);
  CollectiveCall call{.collective = Collective::kAllReduce,
                      .self = self,
                      .group = group,
                      .dtype = dtype,
                      .reduce = kind,
                      .count = count,
                      .input = input,
                      .output = output,
                      .input_bytes = bytes,
                      .output_bytes = bytes};
  Run(call);
}

void Communicator::AllGather(int64_t self, std::span<const int64_t> group, const void* input,
                             void* output, int64_t bytes_per_member) {
  CollectiveCall call{.collective = Collective::kAllGather,
                      .self = self,
                      .group = group,
                      .count = bytes_per_member,
                      .input = input,
                      .output = output,
                      .input_bytes = bytes_per_member,
                      .output_bytes = bytes_per_member * static_cast<int64_t>(group.size())};
  Run(call);
}

void Communicator::ReduceScatter(int64_t self, std::span<const int64_t> group, DType dtype,
                                 ReduceKind kind, const void* input, void* output,
                                 int64_t count_per_member) {
  int64_t block = count_per_member * DTypeSize(dtype);
  CollectiveCall call{.collective = Collective::kReduceScatter,
                      .self = self,
                      .group = group,
                      .dtype = dtype,
                      .reduce = kind,
                      .count = count_per_member,
                      .input = input,
                      .output = output,
                      .input_bytes = block * static_cast<int64_t>(group.size()),
                      .output_bytes = block};
  Run(call);
}

void Communicator::AllToAll(int64_t self, std::span<const int64_t> group, const void* input,
                            void* output, int64_t bytes_per_block) {
  int64_t bytes = bytes_per_block * static_cast<int64_t>(group.size());
  CollectiveCall call{.collective = Collective::kAllToAll,
                      .self = self,
                      .group = group,
                      .count = bytes_per_block,
                      .input = input,
                      .output = output,
                      .input_bytes = bytes,
                      .output_bytes = bytes};
  Run(call);
}

void Communicator::CollectivePermute(int64_t self,
                                     std::span<const std::pair<int64_t, int64_t>> pairs,
                                     const void* input, void* output, int64_t bytes) {
  CollectiveCall call{.collective = Collective::kCollectivePermute,
                      .self = self,
                      .group = everyone_,
                      .count = bytes,
                      .source_target_pairs = pairs,
                      .input = input,
                      .output = output,
                      .input_bytes = bytes,
                      .output_bytes = bytes};
  Run(call);
}

void Communicator::Barrier(int64_t self, std::span<const int64_t> group) {
  CollectiveCall call{.collective = Collective::kBarrier, .self = self, .group = group};
  Run(call);
}

// ---------------------------------------------------------------------------
// The in-process backend.

namespace {

// What every member of one rendezvous must agree on.
struct Signature {
  Collective collective;
  std::vector<int64_t> group;
  DType dtype;
  ReduceKind reduce;
  int64_t count;
  std::vector<std::pair<int64_t, int64_t>> pairs;

  static Signature Of(const CollectiveCall& c) {
    bool reduces =
        c.collective == Collective::kAllReduce || c.collective == Collective::kReduceScatter;
    return {c.collective,
            {c.group.begin(), c.group.end()},
            reduces ? c.dtype : DType::kU8,
            reduces ? c.reduce : ReduceKind::kSum,
            c.count,
            {c.source_target_pairs.begin(), c.source_target_pairs.end()}};
  }
  bool operator==(const Signature&) const = default;

  std::string ToString() const {
    std::string name(CollectiveName(collective));
    std::string over = " over " + GroupToString(group);
    switch (collective) {
      case Collective::kAllReduce:
      case Collective::kReduceScatter:
        return fmt::format("{}({}, {}, {} elements{}){}", name, ReduceKindName(reduce),
                           DTypeName(dtype), count,
                           collective == Collective::kReduceScatter ? " per member" : "", over);
      case Collective::kAllGather:
        return fmt::format("{}({} bytes per member){}", name, count, over);
      case Collective::kAllToAll:
        return fmt::format("{}({} bytes per block){}", name, count, over);
      case Collective::kCollectivePermute: {
        std::vector<std::string> arrows;
        for (auto [s, t] : pairs) arrows.push_back(fmt::format("{}->{}", s, t));
        return fmt::format("{}({} bytes, pairs {{{}}})", name, count, fmt::join(arrows, ","));
      }
      case Collective::kBarrier:
        return name + over;
    }
    return name;
  }
};

struct Rendezvous;

// The calls on one set of participants (sorted ids): each member numbers its
// own calls, and the k-th calls of all members meet in one rendezvous.
struct MemberSet {
  std::vector<int64_t> next_call;                          // by position in the sorted set
  std::map<int64_t, std::shared_ptr<Rendezvous>> pending;  // by call number
};

struct Rendezvous {
  Rendezvous(Signature s, int64_t first, int64_t call_number, MemberSet* owner)
      : signature(std::move(s)), first_member(first), sequence(call_number), set(owner) {
    size_t n = signature.group.size();
    inputs.resize(n);
    outputs.resize(n);
    arrived.resize(n);
  }
  Signature signature;  // of the first member to arrive
  int64_t first_member;
  int64_t sequence;
  MemberSet* set;
  // By rank; written under the communicator's mutex before the last member
  // arrives, read by everyone after (no writes then).
  std::vector<const void*> inputs;
  std::vector<void*> outputs;
  std::vector<bool> arrived;
  int64_t num_arrived = 0, num_finished = 0;
  std::string error;  // the members disagreed: every member throws this
  std::condition_variable cv;
};

class InProcessCommunicator final : public Communicator {
 public:
  InProcessCommunicator(int64_t participants, std::chrono::milliseconds timeout)
      : Communicator(participants), timeout_(timeout) {}

  void Abort(const std::string& reason) override {
    std::lock_guard<std::mutex> lock(mutex_);
    AbortLocked(reason);
  }

 protected:
  void Execute(const CollectiveCall& call) override {
    std::shared_ptr<Rendezvous> rendezvous = Join(call);
    Contribute(call, *rendezvous);
    // Our input must stay valid until every member has finished reading it,
    // so this wait ignores aborts and timeouts: the others are not waiting
    // on anything, only copying.
    std::unique_lock<std::mutex> lock(mutex_);
    const int64_t n = static_cast<int64_t>(call.group.size());
    if (++rendezvous->num_finished == n) {
      rendezvous->set->pending.erase(rendezvous->sequence);
      rendezvous->cv.notify_all();
    } else {
      rendezvous->cv.wait(lock, [&] { return rendezvous->num_finished == n; });
    }
  }

 private:
  void AbortLocked(const std::string& reason) {
    if (!abort_reason_) abort_reason_ = reason;
    for (auto& [members, set] : sets_) {
      for (auto& [sequence, rendezvous] : set.pending) rendezvous->cv.notify_all();
    }
  }

  [[noreturn]] void ThrowAborted(const CollectiveCall& call) {
    Fail("[{}] aborted: {}", CollectiveName(call.collective), *abort_reason_);
  }

  // Publishes the call's buffers and returns once every member has (the
  // rendezvous is then committed: everyone completes it, abort or not).
  std::shared_ptr<Rendezvous> Join(const CollectiveCall& call) {
    std::vector<int64_t> members(call.group.begin(), call.group.end());
    std::sort(members.begin(), members.end());
    const int64_t n = static_cast<int64_t>(members.size());

    std::unique_lock<std::mutex> lock(mutex_);
    MemberSet& set = sets_[members];
    if (set.next_call.empty()) set.next_call.assign(n, 0);
    int64_t position =
        std::lower_bound(members.begin(), members.end(), call.self) - members.begin();
    const int64_t sequence = set.next_call[position]++;
    auto found = set.pending.find(sequence);
    if (found != set.pending.end() && !found->second->error.empty()) {
      throw Error(found->second->error);
    }
    if (abort_reason_) ThrowAborted(call);
    Signature mine = Signature::Of(call);
    if (found == set.pending.end()) {
      found = set.pending
                  .emplace(sequence, std::make_shared<Rendezvous>(mine, call.self, sequence, &set))
                  .first;
    } else if (!(found->second->signature == mine)) {
      Rendezvous& r = *found->second;
      r.error = fmt::format(
          "[{}] participants disagree on call #{} over the set {}: participant {} called {}, "
          "participant {} called {}",
          CollectiveName(call.collective), sequence, GroupToString(members), r.first_member,
          r.signature.ToString(), call.self, mine.ToString());
      AbortLocked(r.error);
      throw Error(r.error);
    }
    std::shared_ptr<Rendezvous> rendezvous = found->second;
    Rendezvous& r = *rendezvous;
    r.inputs[call.rank] = call.input;
    r.outputs[call.rank] = call.output;
    r.arrived[call.rank] = true;
    if (++r.num_arrived == n) {
      r.cv.notify_all();
      return rendezvous;
    }
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    while (r.num_arrived < n) {
      if (!r.error.empty()) throw Error(r.error);
      if (abort_reason_) ThrowAborted(call);
      if (std::chrono::steady_clock::now() >= deadline) {
        std::vector<int64_t> absent, present;
        for (int64_t i = 0; i < n; ++i) (r.arrived[i] ? present : absent).push_back(call.group[i]);
        std::string message = fmt::format(
            "[{}] timed out after {} ms: participant(s) {} of group {} never arrived (call #{} "
            "over this set; arrived: {}). Raise STRATA_COLLECTIVE_TIMEOUT_MS if they are just slow",
            CollectiveName(call.collective), timeout_.count(), GroupToString(absent),
            GroupToString(call.group), sequence, GroupToString(present));
        AbortLocked(message);
        throw Error(message);
      }
      r.cv.wait_until(lock, deadline);
    }
    return rendezvous;
  }

  // This member's part, outside the lock: reads the others' inputs, writes
  // outputs. All-reduce splits the elements: each member reduces its share
  // and writes it into every member's output, so the work is spread.
  static void Contribute(const CollectiveCall& call, const Rendezvous& r) {
    const int64_t n = static_cast<int64_t>(call.group.size());
    const int64_t rank = call.rank;
    auto* out = static_cast<uint8_t*>(call.output);
    auto input = [&](int64_t j) { return static_cast<const uint8_t*>(r.inputs[j]); };
    switch (call.collective) {
      case Collective::kAllReduce: {
        const int64_t element = DTypeSize(call.dtype);
        const int64_t line = std::max<int64_t>(1, 64 / element);  // shares end on cache lines
        int64_t share = (call.count + n - 1) / n;
        share = (share + line - 1) / line * line;
        const int64_t begin = std::min(call.count, rank * share);
        const int64_t end = std::min(call.count, begin + share);
        constexpr int64_t kTile = 4096;  // reduced, then copied out while in cache
        for (int64_t t = begin; t < end; t += kTile) {
          const int64_t len = std::min(kTile, end - t);
          ReduceInOrder(call.dtype, call.reduce, r.inputs, t, out + t * element, len);
          for (int64_t j = 0; j < n; ++j) {
            if (j == rank) continue;
            std::memcpy(static_cast<uint8_t*>(r.outputs[j]) + t * element, out + t * element,
                        len * element);
          }
        }
        return;
      }
      case Collective::kAllGather:
        if (call.count == 0) return;
        for (int64_t j = 0; j < n; ++j) std::memcpy(out + j * call.count, input(j), call.count);
        return;
      case Collective::kReduceScatter:
        ReduceInOrder(call.dtype, call.reduce, r.inputs, rank * call.count, out, call.count);
        return;
      case Collective::kAllToAll:
        if (call.count == 0) return;
        for (int64_t j = 0; j < n; ++j) {
          std::memcpy(out + j * call.count, input(j) + rank * call.count, call.count);
        }
        return;
      case Collective::kCollectivePermute: {
        if (call.count == 0) return;
        for (auto [source, target] : call.source_target_pairs) {
          if (target == call.self) {  // the group is every participant: rank == id
            std::memcpy(out, input(source), call.count);
            return;
          }
        }
        std::memset(out, 0, call.count);
        return;
      }
      case Collective::kBarrier:
        return;
    }
  }

  const std::chrono::milliseconds timeout_;
  std::mutex mutex_;
  std::optional<std::string> abort_reason_;
  std::map<std::vector<int64_t>, MemberSet> sets_;
};

}  // namespace

std::chrono::milliseconds DefaultCollectiveTimeout() { return GetConfig().collective_timeout; }

std::unique_ptr<Communicator> MakeInProcessCommunicator(
    int64_t participants, std::optional<std::chrono::milliseconds> timeout) {
  std::chrono::milliseconds t = timeout ? *timeout : DefaultCollectiveTimeout();
  if (t.count() < 1) Fail("[communicator] the timeout must be positive, got {} ms", t.count());
  return std::make_unique<InProcessCommunicator>(participants, t);
}

}  // namespace strata::runtime
