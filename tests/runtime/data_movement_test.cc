// Data-movement opcodes against index-arithmetic references: iota,
// broadcast, reshape, transpose, copy, slice, dynamic-slice,
// dynamic-update-slice, concatenate, pad and reverse, with zero-sized
// dimensions and out-of-range dynamic starts (clamped as XLA clamps them).
#include <fmt/core.h>
#include <algorithm>
#include <numeric>

#include "runtime/test_util.h"

namespace strata::runtime::test {
namespace {

using hlo::Builder;
using hlo::Instruction;
using Params = std::vector<Instruction*>;
using Dims = std::vector<int64_t>;

// Distinct, exactly representable values.
std::vector<float> Values(const Dims& dims) {
  std::vector<float> v(NumElements(dims));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) * 0.5f - 7.0f;
  return v;
}

float At(const std::vector<float>& x, const Dims& dims, const Dims& index) {
  return x[Ravel(index, dims)];
}

TEST(Iota, EveryDimensionAndType) {
  for (const Dims& dims : {Dims{2, 3, 4}, Dims{7}, Dims{3, 0, 2}, Dims{300, 130}}) {
    for (int64_t d = 0; d < static_cast<int64_t>(dims.size()); ++d) {
      SCOPED_TRACE("iota dimension " + std::to_string(d) + " of " + DimsToString(dims));
      auto build = [&](DType t) {
        return [=](Builder& b, const Params&) { return b.Iota(Shape(t, dims), d); };
      };
      ExpectRun<int32_t>({}, build(DType::kS32), dims,
                         Tabulate<int32_t>(dims, [&](const Dims& i) { return i[d]; }));
      ExpectRun<float>({}, build(DType::kF32), dims,
                       Tabulate<float>(dims, [&](const Dims& i) { return i[d]; }));
      ExpectRun<int64_t>({}, build(DType::kS64), dims,
                         Tabulate<int64_t>(dims, [&](const Dims& i) { return i[d]; }));
    }
  }
}

TEST(Broadcast, ScalarVectorAndTransposedOrder) {
  ExpectRun<float>(
      {Arg<float>({2.5f}, {})},
      [](Builder& b, const Params& p) {
        return b.Broadcast(p[0], {2, 3}, {});
      },
      {2, 3}, std::vector<float>(6, 2.5f));
  // A vector into each position of a rank-3 output.
  const Dims out = {3, 4, 5};
  for (int64_t d = 0; d < 3; ++d) {
    SCOPED_TRACE("vector into dimension " + std::to_string(d));
    std::vector<float> x = Values({out[d]});
    ExpectRun<float>(
        {Arg(x, {out[d]})},
        [&](Builder& b, const Params& p) { return b.Broadcast(p[0], out, {d}); }, out,
        Tabulate<float>(out, [&](const Dims& i) { return x[i[d]]; }));
  }
  // Operand dims in transposed order: x[3,5] -> out[5,4,3] with x[i, j] at out[j, *, i].
  std::vector<float> x = Values({3, 5});
  ExpectRun<float>(
      {Arg(x, {3, 5})},
      [](Builder& b, const Params& p) {
        return b.Broadcast(p[0], {5, 4, 3}, {2, 0});
      },
      {5, 4, 3}, Tabulate<float>({5, 4, 3}, [&](const Dims& i) {
        return At(x, {3, 5}, {i[2], i[0]});
      }));
  // Large enough for the parallel copy; the inner dimension repeats (stride 0).
  std::vector<float> col = Values({512});
  ExpectRun<float>(
      {Arg(col, {512})},
      [](Builder& b, const Params& p) {
        return b.Broadcast(p[0], {512, 80}, {0});
      },
      {512, 80}, Tabulate<float>({512, 80}, [&](const Dims& i) { return col[i[0]]; }));
  ExpectRun<float>({Arg<float>({}, {0})},
                   [](Builder& b, const Params& p) {
                     return b.Broadcast(p[0], {2, 0}, {1});
                   },
                   {2, 0}, {});
  ExpectRun<float>({Arg<float>({1}, {})},
                   [](Builder& b, const Params& p) {
                     return b.Broadcast(p[0], {0, 3}, {});
                   },
                   {0, 3}, {});
}

TEST(Reshape, KeepsRowMajorOrder) {
  std::vector<float> x = Values({2, 3, 4});
  for (const Dims& to : {Dims{4, 6}, Dims{24}, Dims{2, 12}, Dims{2, 3, 4}, Dims{1, 24, 1}}) {
    ExpectRun<float>(
        {Arg(x, {2, 3, 4})}, [&](Builder& b, const Params& p) { return b.Reshape(p[0], to); }, to,
        x);
  }
  ExpectRun<float>({Arg<float>({}, {0, 3})},
                   [](Builder& b, const Params& p) {
                     return b.Reshape(p[0], {3, 0});
                   },
                   {3, 0}, {});
}

// Transpose of any element size, compared as raw bits.
template <typename T>
void CheckTranspose(DType dtype, const Dims& dims, const Dims& perm) {
  SCOPED_TRACE(std::string(DTypeName(dtype)) + DimsToString(dims) + " perm " + DimsToString(perm));
  std::vector<T> x(NumElements(dims));
  std::iota(x.begin(), x.end(), T(1));
  Buffer arg = Buffer::FromHost(
      Shape(dtype, dims),
      std::span(reinterpret_cast<const uint8_t*>(x.data()), x.size() * sizeof(T)), Cpu());
  Dims out;
  for (int64_t p : perm) out.push_back(dims[p]);
  ExpectRun<T>(
      {arg}, [&](Builder& b, const Params& p) { return b.Transpose(p[0], perm); }, out,
      Tabulate<T>(out, [&](const Dims& i) {
        Dims src(dims.size());
        for (size_t k = 0; k < perm.size(); ++k) src[perm[k]] = i[k];
        return x[Ravel(src, dims)];
      }));
}

TEST(Transpose, Rank2To4AndElementSizes) {
  CheckTranspose<uint32_t>(DType::kF32, {3, 5}, {1, 0});
  Dims perm3 = {0, 1, 2};
  do {
    CheckTranspose<uint32_t>(DType::kF32, {2, 3, 4}, perm3);
  } while (std::next_permutation(perm3.begin(), perm3.end()));
  for (const Dims& perm :
       {Dims{3, 1, 0, 2}, Dims{0, 2, 1, 3}, Dims{1, 0, 3, 2}, Dims{3, 2, 1, 0}}) {
    CheckTranspose<uint32_t>(DType::kS32, {2, 3, 4, 5}, perm);
  }
  CheckTranspose<uint8_t>(DType::kU8, {3, 4, 5}, {2, 1, 0});
  CheckTranspose<uint16_t>(DType::kF16, {3, 4, 5}, {1, 2, 0});
  CheckTranspose<uint64_t>(DType::kF64, {3, 4, 5}, {2, 0, 1});
  CheckTranspose<uint32_t>(DType::kF32, {64, 48, 32}, {2, 0, 1});  // parallel path
  CheckTranspose<uint32_t>(DType::kF32, {2, 0, 3}, {2, 0, 1});
}

TEST(Copy, CopiesIncludingEmpty) {
  std::vector<float> x = Values({3, 4});
  ExpectRun<float>(
      {Arg(x, {3, 4})}, [](Builder& b, const Params& p) { return b.Copy(p[0]); }, {3, 4}, x);
  ExpectRun<float>({Arg<float>({}, {0, 2})},
                   [](Builder& b, const Params& p) { return b.Copy(p[0]); }, {0, 2}, {});
}

TEST(Slice, StartsLimitsStrides) {
  const Dims dims = {6, 7, 8};
  std::vector<float> x = Values(dims);
  struct Case {
    Dims starts, limits, strides;
  };
  const Case cases[] = {{{1, 0, 2}, {5, 7, 8}, {1, 1, 1}}, {{0, 1, 0}, {6, 7, 8}, {2, 3, 1}},
                        {{1, 2, 3}, {6, 6, 8}, {2, 1, 3}}, {{0, 0, 0}, {6, 7, 8}, {1, 1, 1}},
                        {{2, 3, 4}, {2, 7, 8}, {1, 1, 1}}, {{5, 6, 7}, {6, 7, 8}, {4, 4, 4}}};
  for (const Case& c : cases) {
    SCOPED_TRACE("slice " + DimsToString(c.starts) + DimsToString(c.limits) +
                 DimsToString(c.strides));
    Dims out;
    for (size_t d = 0; d < 3; ++d)
      out.push_back((c.limits[d] - c.starts[d] + c.strides[d] - 1) / c.strides[d]);
    ExpectRun<float>(
        {Arg(x, dims)},
        [&](Builder& b, const Params& p) { return b.Slice(p[0], c.starts, c.limits, c.strides); },
        out, Tabulate<float>(out, [&](const Dims& i) {
          Dims src(3);
          for (size_t d = 0; d < 3; ++d) src[d] = c.starts[d] + i[d] * c.strides[d];
          return At(x, dims, src);
        }));
  }
}

// XLA clamps each start into [0, dim - size] so the window stays inside.
Dims ClampStarts(const Dims& starts, const Dims& dims, const Dims& sizes) {
  Dims out;
  for (size_t d = 0; d < dims.size(); ++d)
    out.push_back(std::clamp<int64_t>(starts[d], 0, dims[d] - sizes[d]));
  return out;
}

// Start indices as runtime parameters (so nothing folds them) of type `T`.
template <typename T>
std::vector<Buffer> StartArgs(const Dims& starts) {
  std::vector<Buffer> args;
  for (int64_t s : starts) args.push_back(Arg(std::vector<T>{static_cast<T>(s)}, {}));
  return args;
}

template <typename T>
void CheckDynamicSlice(const Dims& dims, const Dims& sizes, const Dims& starts) {
  SCOPED_TRACE("dynamic-slice " + DimsToString(sizes) + " at " + DimsToString(starts) + " of " +
               DimsToString(dims));
  std::vector<float> x = Values(dims);
  std::vector<Buffer> args = StartArgs<T>(starts);
  args.insert(args.begin(), Arg(x, dims));
  Dims at = ClampStarts(starts, dims, sizes);
  ExpectRun<float>(
      args,
      [&](Builder& b, const Params& p) {
        return b.DynamicSlice(p[0], Params(p.begin() + 1, p.end()), sizes);
      },
      sizes, Tabulate<float>(sizes, [&](const Dims& i) {
        Dims src(dims.size());
        for (size_t d = 0; d < dims.size(); ++d) src[d] = at[d] + i[d];
        return At(x, dims, src);
      }));
}

TEST(DynamicSlice, InRangeAndClampedStarts) {
  for (const Dims& starts :
       {Dims{0, 0}, Dims{2, 3}, Dims{3, 3}, Dims{-1, 10}, Dims{100, -5}, Dims{-7, -7}}) {
    CheckDynamicSlice<int32_t>({6, 7}, {3, 4}, starts);
    CheckDynamicSlice<int64_t>({6, 7}, {3, 4}, starts);
  }
  CheckDynamicSlice<uint32_t>({6, 7}, {3, 4}, {4000000000, 1});  // large unsigned: clamps high
  CheckDynamicSlice<int32_t>({4, 5, 6}, {2, 5, 3}, {3, 1, -2});
  CheckDynamicSlice<int32_t>({0, 4}, {0, 2}, {5, 1});
  CheckDynamicSlice<int32_t>({3, 4}, {0, 2}, {1, 9});
}

// Unsigned starts compare as unsigned: 2^63 + 5 is far past the end, not negative.
TEST(DynamicSlice, HugeUnsignedStartClampsHigh) {
  std::vector<float> x = Values({6});
  const uint64_t huge = (uint64_t{1} << 63) + 5;
  ExpectRun<float>({Arg(x, {6}), Arg(std::vector<uint64_t>{huge}, {})},
                   [](Builder& b, const Params& p) { return b.DynamicSlice(p[0], {p[1]}, {2}); },
                   {2}, {x[4], x[5]});
}

template <typename T>
void CheckDynamicUpdateSlice(const Dims& dims, const Dims& update_dims, const Dims& starts) {
  SCOPED_TRACE("dynamic-update-slice " + DimsToString(update_dims) + " at " + DimsToString(starts) +
               " of " + DimsToString(dims));
  std::vector<float> x = Values(dims), update(NumElements(update_dims));
  for (size_t i = 0; i < update.size(); ++i) update[i] = 1000.0f + static_cast<float>(i);
  std::vector<Buffer> args = StartArgs<T>(starts);
  args.insert(args.begin(), {Arg(x, dims), Arg(update, update_dims)});
  Dims at = ClampStarts(starts, dims, update_dims);
  ExpectRun<float>(
      args,
      [&](Builder& b, const Params& p) {
        return b.DynamicUpdateSlice(p[0], p[1], Params(p.begin() + 2, p.end()));
      },
      dims, Tabulate<float>(dims, [&](const Dims& i) {
        Dims u(dims.size());
        for (size_t d = 0; d < dims.size(); ++d) {
          u[d] = i[d] - at[d];
          if (u[d] < 0 || u[d] >= update_dims[d]) return At(x, dims, i);
        }
        return update[Ravel(u, update_dims)];
      }));
  EXPECT_EQ(args[0].ToVector<float>(), x) << "the operand argument was modified";
}

TEST(DynamicUpdateSlice, InRangeAndClampedStarts) {
  for (const Dims& starts : {Dims{0, 0}, Dims{2, 3}, Dims{4, 4}, Dims{-1, 10}, Dims{100, -5}}) {
    CheckDynamicUpdateSlice<int32_t>({6, 7}, {2, 3}, starts);
    CheckDynamicUpdateSlice<int64_t>({6, 7}, {2, 3}, starts);
  }
  CheckDynamicUpdateSlice<int32_t>({4, 5, 6}, {2, 5, 3}, {3, 1, -2});
  CheckDynamicUpdateSlice<int32_t>({6, 7}, {6, 7}, {3, 3});  // whole operand
  CheckDynamicUpdateSlice<int32_t>({6, 7}, {0, 3}, {2, 2});
  CheckDynamicUpdateSlice<int32_t>({0, 3}, {0, 3}, {1, 1});
}

TEST(Concatenate, SeveralOperandsEachDimension) {
  const Dims base = {2, 3, 4};
  for (int64_t d = 0; d < 3; ++d) {
    SCOPED_TRACE("concatenate along " + std::to_string(d));
    std::vector<Dims> shapes;
    std::vector<std::vector<float>> parts;
    std::vector<Buffer> args;
    for (int64_t size : {2, 0, 3, 1}) {
      Dims s = base;
      s[d] = size;
      std::vector<float> v = Values(s);
      for (float& e : v) e += 100.0f * static_cast<float>(shapes.size());
      shapes.push_back(s);
      parts.push_back(v);
      args.push_back(Arg(v, s));
    }
    Dims out = base;
    out[d] = 6;
    ExpectRun<float>(
        args, [&](Builder& b, const Params& p) { return b.Concatenate(p, d); }, out,
        Tabulate<float>(out, [&](Dims i) {
          size_t k = 0;
          while (i[d] >= shapes[k][d]) i[d] -= shapes[k++][d];
          return At(parts[k], shapes[k], i);
        }));
  }
}

// Input element k of a dimension lands at low + k * (interior + 1); outside
// [0, size) it is cropped; every other position is the padding value.
void CheckPad(const Dims& dims, const std::vector<hlo::PadRange>& padding) {
  std::string what = fmt::format("pad {}", DimsToString(dims));
  for (const auto& p : padding) what += fmt::format(" {}_{}_{}", p.low, p.high, p.interior);
  SCOPED_TRACE(what);
  std::vector<float> x = Values(dims);
  Dims out;
  for (size_t d = 0; d < dims.size(); ++d) {
    const auto& p = padding[d];
    out.push_back(p.low + p.high + dims[d] + std::max<int64_t>(dims[d] - 1, 0) * p.interior);
  }
  ExpectRun<float>(
      {Arg(x, dims), Arg<float>({-99.0f}, {})},
      [&](Builder& b, const Params& p) { return b.Pad(p[0], p[1], padding); }, out,
      Tabulate<float>(out, [&](const Dims& i) {
        Dims src(dims.size());
        for (size_t d = 0; d < dims.size(); ++d) {
          int64_t offset = i[d] - padding[d].low, step = padding[d].interior + 1;
          if (offset < 0 || offset % step != 0 || offset / step >= dims[d]) return -99.0f;
          src[d] = offset / step;
        }
        return At(x, dims, src);
      }));
}

TEST(Pad, LowHighInteriorAndCropping) {
  CheckPad({3, 4}, {{1, 2, 0}, {0, 1, 0}});
  CheckPad({3, 4}, {{0, 0, 1}, {2, 0, 2}});
  CheckPad({3, 4}, {{-1, 0, 0}, {0, -2, 0}});
  CheckPad({3, 4}, {{-2, 1, 1}, {1, -3, 1}});
  CheckPad({3, 4}, {{-3, -2, 2}, {-1, -1, 0}});
  CheckPad({5, 4}, {{-1, 1, 1}, {-2, 0, 2}});  // cropping into the interior padding
  CheckPad({3, 4}, {{-2, -1, 0}, {0, 0, 0}});  // crops to nothing
  CheckPad({0, 3}, {{2, 1, 3}, {0, 0, 0}});    // all padding
  CheckPad({2, 3, 4}, {{1, 0, 1}, {-1, 2, 0}, {0, -1, 2}});
}

TEST(Reverse, SubsetsOfDimensions) {
  const Dims dims = {3, 4, 5};
  std::vector<float> x = Values(dims);
  for (const Dims& reversed :
       {Dims{}, Dims{0}, Dims{1}, Dims{2}, Dims{0, 2}, Dims{1, 2}, Dims{0, 1, 2}}) {
    SCOPED_TRACE("reverse " + DimsToString(reversed));
    ExpectRun<float>(
        {Arg(x, dims)}, [&](Builder& b, const Params& p) { return b.Reverse(p[0], reversed); },
        dims, Tabulate<float>(dims, [&](Dims i) {
          for (int64_t d : reversed) i[d] = dims[d] - 1 - i[d];
          return At(x, dims, i);
        }));
  }
  ExpectRun<float>({Arg<float>({}, {3, 0, 2})},
                   [](Builder& b, const Params& p) {
                     return b.Reverse(p[0], {0, 1});
                   },
                   {3, 0, 2}, {});
}

}  // namespace
}  // namespace strata::runtime::test
