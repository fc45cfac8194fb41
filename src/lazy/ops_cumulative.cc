// Cumulative ops along a dim: cumsum, cumprod, cummax, cummin and
// logcumsumexp. Each is an inclusive scan with an associative combine, run
// as ceil(log2 n) rounds of "combine with the value k places earlier" for
// k = 1, 2, 4, ... (Hillis and Steele); the first k elements of a round have
// nothing k places earlier and keep their value. A round is a shift (a pad
// that trims) and elementwise ops the compiler fuses, and the gradients come
// from those ops' rules. (A reduce-window over the whole prefix, XLA's form on TPUs,
// does n^2 / 2 work a row.)
#include <fmt/format.h>

#include <limits>
#include <type_traits>

#include "strata/lazy/op_builder.h"

namespace strata {

using hlo::Opcode;
using lazy::Op;
using lazy::Wrap;

namespace {

// y's values k places earlier along d: element i holds y[i - k]; the first
// k hold `fill`. One pad that adds k in front and trims k at the end.
Tensor Earlier(const Tensor& y, int64_t d, int64_t k, double fill) {
  hlo::Attributes shift;
  shift.padding.assign(y.rank(), hlo::PadRange{});
  shift.padding[d] = {k, -k, 0};
  return Wrap(
      Op(Opcode::kPad, {y.value(), lazy::ScalarValue(fill, y.dtype(), {})}, std::move(shift)));
}

// Whether each position along d has an element k places earlier.
Tensor HasEarlier(const Tensor& like, int64_t d, int64_t k) {
  hlo::Attributes iota;
  iota.dimensions = {d};
  const std::vector<int64_t>& dims = like.shape().dims();
  ir::Value position = Op(Opcode::kIota, {}, std::move(iota), Shape(DType::kS64, dims));
  hlo::Attributes at_least;
  at_least.direction = hlo::Comparison::kGe;
  return Wrap(Op(Opcode::kCompare,
                 {position, lazy::ScalarValue(static_cast<double>(k), DType::kS64, dims, true)},
                 std::move(at_least)));
}

Tensor IsNaN(const Tensor& x) { return ne(x, x); }

// The checks every cumulative op shares; returns the dim, non-negative.
int64_t CumulativeDim(std::string_view op, const Tensor& x, int64_t dim) {
  return lazy::NormalizeDim(op, dim, x.shape());
}

// cumsum / cumprod: torch's dtypes (bool and integers accumulate in s64,
// f16 and bf16 in f32 and round once). A sum is XLA's reduce-window over
// the whole prefix, which the runtime runs as a running scan in one pass
// (and its gradient, a suffix sum, too); a product keeps the rounds, since
// a window product has no gradient rule.
Tensor SumOrProduct(std::string_view op, const Tensor& x, int64_t dim, bool product) {
  const int64_t d = CumulativeDim(op, x, dim);
  const DType out = IsFloating(x.dtype()) ? x.dtype() : DType::kS64;
  Tensor y = astype(x, lazy::ComputeType(out));
  if (x.rank() == 0) return astype(y, out);
  if (!product && x.dim(d) > 1) {
    std::vector<hlo::WindowDim> prefix(x.rank());
    prefix[d].size = x.dim(d);
    prefix[d].pad_low = x.dim(d) - 1;
    return astype(reduce_window(y, Opcode::kAdd, std::move(prefix)), out);
  }
  for (int64_t k = 1; k < x.dim(d); k *= 2) {
    Tensor earlier = Earlier(y, d, k, product ? 1 : 0);
    y = product ? y * earlier : y + earlier;
  }
  return astype(y, out);
}

// The identity of a running maximum (the lowest value of `t`) or minimum
// (the highest), as a literal of `t` itself (the 64-bit bounds have no
// double to pass through).
template <typename T>
hlo::Literal BoundOf(bool highest) {
  if constexpr (std::is_floating_point_v<T>) {
    return hlo::Literal::Scalar<T>(highest ? std::numeric_limits<T>::infinity()
                                           : -std::numeric_limits<T>::infinity());
  } else {
    return hlo::Literal::Scalar<T>(highest ? std::numeric_limits<T>::max()
                                           : std::numeric_limits<T>::lowest());
  }
}

hlo::Literal Bound(DType t, bool highest) {
  switch (t) {
    case DType::kS8:
      return BoundOf<int8_t>(highest);
    case DType::kS16:
      return BoundOf<int16_t>(highest);
    case DType::kU16:
      return BoundOf<uint16_t>(highest);
    case DType::kS32:
      return BoundOf<int32_t>(highest);
    case DType::kS64:
      return BoundOf<int64_t>(highest);
    case DType::kU8:
      return BoundOf<uint8_t>(highest);
    case DType::kU32:
      return BoundOf<uint32_t>(highest);
    case DType::kU64:
      return BoundOf<uint64_t>(highest);
    case DType::kF64:
      return BoundOf<double>(highest);
    default:
      STRATA_CHECK(t == DType::kF32, "no running-extreme identity for {}", DTypeName(t));
      return BoundOf<float>(highest);
  }
}

// A running maximum (or minimum) along d: XLA's whole-prefix reduce-window,
// which the runtime runs as a scan.
ir::Value RunningExtreme(const ir::Value& x, int64_t d, bool is_max) {
  const Shape& s = x.shape();
  std::vector<hlo::WindowDim> prefix(s.rank());
  prefix[d].size = s.dim(d);
  prefix[d].pad_low = s.dim(d) - 1;
  hlo::Attributes a;
  a.window = std::move(prefix);
  a.called = {ir::ScalarCombiner(is_max ? Opcode::kMaximum : Opcode::kMinimum, s.dtype())};
  const ir::Value identity{ir::Node::MakeConstant(Bound(s.dtype(), !is_max)), 0};
  return Op(Opcode::kReduceWindow, {x, identity}, std::move(a));
}

// The values of cummax / cummin: the running extreme, whose cotangent goes
// to the element of x each one came from (its index), as torch's does.
class GatheredFromIndices final : public ir::GradientRule {
 public:
  explicit GatheredFromIndices(int64_t dim) : dim_(dim) {}
  // Operands: the running extreme (no gradient), x, the indices.
  std::vector<ir::Value> Vjp(const ir::NodePtr& node, const std::vector<ir::Value>& cotangents,
                             const std::vector<bool>& needed) const override {
    std::vector<ir::Value> grads(node->operands().size());
    const ir::Value& x = node->operands()[1];
    if (!cotangents[0] || !IsFloating(x.shape().dtype())) return grads;
    grads[1] = lazy::ScatterAddAlongDim(zeros(x.shape().dims(), x.shape().dtype()).value(), dim_,
                                        node->operands()[2], cotangents[0]);
    return grads;
  }

 private:
  int64_t dim_;
};

// cummax / cummin as torch computes them: the index is where the running
// extreme was last reached (ties take the later index; a NaN, once seen,
// stays, and each later NaN takes the index). Two scans: the running
// extreme m, then the running maximum of "k where x[k] == m[k] (or is NaN),
// else -1", the position of the current extreme. m is made of x's own
// elements; its gradient goes to them through the indices.
ValuesIndices ExtremeWithIndex(std::string_view op, const Tensor& x, int64_t dim, bool is_max) {
  const int64_t d = CumulativeDim(op, x, dim);
  if (x.rank() == 0) return {x, zeros({}, DType::kS64)};
  if (x.dim(d) == 0) return {x, zeros(x.shape().dims(), DType::kS64)};
  const ir::Value raw = x.value();
  const ir::Value keys{raw.node->CloneStoppingGradient(), raw.index};
  const DType t = x.dtype() == DType::kPred ? DType::kU8 : lazy::ComputeType(x.dtype());
  const Tensor k = Wrap(lazy::ConvertValue(keys, t));
  const Tensor extreme = Wrap(RunningExtreme(k.value(), d, is_max));
  hlo::Attributes iota;
  iota.dimensions = {d};
  const Tensor position =
      Wrap(Op(Opcode::kIota, {}, std::move(iota), Shape(DType::kS64, x.shape().dims())));
  Tensor reached = eq(k, extreme);
  if (IsFloating(t)) reached = logical_or(reached, IsNaN(k));
  const Tensor marks = where(reached, position, full(x.shape().dims(), -1, DType::kS64));
  const Tensor index = Wrap(RunningExtreme(marks.value(), d, /*is_max=*/true));
  const ir::Value values = lazy::ConvertValue(extreme.value(), x.dtype());
  ir::NodePtr routed = ir::Node::MakeWithGradientRule({values, raw, index.value()},
                                                      std::make_shared<GatheredFromIndices>(d));
  return {Wrap(ir::Value{routed, 0}), index};
}

// log(exp(a) + exp(b)) around m = max(a, b): m carries no gradient (the
// expression does not change with it), so ties split the gradient evenly,
// and infinities give no inf - inf.
Tensor LogAddExp(const Tensor& a, const Tensor& b) {
  const ir::Value raw = maximum(a, b).value();
  Tensor m{ir::Value{raw.node->CloneStoppingGradient(), raw.index}};
  Tensor finite_m =
      where(Wrap(Op(Opcode::kIsFinite, {m.value()})), m, zeros(m.shape().dims(), m.dtype()));
  return finite_m + log(exp(a - finite_m) + exp(b - finite_m));
}

}  // namespace

Tensor cumsum(const Tensor& x, int64_t dim) { return SumOrProduct("cumsum", x, dim, false); }

Tensor cumprod(const Tensor& x, int64_t dim) { return SumOrProduct("cumprod", x, dim, true); }

ValuesIndices cummax(const Tensor& x, int64_t dim) {
  return ExtremeWithIndex("cummax", x, dim, true);
}

ValuesIndices cummin(const Tensor& x, int64_t dim) {
  return ExtremeWithIndex("cummin", x, dim, false);
}

Tensor logcumsumexp(const Tensor& x, int64_t dim) {
  const int64_t d = CumulativeDim("logcumsumexp", x, dim);
  if (!IsFloating(x.dtype())) {
    Fail("[logcumsumexp] needs a floating-point tensor, got {}", x.shape().ToString());
  }
  Tensor y = astype(x, lazy::ComputeType(x.dtype()));
  if (x.rank() == 0) return x;
  for (int64_t k = 1; k < x.dim(d); k *= 2) {
    y = where(HasEarlier(x, d, k), LogAddExp(Earlier(y, d, k, 0), y), y);
  }
  return astype(y, x.dtype());
}

}  // namespace strata
