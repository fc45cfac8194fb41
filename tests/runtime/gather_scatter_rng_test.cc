// gather and scatter against references written from XLA's dimension-number
// semantics (clamped gather starts, skipped out-of-bounds scatter windows),
// and rng-bit-generator against an independent Philox-4x32-10.
#include <array>
#include <numeric>

#include "runtime/test_util.h"

namespace strata::runtime::test {
namespace {

using hlo::Builder;
using hlo::Opcode;
using Dims = std::vector<int64_t>;

bool Contains(const Dims& v, int64_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// Index vector of batch position `batch` (indices dims without
// index_vector_dim); an index_vector_dim equal to the rank means size 1.
Dims IndexVector(const std::vector<int64_t>& indices, const Dims& id, int64_t index_vector_dim,
                 const Dims& batch) {
  const int64_t size =
      index_vector_dim == static_cast<int64_t>(id.size()) ? 1 : id[index_vector_dim];
  Dims out;
  for (int64_t k = 0; k < size; ++k) {
    Dims at = batch;
    if (index_vector_dim < static_cast<int64_t>(id.size()))
      at.insert(at.begin() + index_vector_dim, k);
    out.push_back(indices[Ravel(at, id)]);
  }
  return out;
}

template <typename T>
std::vector<T> GatherReference(const std::vector<T>& operand, const Dims& od,
                               const std::vector<int64_t>& indices, const Dims& id,
                               const hlo::GatherDims& g, Dims* out_dims) {
  Dims batch_sizes, window_sizes;
  for (int64_t i = 0; i < static_cast<int64_t>(id.size()); ++i) {
    if (i != g.index_vector_dim) batch_sizes.push_back(id[i]);
  }
  for (int64_t d = 0; d < static_cast<int64_t>(od.size()); ++d) {
    if (!Contains(g.collapsed_slice_dims, d)) window_sizes.push_back(g.slice_sizes[d]);
  }
  out_dims->clear();
  for (size_t i = 0, b = 0, w = 0; i < batch_sizes.size() + window_sizes.size(); ++i) {
    out_dims->push_back(Contains(g.offset_dims, i) ? window_sizes[w++] : batch_sizes[b++]);
  }
  return Tabulate<T>(*out_dims, [&](const Dims& o) {
    Dims batch, window;
    for (size_t i = 0; i < o.size(); ++i)
      (Contains(g.offset_dims, i) ? window : batch).push_back(o[i]);
    Dims start(od.size(), 0);
    Dims vec = IndexVector(indices, id, g.index_vector_dim, batch);
    for (size_t k = 0; k < vec.size(); ++k) {
      int64_t d = g.start_index_map[k];
      start[d] = std::clamp<int64_t>(vec[k], 0, od[d] - g.slice_sizes[d]);
    }
    Dims at(od.size());
    for (size_t d = 0, w = 0; d < od.size(); ++d)
      at[d] = start[d] + (Contains(g.collapsed_slice_dims, d) ? 0 : window[w++]);
    return operand[Ravel(at, od)];
  });
}

struct GatherCase {
  const char* name;
  Dims operand, indices;
  std::vector<int64_t> index_values;
  hlo::GatherDims dims;
};

const GatherCase kGatherCases[] = {
    // Embedding lookup: rows of [V, H]; -2 and 15 clamp to the first and last row.
    {"embedding", {10, 8}, {6}, {3, 0, 9, 3, -2, 15}, {{1}, {0}, {0}, 1, {1, 8}}},
    {"embedding, explicit index vector",
     {10, 8},
     {6, 1},
     {3, 0, 9, 3, -2, 15},
     {{1}, {0}, {0}, 1, {1, 8}}},
    {"embedding, 2-D batch", {10, 8}, {2, 3}, {1, 2, 3, 9, 8, 7}, {{2}, {0}, {0}, 2, {1, 8}}},
    {"embedding, offset dim first", {10, 8}, {4}, {5, 1, 5, 0}, {{0}, {0}, {0}, 1, {1, 8}}},
    {"2-D start, windows clamped",
     {6, 7},
     {5, 2},
     {0, 0, 2, 3, 5, 6, -1, 4, 4, -3},
     {{1, 2}, {}, {0, 1}, 1, {2, 3}}},
    {"points, reversed start map",
     {6, 7},
     {4, 2},
     {1, 2, 6, 5, 0, 0, 3, 9},
     {{}, {0, 1}, {1, 0}, 1, {1, 1}}},
    {"index vector dim 0", {6, 7}, {2, 3}, {1, 5, 2, 0, 6, 3}, {{1, 2}, {}, {0, 1}, 0, {2, 2}}},
    {"no indices", {10, 8}, {0}, {}, {{1}, {0}, {0}, 1, {1, 8}}},
};

template <typename I>
void CheckGathers() {
  for (const GatherCase& c : kGatherCases) {
    SCOPED_TRACE(std::string(c.name) + " with " + std::string(DTypeName(DTypeOf<I>::value)) +
                 " indices");
    std::vector<float> operand = Random<float>(NumElements(c.operand), 1, -5, 5);
    std::vector<I> indices(c.index_values.begin(), c.index_values.end());
    Dims out_dims;
    auto expected =
        GatherReference(operand, c.operand, c.index_values, c.indices, c.dims, &out_dims);
    ExpectRun<float>(
        {Arg(operand, c.operand), Arg(indices, c.indices)},
        [&](Builder& b, const std::vector<hlo::Instruction*>& p) {
          return b.Gather(p[0], p[1], c.dims);
        },
        out_dims, expected);
  }
}

TEST(Gather, EmbeddingAndGeneralForms) {
  CheckGathers<int32_t>();
  CheckGathers<int64_t>();
}

TEST(Gather, HugeUnsignedIndexClampsHigh) {
  std::vector<float> table = Random<float>(4 * 2, 6, -1, 1);
  std::vector<uint64_t> ids = {(uint64_t{1} << 63) + 5, 1};
  hlo::GatherDims dims{{1}, {0}, {0}, 1, {1, 2}};
  ExpectRun<float>({Arg(table, {4, 2}), Arg(ids, {2})},
                   [&](Builder& b, const std::vector<hlo::Instruction*>& p) {
                     return b.Gather(p[0], p[1], dims);
                   },
                   {2, 2}, {table[6], table[7], table[2], table[3]});
}

TEST(Gather, LargeEmbeddingLookup) {
  const int64_t vocab = 1000, hidden = 64, n = 5000;
  std::vector<float> table = Random<float>(vocab * hidden, 2, -1, 1);
  std::vector<int32_t> ids = Random<int32_t>(n, 3, 0, vocab - 1);
  std::vector<float> expected;
  for (int32_t id : ids)
    expected.insert(expected.end(), table.begin() + id * hidden, table.begin() + (id + 1) * hidden);
  hlo::GatherDims dims{{1}, {0}, {0}, 1, {1, hidden}};
  ExpectRun<float>(
      {Arg(table, {vocab, hidden}), Arg(ids, {n})},
      [&](Builder& b, const std::vector<hlo::Instruction*>& p) {
        return b.Gather(p[0], p[1], dims);
      },
      {n, hidden}, expected);
}

// Applies every update whose whole window fits in the operand, in row-major
// update order; windows that do not fit are skipped, as XLA does.
template <typename T, typename F>
std::vector<T> ScatterReference(std::vector<T> out, const Dims& od,
                                const std::vector<int64_t>& indices, const Dims& id,
                                const std::vector<T>& updates, const Dims& ud,
                                const hlo::ScatterDims& s, F combine) {
  Dims window_sizes(od.size(), 1);
  for (size_t d = 0, w = 0; d < od.size(); ++d) {
    if (!Contains(s.inserted_window_dims, d)) window_sizes[d] = ud[s.update_window_dims[w++]];
  }
  for (int64_t u = 0; u < NumElements(ud); ++u) {
    Dims at = Unravel(u, ud), batch, window;
    for (size_t i = 0; i < at.size(); ++i)
      (Contains(s.update_window_dims, i) ? window : batch).push_back(at[i]);
    Dims start(od.size(), 0), target(od.size());
    Dims vec = IndexVector(indices, id, s.index_vector_dim, batch);
    for (size_t k = 0; k < vec.size(); ++k) start[s.scatter_dims_to_operand_dims[k]] = vec[k];
    bool fits = true;
    for (size_t d = 0, w = 0; d < od.size(); ++d) {
      fits &= start[d] >= 0 && start[d] + window_sizes[d] <= od[d];
      target[d] = start[d] + (Contains(s.inserted_window_dims, d) ? 0 : window[w++]);
    }
    if (fits) out[Ravel(target, od)] = combine(out[Ravel(target, od)], updates[u]);
  }
  return out;
}

enum class Combine { kAdd, kMax, kOverwrite, kAddSquare };

hlo::Computation* AddCombiner(Graph& g, Combine c, DType t) {
  if (c == Combine::kAdd) return g.Add(hlo::MakeScalarBinaryComputation("add", Opcode::kAdd, t));
  if (c == Combine::kMax)
    return g.Add(hlo::MakeScalarBinaryComputation("max", Opcode::kMaximum, t));
  Builder b("combine");
  auto* old_value = b.Parameter(0, Shape::Scalar(t), "old");
  auto* update = b.Parameter(1, Shape::Scalar(t), "update");
  if (c == Combine::kOverwrite) return g.Add(b.Build(update));
  return g.Add(
      b.Build(b.Add(old_value, b.Multiply(update, update))));  // not a single op: generic path
}

template <typename T>
T Reference(Combine c, T a, T b) {
  switch (c) {
    case Combine::kAdd:
      return a + b;
    case Combine::kMax:
      return std::max(a, b);
    case Combine::kOverwrite:
      return b;
    case Combine::kAddSquare:
      return a + b * b;
  }
  return a;
}

struct ScatterCase {
  const char* name;
  Combine combine;
  Dims operand, indices;
  std::vector<int64_t> index_values;
  Dims updates;
  hlo::ScatterDims dims;
};

const hlo::ScatterDims kRows{{1}, {0}, {0}, 1};  // updates[n, :] into operand[index[n], :]
const ScatterCase kScatterCases[] = {
    // The embedding gradient: repeated rows accumulate.
    {"add rows, repeated",
     Combine::kAdd,
     {8, 5},
     {10},
     {1, 3, 1, 7, 1, 3, 0, 7, 2, 1},
     {10, 5},
     kRows},
    {"add rows, out of bounds skipped",
     Combine::kAdd,
     {8, 5},
     {5},
     {-1, 8, 100, 3, 3},
     {5, 5},
     kRows},
    {"overwrite rows", Combine::kOverwrite, {8, 5}, {3}, {5, 2, 7}, {3, 5}, kRows},
    {"max rows, repeated", Combine::kMax, {8, 5}, {6}, {4, 4, 0, 4, 0, 6}, {6, 5}, kRows},
    {"sum of squares, repeated",
     Combine::kAddSquare,
     {8, 5},
     {6},
     {4, 4, 0, 9, 0, 6},
     {6, 5},
     kRows},
    // Two-row windows: a start of 7 would overrun row 8, so the whole window is skipped.
    {"windows partly out of bounds",
     Combine::kAdd,
     {8, 5},
     {4},
     {6, 7, 0, -1},
     {4, 2, 5},
     {{1, 2}, {}, {0}, 1}},
    {"points, 2-D index",
     Combine::kAdd,
     {6, 7},
     {5, 2},
     {0, 0, 5, 6, 2, 3, 2, 3, 6, 0},
     {5},
     {{}, {0, 1}, {0, 1}, 1}},
    {"no updates", Combine::kAdd, {8, 5}, {0}, {}, {0, 5}, kRows},
};

template <typename T, typename I>
void CheckScatters() {
  for (const ScatterCase& c : kScatterCases) {
    SCOPED_TRACE(std::string(c.name) + " on " + std::string(DTypeName(DTypeOf<T>::value)) +
                 " with " + std::string(DTypeName(DTypeOf<I>::value)) + " indices");
    // Small integers keep every float sum exact whatever the order.
    std::vector<T> operand = Random<T>(NumElements(c.operand), 4, -9, 9);
    std::vector<T> updates = Random<T>(NumElements(c.updates), 5, -9, 9);
    for (T& v : operand) v = std::round(v);
    for (T& v : updates) v = std::round(v);
    std::vector<I> indices(c.index_values.begin(), c.index_values.end());
    auto expected =
        ScatterReference(operand, c.operand, c.index_values, c.indices, updates, c.updates, c.dims,
                         [&](T a, T b) { return Reference(c.combine, a, b); });
    ExpectRun<T>(
        {Arg(operand, c.operand), Arg(indices, c.indices), Arg(updates, c.updates)},
        [&](Graph& g) {
          return g.b.Scatter(g.params[0], g.params[1], g.params[2], c.dims,
                             AddCombiner(g, c.combine, DTypeOf<T>::value));
        },
        c.operand, expected);
  }
}

TEST(Scatter, CombinersRepeatsAndBounds) {
  CheckScatters<float, int32_t>();
  CheckScatters<float, int64_t>();
  CheckScatters<int32_t, int32_t>();
  CheckScatters<double, int32_t>();
}

// --- rng-bit-generator -------------------------------------------------------

// Philox-4x32-10 as published (Salmon et al., SC'11): ten rounds of two
// 32x32->64 multiplies, the key bumped by the Weyl constants between rounds.
std::array<uint32_t, 4> Philox(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = uint64_t{0xD2511F53} * c[0], p1 = uint64_t{0xCD9E8D57} * c[2];
    c = {static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k[0], static_cast<uint32_t>(p1),
         static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k[1], static_cast<uint32_t>(p0)};
    k[0] += 0x9E3779B9;
    k[1] += 0xBB67AE85;
  }
  return c;
}

TEST(Rng, ReferencePhiloxMatchesRandom123KnownAnswers) {
  EXPECT_EQ(Philox({0, 0, 0, 0}, {0, 0}),
            (std::array<uint32_t, 4>{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(Philox({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
            (std::array<uint32_t, 4>{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(Philox({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
            (std::array<uint32_t, 4>{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

// The words the kernel must produce: block b encrypts the 64-bit counter
// counter + b (words 0, 1; words 2, 3 zero) under key (lo, hi).
std::vector<uint32_t> ReferenceWords(uint64_t key, uint64_t counter, int64_t words) {
  std::vector<uint32_t> out;
  for (uint64_t b = 0; static_cast<int64_t>(out.size()) < words; ++b) {
    // the 128-bit counter (key << 64 | counter) + b, as XLA reads a two-word state
    const uint64_t n = counter + b, high = key + (n < counter ? 1 : 0);
    auto block = Philox({static_cast<uint32_t>(n), static_cast<uint32_t>(n >> 32),
                         static_cast<uint32_t>(high), static_cast<uint32_t>(high >> 32)},
                        {static_cast<uint32_t>(key), static_cast<uint32_t>(key >> 32)});
    out.insert(out.end(), block.begin(), block.end());
  }
  out.resize(words);
  return out;
}

std::vector<Buffer> RunRng(uint64_t key, uint64_t counter, const Shape& bits) {
  Graph g({Shape(DType::kU64, {2})});
  return g.Run(g.b.RngBitGenerator(g.params[0], bits),
               {Arg(std::vector<uint64_t>{key, counter}, {2})});
}

TEST(Rng, KernelMatchesReferenceAndAdvancesCounter) {
  struct Case {
    uint64_t key, counter;
    Dims dims;
  };
  const Case cases[] = {{0, 0, {4}},
                        {0x0123456789ABCDEF, 0xFFFFFFFE, {4, 5}},  // counter carries into word 1
                        {42, 0xFFFFFFFFFFFFFFFE, {12}},            // and wraps at 2^64
                        {7, 100, {5}},                             // partial last block
                        {7, 100, {0}},
                        {99, 3, {1000, 33}}};  // parallel blocks
  for (const Case& c : cases) {
    SCOPED_TRACE("key " + std::to_string(c.key) + " counter " + std::to_string(c.counter) +
                 DimsToString(c.dims));
    const int64_t words = NumElements(c.dims), blocks = (words + 3) / 4;
    auto out = RunRng(c.key, c.counter, Shape(DType::kU32, c.dims));
    EXPECT_EQ(out[1].ToVector<uint32_t>(), ReferenceWords(c.key, c.counter, words));
    EXPECT_EQ(out[0].ToVector<uint64_t>(), (std::vector<uint64_t>{c.key, c.counter + blocks}));
  }
  // The Random123 known answer straight from the kernel.
  EXPECT_EQ(RunRng(0, 0, Shape(DType::kU32, {4}))[1].ToVector<uint32_t>(),
            (std::vector<uint32_t>{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
}

// What XLA:CPU (jaxlib 0.10.2) gives for `rng-bit-generator(state),
// algorithm=rng_philox` into u32[8]: strata's bits are XLA's bits, the
// counter's carry into the key's words included.
TEST(Rng, TheBitsAreXlasForTheSameState) {
  EXPECT_EQ(RunRng(0x0123456789ABCDEF, 0xFEDCBA9876543210, Shape(DType::kU32, {8}))[1]
                .ToVector<uint32_t>(),
            (std::vector<uint32_t>{0x1ec53d42, 0xcfa390b5, 0xf2235702, 0xe71ff917, 0xcb472319,
                                   0xd682777a, 0xa09c7b98, 0x304e9f89}));
  EXPECT_EQ(RunRng(5, ~uint64_t{0}, Shape(DType::kU32, {8}))[1].ToVector<uint32_t>(),
            (std::vector<uint32_t>{0x4e5aa1ba, 0xf08b4400, 0x979e52b9, 0xf8215f0c, 0x03dae66b,
                                   0xd8ab4d53, 0xea579295, 0x2b5923e7}));
}

TEST(Rng, U64BitsPairWordsLittleEndian) {
  auto out = RunRng(5, 9, Shape(DType::kU64, {3}));
  auto words = ReferenceWords(5, 9, 6);
  std::vector<uint64_t> expected;
  for (int i = 0; i < 3; ++i) expected.push_back(words[2 * i] | uint64_t{words[2 * i + 1]} << 32);
  EXPECT_EQ(out[1].ToVector<uint64_t>(), expected);
  EXPECT_EQ(out[0].ToVector<uint64_t>(), (std::vector<uint64_t>{5, 11}));
}

TEST(Rng, DifferentKeysGiveDifferentBits) {
  auto a = RunRng(1, 0, Shape(DType::kU32, {64}))[1].ToVector<uint32_t>();
  auto b = RunRng(2, 0, Shape(DType::kU32, {64}))[1].ToVector<uint32_t>();
  int same = 0;
  for (int i = 0; i < 64; ++i) same += a[i] == b[i];
  EXPECT_LE(same, 1);
}

// uniform = (bits >> 8) * 2^-24 and its mean, computed in the program; the
// new state is unused.
TEST(Rng, UniformFloatsHaveMeanOneHalf) {
  const int64_t n = 100000;
  Graph g({Shape(DType::kU64, {2})});
  auto* bits = g.b.GetTupleElement(g.b.RngBitGenerator(g.params[0], Shape(DType::kU32, {n})), 1);
  auto* shifted = g.b.Binary(Opcode::kShiftRightLogical, bits,
                             g.b.Broadcast(g.b.ConstantScalar<uint32_t>(8), {n}, {}));
  auto* uniform = g.b.Multiply(g.b.Convert(shifted, DType::kF32),
                               g.b.Broadcast(g.b.ConstantScalar(1.0f / 16777216.0f), {n}, {}));
  auto* sum = g.b.Reduce(uniform, g.b.ConstantScalar(0.0f), {0},
                         g.Add(hlo::MakeScalarBinaryComputation("add", Opcode::kAdd, DType::kF32)));
  auto out = g.Run(g.b.Tuple({sum, g.b.Slice(uniform, {0}, {8})}),
                   {Arg(std::vector<uint64_t>{1234, 0}, {2})});
  auto words = ReferenceWords(1234, 0, n);
  double expected_sum = 0;
  for (uint32_t w : words) expected_sum += (w >> 8) / 16777216.0;
  const double mean = out[0].ToVector<float>()[0] / n;
  EXPECT_NEAR(mean, 0.5, 0.01);
  EXPECT_NEAR(mean, expected_sum / n, 1e-4);
  auto head = out[1].ToVector<float>();
  for (int i = 0; i < 8; ++i) EXPECT_EQ(head[i], (words[i] >> 8) / 16777216.0f) << i;
}

}  // namespace
}  // namespace strata::runtime::test
