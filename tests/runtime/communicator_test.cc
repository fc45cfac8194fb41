// The in-process Communicator: every collective against plain loops over the
// known inputs, on 2, 3 and 4 participant threads; determinism of float
// reductions; mismatches, timeouts and aborts end in errors, never hangs.
#include "strata/runtime/communicator.h"

#include <gtest/gtest.h>

#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "strata/core/config.h"
#include "strata/core/error.h"
#include "strata/hlo/literal.h"

namespace strata::runtime {
namespace {

using Bytes = std::vector<uint8_t>;
using std::chrono::milliseconds;

// Runs body(p) for every participant p on its own thread, all at once, and
// returns the message of the strata::Error each threw ("" if none).
std::vector<std::string> OnThreads(int64_t n, const std::function<void(int64_t)>& body) {
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int64_t p = 0; p < n; ++p) {
    threads.emplace_back([&, p] {
      try {
        body(p);
      } catch (const Error& e) {
        errors[p] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Group {1, 2, ..., n-1, 0}: a member's rank differs from its id, so the
// tests notice id order used where group order is meant.
std::vector<int64_t> RotatedGroup(int64_t n) {
  std::vector<int64_t> group;
  for (int64_t i = 1; i <= n; ++i) group.push_back(i % n);
  return group;
}

template <typename T>
std::vector<T> FromBytes(const Bytes& bytes) {
  std::vector<T> out(bytes.size() / sizeof(T));
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}
template <typename T>
Bytes ToBytes(const std::vector<T>& values) {
  Bytes out(values.size() * sizeof(T));
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

// ---------------------------------------------------------------------------
// The reference: a plain left fold in group order, written independently of
// the communicator's.

template <typename T>
T ApplyReference(ReduceKind kind, T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (kind == ReduceKind::kSum) return a + b;
    if (kind == ReduceKind::kProduct) return a * b;
    if (std::isnan(a)) return a;
    if (std::isnan(b)) return b;
    return kind == ReduceKind::kMax ? std::max(a, b) : std::min(a, b);
  } else {
    switch (kind) {  // wrap through u64; the narrowing conversion is modular in C++20
      case ReduceKind::kSum:
        return static_cast<T>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
      case ReduceKind::kProduct:
        return static_cast<T>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
      case ReduceKind::kMax:
        return std::max(a, b);
      case ReduceKind::kMin:
        return std::min(a, b);
      case ReduceKind::kAnd:
        return static_cast<T>(a & b);
      case ReduceKind::kOr:
        return static_cast<T>(a | b);
    }
    return a;
  }
}

template <typename T>
Bytes FoldTyped(ReduceKind kind, const std::vector<Bytes>& inputs, int64_t offset, int64_t count) {
  std::vector<std::vector<T>> values;
  for (const Bytes& b : inputs) values.push_back(FromBytes<T>(b));
  std::vector<T> out(count);
  for (int64_t i = 0; i < count; ++i) {
    T acc = values[0][offset + i];
    for (size_t j = 1; j < values.size(); ++j)
      acc = ApplyReference(kind, acc, values[j][offset + i]);
    out[i] = acc;
  }
  return ToBytes(out);
}

// f16 / bf16: each element in f32, folded in f32, rounded once.
Bytes FoldHalf(DType dtype, ReduceKind kind, const std::vector<Bytes>& inputs, int64_t offset,
               int64_t count) {
  std::vector<std::vector<float>> values;
  for (const Bytes& b : inputs) {
    std::vector<float> widened;
    for (uint16_t h : FromBytes<uint16_t>(b)) {
      widened.push_back(dtype == DType::kF16 ? hlo::HalfToFloat(h) : hlo::BFloat16ToFloat(h));
    }
    values.push_back(std::move(widened));
  }
  std::vector<uint16_t> out(count);
  for (int64_t i = 0; i < count; ++i) {
    float acc = values[0][offset + i];
    for (size_t j = 1; j < values.size(); ++j)
      acc = ApplyReference(kind, acc, values[j][offset + i]);
    out[i] = dtype == DType::kF16 ? hlo::FloatToHalf(acc) : hlo::FloatToBFloat16(acc);
  }
  return ToBytes(out);
}

// `inputs` in group order; elements [offset, offset + count) of each.
Bytes ReferenceFold(DType dtype, ReduceKind kind, const std::vector<Bytes>& inputs, int64_t offset,
                    int64_t count) {
  switch (dtype) {
    case DType::kPred: {
      Bytes out(count);
      for (int64_t i = 0; i < count; ++i) {
        bool acc = inputs[0][offset + i] != 0;
        for (size_t j = 1; j < inputs.size(); ++j) {
          bool x = inputs[j][offset + i] != 0;
          bool is_and = kind == ReduceKind::kAnd || kind == ReduceKind::kMin;
          acc = is_and ? (acc && x) : (acc || x);
        }
        out[i] = acc;
      }
      return out;
    }
    case DType::kS8:
      return FoldTyped<int8_t>(kind, inputs, offset, count);
    case DType::kS32:
      return FoldTyped<int32_t>(kind, inputs, offset, count);
    case DType::kS64:
      return FoldTyped<int64_t>(kind, inputs, offset, count);
    case DType::kU8:
      return FoldTyped<uint8_t>(kind, inputs, offset, count);
    case DType::kU32:
      return FoldTyped<uint32_t>(kind, inputs, offset, count);
    case DType::kU64:
      return FoldTyped<uint64_t>(kind, inputs, offset, count);
    case DType::kF32:
      return FoldTyped<float>(kind, inputs, offset, count);
    case DType::kF64:
      return FoldTyped<double>(kind, inputs, offset, count);
    case DType::kF16:
    case DType::kBF16:
      return FoldHalf(dtype, kind, inputs, offset, count);
  }
  return {};
}

// Valid values of `dtype`: integers over their whole range (so sums and
// products wrap), floats in [-4, 4], pred 0 / 1.
Bytes RandomValues(DType dtype, int64_t count, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> real(-4, 4);
  Bytes out(count * DTypeSize(dtype));
  for (int64_t i = 0; i < count; ++i) {
    uint8_t* p = out.data() + i * DTypeSize(dtype);
    uint64_t bits = rng();
    switch (dtype) {
      case DType::kPred:
        *p = bits & 1;
        break;
      case DType::kF32: {
        float f = static_cast<float>(real(rng));
        std::memcpy(p, &f, 4);
        break;
      }
      case DType::kF64: {
        double d = real(rng);
        std::memcpy(p, &d, 8);
        break;
      }
      case DType::kF16:
      case DType::kBF16: {
        float f = static_cast<float>(real(rng));
        uint16_t h = dtype == DType::kF16 ? hlo::FloatToHalf(f) : hlo::FloatToBFloat16(f);
        std::memcpy(p, &h, 2);
        break;
      }
      default:
        std::memcpy(p, &bits, DTypeSize(dtype));
        break;
    }
  }
  return out;
}

constexpr DType kAllDTypes[] = {DType::kPred, DType::kS8,  DType::kS32, DType::kS64,
                                DType::kU8,   DType::kU32, DType::kU64, DType::kF16,
                                DType::kBF16, DType::kF32, DType::kF64};
constexpr ReduceKind kAllKinds[] = {ReduceKind::kSum, ReduceKind::kProduct, ReduceKind::kMax,
                                    ReduceKind::kMin, ReduceKind::kAnd,     ReduceKind::kOr};

// ---------------------------------------------------------------------------
// Each collective against its reference.

TEST(CommunicatorAllReduce, MatchesAPlainLoopForEveryDTypeAndReduction) {
  for (int64_t n : {2, 3, 4}) {
    auto comm = MakeInProcessCommunicator(n);
    std::vector<int64_t> group = RotatedGroup(n);
    struct Case {
      DType dtype;
      ReduceKind kind;
      int64_t count;
      std::vector<Bytes> inputs;  // by participant id
      std::vector<Bytes> outputs;
    };
    std::vector<Case> cases;
    for (DType dtype : kAllDTypes) {
      for (ReduceKind kind : kAllKinds) {
        if (!IsReductionDefined(dtype, kind)) continue;
        // 1037 elements: shares that do not divide evenly, and several tiles.
        int64_t count = dtype == DType::kF32 && kind == ReduceKind::kSum ? 10007 : 1037;
        Case c{dtype, kind, count, {}, {}};
        for (int64_t p = 0; p < n; ++p) {
          c.inputs.push_back(
              RandomValues(dtype, count, static_cast<uint32_t>(cases.size() * 7 + p)));
          c.outputs.emplace_back(count * DTypeSize(dtype), 0xAB);
        }
        cases.push_back(std::move(c));
      }
    }
    auto errors = OnThreads(n, [&](int64_t p) {
      for (Case& c : cases) {
        comm->AllReduce(p, group, c.dtype, c.kind, c.inputs[p].data(), c.outputs[p].data(),
                        c.count);
      }
    });
    for (int64_t p = 0; p < n; ++p) ASSERT_EQ(errors[p], "") << "participant " << p;
    for (const Case& c : cases) {
      std::vector<Bytes> in_group_order;
      for (int64_t id : group) in_group_order.push_back(c.inputs[id]);
      Bytes expected = ReferenceFold(c.dtype, c.kind, in_group_order, 0, c.count);
      for (int64_t p = 0; p < n; ++p) {
        EXPECT_EQ(c.outputs[p], expected) << n << " participants, " << DTypeName(c.dtype) << " "
                                          << ReduceKindName(c.kind) << ", participant " << p;
      }
    }
  }
}

TEST(CommunicatorAllReduce, RunsInPlace) {
  const int64_t n = 3, count = 1000;
  auto comm = MakeInProcessCommunicator(n);
  std::vector<int64_t> group = RotatedGroup(n);
  std::vector<Bytes> data, original;
  for (int64_t p = 0; p < n; ++p) data.push_back(RandomValues(DType::kS64, count, 100 + p));
  original = data;
  auto errors = OnThreads(n, [&](int64_t p) {
    comm->AllReduce(p, group, DType::kS64, ReduceKind::kSum, data[p].data(), data[p].data(), count);
  });
  std::vector<Bytes> in_group_order;
  for (int64_t id : group) in_group_order.push_back(original[id]);
  Bytes expected = ReferenceFold(DType::kS64, ReduceKind::kSum, in_group_order, 0, count);
  for (int64_t p = 0; p < n; ++p) {
    EXPECT_EQ(errors[p], "");
    EXPECT_EQ(data[p], expected) << "participant " << p;
  }
}

TEST(CommunicatorAllGather, ConcatenatesInGroupOrder) {
  for (int64_t n : {2, 3, 4}) {
    auto comm = MakeInProcessCommunicator(n);
    std::vector<int64_t> group = RotatedGroup(n);
    const int64_t bytes = 13;
    std::vector<Bytes> in, out(n, Bytes(n * bytes, 0xAB));
    for (int64_t p = 0; p < n; ++p) in.push_back(RandomValues(DType::kU8, bytes, 200 + p));
    auto errors = OnThreads(
        n, [&](int64_t p) { comm->AllGather(p, group, in[p].data(), out[p].data(), bytes); });
    Bytes expected;
    for (int64_t id : group) expected.insert(expected.end(), in[id].begin(), in[id].end());
    for (int64_t p = 0; p < n; ++p) {
      EXPECT_EQ(errors[p], "");
      EXPECT_EQ(out[p], expected) << n << " participants, participant " << p;
    }
  }
}

TEST(CommunicatorReduceScatter, GivesRankRTheReductionOfBlockR) {
  for (int64_t n : {2, 3, 4}) {
    for (auto [dtype, kind] :
         {std::pair{DType::kF32, ReduceKind::kSum}, std::pair{DType::kBF16, ReduceKind::kSum},
          std::pair{DType::kS32, ReduceKind::kMax}, std::pair{DType::kPred, ReduceKind::kAnd}}) {
      auto comm = MakeInProcessCommunicator(n);
      std::vector<int64_t> group = RotatedGroup(n);
      const int64_t count = 37, block = count * DTypeSize(dtype);
      std::vector<Bytes> in, out(n, Bytes(block, 0xAB));
      for (int64_t p = 0; p < n; ++p) in.push_back(RandomValues(dtype, n * count, 300 + p));
      auto errors = OnThreads(n, [&](int64_t p) {
        comm->ReduceScatter(p, group, dtype, kind, in[p].data(), out[p].data(), count);
      });
      std::vector<Bytes> in_group_order;
      for (int64_t id : group) in_group_order.push_back(in[id]);
      for (int64_t rank = 0; rank < n; ++rank) {
        int64_t id = group[rank];
        EXPECT_EQ(errors[id], "");
        EXPECT_EQ(out[id], ReferenceFold(dtype, kind, in_group_order, rank * count, count))
            << n << " participants, " << DTypeName(dtype) << ", rank " << rank;
      }
    }
  }
}

TEST(CommunicatorAllToAll, SendsBlockJToRankJ) {
  for (int64_t n : {2, 3, 4}) {
    auto comm = MakeInProcessCommunicator(n);
    std::vector<int64_t> group = RotatedGroup(n);
    const int64_t block = 11;
    std::vector<Bytes> in, out(n, Bytes(n * block, 0xAB));
    for (int64_t p = 0; p < n; ++p) in.push_back(RandomValues(DType::kU8, n * block, 400 + p));
    auto errors = OnThreads(
        n, [&](int64_t p) { comm->AllToAll(p, group, in[p].data(), out[p].data(), block); });
    for (int64_t r = 0; r < n; ++r) {
      EXPECT_EQ(errors[group[r]], "");
      for (int64_t j = 0; j < n; ++j) {
        const uint8_t* got = out[group[r]].data() + j * block;
        const uint8_t* sent = in[group[j]].data() + r * block;
        EXPECT_EQ(Bytes(got, got + block), Bytes(sent, sent + block))
            << n << " participants, rank " << r << " block " << j;
      }
    }
  }
}

TEST(CommunicatorCollectivePermute, ShiftsAroundARing) {
  for (int64_t n : {2, 3, 4}) {
    auto comm = MakeInProcessCommunicator(n);
    std::vector<std::pair<int64_t, int64_t>> pairs;
    for (int64_t p = 0; p < n; ++p) pairs.push_back({p, (p + 1) % n});
    const int64_t bytes = 24;
    std::vector<Bytes> in, out(n, Bytes(bytes, 0xAB));
    for (int64_t p = 0; p < n; ++p) in.push_back(RandomValues(DType::kU8, bytes, 500 + p));
    auto errors = OnThreads(n, [&](int64_t p) {
      comm->CollectivePermute(p, pairs, in[p].data(), out[p].data(), bytes);
    });
    for (int64_t p = 0; p < n; ++p) {
      EXPECT_EQ(errors[p], "");
      EXPECT_EQ(out[p], in[(p + n - 1) % n]) << n << " participants, participant " << p;
    }
  }
}

TEST(CommunicatorCollectivePermute, GivesZerosToAParticipantNobodySendsTo) {
  auto comm = MakeInProcessCommunicator(3);
  const std::vector<std::pair<int64_t, int64_t>> pairs = {{0, 1}, {1, 0}};
  std::vector<Bytes> in = {Bytes(8, 10), Bytes(8, 11), Bytes(8, 12)};
  std::vector<Bytes> out(3, Bytes(8, 0xAB));
  auto errors = OnThreads(
      3, [&](int64_t p) { comm->CollectivePermute(p, pairs, in[p].data(), out[p].data(), 8); });
  EXPECT_EQ(errors, std::vector<std::string>(3));
  EXPECT_EQ(out[0], Bytes(8, 11));
  EXPECT_EQ(out[1], Bytes(8, 10));
  EXPECT_EQ(out[2], Bytes(8, 0));
  EXPECT_EQ(comm->bytes_sent(0), 8);
  EXPECT_EQ(comm->bytes_sent(1), 8);
  EXPECT_EQ(comm->bytes_sent(2), 0);
}

TEST(CommunicatorBarrier, ReturnsOnlyOnceEveryMemberArrived) {
  const int64_t n = 4;
  auto comm = MakeInProcessCommunicator(n);
  const std::vector<int64_t> group = {0, 1, 2, 3};
  std::atomic<int> arrived{0};
  std::vector<int> seen(n);
  auto errors = OnThreads(n, [&](int64_t p) {
    std::this_thread::sleep_for(milliseconds(10 * p));
    arrived++;
    comm->Barrier(p, group);
    seen[p] = arrived.load();
  });
  EXPECT_EQ(errors, std::vector<std::string>(n));
  EXPECT_EQ(seen, std::vector<int>(n, n));
}

TEST(CommunicatorGroups, DisjointSubGroupsRunConcurrently) {
  const int64_t n = 4, rounds = 50;
  auto comm = MakeInProcessCommunicator(n);
  const std::vector<int64_t> evens = {0, 2}, odds = {1, 3}, everyone = {3, 2, 1, 0};
  auto errors = OnThreads(n, [&](int64_t p) {
    const std::vector<int64_t>& mine = p % 2 == 0 ? evens : odds;
    for (int64_t round = 0; round < rounds; ++round) {
      int32_t x = static_cast<int32_t>(100 * p + round), sum = 0;
      comm->AllReduce(p, mine, DType::kS32, ReduceKind::kSum, &x, &sum, 1);
      int32_t partner = static_cast<int32_t>(100 * (p ^ 2) + round);
      EXPECT_EQ(sum, x + partner) << "participant " << p << " round " << round;
      int64_t gathered[2] = {-1, -1}, id = p;
      comm->AllGather(p, mine, &id, gathered, sizeof(id));
      EXPECT_EQ(gathered[0], mine[0]);
      EXPECT_EQ(gathered[1], mine[1]);
      if (round % 10 == 0) {  // every set's calls interleave with the others'
        int64_t total = 0, one = p;
        comm->AllReduce(p, everyone, DType::kS64, ReduceKind::kSum, &one, &total, 1);
        EXPECT_EQ(total, 0 + 1 + 2 + 3);
      }
    }
  });
  EXPECT_EQ(errors, std::vector<std::string>(n));
}

TEST(CommunicatorGroups, SingleMemberGroupsCopy) {
  auto comm = MakeInProcessCommunicator(2);
  const std::vector<int64_t> alone = {1};
  float x[3] = {1, 2, 3}, y[3] = {};
  comm->AllReduce(1, alone, DType::kF32, ReduceKind::kSum, x, y, 3);
  EXPECT_EQ(std::vector<float>(y, y + 3), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(comm->bytes_sent(1), 0);
  // Nothing at all is fine too, and needs no buffers.
  comm->AllGather(1, alone, nullptr, nullptr, 0);
}

// ---------------------------------------------------------------------------
// Determinism and the floating-point rules.

TEST(CommunicatorDeterminism, F32SumIsTheInOrderSumEveryRun) {
  const int64_t n = 4, count = 4 * 64 + 3;  // every member reduces a share
  const std::vector<int64_t> group = {2, 0, 3, 1};
  // Element i holds a rotation of (1e8, 1, -1e8, 2) over the group, so the
  // in-order sum differs from other orders (1e8 + 1 rounds back to 1e8).
  const float pattern[4] = {1e8f, 1.0f, -1e8f, 2.0f};
  std::vector<std::vector<float>> in(n, std::vector<float>(count));
  for (int64_t rank = 0; rank < n; ++rank) {
    for (int64_t i = 0; i < count; ++i) {
      in[group[rank]][i] = pattern[(rank + i) % 4] * (1.0f + static_cast<float>(i % 7) / 8);
    }
  }
  std::vector<float> expected(count), by_id(count);
  for (int64_t i = 0; i < count; ++i) {
    float acc = in[group[0]][i];
    for (int64_t rank = 1; rank < n; ++rank) acc += in[group[rank]][i];
    expected[i] = acc;
    by_id[i] = ((in[0][i] + in[1][i]) + in[2][i]) + in[3][i];
  }
  ASSERT_NE(expected, by_id) << "the inputs must make the order matter";

  auto comm = MakeInProcessCommunicator(n);
  for (int run = 0; run < 20; ++run) {
    std::vector<std::vector<float>> out(n, std::vector<float>(count, -7.0f));
    auto errors = OnThreads(n, [&](int64_t p) {
      comm->AllReduce(p, group, DType::kF32, ReduceKind::kSum, in[p].data(), out[p].data(), count);
    });
    ASSERT_EQ(errors, std::vector<std::string>(n));
    for (int64_t p = 0; p < n; ++p) {
      for (int64_t i = 0; i < count; ++i) {
        ASSERT_EQ(std::bit_cast<uint32_t>(out[p][i]), std::bit_cast<uint32_t>(expected[i]))
            << "run " << run << ", participant " << p << ", element " << i;
      }
    }
  }
}

TEST(CommunicatorDeterminism, HalfSumsRoundOnceAtTheEnd) {
  // 1 + 2^-8 + 2^-8 = 1 + 2^-7, a bf16 value (0x3F81). Rounding after each
  // add would give 1 twice (a tie, to even), 0x3F80. Likewise in f16:
  // 1 + 2^-11 + 2^-11 = 1 + 2^-10 = 0x3C01, stepwise 0x3C00.
  for (auto [dtype, one, tiny, expected] :
       {std::tuple<DType, uint16_t, uint16_t, uint16_t>{DType::kBF16, 0x3F80, 0x3B80, 0x3F81},
        std::tuple<DType, uint16_t, uint16_t, uint16_t>{DType::kF16, 0x3C00, 0x1000, 0x3C01}}) {
    auto comm = MakeInProcessCommunicator(3);
    const std::vector<int64_t> group = {0, 1, 2};
    uint16_t in[3] = {one, tiny, tiny}, out[3] = {};
    auto errors = OnThreads(3, [&](int64_t p) {
      comm->AllReduce(p, group, dtype, ReduceKind::kSum, &in[p], &out[p], 1);
    });
    EXPECT_EQ(errors, std::vector<std::string>(3));
    for (int p = 0; p < 3; ++p) EXPECT_EQ(out[p], expected) << DTypeName(dtype) << " " << p;
  }
}

TEST(CommunicatorDeterminism, MaxAndMinPropagateNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<int64_t> group = {0, 1, 2};
  // Element 0: NaN at rank 1; element 1: no NaN; element 2: NaN last.
  std::vector<std::vector<float>> in = {{1, 1, 2}, {nan, 5, 0}, {3, 3, nan}};
  for (ReduceKind kind : {ReduceKind::kMax, ReduceKind::kMin}) {
    auto comm = MakeInProcessCommunicator(3);
    std::vector<std::vector<float>> out(3, std::vector<float>(3));
    auto errors = OnThreads(3, [&](int64_t p) {
      comm->AllReduce(p, group, DType::kF32, kind, in[p].data(), out[p].data(), 3);
    });
    EXPECT_EQ(errors, std::vector<std::string>(3));
    for (int p = 0; p < 3; ++p) {
      EXPECT_TRUE(std::isnan(out[p][0])) << ReduceKindName(kind);
      EXPECT_EQ(out[p][1], kind == ReduceKind::kMax ? 5 : 1);
      EXPECT_TRUE(std::isnan(out[p][2])) << ReduceKindName(kind);
    }
  }
  // bf16 keeps the NaN through the f32 round trip.
  auto comm = MakeInProcessCommunicator(2);
  const std::vector<int64_t> pair = {0, 1};
  uint16_t h[2] = {0x3F80, 0x7FC0}, out[2] = {};
  OnThreads(2, [&](int64_t p) {
    comm->AllReduce(p, pair, DType::kBF16, ReduceKind::kMax, &h[p], &out[p], 1);
  });
  for (int p = 0; p < 2; ++p) EXPECT_TRUE(std::isnan(hlo::BFloat16ToFloat(out[p])));
}

// ---------------------------------------------------------------------------
// Failures: errors on every member, never a hang.

TEST(CommunicatorErrors, MismatchedCountFailsEveryMember) {
  auto comm = MakeInProcessCommunicator(3, milliseconds(5000));
  const std::vector<int64_t> group = {0, 1, 2};
  std::vector<std::vector<float>> in(3, std::vector<float>(5, 1)), out = in;
  auto errors = OnThreads(3, [&](int64_t p) {
    comm->AllReduce(p, group, DType::kF32, ReduceKind::kSum, in[p].data(), out[p].data(),
                    p == 2 ? 5 : 4);
  });
  for (int64_t p = 0; p < 3; ++p) {
    EXPECT_TRUE(Contains(errors[p], "disagree")) << errors[p];
    EXPECT_TRUE(Contains(errors[p], "4 elements")) << errors[p];
    EXPECT_TRUE(Contains(errors[p], "5 elements")) << errors[p];
  }
  // The communicator stays aborted: later calls fail at once.
  EXPECT_THROW(comm->Barrier(0, std::vector<int64_t>{0}), Error);
}

TEST(CommunicatorErrors, EveryKindOfDisagreementIsNamed) {
  const std::vector<int64_t> forward = {0, 1}, backward = {1, 0};
  float in[2][4] = {}, out[2][8] = {};
  struct Disagreement {
    std::string what;
    std::function<void(Communicator&, int64_t)> call;
    std::vector<std::string> named;
  };
  const std::vector<Disagreement> cases = {
      {"dtype",
       [&](Communicator& c, int64_t p) {
         c.AllReduce(p, forward, p ? DType::kS32 : DType::kF32, ReduceKind::kSum, in[p], out[p], 4);
       },
       {"f32", "s32"}},
      {"reduction",
       [&](Communicator& c, int64_t p) {
         c.AllReduce(p, forward, DType::kF32, p ? ReduceKind::kMax : ReduceKind::kSum, in[p],
                     out[p], 4);
       },
       {"sum", "max"}},
      {"collective",
       [&](Communicator& c, int64_t p) {
         if (p == 0) {
           c.AllReduce(p, forward, DType::kF32, ReduceKind::kSum, in[p], out[p], 4);
         } else {
           c.AllGather(p, forward, in[p], out[p], 16);
         }
       },
       {"all-reduce(", "all-gather("}},
      {"group order",
       [&](Communicator& c, int64_t p) { c.Barrier(p, p ? backward : forward); },
       {"{0,1}", "{1,0}"}},
  };
  for (const Disagreement& d : cases) {
    auto comm = MakeInProcessCommunicator(2, milliseconds(5000));
    auto errors = OnThreads(2, [&](int64_t p) { d.call(*comm, p); });
    for (int64_t p = 0; p < 2; ++p) {
      EXPECT_TRUE(Contains(errors[p], "disagree")) << d.what << ": " << errors[p];
      EXPECT_TRUE(Contains(errors[p], "participant 0")) << d.what << ": " << errors[p];
      EXPECT_TRUE(Contains(errors[p], "participant 1")) << d.what << ": " << errors[p];
      for (const std::string& part : d.named) {
        EXPECT_TRUE(Contains(errors[p], part)) << d.what << ": " << errors[p];
      }
    }
  }
}

TEST(CommunicatorErrors, TimeoutNamesTheAbsentMember) {
  auto comm = MakeInProcessCommunicator(3, milliseconds(200));
  const std::vector<int64_t> group = {0, 1, 2};
  auto start = std::chrono::steady_clock::now();
  auto errors = OnThreads(3, [&](int64_t p) {
    if (p == 2) return;  // never arrives
    int32_t x = 1, y = 0;
    comm->AllReduce(p, group, DType::kS32, ReduceKind::kSum, &x, &y, 1);
  });
  auto elapsed = std::chrono::steady_clock::now() - start;
  for (int64_t p = 0; p < 2; ++p) {
    EXPECT_TRUE(Contains(errors[p], "[all-reduce]")) << errors[p];
    EXPECT_TRUE(Contains(errors[p], "timed out")) << errors[p];
    EXPECT_TRUE(Contains(errors[p], "participant(s) {2} of group {0,1,2} never arrived"))
        << errors[p];
  }
  EXPECT_EQ(errors[2], "");
  EXPECT_LT(elapsed, std::chrono::seconds(3));
  // The latecomer finds the communicator aborted instead of waiting alone.
  int32_t x = 1, y = 0;
  try {
    comm->AllReduce(2, group, DType::kS32, ReduceKind::kSum, &x, &y, 1);
    ADD_FAILURE() << "the latecomer was not stopped";
  } catch (const Error& e) {
    EXPECT_TRUE(Contains(e.what(), "aborted")) << e.what();
  }
}

TEST(CommunicatorErrors, AbortWakesEveryWaiter) {
  auto comm = MakeInProcessCommunicator(3, milliseconds(60000));
  const std::vector<int64_t> group = {0, 1, 2};
  auto errors = OnThreads(3, [&](int64_t p) {
    if (p == 2) {  // fails instead of joining
      std::this_thread::sleep_for(milliseconds(50));
      comm->Abort("participant 2 failed");
      return;
    }
    float x = 1, y = 0;
    comm->AllReduce(p, group, DType::kF32, ReduceKind::kSum, &x, &y, 1);
  });
  EXPECT_EQ(errors[0], "[all-reduce] aborted: participant 2 failed");
  EXPECT_EQ(errors[1], "[all-reduce] aborted: participant 2 failed");
  try {
    comm->Barrier(0, std::vector<int64_t>{0, 1});
    ADD_FAILURE() << "a call after the abort went through";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "[barrier] aborted: participant 2 failed");
  }
}

TEST(CommunicatorErrors, RejectsBadArguments) {
  float a[8] = {}, b[8] = {};
  uint8_t flags[2] = {};
  const std::vector<std::pair<std::string, std::function<void(Communicator&)>>> cases = {
      {"not in its group",
       [&](Communicator& c) {
         c.AllReduce(1, std::vector<int64_t>{0, 2}, DType::kF32, ReduceKind::kSum, a, b, 1);
       }},
      {"twice",
       [&](Communicator& c) {
         c.Barrier(0, std::vector<int64_t>{0, 1, 0});
       }},
      {"out of range",
       [&](Communicator& c) {
         c.Barrier(0, std::vector<int64_t>{0, 3});
       }},
      {"out of range", [&](Communicator& c) { c.Barrier(-1, std::vector<int64_t>{0}); }},
      {"empty", [&](Communicator& c) { c.Barrier(0, std::vector<int64_t>{}); }},
      {"overlap",
       [&](Communicator& c) {
         c.AllGather(0, std::vector<int64_t>{0, 1}, a, a + 1, 8);
       }},
      {"overlap",
       [&](Communicator& c) {
         c.AllReduce(0, std::vector<int64_t>{0}, DType::kF32, ReduceKind::kSum, a, a + 1, 2);
       }},
      {"and is not defined on f32",
       [&](Communicator& c) {
         c.AllReduce(0, std::vector<int64_t>{0}, DType::kF32, ReduceKind::kAnd, a, b, 1);
       }},
      {"sum is not defined on pred",
       [&](Communicator& c) {
         c.AllReduce(0, std::vector<int64_t>{0}, DType::kPred, ReduceKind::kSum, flags, flags + 1,
                     1);
       }},
      {"target of two pairs",
       [&](Communicator& c) {
         std::vector<std::pair<int64_t, int64_t>> pairs = {{0, 2}, {1, 2}};
         c.CollectivePermute(0, pairs, a, b, 4);
       }},
      {"negative", [&](Communicator& c) { c.AllToAll(0, std::vector<int64_t>{0}, a, b, -4); }},
      {"null buffer",
       [&](Communicator& c) { c.AllGather(0, std::vector<int64_t>{0}, nullptr, b, 4); }},
  };
  for (const auto& [expected, call] : cases) {
    auto comm = MakeInProcessCommunicator(3, milliseconds(5000));
    try {
      call(*comm);
      ADD_FAILURE() << "accepted: " << expected;
    } catch (const Error& e) {
      EXPECT_TRUE(Contains(e.what(), expected)) << e.what();
    }
    EXPECT_THROW(comm->Barrier(0, std::vector<int64_t>{0}), Error) << "not aborted: " << expected;
  }
  EXPECT_THROW(MakeInProcessCommunicator(0), Error);
  EXPECT_THROW(MakeInProcessCommunicator(2, milliseconds(0)), Error);
}

// ---------------------------------------------------------------------------
// Accounting and configuration.

TEST(CommunicatorBytesSent, FollowsTheDocumentedAccounting) {
  const int64_t n = 4;
  auto comm = MakeInProcessCommunicator(n);
  const std::vector<int64_t> group = {0, 1, 2, 3};
  auto errors = OnThreads(n, [&](int64_t p) {
    std::vector<float> in(100), out(400);
    comm->AllReduce(p, group, DType::kF32, ReduceKind::kSum, in.data(), out.data(), 100);
    comm->AllGather(p, group, in.data(), out.data(), 10);
    comm->ReduceScatter(p, group, DType::kF32, ReduceKind::kSum, in.data(), out.data(), 5);
    comm->AllToAll(p, group, in.data(), out.data(), 8);
    comm->Barrier(p, group);
  });
  EXPECT_EQ(errors, std::vector<std::string>(n));
  // all-reduce 2*3*400/4 = 600, all-gather 3*10, reduce-scatter 3*20, all-to-all 3*8.
  for (int64_t p = 0; p < n; ++p) EXPECT_EQ(comm->bytes_sent(p), 600 + 30 + 60 + 24);
  comm->ResetBytesSent();
  for (int64_t p = 0; p < n; ++p) EXPECT_EQ(comm->bytes_sent(p), 0);
  EXPECT_THROW(comm->bytes_sent(n), Error);
}

TEST(CommunicatorTimeout, DefaultComesFromTheConfig) {
  const Config saved = GetConfig();
  Config c = saved;
  c.collective_timeout = milliseconds(1234);
  SetConfig(c);
  EXPECT_EQ(DefaultCollectiveTimeout(), milliseconds(1234));
  SetConfig(saved);
  EXPECT_EQ(DefaultCollectiveTimeout(), saved.collective_timeout);
}

}  // namespace
}  // namespace strata::runtime
