// reduce and dot against plain loops: every reducer over every subset of a
// rank-3 input's dimensions, non-identity inits, a variadic argmax, a to_apply
// that is not one binary op, zero-sized dimensions; dot in every layout the
// kernel distinguishes (plain, transposed, copied), f32 / f64 / s32.
#include <algorithm>
#include <functional>
#include <limits>

#include "runtime/test_util.h"

namespace strata::runtime::test {
namespace {

using hlo::Builder;
using hlo::Comparison;
using hlo::Opcode;
using Dims = std::vector<int64_t>;

// Reference reduce: each output starts at init and folds in its inputs in
// row-major order (the order does not matter for these reducers).
template <typename T, typename F>
std::vector<T> ReduceReference(const std::vector<T>& x, const Dims& dims, const Dims& reduced,
                               T init, F op, Dims* out_dims) {
  Dims kept;
  for (size_t d = 0; d < dims.size(); ++d) {
    if (std::find(reduced.begin(), reduced.end(), static_cast<int64_t>(d)) == reduced.end())
      kept.push_back(d);
  }
  out_dims->clear();
  for (int64_t d : kept) out_dims->push_back(dims[d]);
  std::vector<T> out(NumElements(*out_dims), init);
  for (int64_t i = 0; i < static_cast<int64_t>(x.size()); ++i) {
    Dims index = Unravel(i, dims), out_index;
    for (int64_t d : kept) out_index.push_back(index[d]);
    const int64_t o = Ravel(out_index, *out_dims);
    out[o] = op(out[o], x[i]);
  }
  return out;
}

std::vector<Dims> AllSubsets(int64_t rank) {
  std::vector<Dims> subsets;
  for (int64_t mask = 0; mask < (1 << rank); ++mask) {
    Dims s;
    for (int64_t d = 0; d < rank; ++d) {
      if (mask & (1 << d)) s.push_back(d);
    }
    subsets.push_back(s);
  }
  return subsets;
}

template <typename T>
T ApplyOp(Opcode op, T a, T b) {
  if constexpr (std::is_same_v<T, bool>) {
    return op == Opcode::kAnd ? (a && b) : (a || b);
  } else if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;  // wrapping, as XLA integers do
    switch (op) {
      case Opcode::kAdd:
        return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
      case Opcode::kMultiply:
        return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
      case Opcode::kMaximum:
        return std::max(a, b);
      case Opcode::kMinimum:
        return std::min(a, b);
      case Opcode::kAnd:
        return a & b;
      default:
        return a | b;
    }
  } else {
    switch (op) {
      case Opcode::kAdd:
        return a + b;
      case Opcode::kMultiply:
        return a * b;
      case Opcode::kMaximum:
        return std::isnan(a) || a > b ? a : b;
      default:
        return std::isnan(a) || a < b ? a : b;
    }
  }
}

// Reduces `x` with a one-op to_apply over every subset of dimensions.
template <typename T>
void CheckReduceAllSubsets(Opcode op, const std::vector<T>& x, const Dims& dims, T init,
                           double rel = 0, double abs = 0) {
  for (const Dims& reduced : AllSubsets(static_cast<int64_t>(dims.size()))) {
    SCOPED_TRACE(std::string(hlo::OpcodeName(op)) + " " +
                 std::string(DTypeName(DTypeOf<T>::value)) + DimsToString(dims) + " over " +
                 DimsToString(reduced));
    Dims out_dims;
    std::vector<T> expected = ReduceReference(
        x, dims, reduced, init, [op](T a, T b) { return ApplyOp(op, a, b); }, &out_dims);
    ExpectRun<T>(
        {Arg(x, dims)},
        [&](Graph& g) {
          auto* to_apply =
              g.Add(hlo::MakeScalarBinaryComputation("reducer", op, DTypeOf<T>::value));
          return g.b.Reduce(g.params[0], g.b.ConstantScalar<T>(init), reduced, to_apply);
        },
        out_dims, expected, rel, abs);
  }
}

// Inits are deliberately not the identity: each output must see init once.
TEST(Reduce, FloatReducersOverEverySubset) {
  for (const Dims& dims : {Dims{3, 4, 5}, Dims{3, 1, 5}, Dims{6, 40, 33}}) {
    const int64_t n = NumElements(dims);
    std::vector<float> x = Random<float>(n, 1, -1, 1);
    std::vector<double> xd = Random<double>(n, 2, -1, 1);
    // Sums: float rounding differs from the reference's order.
    CheckReduceAllSubsets<float>(Opcode::kAdd, x, dims, 10.0f, 1e-5, 1e-5 * static_cast<double>(n));
    CheckReduceAllSubsets<double>(Opcode::kAdd, xd, dims, 10.0, 1e-12,
                                  1e-13 * static_cast<double>(n));
    CheckReduceAllSubsets<float>(Opcode::kMaximum, x, dims, 0.3f);
    CheckReduceAllSubsets<float>(Opcode::kMinimum, x, dims, -0.3f);
    CheckReduceAllSubsets<double>(Opcode::kMaximum, xd, dims, 0.3);
    std::vector<float> near_one = Random<float>(n, 3, 0.99, 1.01);
    CheckReduceAllSubsets<float>(Opcode::kMultiply, near_one, dims, 2.0f, 1e-4);
  }
}

TEST(Reduce, IntegerAndPredReducersOverEverySubset) {
  const Dims dims = {3, 4, 5};
  const int64_t n = NumElements(dims);
  std::vector<int32_t> x = Random<int32_t>(n, 4, -100, 100);
  CheckReduceAllSubsets<int32_t>(Opcode::kAdd, x, dims, 10);
  CheckReduceAllSubsets<int32_t>(Opcode::kMaximum, x, dims, -5);
  CheckReduceAllSubsets<int32_t>(Opcode::kMinimum, x, dims, 5);
  CheckReduceAllSubsets<int32_t>(Opcode::kMultiply, Random<int32_t>(n, 5, -3, 3), dims,
                                 3);  // wraps
  CheckReduceAllSubsets<int64_t>(Opcode::kAdd, Random<int64_t>(n, 6, -1000, 1000), dims, -7);
  std::vector<uint32_t> bits = RandomBits<uint32_t>(n, 7);
  CheckReduceAllSubsets<uint32_t>(Opcode::kAnd, bits, dims, 0xFFFF0FFFu);
  CheckReduceAllSubsets<uint32_t>(Opcode::kOr, bits, dims, 0x10u);
  std::vector<bool> p;
  for (int32_t v : Random<int32_t>(n, 8, 0, 5)) p.push_back(v != 0);
  CheckReduceAllSubsets<bool>(Opcode::kAnd, p, dims, true);
  CheckReduceAllSubsets<bool>(Opcode::kOr, std::vector<bool>(n, false), dims, false);
  CheckReduceAllSubsets<bool>(Opcode::kOr, p, dims, false);
}

TEST(Reduce, EverythingOfALargeInput) {  // exercises the chunked parallel sum
  const Dims dims = {2, 256, 300};
  const int64_t n = NumElements(dims);
  std::vector<float> x = Random<float>(n, 9, 0, 1);
  for (Opcode op : {Opcode::kAdd, Opcode::kMaximum, Opcode::kMinimum}) {
    Dims out_dims;
    auto expected = ReduceReference(
        x, dims, {0, 1, 2}, 10.0f, [op](float a, float b) { return ApplyOp(op, a, b); }, &out_dims);
    ExpectRun<float>(
        {Arg(x, dims)},
        [&](Graph& g) {
          auto* f = g.Add(hlo::MakeScalarBinaryComputation("reducer", op, DType::kF32));
          return g.b.Reduce(g.params[0], g.b.ConstantScalar(10.0f), {0, 1, 2}, f);
        },
        {}, expected, 1e-5);
  }
}

// Row reductions long enough for the vector folds (32 elements and up: one
// vector of partials below 64, four at 64 and above, then a tail): every
// length around those edges, a NaN or an infinity at each kind of position
// (the first element, inside each of the four vectors, the last full block,
// the tail). Maxima and minima against the plain loop exactly (a NaN
// anywhere gives NaN), sums against the loop in double.
TEST(Reduce, RowFoldsKeepNaNsAndInfinitiesAtEveryPositionAndLength) {
  for (int64_t n : {31, 32, 33, 47, 48, 63, 64, 65, 79, 127, 128, 130, 200, 256, 257}) {
    std::vector<int64_t> spots = {-1, 0, 5, 17, 35, 50, n - 17, n - 1};
    for (int64_t spot : spots) {
      if (spot >= n) continue;
      for (float special : {std::numeric_limits<float>::quiet_NaN(), INFINITY, -INFINITY}) {
        SCOPED_TRACE(::testing::Message() << "n " << n << " at " << spot << " " << special);
        std::vector<float> x = Random<float>(2 * n, static_cast<uint32_t>(n), -1, 1);
        if (spot >= 0) x[n + spot] = special;  // the second row; the first stays finite
        const Dims dims = {2, n};
        for (Opcode op : {Opcode::kMaximum, Opcode::kMinimum, Opcode::kAdd}) {
          Dims out_dims;
          auto expected = ReduceReference(
              x, dims, {1}, 0.25f, [op](float a, float b) { return ApplyOp(op, a, b); }, &out_dims);
          ExpectRun<float>(
              {Arg(x, dims)},
              [&](Graph& g) {
                auto* f = g.Add(hlo::MakeScalarBinaryComputation("reducer", op, DType::kF32));
                return g.b.Reduce(g.params[0], g.b.ConstantScalar(0.25f), {1}, f);
              },
              out_dims, expected, op == Opcode::kAdd ? 1e-5 : 0, op == Opcode::kAdd ? 1e-5 : 0);
        }
      }
    }
  }
}

TEST(Reduce, ZeroSizedDimensionsYieldInit) {
  const Dims dims = {3, 0, 5};
  for (const Dims& reduced : AllSubsets(3)) {
    SCOPED_TRACE("over " + DimsToString(reduced));
    Dims out_dims;
    auto expected = ReduceReference<float>({}, dims, reduced, 4.5f, std::plus<float>(), &out_dims);
    ExpectRun<float>(
        {Arg<float>({}, dims)},
        [&](Graph& g) {
          auto* f = g.Add(hlo::MakeScalarBinaryComputation("add", Opcode::kAdd, DType::kF32));
          return g.b.Reduce(g.params[0], g.b.ConstantScalar(4.5f), reduced, f);
        },
        out_dims, expected);
  }
}

// to_apply(acc, x) = acc + x * x is not a single binary op, so the kernel
// runs the compiled computation per element.
TEST(Reduce, GenericToApplySumsSquares) {
  const Dims dims = {3, 4, 5};
  std::vector<double> x = Random<double>(NumElements(dims), 10, -2, 2);
  for (const Dims& reduced : AllSubsets(3)) {
    SCOPED_TRACE("over " + DimsToString(reduced));
    Dims out_dims;
    auto expected = ReduceReference(
        x, dims, reduced, 1.5, [](double a, double v) { return a + v * v; }, &out_dims);
    ExpectRun<double>(
        {Arg(x, dims)},
        [&](Graph& g) {
          Builder fb("sum_squares");
          auto* acc = fb.Parameter(0, Shape::Scalar(DType::kF64), "acc");
          auto* v = fb.Parameter(1, Shape::Scalar(DType::kF64), "v");
          auto* f = g.Add(fb.Build(fb.Add(acc, fb.Multiply(v, v))));
          return g.b.Reduce(g.params[0], g.b.ConstantScalar(1.5), reduced, f);
        },
        out_dims, expected, 1e-12);
  }
}

// (best, best_index, value, index) -> the larger value; on a tie the smaller
// index, which makes the result independent of the reduction order.
hlo::Computation* AddArgmax(Graph& g) {
  Builder b("argmax");
  auto* best = b.Parameter(0, Shape::Scalar(DType::kF32), "best");
  auto* best_index = b.Parameter(1, Shape::Scalar(DType::kS32), "best_index");
  auto* value = b.Parameter(2, Shape::Scalar(DType::kF32), "value");
  auto* index = b.Parameter(3, Shape::Scalar(DType::kS32), "index");
  auto* tie = b.Compare(value, best, Comparison::kEq);
  auto* earlier = b.Compare(index, best_index, Comparison::kLt);
  auto* take = b.Binary(Opcode::kOr, b.Compare(value, best, Comparison::kGt),
                        b.Binary(Opcode::kAnd, tie, earlier));
  return g.Add(b.Build(b.Tuple({b.Select(take, value, best), b.Select(take, index, best_index)})));
}

TEST(Reduce, VariadicArgmaxWithTies) {
  const Dims dims = {6, 50};
  std::vector<float> x;
  for (int32_t v : Random<int32_t>(NumElements(dims), 100, 0, 4)) x.push_back(v);  // many ties
  for (int64_t dim : {0, 1}) {
    for (bool only_index : {false, true}) {  // the unused max must not clobber anything
      SCOPED_TRACE("argmax over " + std::to_string(dim) + (only_index ? ", index only" : ""));
      const int64_t outer = dims[1 - dim];
      std::vector<float> best(outer, -INFINITY);
      std::vector<int32_t> best_index(outer, 0);
      for (int64_t i = 0; i < NumElements(dims); ++i) {
        Dims at = Unravel(i, dims);
        int64_t o = at[1 - dim];
        if (x[i] > best[o]) best[o] = x[i], best_index[o] = static_cast<int32_t>(at[dim]);
      }
      Graph g({Shape(DType::kF32, dims)});
      auto* indices = g.b.Iota(Shape(DType::kS32, dims), dim);
      auto* reduce = g.b.Reduce({g.params[0], indices},
                                {g.b.ConstantScalar(-INFINITY), g.b.ConstantScalar<int32_t>(0)},
                                {dim}, AddArgmax(g));
      auto out = g.Run(only_index ? g.b.GetTupleElement(reduce, 1) : reduce, {Arg(x, dims)});
      EXPECT_EQ(out.back().ToVector<int32_t>(), best_index);
      if (!only_index) {
        EXPECT_EQ(out[0].ToVector<float>(), best);
      }
    }
  }
}

// --- dot ---------------------------------------------------------------------

hlo::DotDims Dot(Dims lhs_batch, Dims rhs_batch, Dims lhs_contracting, Dims rhs_contracting) {
  return {std::move(lhs_batch), std::move(rhs_batch), std::move(lhs_contracting),
          std::move(rhs_contracting)};
}

Dims FreeDims(int64_t rank, const Dims& batch, const Dims& contracting) {
  Dims free;
  for (int64_t d = 0; d < rank; ++d) {
    if (std::count(batch.begin(), batch.end(), d) +
            std::count(contracting.begin(), contracting.end(), d) ==
        0) {
      free.push_back(d);
    }
  }
  return free;
}

// out[batch, lhs_free, rhs_free] = sum over contracting of lhs * rhs.
template <typename T>
std::vector<T> DotReference(const std::vector<T>& lhs, const Dims& ld, const std::vector<T>& rhs,
                            const Dims& rd, const hlo::DotDims& dd, Dims* out_dims) {
  using Acc = std::conditional_t<std::is_floating_point_v<T>, long double, int64_t>;
  Dims lf = FreeDims(ld.size(), dd.lhs_batch, dd.lhs_contracting);
  Dims rf = FreeDims(rd.size(), dd.rhs_batch, dd.rhs_contracting);
  out_dims->clear();
  for (int64_t d : dd.lhs_batch) out_dims->push_back(ld[d]);
  for (int64_t d : lf) out_dims->push_back(ld[d]);
  for (int64_t d : rf) out_dims->push_back(rd[d]);
  Dims k_dims;
  for (int64_t d : dd.lhs_contracting) k_dims.push_back(ld[d]);
  return Tabulate<T>(*out_dims, [&](const Dims& o) {
    Dims li(ld.size()), ri(rd.size());
    size_t pos = 0;
    for (size_t i = 0; i < dd.lhs_batch.size(); ++i, ++pos)
      li[dd.lhs_batch[i]] = ri[dd.rhs_batch[i]] = o[pos];
    for (int64_t d : lf) li[d] = o[pos++];
    for (int64_t d : rf) ri[d] = o[pos++];
    Acc sum = 0;
    for (int64_t k = 0; k < NumElements(k_dims); ++k) {
      Dims kk = Unravel(k, k_dims);
      for (size_t i = 0; i < kk.size(); ++i)
        li[dd.lhs_contracting[i]] = ri[dd.rhs_contracting[i]] = kk[i];
      sum += static_cast<Acc>(lhs[Ravel(li, ld)]) * static_cast<Acc>(rhs[Ravel(ri, rd)]);
    }
    return static_cast<T>(sum);
  });
}

struct DotCase {
  const char* name;
  Dims lhs, rhs;
  hlo::DotDims dims;
};

const DotCase kDotCases[] = {
    {"matrix-vector", {5, 7}, {7}, Dot({}, {}, {1}, {0})},
    {"vector-matrix", {7}, {7, 4}, Dot({}, {}, {0}, {0})},
    {"matrix-matrix", {5, 7}, {7, 3}, Dot({}, {}, {1}, {0})},
    {"lhs transposed", {7, 5}, {7, 3}, Dot({}, {}, {0}, {0})},
    {"rhs transposed", {5, 7}, {3, 7}, Dot({}, {}, {1}, {1})},
    {"both transposed", {7, 5}, {3, 7}, Dot({}, {}, {0}, {1})},
    {"batched", {2, 5, 7}, {2, 7, 3}, Dot({0}, {0}, {2}, {1})},
    {"batch not leading", {5, 2, 7}, {7, 2, 3}, Dot({1}, {1}, {2}, {0})},
    {"two batch dims, rhs swapped", {2, 3, 4, 5}, {3, 2, 5, 6}, Dot({0, 1}, {1, 0}, {3}, {2})},
    {"two contracting dims", {4, 3, 5}, {3, 5, 6}, Dot({}, {}, {1, 2}, {0, 1})},
    {"two contracting dims, reordered", {4, 3, 5}, {5, 3, 6}, Dot({}, {}, {2, 1}, {0, 1})},
    {"contracting in the middle", {4, 3, 5}, {2, 3}, Dot({}, {}, {1}, {1})},
    {"outer product", {3}, {4}, Dot({}, {}, {}, {})},
    {"K = 0", {3, 0}, {0, 4}, Dot({}, {}, {1}, {0})},
    {"M = 0", {0, 4}, {4, 3}, Dot({}, {}, {1}, {0})},
    {"N = 0", {3, 4}, {4, 0}, Dot({}, {}, {1}, {0})},
    {"batch = 0", {0, 3, 4}, {0, 4, 2}, Dot({0}, {0}, {2}, {1})},
    {"larger", {64, 128}, {128, 96}, Dot({}, {}, {1}, {0})},
    {"larger, batched and transposed", {3, 96, 64}, {3, 80, 96}, Dot({0}, {0}, {1}, {2})},
};

template <typename T>
void CheckDots(double rel, double abs) {
  for (const DotCase& c : kDotCases) {
    SCOPED_TRACE(std::string(c.name) + " on " + std::string(DTypeName(DTypeOf<T>::value)));
    std::vector<T> lhs = Random<T>(NumElements(c.lhs), 20, -3, 3),
                   rhs = Random<T>(NumElements(c.rhs), 21, -3, 3);
    Dims out_dims;
    std::vector<T> expected = DotReference(lhs, c.lhs, rhs, c.rhs, c.dims, &out_dims);
    ExpectRun<T>(
        {Arg(lhs, c.lhs), Arg(rhs, c.rhs)},
        [&](Builder& b, const std::vector<hlo::Instruction*>& p) {
          return b.Dot(p[0], p[1], c.dims);
        },
        out_dims, expected, rel, abs);
  }
}

TEST(Dot, F32UsesGemm) { CheckDots<float>(1e-5, 1e-4); }
TEST(Dot, F64Loop) { CheckDots<double>(1e-12, 1e-12); }
TEST(Dot, S32Loop) { CheckDots<int32_t>(0, 0); }

}  // namespace
}  // namespace strata::runtime::test
