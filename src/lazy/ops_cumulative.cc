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

// cummax / cummin as torch computes them: a NaN, once seen, stays (the
// index moves to each later NaN); otherwise ties take the later index.
ValuesIndices ExtremeWithIndex(std::string_view op, const Tensor& x, int64_t dim, bool is_max) {
  const int64_t d = CumulativeDim(op, x, dim);
  if (x.rank() == 0) return {x, zeros({}, DType::kS64)};
  hlo::Attributes iota;
  iota.dimensions = {d};
  Tensor value = x;
  Tensor index = Wrap(Op(Opcode::kIota, {}, std::move(iota), Shape(DType::kS64, x.shape().dims())));
  const bool floating = IsFloating(x.dtype());
  for (int64_t k = 1; k < x.dim(d); k *= 2) {
    Tensor earlier_value = Earlier(value, d, k, 0);
    Tensor earlier_index = Earlier(index, d, k, 0);
    Tensor later_wins = is_max ? ge(value, earlier_value) : le(value, earlier_value);
    if (floating) {
      later_wins =
          logical_or(IsNaN(value), logical_and(logical_not(IsNaN(earlier_value)), later_wins));
    }
    Tensor keep_earlier = logical_and(HasEarlier(x, d, k), logical_not(later_wins));
    value = where(keep_earlier, earlier_value, value);
    index = where(keep_earlier, earlier_index, index);
  }
  return {value, index};
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
