// Elementwise ops: broadcasting, type promotion, scalars.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "strata/lazy/index_check.h"
#include "strata/lazy/op_builder.h"

namespace strata::lazy {

ir::Value Op(hlo::Opcode opcode, std::vector<ir::Value> operands, hlo::Attributes attributes,
             Shape declared, int64_t index) {
  return ir::Value{
      ir::Node::MakeOp(opcode, std::move(operands), std::move(attributes), std::move(declared)),
      index};
}

namespace {

// `what` names the tensor in messages: its shape, or its rank.
int64_t NormalizeDimOf(std::string_view op, int64_t dim, int64_t rank, const std::string& what) {
  int64_t r = std::max<int64_t>(rank, 1);
  if (dim < -r || dim >= r) {
    Fail("[{}] dimension {} out of range for {}: expected it in [{}, {}]", op, dim, what, -r,
         r - 1);
  }
  return dim < 0 ? dim + r : dim;
}

std::vector<int64_t> NormalizeDimsOf(std::string_view op, const std::vector<int64_t>& given,
                                     int64_t rank, const std::string& what) {
  std::vector<int64_t> dims = given;
  for (int64_t& d : dims) d = NormalizeDimOf(op, d, rank, what);
  std::vector<int64_t> sorted = dims;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
    Fail("[{}] dimensions {} repeat a dimension of {}", op, DimsToString(given), what);
  }
  return dims;
}

std::string RankText(int64_t rank) { return fmt::format("a tensor of rank {}", rank); }

}  // namespace

int64_t NormalizeDim(std::string_view op, int64_t dim, int64_t rank) {
  return NormalizeDimOf(op, dim, rank, RankText(rank));
}
std::vector<int64_t> NormalizeDims(std::string_view op, std::vector<int64_t> dims, int64_t rank) {
  return NormalizeDimsOf(op, dims, rank, RankText(rank));
}
int64_t NormalizeDim(std::string_view op, int64_t dim, const Shape& shape) {
  return NormalizeDimOf(op, dim, shape.rank(), shape.ToString());
}
std::vector<int64_t> NormalizeDims(std::string_view op, std::vector<int64_t> dims,
                                   const Shape& shape) {
  return NormalizeDimsOf(op, dims, shape.rank(), shape.ToString());
}

std::vector<int64_t> BroadcastDims(std::string_view op, const std::vector<int64_t>& a,
                                   const std::vector<int64_t>& b) {
  size_t rank = std::max(a.size(), b.size());
  std::vector<int64_t> out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1) {
      Fail("[{}] shapes {} and {} cannot be broadcast together: dimension {} is {} vs {}", op,
           DimsToString(a), DimsToString(b), i, da, db);
    }
    out[i] = da == 1 ? db : da;
  }
  return out;
}

ir::Value BroadcastValue(const ir::Value& v, const std::vector<int64_t>& dims) {
  const Shape& s = v.shape();
  if (s.dims() == dims) return v;
  // Drop stretched size-1 dims, then map the rest onto the trailing dims.
  size_t offset = dims.size() - s.dims().size();
  std::vector<int64_t> kept_dims, mapping;
  for (size_t i = 0; i < s.dims().size(); ++i) {
    if (s.dim(i) == dims[offset + i]) {
      kept_dims.push_back(s.dim(i));
      mapping.push_back(static_cast<int64_t>(offset + i));
    } else if (s.dim(i) != 1) {
      Fail("[broadcast_to] cannot broadcast {} to {}", s.ToString(), DimsToString(dims));
    }
  }
  ir::Value x = v;
  if (kept_dims != s.dims()) x = Op(hlo::Opcode::kReshape, {x}, {}, Shape(s.dtype(), kept_dims));
  hlo::Attributes a;
  a.dimensions = mapping;
  return Op(hlo::Opcode::kBroadcast, {x}, std::move(a), Shape(s.dtype(), dims));
}

namespace {

int Category(DType t) { return t == DType::kPred ? 0 : IsInteger(t) ? 1 : 2; }

}  // namespace

DType PromoteTypes(DType a, DType b) {
  if (a == b) return a;
  int ca = Category(a), cb = Category(b);
  if (ca != cb) return ca > cb ? a : b;
  if (ca == 2) {
    if ((a == DType::kF16 && b == DType::kBF16) || (a == DType::kBF16 && b == DType::kF16))
      return DType::kF32;
    return DTypeSize(a) >= DTypeSize(b) ? a : b;
  }
  // Integers: mixing signed and unsigned needs the next wider signed type.
  bool sa = IsSignedInteger(a), sb = IsSignedInteger(b);
  if (sa == sb) return DTypeSize(a) >= DTypeSize(b) ? a : b;
  DType s = sa ? a : b, u = sa ? b : a;
  if (DTypeSize(s) > DTypeSize(u)) return s;
  return DTypeSize(u) == 1 ? DType::kS16 : DTypeSize(u) == 2 ? DType::kS32 : DType::kS64;
}

DType ResultType(const Tensor& a, const Tensor& b) {
  const bool a0 = a.shape().rank() == 0, b0 = b.shape().rank() == 0;
  if (a0 != b0) {  // a 0-d tensor decides only when its category is higher
    const DType dimensioned = a0 ? b.dtype() : a.dtype(), zero_d = a0 ? a.dtype() : b.dtype();
    if (Category(zero_d) <= Category(dimensioned)) return dimensioned;
  }
  return PromoteTypes(a.dtype(), b.dtype());
}

ir::Value ConvertValue(const ir::Value& v, DType dtype) {
  if (v.shape().dtype() == dtype) return v;
  return Op(hlo::Opcode::kConvert, {v}, {}, Shape(dtype, v.shape().dims()));
}

DType ScalarTypeWith(DType tensor_dtype, double value) {
  // Checked before the cast: casting inf, NaN or an out-of-range value to int64 is undefined.
  bool integral = std::isfinite(value) && std::abs(value) < 0x1p63 &&
                  value == static_cast<double>(static_cast<int64_t>(value));
  // As torch: an integer scalar meeting a bool tensor is s64 (bool + 1 is 2, not true).
  if (tensor_dtype == DType::kPred) return integral ? DType::kS64 : DType::kF32;
  if (IsInteger(tensor_dtype) && !integral) return DType::kF32;
  return tensor_dtype;
}

ir::Value ScalarValue(double value, DType dtype, const std::vector<int64_t>& dims, bool bake) {
  hlo::Literal lit = hlo::Literal::ScalarOf(dtype, value);
  ir::Value v = (bake || value == 0 || value == 1 || BakeScalars::active())
                    ? ir::Value{ir::Node::MakeConstant(std::move(lit))}
                    : ir::Value{ir::Node::MakeScalar(std::move(lit))};
  return dims.empty() ? v : BroadcastValue(v, dims);
}

Tensor BinaryOp(std::string_view name, hlo::Opcode opcode, const Tensor& a, const Tensor& b) {
  auto dims = BroadcastDims(name, a.shape().dims(), b.shape().dims());
  DType t = ResultType(a, b);
  // As torch: on bools, + and maximum are logical or, * and minimum logical and
  // (the HLO arithmetic ops reject pred).
  if (t == DType::kPred && (opcode == hlo::Opcode::kAdd || opcode == hlo::Opcode::kMaximum))
    opcode = hlo::Opcode::kOr;
  if (t == DType::kPred && (opcode == hlo::Opcode::kMultiply || opcode == hlo::Opcode::kMinimum)) {
    opcode = hlo::Opcode::kAnd;
  }
  if (t == DType::kPred && opcode != hlo::Opcode::kAnd && opcode != hlo::Opcode::kOr &&
      opcode != hlo::Opcode::kXor) {
    Fail("[{}] is not defined for bool tensors ({} and {})", name, a.shape().ToString(),
         b.shape().ToString());
  }
  DType c = ComputeType(t);
  ir::Value r = Op(opcode, {BroadcastValue(ConvertValue(a.value(), c), dims),
                            BroadcastValue(ConvertValue(b.value(), c), dims)});
  return Wrap(ConvertValue(r, t));
}

Tensor CompareOp(std::string_view name, hlo::Comparison direction, const Tensor& a,
                 const Tensor& b) {
  auto dims = BroadcastDims(name, a.shape().dims(), b.shape().dims());
  DType t = ComputeType(ResultType(a, b));
  hlo::Attributes attrs;
  attrs.direction = direction;
  return Wrap(Op(hlo::Opcode::kCompare,
                 {BroadcastValue(ConvertValue(a.value(), t), dims),
                  BroadcastValue(ConvertValue(b.value(), t), dims)},
                 std::move(attrs)));
}

Tensor UnaryOp(std::string_view name, hlo::Opcode opcode, const Tensor& x, bool float_only) {
  ir::Value v = x.value();
  if (float_only && !IsFloating(x.dtype()))
    v = ConvertValue(v, DType::kF32);  // as torch: ints -> float
  DType t = v.shape().dtype();
  return Wrap(ConvertValue(Op(opcode, {ConvertValue(v, ComputeType(t))}), t));
}

}  // namespace strata::lazy

namespace strata {

namespace {
thread_local bool scalars_baked = false;
}  // namespace

BakeScalars::BakeScalars(bool bake) : previous_(scalars_baked) { scalars_baked = bake; }
BakeScalars::~BakeScalars() { scalars_baked = previous_; }
bool BakeScalars::active() { return scalars_baked; }

using hlo::Opcode;
using lazy::BinaryOp;
using lazy::CompareOp;
using lazy::ScalarTypeWith;
using lazy::ScalarValue;
using lazy::UnaryOp;
using lazy::Wrap;

namespace {
// A C++ scalar as a tensor next to `like`.
Tensor ScalarFor(const Tensor& like, double value) {
  return Wrap(ScalarValue(value, ScalarTypeWith(like.dtype(), value), {}));
}
}  // namespace

Tensor operator+(const Tensor& a, const Tensor& b) { return BinaryOp("add", Opcode::kAdd, a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) {
  return BinaryOp("sub", Opcode::kSubtract, a, b);
}
Tensor operator*(const Tensor& a, const Tensor& b) {
  return BinaryOp("mul", Opcode::kMultiply, a, b);
}
Tensor operator/(const Tensor& a, const Tensor& b) {
  // True division, as torch: integers divide as floats.
  if (!IsFloating(a.dtype()) && !IsFloating(b.dtype()))
    return astype(a, DType::kF32) / astype(b, DType::kF32);
  return BinaryOp("div", Opcode::kDivide, a, b);
}
Tensor operator+(const Tensor& a, double b) { return a + ScalarFor(a, b); }
Tensor operator-(const Tensor& a, double b) { return a - ScalarFor(a, b); }
Tensor operator*(const Tensor& a, double b) { return a * ScalarFor(a, b); }
Tensor operator/(const Tensor& a, double b) { return a / ScalarFor(a, b); }
Tensor operator+(double a, const Tensor& b) { return ScalarFor(b, a) + b; }
Tensor operator-(double a, const Tensor& b) { return ScalarFor(b, a) - b; }
Tensor operator*(double a, const Tensor& b) { return ScalarFor(b, a) * b; }
Tensor operator/(double a, const Tensor& b) { return ScalarFor(b, a) / b; }
Tensor operator-(const Tensor& a) {
  if (a.dtype() == DType::kPred) Fail("[neg] is not defined for bool tensors; use logical_not");
  return Wrap(lazy::ConvertValue(
      lazy::Op(Opcode::kNegate, {lazy::ConvertValue(a.value(), lazy::ComputeType(a.dtype()))}),
      a.dtype()));
}
Tensor pow(const Tensor& a, const Tensor& b) {
  Tensor r = BinaryOp("pow", Opcode::kPower, a, b);
  if (!IsSignedInteger(r.dtype())) return r;
  // A negative exponent: XLA gives 0 but for base 1; torch gives (-1)^e
  // for base -1 too.
  const Tensor minus_one = integer_scalar(-1, r.dtype()), zero = zeros({}, r.dtype());
  const Tensor e = astype(b, r.dtype());
  const Tensor odd = ne(BinaryOp("pow", Opcode::kRemainder, e, integer_scalar(2, r.dtype())), zero);
  const Tensor fix = logical_and(eq(astype(a, r.dtype()), minus_one), lt(e, zero));
  return where(fix, where(odd, minus_one, integer_scalar(1, r.dtype())), r);
}
Tensor pow(const Tensor& a, double exponent) {
  if (IsInteger(a.dtype()) && exponent < 0 && std::floor(exponent) == exponent) {
    Fail("[pow] integers to negative integer powers are not allowed (as torch): {} ** {:g}",
         a.shape().ToString(), exponent);
  }
  if (exponent == 2) return a * a;
  return pow(a, ScalarFor(a, exponent));
}
Tensor remainder(const Tensor& a, const Tensor& b) {
  // torch.remainder takes the divisor's sign: r = fmod(a, b); r += b where signs differ.
  Tensor r = BinaryOp("remainder", Opcode::kRemainder, a, b);
  Tensor zero = zeros({}, r.dtype());
  Tensor fix = logical_and(ne(r, zero), ne(lt(r, zero), lt(b, zero)));
  return lazy::WithDivisorCheck(where(fix, r + b, r), b, "remainder");
}
Tensor trunc_divide(const Tensor& a, const Tensor& b) {
  if (IsFloating(lazy::ResultType(a, b))) {
    Tensor q = a / b;
    return where(lt(q, zeros({}, q.dtype())), ceil(q), floor(q));
  }
  // HLO's integer divide rounds toward zero.
  return lazy::WithDivisorCheck(BinaryOp("trunc_divide", Opcode::kDivide, a, b), b, "trunc_divide");
}
Tensor floor_divide(const Tensor& a, const Tensor& b) {
  if (IsFloating(lazy::ResultType(a, b))) {
    // torch's (and Python's) float floor division: from fmod, so that
    // -5 // inf is -1 (floor(-5 / inf) would be -0).
    const DType t = lazy::ResultType(a, b);
    const Tensor x = astype(a, t), y = astype(b, t), zero = zeros({}, t);
    const Tensor mod = BinaryOp("floor_divide", Opcode::kRemainder, x, y);  // C's fmod
    Tensor div = (x - mod) / y;
    div = where(logical_and(ne(mod, zero), ne(lt(y, zero), lt(mod, zero))), div - 1.0, div);
    // The quotient rounded to the nearest whole value toward it; x / 0 as is.
    Tensor whole = floor(div);
    whole = where(gt(div - whole, constant(0.5, t)), whole + 1.0, whole);
    Tensor q =
        where(eq(div, zero), BinaryOp("floor_divide", Opcode::kMultiply, zero, x / y), whole);
    return where(eq(y, zero), x / y, q);
  }
  Tensor q = BinaryOp("floor_divide", Opcode::kDivide, a, b);
  // One down where the division was inexact and the signs differ.
  Tensor zero = zeros({}, q.dtype());
  Tensor inexact = ne(q * b, a);
  Tensor fix = logical_and(inexact, ne(lt(a, zero), lt(b, zero)));
  return lazy::WithDivisorCheck(where(fix, q - integer_scalar(1, q.dtype()), q), b, "floor_divide");
}

// The ops of the rows whose api column is Api(name), as ops.h declares them.
namespace {
Opcode RowOf(std::string_view api) {
  static const auto* const rows = [] {
    auto* m = new std::map<std::string_view, Opcode>;  // never freed: lives as the table does
    for (int i = 0; i < hlo::kOpcodeCount; ++i) {
      const auto op = static_cast<Opcode>(i);
      if (hlo::ApiIsGenerated(op)) (*m)[hlo::ApiNameOf(op)] = op;
    }
    return m;
  }();
  return rows->at(api);
}
bool TakesOnlyFloats(Opcode op) { return hlo::ElementTypesOf(op) == hlo::ElementTypes::kFloat; }
Tensor RowUnary(std::string_view api, const Tensor& x) {
  const Opcode op = RowOf(api);
  return UnaryOp(api, op, x, TakesOnlyFloats(op));
}
Tensor RowBinary(std::string_view api, const Tensor& a, const Tensor& b) {
  const Opcode op = RowOf(api);
  if (TakesOnlyFloats(op) && !IsFloating(lazy::ResultType(a, b)))
    return BinaryOp(api, op, astype(a, DType::kF32), astype(b, DType::kF32));
  return BinaryOp(api, op, a, b);
}
}  // namespace

#define STRATA_LAZY_DEFINE_ROW(e, name, kind, complex, ...) STRATA_LAZY_DEFINE_##kind(__VA_ARGS__)
#define STRATA_LAZY_DEFINE_Other(...)
#define STRATA_LAZY_DEFINE_Collective(...)
#define STRATA_LAZY_DEFINE_Unary(api, ...) STRATA_LAZY_DEFINE_UNARY_##api
#define STRATA_LAZY_DEFINE_Binary(api, ...) STRATA_LAZY_DEFINE_BINARY_##api
#define STRATA_LAZY_DEFINE_UNARY_Api(n) \
  Tensor n(const Tensor& x) { return RowUnary(#n, x); }
#define STRATA_LAZY_DEFINE_BINARY_Api(n) \
  Tensor n(const Tensor& a, const Tensor& b) { return RowBinary(#n, a, b); }
#define STRATA_LAZY_DEFINE_UNARY_Custom(n)
#define STRATA_LAZY_DEFINE_BINARY_Custom(n)
#define STRATA_LAZY_DEFINE_UNARY_Internal()
#define STRATA_LAZY_DEFINE_BINARY_Internal()
STRATA_HLO_OPCODES(STRATA_LAZY_DEFINE_ROW)
#undef STRATA_LAZY_DEFINE_ROW
#undef STRATA_LAZY_DEFINE_Other
#undef STRATA_LAZY_DEFINE_Collective
#undef STRATA_LAZY_DEFINE_Unary
#undef STRATA_LAZY_DEFINE_Binary
#undef STRATA_LAZY_DEFINE_UNARY_Api
#undef STRATA_LAZY_DEFINE_BINARY_Api
#undef STRATA_LAZY_DEFINE_UNARY_Custom
#undef STRATA_LAZY_DEFINE_BINARY_Custom
#undef STRATA_LAZY_DEFINE_UNARY_Internal
#undef STRATA_LAZY_DEFINE_BINARY_Internal

// torch.sign of bools is the identity (the HLO op takes numbers).
Tensor sign(const Tensor& x) {
  return x.dtype() == DType::kPred ? x : UnaryOp("sign", Opcode::kSign, x, false);
}
Tensor floor(const Tensor& x) {
  if (x.dtype() == DType::kPred) Fail("[floor] is not defined for bool tensors (as torch)");
  return IsFloating(x.dtype()) ? UnaryOp("floor", Opcode::kFloor, x, true) : x;
}
Tensor ceil(const Tensor& x) {
  return IsFloating(x.dtype()) ? UnaryOp("ceil", Opcode::kCeil, x, true) : x;
}
Tensor logical_not(const Tensor& x) {
  return Wrap(lazy::Op(Opcode::kNot, {lazy::ConvertValue(x.value(), DType::kPred)}));
}
// where(), not maximum / minimum: x at a bound keeps its whole gradient and a
// NaN stays NaN, as torch.clamp.
Tensor clamp(const Tensor& x, std::optional<double> low, std::optional<double> high) {
  Tensor r = x;
  if (low) {
    const Tensor bound = ScalarFor(x, *low);
    r = where(lt(r, bound), bound, r);
  }
  if (high) {
    const Tensor bound = ScalarFor(x, *high);
    r = where(gt(r, bound), bound, r);
  }
  return r;
}

Tensor eq(const Tensor& a, const Tensor& b) { return CompareOp("eq", hlo::Comparison::kEq, a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return CompareOp("ne", hlo::Comparison::kNe, a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return CompareOp("lt", hlo::Comparison::kLt, a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return CompareOp("le", hlo::Comparison::kLe, a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return CompareOp("gt", hlo::Comparison::kGt, a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return CompareOp("ge", hlo::Comparison::kGe, a, b); }
Tensor logical_and(const Tensor& a, const Tensor& b) {
  return BinaryOp("logical_and", Opcode::kAnd, astype(a, DType::kPred), astype(b, DType::kPred));
}
Tensor logical_or(const Tensor& a, const Tensor& b) {
  return BinaryOp("logical_or", Opcode::kOr, astype(a, DType::kPred), astype(b, DType::kPred));
}

namespace {
void CheckBitwiseOperand(std::string_view name, const Tensor& x) {
  if (!IsInteger(x.dtype()) && x.dtype() != DType::kPred) {
    Fail("[{}] is only defined for integer and bool tensors, got {}", name, x.shape().ToString());
  }
}
Tensor BitwiseOp(std::string_view name, Opcode opcode, const Tensor& a, const Tensor& b) {
  CheckBitwiseOperand(name, a);
  CheckBitwiseOperand(name, b);
  return BinaryOp(name, opcode, a, b);
}
}  // namespace

Tensor bitwise_and(const Tensor& a, const Tensor& b) {
  return BitwiseOp("bitwise_and", Opcode::kAnd, a, b);
}
Tensor bitwise_or(const Tensor& a, const Tensor& b) {
  return BitwiseOp("bitwise_or", Opcode::kOr, a, b);
}
Tensor bitwise_xor(const Tensor& a, const Tensor& b) {
  return BitwiseOp("bitwise_xor", Opcode::kXor, a, b);
}
Tensor bitwise_not(const Tensor& x) {
  CheckBitwiseOperand("bitwise_not", x);
  return Wrap(lazy::Op(Opcode::kNot, {x.value()}));
}

Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b) {
  auto dims = lazy::BroadcastDims(
      "where", lazy::BroadcastDims("where", condition.shape().dims(), a.shape().dims()),
      b.shape().dims());
  DType t = lazy::ResultType(a, b);
  return Wrap(
      lazy::Op(Opcode::kSelect,
               {lazy::BroadcastValue(lazy::ConvertValue(condition.value(), DType::kPred), dims),
                lazy::BroadcastValue(lazy::ConvertValue(a.value(), t), dims),
                lazy::BroadcastValue(lazy::ConvertValue(b.value(), t), dims)}));
}

Tensor astype(const Tensor& x, DType dtype) { return Wrap(lazy::ConvertValue(x.value(), dtype)); }

}  // namespace strata
