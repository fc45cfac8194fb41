// Collective communication between the participants of an SPMD program. The
// program runs as N copies (participants 0..N-1, one per device); each copy
// calls the collectives from its own thread (in-process backend) or process
// (a later MPI backend) with pointers to its own input and output buffers
// only, so the interface assumes no shared memory.
//
// Every collective is called by each member of `group` (participant ids in a
// fixed order; a member's position is its rank). Members must call the
// collectives on one member set in the same order (the same SPMD program does);
// calls on different sets may interleave. Members of one call that disagree
// (collective, group order, dtype, reduction, size) all get a strata::Error
// naming the two disagreeing calls, never a hang or a wrong answer.
//
// Any strata::Error thrown by a collective (bad arguments, a disagreement, a
// timeout, an abort) leaves the communicator aborted: the members' call
// sequences have diverged, so every later call throws too. Make a new
// communicator for the next run.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "strata/core/dtype.h"

namespace strata::runtime {

// The element-wise reductions of all-reduce and reduce-scatter. kAnd / kOr
// are bitwise on integers and logical on pred; on pred kMax is or and kMin is
// and; kSum / kProduct wrap on integers and are not defined on pred; floats
// take sum, product, max and min. Max and min propagate NaN (the first NaN in
// group order).
enum class ReduceKind : uint8_t { kSum, kProduct, kMax, kMin, kAnd, kOr };
std::string_view ReduceKindName(ReduceKind kind);  // "sum", "product", ...
bool IsReductionDefined(DType dtype, ReduceKind kind);

// output[i] = ((in0[offset+i] op in1[offset+i]) op in2[offset+i]) ... for
// i < count, folded in the order of `inputs`. f16 / bf16 elements are
// widened to f32, folded in f32 and rounded to nearest-even once at the end.
// Every backend reduces with this, so results are identical bits on every
// member, every run and every backend. `output` may be one of the inputs
// (at the same offset).
void ReduceInOrder(DType dtype, ReduceKind kind, std::span<const void* const> inputs,
                   int64_t offset, void* output, int64_t count);

enum class Collective : uint8_t {
  kAllReduce,
  kAllGather,
  kReduceScatter,
  kAllToAll,
  kCollectivePermute,
  kBarrier
};
std::string_view CollectiveName(Collective collective);  // XLA's: "all-reduce", ...

// One member's call, validated by Communicator, as a backend receives it.
struct CollectiveCall {
  Collective collective = Collective::kBarrier;
  int64_t self = 0;                     // the calling participant
  std::span<const int64_t> group = {};  // collective-permute: every participant, in id order
  int64_t rank = -1;                    // self's position in `group`
  DType dtype = DType::kU8;             // reductions only
  ReduceKind reduce = ReduceKind::kSum;
  // all-reduce: elements; reduce-scatter: elements per member; all-gather:
  // bytes per member; all-to-all: bytes per block; collective-permute: bytes.
  int64_t count = 0;
  std::span<const std::pair<int64_t, int64_t>> source_target_pairs = {};  // collective-permute
  const void* input = nullptr;
  void* output = nullptr;
  int64_t input_bytes = 0, output_bytes = 0;
};

class Communicator {
 public:
  virtual ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int64_t size() const { return size_; }  // participants

  // Buffers of different members must be distinct, and a member's input and
  // output must not overlap (all-reduce alone may run in place: input ==
  // output). Inputs are only read, and stay the caller's again once the
  // call returns.

  // output = the reduction of every member's `count` elements, in group order.
  void AllReduce(int64_t self, std::span<const int64_t> group, DType dtype, ReduceKind kind,
                 const void* input, void* output, int64_t count);
  // output = the members' inputs (bytes_per_member each) concatenated in group order.
  void AllGather(int64_t self, std::span<const int64_t> group, const void* input, void* output,
                 int64_t bytes_per_member);
  // input = group.size() blocks of count_per_member elements; the member of
  // rank r gets the reduction (in group order) of every member's block r.
  void ReduceScatter(int64_t self, std::span<const int64_t> group, DType dtype, ReduceKind kind,
                     const void* input, void* output, int64_t count_per_member);
  // input and output = group.size() blocks; output block j of the member of
  // rank r = input block r of the member of rank j.
  void AllToAll(int64_t self, std::span<const int64_t> group, const void* input, void* output,
                int64_t bytes_per_block);
  // Called by every participant (all size() of them) with the same pairs:
  // output = the input of the source whose target is self, or zeros if none.
  // No participant may appear twice as a source or twice as a target.
  void CollectivePermute(int64_t self,
                         std::span<const std::pair<int64_t, int64_t>> source_target_pairs,
                         const void* input, void* output, int64_t bytes);
  // Returns once every member has called it.
  void Barrier(int64_t self, std::span<const int64_t> group);

  // A participant failed: every current and later wait throws
  // strata::Error("[<collective>] aborted: <reason>"). The first reason
  // wins. A call whose members had all arrived before the abort completes.
  virtual void Abort(const std::string& reason) = 0;

  // Bytes `participant` sent through collectives since the last reset, as a
  // bandwidth-optimal algorithm sends them (B = the member's input bytes,
  // n = group size; 0 when n == 1): all-reduce 2(n-1)B/n (ring reduce-scatter
  // then all-gather; rounded down), all-gather (n-1)B, reduce-scatter and
  // all-to-all (n-1) blocks, collective-permute B if it sends to another
  // participant, barrier 0.
  int64_t bytes_sent(int64_t participant) const;
  void ResetBytesSent();

 protected:
  explicit Communicator(int64_t size);
  // Runs one validated call; the backend's whole job.
  virtual void Execute(const CollectiveCall& call) = 0;

 private:
  void Run(CollectiveCall& call);
  int64_t size_;
  std::vector<int64_t> everyone_;  // 0..size-1: collective-permute's group
  std::unique_ptr<std::atomic<int64_t>[]> bytes_sent_;
};

// STRATA_COLLECTIVE_TIMEOUT_MS from the environment, else 300000 (5 min).
std::chrono::milliseconds DefaultCollectiveTimeout();

// Participants are threads of this process sharing memory: each member reads
// the others' inputs directly. Every participant needs its own thread, all
// running at once (not tasks of a smaller pool). A member that waits longer
// than `timeout` for the others throws an Error naming the members that never
// arrived, and aborts the communicator.
std::unique_ptr<Communicator> MakeInProcessCommunicator(
    int64_t participants, std::optional<std::chrono::milliseconds> timeout = std::nullopt);

}  // namespace strata::runtime
