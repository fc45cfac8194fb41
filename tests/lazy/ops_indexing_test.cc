// The data-dependent window ops (pad, dynamic_slice, dynamic_update_slice,
// index_add) against plain-loop references: ranks 0-3, several dtypes,
// zero-sized dims, clamped starts, repeated indices; that new start values
// reuse the compiled program; and that bad calls throw naming the op.
#include <algorithm>
#include <cstdint>
#include <limits>

#include "lazy/op_test_util.h"
#include "strata/lazy/context.h"

namespace strata::test {
namespace {

using lazy::Context;

// ---- references (plain loops, never strata) ----------------------------------------

// XLA's clamp: the window [start, start + size) stays inside [0, dim).
int64_t ClampStart(int64_t start, int64_t dim, int64_t size) {
  return std::clamp<int64_t>(start, 0, dim - size);
}

template <typename T>
std::vector<T> RefPad(const std::vector<T>& x, const Dims& dims, const Dims& low, const Dims& high,
                      T value, Dims* out_dims) {
  Dims out;
  for (size_t d = 0; d < dims.size(); ++d) out.push_back(low[d] + dims[d] + high[d]);
  *out_dims = out;
  return Tabulate<T>(out, [&](const Dims& i) -> T {
    Dims src(i.size());
    for (size_t d = 0; d < i.size(); ++d) {
      src[d] = i[d] - low[d];
      if (src[d] < 0 || src[d] >= dims[d]) return value;
    }
    return x[Ravel(src, dims)];
  });
}

template <typename T>
std::vector<T> RefDynamicSlice(const std::vector<T>& x, const Dims& dims, const Dims& starts,
                               const Dims& sizes) {
  Dims s(dims.size());
  for (size_t d = 0; d < dims.size(); ++d) s[d] = ClampStart(starts[d], dims[d], sizes[d]);
  return Tabulate<T>(sizes, [&](const Dims& i) -> T {
    Dims src = i;
    for (size_t d = 0; d < i.size(); ++d) src[d] += s[d];
    return x[Ravel(src, dims)];
  });
}

template <typename T>
std::vector<T> RefDynamicUpdateSlice(std::vector<T> x, const Dims& dims, const std::vector<T>& u,
                                     const Dims& udims, const Dims& starts) {
  Dims s(dims.size());
  for (size_t d = 0; d < dims.size(); ++d) s[d] = ClampStart(starts[d], dims[d], udims[d]);
  for (int64_t j = 0; j < NumElements(udims); ++j) {
    Dims i = Unravel(j, udims);
    for (size_t d = 0; d < i.size(); ++d) i[d] += s[d];
    x[Ravel(i, dims)] = u[j];
  }
  return x;
}

// torch.index_add: x[..., index[k], ...] += alpha * source[..., k, ...] along `dim`
// (non-negative here), in order of k.
template <typename T>
std::vector<T> RefIndexAdd(std::vector<T> x, const Dims& dims, int64_t dim,
                           const std::vector<int64_t>& index, const std::vector<T>& source,
                           T alpha) {
  Dims sdims = dims;
  sdims[dim] = static_cast<int64_t>(index.size());
  for (int64_t j = 0; j < NumElements(sdims); ++j) {
    Dims i = Unravel(j, sdims);
    i[dim] = index[i[dim]];
    T term = alpha == T(1) ? source[j] : static_cast<T>(source[j] * alpha);
    x[Ravel(i, dims)] = static_cast<T>(x[Ravel(i, dims)] + term);
  }
  return x;
}

// ---- inputs -------------------------------------------------------------------------

// A rank-0 start (or index) tensor of C++ type I: device data, not a literal.
template <typename I>
Tensor Scalar(I v) {
  return Tensor::FromVector<I>({v}, {});
}

// One rank-0 start tensor per entry, as `dtype` (an integer type).
std::vector<Tensor> Starts(const Dims& values, DType dtype = DType::kS64) {
  std::vector<Tensor> out;
  for (int64_t v : values) {
    switch (dtype) {
      case DType::kS8:
        out.push_back(Scalar<int8_t>(static_cast<int8_t>(v)));
        break;
      case DType::kS32:
        out.push_back(Scalar<int32_t>(static_cast<int32_t>(v)));
        break;
      case DType::kU8:
        out.push_back(Scalar<uint8_t>(static_cast<uint8_t>(v)));
        break;
      case DType::kU32:
        out.push_back(Scalar<uint32_t>(static_cast<uint32_t>(v)));
        break;
      case DType::kU64:
        out.push_back(Scalar<uint64_t>(static_cast<uint64_t>(v)));
        break;
      default:
        out.push_back(Scalar<int64_t>(v));
        break;
    }
  }
  return out;
}

Tensor Index(const std::vector<int64_t>& values) {
  return Tensor::FromVector<int64_t>(values, {static_cast<int64_t>(values.size())});
}

template <typename T>
std::vector<T> Values(const Dims& dims, uint32_t seed) {
  if constexpr (std::is_floating_point_v<T>) {
    return RandomValues<T>(NumElements(dims), seed);
  } else {
    return RandomValues<T>(NumElements(dims), seed, -9, 9);
  }
}

// A fill value / alpha that is not 0 or 1 (those are baked into the program).
template <typename T>
T OddValue() {
  return std::is_floating_point_v<T> ? static_cast<T>(-2.5) : static_cast<T>(-7);
}
template <typename T>
T OddAlpha() {
  return std::is_floating_point_v<T> ? static_cast<T>(2.5) : static_cast<T>(3);
}

// Floats accumulate in the same order as the reference; allow last-bit slack.
template <typename T>
constexpr double kRel = std::is_same_v<T, float> ? 1e-6 : (std::is_same_v<T, double> ? 1e-14 : 0);

template <typename T>
class IndexingTyped : public ::testing::Test {};
using ValueTypes = ::testing::Types<float, double, int32_t, int64_t>;
TYPED_TEST_SUITE(IndexingTyped, ValueTypes);

// ---- pad ----------------------------------------------------------------------------

struct PadCase {
  Dims dims, low, high;
};

const std::vector<PadCase>& PadCases() {
  static const std::vector<PadCase> cases = {
      {{}, {}, {}},                       // rank 0: nothing to pad
      {{5}, {2}, {3}},                    // 1-D
      {{5}, {0}, {0}},                    // no padding at all
      {{1}, {4}, {0}},                    // low only
      {{3, 4}, {1, 0}, {2, 3}},           // 2-D, mixed
      {{3, 4}, {0, 2}, {0, 0}},           // one dim untouched
      {{2, 3, 2}, {0, 1, 2}, {1, 0, 1}},  // 3-D
      {{0}, {2}, {1}},                    // empty input: all padding
      {{0, 3}, {2, 1}, {1, 0}},           // zero-sized dim padded up
      {{2, 0, 3}, {0, 0, 1}, {1, 0, 0}},  // zero-sized dim stays empty
      {{4, 0}, {0, 0}, {0, 0}},           // empty, no padding
  };
  return cases;
}

TYPED_TEST(IndexingTyped, PadMatchesLoops) {
  using T = TypeParam;
  uint32_t seed = 1;
  for (const PadCase& c : PadCases()) {
    for (T value : {T(0), T(1), OddValue<T>()}) {
      SCOPED_TRACE(::testing::Message()
                   << "dims " << DimsToString(c.dims) << " low " << DimsToString(c.low) << " high "
                   << DimsToString(c.high) << " value " << +value);
      std::vector<T> x = Values<T>(c.dims, seed++);
      Dims out_dims;
      std::vector<T> expected = RefPad<T>(x, c.dims, c.low, c.high, value, &out_dims);
      ExpectTensor<T>(pad(Tensor::FromVector<T>(x, c.dims), c.low, c.high, value), out_dims,
                      expected);
    }
  }
}

TYPED_TEST(IndexingTyped, PadOfComputedTensor) {
  using T = TypeParam;
  Dims dims = {2, 3};
  std::vector<T> x = Values<T>(dims, 7);
  std::vector<T> doubled(x.size());
  for (size_t i = 0; i < x.size(); ++i) doubled[i] = static_cast<T>(x[i] + x[i]);
  Tensor t = Tensor::FromVector<T>(x, dims);
  Dims out_dims;
  std::vector<T> expected = RefPad<T>(doubled, dims, {1, 2}, {2, 1}, T(4), &out_dims);
  ExpectTensor<T>(pad(t + t, {1, 2}, {2, 1}, 4), out_dims, expected);
  // Padding twice composes.
  Dims twice_dims;
  std::vector<T> twice = RefPad<T>(expected, out_dims, {0, 1}, {1, 0}, T(-3), &twice_dims);
  ExpectTensor<T>(pad(pad(t + t, {1, 2}, {2, 1}, 4), {0, 1}, {1, 0}, -3), twice_dims, twice);
}

TEST(PadIndexing, Bool) {
  Dims dims = {2, 3};
  std::vector<uint8_t> x = {1, 0, 1, 0, 0, 1};
  for (uint8_t value : {uint8_t{0}, uint8_t{1}}) {
    Dims out_dims;
    std::vector<uint8_t> expected = RefPad<uint8_t>(x, dims, {1, 0}, {0, 2}, value, &out_dims);
    Tensor padded = pad(BoolTensor(x, dims), {1, 0}, {0, 2}, value);
    ASSERT_EQ(padded.shape().dims(), out_dims);
    EXPECT_EQ(BoolValues(padded), expected) << "value " << +value;
  }
  Tensor scalar_pad = pad(BoolTensor({1}, {}), {}, {}, 0);
  EXPECT_EQ(BoolValues(scalar_pad), (std::vector<uint8_t>{1}));
}

// ---- dynamic_slice ------------------------------------------------------------------

struct WindowCase {
  Dims dims, sizes;
  std::vector<Dims> starts;  // each is clamped into range by the op
};

const std::vector<WindowCase>& WindowCases() {
  static const std::vector<WindowCase> cases = {
      {{}, {}, {{}}},
      {{7}, {3}, {{-5}, {-1}, {0}, {2}, {4}, {5}, {100}}},
      {{7}, {7}, {{-3}, {0}, {3}}},  // the whole dim: every start clamps to 0
      {{7}, {0}, {{-2}, {0}, {7}, {9}}},
      {{4, 5},
       {2, 3},
       {{0, 0}, {1, 2}, {2, 2}, {3, 1}, {-3, 4}, {9, -1}, {-1, 7}, {1000000, 1000000}}},
      {{4, 5}, {4, 1}, {{0, 4}, {1, 0}, {-1, 5}}},
      {{4, 5}, {0, 3}, {{2, 1}, {5, 5}}},
      {{3, 4, 5}, {2, 1, 3}, {{0, 0, 0}, {1, 3, 2}, {2, 3, 2}, {-1, 9, 1}, {5, -4, 99}}},
      {{3, 4, 5}, {1, 4, 5}, {{2, 1, 1}, {-9, -9, -9}}},
      {{0, 3}, {0, 2}, {{5, -1}, {0, 1}, {0, 9}}},  // zero-sized operand
      {{2, 0, 3}, {1, 0, 3}, {{1, 0, 0}, {-1, 4, 2}}},
  };
  return cases;
}

TYPED_TEST(IndexingTyped, DynamicSliceMatchesLoops) {
  using T = TypeParam;
  uint32_t seed = 100;
  for (const WindowCase& c : WindowCases()) {
    std::vector<T> x = Values<T>(c.dims, seed++);
    Tensor t = Tensor::FromVector<T>(x, c.dims);
    for (const Dims& s : c.starts) {
      SCOPED_TRACE(::testing::Message() << "dims " << DimsToString(c.dims) << " sizes "
                                        << DimsToString(c.sizes) << " starts " << DimsToString(s));
      ExpectTensor<T>(dynamic_slice(t, Starts(s), c.sizes), c.sizes,
                      RefDynamicSlice<T>(x, c.dims, s, c.sizes));
    }
  }
}

TEST(DynamicSliceIndexing, StartDtypes) {
  Dims dims = {6, 5}, sizes = {2, 3};
  std::vector<float> x = Values<float>(dims, 3);
  Tensor t = Tensor::FromVector<float>(x, dims);
  struct Case {
    DType dtype;
    Dims starts;     // cast to `dtype` when stored
    Dims effective;  // what the stored values mean as indices
  };
  for (const Case& c : std::vector<Case>{
           {DType::kS8, {-3, 2}, {-3, 2}},
           {DType::kS8, {3, 127}, {3, 127}},
           {DType::kS32, {4, -1}, {4, -1}},
           {DType::kS64, {1, 1}, {1, 1}},
           {DType::kU8, {255, 1}, {255, 1}},
           {DType::kU32, {2, 3}, {2, 3}},
           // u64 past 2^63 is huge, not negative: it clamps to the end.
           {DType::kU64,
            {-1, -2},
            {std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::max()}},
       }) {
    SCOPED_TRACE(::testing::Message()
                 << DTypeName(c.dtype) << " starts " << DimsToString(c.starts));
    ExpectTensor<float>(dynamic_slice(t, Starts(c.starts, c.dtype), sizes), sizes,
                        RefDynamicSlice<float>(x, dims, c.effective, sizes));
  }
  // Starts of different dtypes in one call.
  std::vector<Tensor> mixed = {Scalar<int32_t>(3), Scalar<uint8_t>(1)};
  ExpectTensor<float>(dynamic_slice(t, mixed, sizes), sizes,
                      RefDynamicSlice<float>(x, dims, {3, 1}, sizes));
}

TEST(DynamicSliceIndexing, ComputedStarts) {
  // Starts that are pending IR (as in a scan body), not device data.
  Dims dims = {5, 4};
  std::vector<double> x = Values<double>(dims, 11);
  Tensor t = Tensor::FromVector<double>(x, dims);
  Tensor i = Scalar<int64_t>(5) - Scalar<int64_t>(2);                  // 3
  Tensor j = argmax(Tensor::FromVector<float>({0, 2, 9, 1}, {4}), 0);  // 2
  ExpectTensor<double>(dynamic_slice(t, {i, j}, {2, 2}), {2, 2},
                       RefDynamicSlice<double>(x, dims, {3, 2}, {2, 2}));
  ExpectTensor<double>(dynamic_slice(t, {i + i, j}, {2, 2}), {2, 2},  // 6 clamps to 3
                       RefDynamicSlice<double>(x, dims, {6, 2}, {2, 2}));
  // A start baked into the program as a literal.
  Tensor c = dynamic_slice(astype(arange(6), DType::kF32), {constant(4, DType::kS64)}, {3});
  ExpectTensor<float>(c, {3}, {3, 4, 5});
}

TEST(DynamicSliceIndexing, Bool) {
  Dims dims = {3, 4};
  std::vector<uint8_t> x = {1, 0, 0, 1, 1, 1, 0, 0, 0, 1, 0, 1};
  Tensor t = BoolTensor(x, dims);
  for (const Dims& s : std::vector<Dims>{{0, 0}, {1, 2}, {5, -3}, {-1, 9}}) {
    Tensor r = dynamic_slice(t, Starts(s), {2, 2});
    ASSERT_EQ(r.shape().dims(), (Dims{2, 2}));
    EXPECT_EQ(BoolValues(r), RefDynamicSlice<uint8_t>(x, dims, s, {2, 2})) << DimsToString(s);
  }
}

// ---- dynamic_update_slice -----------------------------------------------------------

TYPED_TEST(IndexingTyped, DynamicUpdateSliceMatchesLoops) {
  using T = TypeParam;
  uint32_t seed = 200;
  for (const WindowCase& c : WindowCases()) {
    std::vector<T> x = Values<T>(c.dims, seed++);
    std::vector<T> u = Values<T>(c.sizes, seed++);
    Tensor t = Tensor::FromVector<T>(x, c.dims);
    Tensor ut = Tensor::FromVector<T>(u, c.sizes);
    for (const Dims& s : c.starts) {
      SCOPED_TRACE(::testing::Message() << "dims " << DimsToString(c.dims) << " update "
                                        << DimsToString(c.sizes) << " starts " << DimsToString(s));
      ExpectTensor<T>(dynamic_update_slice(t, ut, Starts(s)), c.dims,
                      RefDynamicUpdateSlice<T>(x, c.dims, u, c.sizes, s));
    }
    // The operand's own data is never written.
    ExpectTensor<T>(t, c.dims, x);
  }
}

TYPED_TEST(IndexingTyped, DynamicUpdateSliceConvertsUpdate) {
  using T = TypeParam;
  // Update of another dtype: converted to x's dtype (integral values, exact everywhere).
  Dims dims = {3, 4};
  std::vector<T> x = Values<T>(dims, 5);
  Tensor t = Tensor::FromVector<T>(x, dims);
  std::vector<int32_t> u32 = {7, -8, 9};
  std::vector<T> u(u32.begin(), u32.end());
  Tensor update = Tensor::FromVector<int32_t>(u32, {1, 3});
  ExpectTensor<T>(dynamic_update_slice(t, update, Starts({2, 1})), dims,
                  RefDynamicUpdateSlice<T>(x, dims, u, {1, 3}, {2, 1}));
  std::vector<double> ud = {-3, 6, 2, 5};
  Tensor dupdate = Tensor::FromVector<double>(ud, {2, 2});
  ExpectTensor<T>(
      dynamic_update_slice(t, dupdate, Starts({0, 3}, DType::kS32)), dims,
      RefDynamicUpdateSlice<T>(x, dims, std::vector<T>(ud.begin(), ud.end()), {2, 2}, {0, 3}));
}

TEST(DynamicUpdateSliceIndexing, Bool) {
  Dims dims = {3, 4};
  std::vector<uint8_t> x(12, 0), u = {1, 1, 0, 1};
  Tensor t = BoolTensor(x, dims), ut = BoolTensor(u, {2, 2});
  for (const Dims& s : std::vector<Dims>{{0, 0}, {1, 2}, {5, -3}, {-1, 9}}) {
    Tensor r = dynamic_update_slice(t, ut, Starts(s));
    ASSERT_EQ(r.shape().dims(), dims);
    EXPECT_EQ(BoolValues(r), RefDynamicUpdateSlice<uint8_t>(x, dims, u, {2, 2}, s))
        << DimsToString(s);
  }
}

TEST(DynamicUpdateSliceIndexing, ChainedAndRoundTrip) {
  Dims dims = {5, 6};
  std::vector<float> x = Values<float>(dims, 21), u1 = Values<float>({3, 3}, 22),
                     u2 = Values<float>({2, 4}, 23);
  Tensor t = Tensor::FromVector<float>(x, dims);
  Tensor ut1 = Tensor::FromVector<float>(u1, {3, 3}), ut2 = Tensor::FromVector<float>(u2, {2, 4});
  // Overlapping writes apply in order.
  std::vector<float> expected = RefDynamicUpdateSlice<float>(x, dims, u1, {3, 3}, {1, 2});
  expected = RefDynamicUpdateSlice<float>(expected, dims, u2, {2, 4}, {2, 9});
  Tensor chained =
      dynamic_update_slice(dynamic_update_slice(t, ut1, Starts({1, 2})), ut2, Starts({2, 9}));
  ExpectTensor<float>(chained, dims, expected);
  // Reading back the window just written gives the update.
  Tensor written = dynamic_update_slice(t * 2, ut1, Starts({2, 1}));
  ExpectTensor<float>(dynamic_slice(written, Starts({2, 1}), {3, 3}), {3, 3}, u1);
}

TEST(DynamicUpdateSliceIndexing, OtherUsersOfTheOperandSeeItUnchanged) {
  // dynamic_update_slice may run in place on its operand's buffer; a second
  // user of that operand in the same graph must still see the old values.
  Dims dims = {4, 3};
  std::vector<float> x = Values<float>(dims, 31), u = {10, 20, 30};
  Tensor t = Tensor::FromVector<float>(x, dims);
  Tensor base = t * 2;
  Tensor updated = dynamic_update_slice(base, Tensor::FromVector<float>(u, {1, 3}), Starts({1, 0}));
  Tensor other = base + 1;
  Tensor total = sum(base);
  std::vector<Tensor*> roots = {&updated, &other, &total};
  sync(roots);
  std::vector<float> twice(x.size()), plus_one(x.size());
  double sum_twice = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    twice[i] = x[i] * 2;
    plus_one[i] = twice[i] + 1;
    sum_twice += twice[i];
  }
  ExpectTensor<float>(updated, dims, RefDynamicUpdateSlice<float>(twice, dims, u, {1, 3}, {1, 0}));
  ExpectTensor<float>(other, dims, plus_one, 1e-6);
  EXPECT_NEAR(total.item<float>(), sum_twice, 1e-4);
  ExpectTensor<float>(t, dims, x);
}

// ---- index_add ----------------------------------------------------------------------

// Indices along a dim of `size` with repeats (every position hit at least once when size <= 4).
std::vector<int64_t> RepeatedIndex(int64_t size) {
  switch (size) {
    case 1:
      return {0, 0, 0};
    case 2:
      return {1, 0, 1, 1, 0};
    case 3:
      return {2, 0, 2, 1, 2};
    default:
      return {size - 1, size - 1, 0, 1, size - 1, 2};
  }
}

TYPED_TEST(IndexingTyped, IndexAddMatchesLoops) {
  using T = TypeParam;
  uint32_t seed = 300;
  for (const Dims& dims : std::vector<Dims>{{6}, {1}, {4, 3}, {2, 3, 4}}) {
    int64_t rank = static_cast<int64_t>(dims.size());
    std::vector<T> x = Values<T>(dims, seed++);
    Tensor t = Tensor::FromVector<T>(x, dims);
    for (int64_t dim = -rank; dim < rank; ++dim) {
      int64_t d = dim < 0 ? dim + rank : dim;
      std::vector<int64_t> index = RepeatedIndex(dims[d]);
      Dims sdims = dims;
      sdims[d] = static_cast<int64_t>(index.size());
      std::vector<T> source = Values<T>(sdims, seed++);
      Tensor st = Tensor::FromVector<T>(source, sdims);
      for (T alpha : {T(1), OddAlpha<T>(), T(-1)}) {
        SCOPED_TRACE(::testing::Message()
                     << "dims " << DimsToString(dims) << " dim " << dim << " alpha " << +alpha);
        ExpectTensor<T>(index_add(t, dim, Index(index), st, alpha), dims,
                        RefIndexAdd<T>(x, dims, d, index, source, alpha), kRel<T>, kRel<T>);
      }
    }
    ExpectTensor<T>(t, dims, x);  // the operand's own data is never written
  }
}

TYPED_TEST(IndexingTyped, IndexAddEmptyAndIndexDtypes) {
  using T = TypeParam;
  Dims dims = {4, 3};
  std::vector<T> x = Values<T>(dims, 41);
  Tensor t = Tensor::FromVector<T>(x, dims);
  // Empty index: nothing added.
  ExpectTensor<T>(index_add(t, 0, Index({}), Tensor::FromVector<T>({}, {0, 3}), 2), dims, x);
  ExpectTensor<T>(index_add(t, -1, Index({}), Tensor::FromVector<T>({}, {4, 0})), dims, x);
  // Zero-sized operand dims.
  ExpectTensor<T>(index_add(Tensor::FromVector<T>({}, {0, 3}), 1, Index({2, 2}),
                            Tensor::FromVector<T>({}, {0, 2})),
                  {0, 3}, {});
  ExpectTensor<T>(index_add(Tensor::FromVector<T>({}, {3, 0}), 0, Index({1, 1, 2}),
                            Tensor::FromVector<T>({}, {3, 0}), 3),
                  {3, 0}, {});
  // s32 and u8 indices.
  std::vector<int64_t> index = {3, 0, 3, 3};
  std::vector<T> source = Values<T>({4, 3}, 42);
  Tensor st = Tensor::FromVector<T>(source, {4, 3});
  std::vector<T> expected = RefIndexAdd<T>(x, dims, 0, index, source, OddAlpha<T>());
  ExpectTensor<T>(
      index_add(t, 0, Tensor::FromVector<int32_t>({3, 0, 3, 3}, {4}), st, OddAlpha<T>()), dims,
      expected, kRel<T>, kRel<T>);
  ExpectTensor<T>(
      index_add(t, 0, Tensor::FromVector<uint8_t>({3, 0, 3, 3}, {4}), st, OddAlpha<T>()), dims,
      expected, kRel<T>, kRel<T>);
}

TEST(IndexAddIndexing, SourceOfAnotherDtypeAndComputedOperand) {
  Dims dims = {3, 2};
  std::vector<float> x = Values<float>(dims, 51);
  std::vector<double> source = {1.5, -2, 0.25, 4, -1, 3};
  std::vector<float> fsource(source.begin(), source.end());
  Tensor t = Tensor::FromVector<float>(x, dims);
  std::vector<int64_t> index = {2, 2, 0};
  ExpectTensor<float>(
      index_add(t, 0, Index(index), Tensor::FromVector<double>(source, {3, 2}), 0.5), dims,
      RefIndexAdd<float>(x, dims, 0, index, fsource, 0.5f), 1e-6, 1e-6);
  // Operand that is itself computed, with another user in the same graph.
  Tensor base = t * 2;
  Tensor added =
      index_add(base, 1, Index({1, 1}), Tensor::FromVector<float>({1, 2, 3, 4, 5, 6}, {3, 2}));
  Tensor other = base - 1;
  std::vector<Tensor*> roots = {&added, &other};
  sync(roots);
  std::vector<float> twice(x.size()), minus_one(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    twice[i] = 2 * x[i];
    minus_one[i] = twice[i] - 1;
  }
  ExpectTensor<float>(added, dims,
                      RefIndexAdd<float>(twice, dims, 1, {1, 1}, {1, 2, 3, 4, 5, 6}, 1.0f), 1e-6,
                      1e-6);
  ExpectTensor<float>(other, dims, minus_one, 1e-6, 1e-6);
}

TEST(IndexAddIndexing, SourceIsTheOperand) {
  // torch.index_add(x, 0, index, x): every update reads the original x.
  Dims dims = {2, 3};
  std::vector<float> x = {1, 2, 3, 10, 20, 30};
  Tensor t = Tensor::FromVector<float>(x, dims);
  ExpectTensor<float>(index_add(t, 0, Index({1, 0}), t), dims,
                      RefIndexAdd<float>(x, dims, 0, {1, 0}, x, 1.0f));
  Dims square = {3, 3};
  std::vector<float> y = Values<float>(square, 81);
  Tensor ty = Tensor::FromVector<float>(y, square);
  ExpectTensor<float>(index_add(ty, -1, Index({2, 2, 0}), ty), square,
                      RefIndexAdd<float>(y, square, 1, {2, 2, 0}, y, 1.0f), 1e-6, 1e-6);
}

// Regression: the scatter used to run in place over its operand while the
// same buffer was also its updates, so later windows read rows earlier ones
// had overwritten (the planner now refuses that reuse).
TEST(IndexAddIndexing, SourceIsTheComputedOperand) {
  Dims dims = {2, 3};
  std::vector<float> x = {1, 2, 3, 10, 20, 30};
  std::vector<float> twice = {2, 4, 6, 20, 40, 60};
  Tensor a = Tensor::FromVector<float>(x, dims) * 2;
  ExpectTensor<float>(index_add(a, 0, Index({1, 0}), a), dims,
                      RefIndexAdd<float>(twice, dims, 0, {1, 0}, twice, 1.0f));
}

TEST(HalfIndexing, PadAndDynamicOps) {
  // Pure data movement: f16 and bf16 work (values exact in both; compared as f32).
  for (DType dt : {DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(DTypeName(dt));
    Tensor x = astype(Tensor::FromVector<float>({1, 2, 3, 4}, {4}), dt);
    Tensor u = astype(Tensor::FromVector<float>({-1, -2}, {2}), dt);
    Tensor padded = pad(x, {1}, {2}, 2.5);
    EXPECT_EQ(padded.dtype(), dt);
    ExpectTensor<float>(astype(padded, DType::kF32), {7}, {2.5, 1, 2, 3, 4, 2.5, 2.5});
    ExpectTensor<float>(astype(dynamic_slice(x, Starts({9}), {2}), DType::kF32), {2}, {3, 4});
    Tensor updated = dynamic_update_slice(x, u, Starts({1}));
    EXPECT_EQ(updated.dtype(), dt);
    ExpectTensor<float>(astype(updated, DType::kF32), {4}, {1, -1, -2, 4});
    // A half update into an f32 operand is converted up.
    ExpectTensor<float>(
        dynamic_update_slice(Tensor::FromVector<float>({1, 2, 3, 4}, {4}), u, Starts({-5})), {4},
        {-1, -2, 3, 4});
  }
}

// Regression: index_add on f16/bf16 used to add in the storage type, which
// the CPU runtime rejects; it now adds in f32 and rounds once.
TEST(IndexAddIndexing, HalfPrecision) {
  for (DType dt : {DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(DTypeName(dt));
    Tensor x = astype(Tensor::FromVector<float>({1, 2, 3, 4}, {4}), dt);
    Tensor s = astype(Tensor::FromVector<float>({1, 2}, {2}), dt);
    Tensor r = index_add(x, 0, Index({3, 3}), s);
    EXPECT_EQ(r.dtype(), dt);
    ExpectTensor<float>(astype(r, DType::kF32), {4}, {1, 2, 3, 7});
    ExpectTensor<float>(astype(index_add(x, 0, Index({0, 3}), s, 2.5), DType::kF32), {4},
                        {3.5, 2, 3, 9});
  }
}

TEST(LargeIndexing, WindowOpsOnTheThreadPool) {
  // Big enough for the parallel copy path.
  Dims dims = {300, 257};
  std::vector<float> x = Values<float>(dims, 91);
  Tensor t = Tensor::FromVector<float>(x, dims);
  ExpectTensor<float>(dynamic_slice(t, Starts({7, 3}), {290, 250}), {290, 250},
                      RefDynamicSlice<float>(x, dims, {7, 3}, {290, 250}));
  ExpectTensor<float>(dynamic_slice(t, Starts({70, 30}), {290, 250}), {290, 250},
                      RefDynamicSlice<float>(x, dims, {70, 30}, {290, 250}));
  std::vector<float> u = Values<float>({280, 200}, 92);
  Tensor ut = Tensor::FromVector<float>(u, {280, 200});
  ExpectTensor<float>(dynamic_update_slice(t, ut, Starts({11, 50})), dims,
                      RefDynamicUpdateSlice<float>(x, dims, u, {280, 200}, {11, 50}));
  ExpectTensor<float>(
      dynamic_update_slice(t * 1.5, ut, Starts({-3, 99})), dims,
      [&] {
        std::vector<float> scaled(x.size());
        for (size_t i = 0; i < x.size(); ++i) scaled[i] = x[i] * 1.5f;
        return RefDynamicUpdateSlice<float>(scaled, dims, u, {280, 200}, {-3, 99});
      }(),
      1e-6);
  Dims out_dims;
  std::vector<float> padded = RefPad<float>(x, dims, {3, 5}, {2, 9}, 2.5f, &out_dims);
  ExpectTensor<float>(pad(t, {3, 5}, {2, 9}, 2.5), out_dims, padded);
  std::vector<int64_t> index = {299, 0, 299, 150};
  std::vector<float> source = Values<float>({4, 257}, 93);
  ExpectTensor<float>(
      index_add(t, 0, Index(index), Tensor::FromVector<float>(source, {4, 257}), -0.5), dims,
      RefIndexAdd<float>(x, dims, 0, index, source, -0.5f), 1e-6, 1e-6);
}

// ---- the compile cache --------------------------------------------------------------

class IndexingCache : public ::testing::Test {
 protected:
  void SetUp() override {
    Context::Get().ClearCache();
    Context::Get().ResetMetrics();
  }
  static int64_t compiles() { return Context::Get().metrics().compiles.load(); }
};

TEST_F(IndexingCache, NewStartValuesDoNotRecompile) {
  Dims dims = {6, 5}, sizes = {2, 3};
  std::vector<float> x = Values<float>(dims, 61);
  Tensor t = Tensor::FromVector<float>(x, dims);
  ExpectTensor<float>(dynamic_slice(t, Starts({1, 2}), sizes), sizes,
                      RefDynamicSlice<float>(x, dims, {1, 2}, sizes));
  ASSERT_EQ(compiles(), 1);
  for (const Dims& s :
       std::vector<Dims>{{3, 0}, {0, 0}, {4, 2}, {-4, 100}, {1LL << 40, -(1LL << 40)}}) {
    ExpectTensor<float>(dynamic_slice(t, Starts(s), sizes), sizes,
                        RefDynamicSlice<float>(x, dims, s, sizes));
  }
  EXPECT_EQ(compiles(), 1) << Context::Get().last_miss_explanation();

  std::vector<float> u = Values<float>(sizes, 62);
  Tensor ut = Tensor::FromVector<float>(u, sizes);
  ExpectTensor<float>(dynamic_update_slice(t, ut, Starts({0, 1})), dims,
                      RefDynamicUpdateSlice<float>(x, dims, u, sizes, {0, 1}));
  ASSERT_EQ(compiles(), 2);
  for (const Dims& s : std::vector<Dims>{{5, 4}, {2, 2}, {-1, -1}, {9, 0}}) {
    ExpectTensor<float>(dynamic_update_slice(t, ut, Starts(s)), dims,
                        RefDynamicUpdateSlice<float>(x, dims, u, sizes, s));
  }
  EXPECT_EQ(compiles(), 2) << Context::Get().last_miss_explanation();
}

TEST_F(IndexingCache, NewIndexValuesAlphaAndPadValueDoNotRecompile) {
  Dims dims = {4, 3};
  std::vector<float> x = Values<float>(dims, 71), source = Values<float>({3, 3}, 72);
  Tensor t = Tensor::FromVector<float>(x, dims), st = Tensor::FromVector<float>(source, {3, 3});
  int64_t before = 0;
  bool first = true;
  for (const std::vector<int64_t>& index :
       std::vector<std::vector<int64_t>>{{0, 1, 2}, {3, 3, 3}, {2, 0, 2}}) {
    for (float alpha : {2.5f, -3.0f}) {
      ExpectTensor<float>(index_add(t, 0, Index(index), st, alpha), dims,
                          RefIndexAdd<float>(x, dims, 0, index, source, alpha), 1e-6, 1e-6);
      if (first) before = compiles(), first = false;
    }
  }
  EXPECT_EQ(before, 1);
  EXPECT_EQ(compiles(), 1) << Context::Get().last_miss_explanation();

  for (float value : {2.5f, -4.0f, 7.0f}) {
    Dims out_dims;
    std::vector<float> expected = RefPad<float>(x, dims, {1, 0}, {0, 2}, value, &out_dims);
    ExpectTensor<float>(pad(t, {1, 0}, {0, 2}, value), out_dims, expected);
  }
  EXPECT_EQ(compiles(), 2) << Context::Get().last_miss_explanation();
}

// ---- bad inputs ---------------------------------------------------------------------

struct BadCall {
  std::string name;
  std::function<void()> call;
  std::string op;
  std::vector<std::string> parts;  // must appear in the message
};

Tensor F32(Dims dims) { return zeros(std::move(dims)); }

std::vector<BadCall> BadCalls() {
  Tensor x = F32({3, 4});
  auto s = [](int64_t v) { return Scalar<int64_t>(v); };
  return {
      // dynamic_slice
      {"ds too few starts",
       [=] {
         dynamic_slice(x, {s(0)}, {1, 1});
       },
       "dynamic_slice",
       {"f32[3,4]", "got 1"}},
      {"ds too many starts",
       [=] {
         dynamic_slice(x, {s(0), s(0), s(0)}, {1, 1});
       },
       "dynamic_slice",
       {"f32[3,4]", "got 3"}},
      {"ds starts for a scalar",
       [=] { dynamic_slice(F32({}), {s(0)}, {}); },
       "dynamic_slice",
       {"f32[]"}},
      {"ds 1-D start",
       [=] {
         dynamic_slice(x, {s(0), Tensor::FromVector<int64_t>({1}, {1})}, {1, 1});
       },
       "dynamic_slice",
       {"start 1", "s64[1]"}},
      {"ds float start",
       [=] {
         dynamic_slice(x, {scalar(1.5), s(0)}, {1, 1});
       },
       "dynamic_slice",
       {"start 0", "f32[]"}},
      {"ds bool start",
       [=] {
         dynamic_slice(x, {s(0), BoolTensor({1}, {})}, {1, 1});
       },
       "dynamic_slice",
       {"start 1", "pred[]"}},
      {"ds undefined start",
       [=] {
         dynamic_slice(x, {s(0), Tensor()}, {1, 1});
       },
       "dynamic_slice",
       {"start 1", "undefined"}},
      {"ds too few sizes",
       [=] {
         dynamic_slice(x, {s(0), s(0)}, {1});
       },
       "dynamic_slice",
       {"f32[3,4]", "got 1"}},
      {"ds size too large",
       [=] {
         dynamic_slice(x, {s(0), s(0)}, {1, 5});
       },
       "dynamic_slice",
       {"size 5", "dim 1", "f32[3,4]"}},
      {"ds negative size",
       [=] {
         dynamic_slice(x, {s(0), s(0)}, {-1, 2});
       },
       "dynamic_slice",
       {"size -1", "dim 0", "f32[3,4]"}},
      // dynamic_update_slice
      {"dus too few starts",
       [=] {
         dynamic_update_slice(x, F32({1, 1}), {s(0)});
       },
       "dynamic_update_slice",
       {"f32[3,4]", "got 1"}},
      {"dus float start",
       [=] {
         dynamic_update_slice(x, F32({1, 1}), {s(0), scalar(2, DType::kF64)});
       },
       "dynamic_update_slice",
       {"start 1", "f64[]"}},
      {"dus 2-D start",
       [=] {
         dynamic_update_slice(x, F32({1, 1}), {zeros({1, 1}, DType::kS32), s(0)});
       },
       "dynamic_update_slice",
       {"start 0", "s32[1,1]"}},
      {"dus update too large",
       [=] {
         dynamic_update_slice(x, F32({4, 1}), {s(0), s(0)});
       },
       "dynamic_update_slice",
       {"f32[4,1]", "f32[3,4]", "dim 0"}},
      {"dus update too wide",
       [=] {
         dynamic_update_slice(x, F32({1, 5}), {s(0), s(0)});
       },
       "dynamic_update_slice",
       {"f32[1,5]", "f32[3,4]", "dim 1"}},
      {"dus update lower rank",
       [=] {
         dynamic_update_slice(x, F32({4}), {s(0), s(0)});
       },
       "dynamic_update_slice",
       {"f32[4]", "f32[3,4]"}},
      {"dus update higher rank",
       [=] {
         dynamic_update_slice(x, F32({1, 1, 1}), {s(0), s(0)});
       },
       "dynamic_update_slice",
       {"f32[1,1,1]", "f32[3,4]"}},
      {"dus scalar update",
       [=] {
         dynamic_update_slice(x, F32({}), {s(0), s(0)});
       },
       "dynamic_update_slice",
       {"f32[]", "f32[3,4]"}},
      // pad
      {"pad short low",
       [=] {
         pad(x, {1}, {1, 1});
       },
       "pad",
       {"f32[3,4]", "got 1 and 2"}},
      {"pad long high",
       [=] {
         pad(x, {1, 1}, {1, 1, 1});
       },
       "pad",
       {"f32[3,4]", "got 2 and 3"}},
      {"pad lists for a scalar", [=] { pad(F32({}), {0}, {0}); }, "pad", {"f32[]"}},
      {"pad negative low",
       [=] {
         pad(x, {0, -1}, {0, 0});
       },
       "pad",
       {"low -1", "dim 1"}},
      {"pad negative high",
       [=] {
         pad(x, {0, 0}, {-2, 0});
       },
       "pad",
       {"high -2", "dim 0"}},
      // index_add
      {"index_add 2-D index",
       [=] {
         index_add(x, 0, zeros({2, 1}, DType::kS64), F32({2, 4}));
       },
       "index_add",
       {"s64[2,1]"}},
      {"index_add float index",
       [=] {
         index_add(x, 0, F32({2}), F32({2, 4}));
       },
       "index_add",
       {"f32[2]"}},
      {"index_add bool index",
       [=] {
         index_add(x, 0, BoolTensor({1, 0}, {2}), F32({2, 4}));
       },
       "index_add",
       {"pred[2]"}},
      {"index_add scalar index",
       [=] {
         index_add(x, 0, s(0), F32({1, 4}));
       },
       "index_add",
       {"s64[]"}},
      {"index_add source wrong along dim",
       [=] {
         index_add(x, 0, Index({0, 1}), F32({3, 4}));
       },
       "index_add",
       {"f32[3,4]", "[2,4]"}},
      {"index_add source wrong other dim",
       [=] {
         index_add(x, 1, Index({0, 1}), F32({2, 2}));
       },
       "index_add",
       {"f32[2,2]", "[3,2]"}},
      {"index_add source wrong rank",
       [=] {
         index_add(x, 0, Index({0, 1}), F32({2, 4, 1}));
       },
       "index_add",
       {"f32[2,4,1]", "[2,4]"}},
      {"index_add dim too large",
       [=] {
         index_add(x, 2, Index({0}), F32({3, 1}));
       },
       "index_add",
       {"dimension 2", "f32[3,4]"}},
      {"index_add dim too small",
       [=] {
         index_add(x, -3, Index({0}), F32({1, 4}));
       },
       "index_add",
       {"dimension -3", "f32[3,4]"}},
      {"index_add into a scalar",
       [=] { index_add(F32({}), 0, Index({0}), F32({1})); },
       "index_add",
       {"rank-0"}},
  };
}

TEST(IndexingErrors, BadInputsThrowNamingTheOp) {
  for (const BadCall& c : BadCalls()) {
    SCOPED_TRACE(c.name);
    EXPECT_THROW(c.call(), Error);
    ExpectError(c.call, c.op, c.parts);
  }
}

}  // namespace
}  // namespace strata::test
