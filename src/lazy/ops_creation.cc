// Creation ops (constants, ranges, identity) and counter-based random numbers.
#include <cmath>
#include <limits>
#include <numbers>

#include "strata/hlo/literal.h"
#include "strata/lazy/op_builder.h"

namespace strata {

using hlo::Opcode;
using lazy::Op;
using lazy::ScalarValue;
using lazy::Wrap;

namespace {

void CheckDims(std::string_view op, const std::vector<int64_t>& dims) {
  for (int64_t d : dims) {
    if (d < 0) Fail("[{}] dimensions must be non-negative, got {}", op, DimsToString(dims));
  }
}

ir::Value Iota(DType dtype, std::vector<int64_t> dims, int64_t dimension) {
  hlo::Attributes a;
  a.dimensions = {dimension};
  return Op(Opcode::kIota, {}, std::move(a), Shape(dtype, std::move(dims)));
}

void CheckKey(std::string_view op, const Tensor& key) {
  if (key.shape() != Shape(DType::kU64, {2})) {
    Fail("[{}] a key must be u64[2] (from random_key or split_key), got {}", op,
         key.shape().ToString());
  }
}

// Significand bits of a floating dtype (with the implicit bit).
int SignificandBits(DType dtype) {
  switch (dtype) {
    case DType::kF64:
      return 53;
    case DType::kF16:
      return 11;
    case DType::kBF16:
      return 8;
    default:
      return 24;
  }
}

// Uniform values in [0, 1) computed in `compute` (f32 or f64) from `key`: the
// top bits of each random word scaled by 2^-bits, with as many bits as
// `target` holds, so every value is exact in `target` and never rounds to 1.
ir::Value UnitUniform(const Tensor& key, std::vector<int64_t> dims, DType compute, DType target) {
  bool wide = compute == DType::kF64;
  DType word = wide ? DType::kU64 : DType::kU32;
  int mantissa_bits = SignificandBits(target);
  int word_bits = wide ? 64 : 32;
  hlo::Attributes a;
  a.rng_algorithm = "rng_philox";
  ir::Value bits = Op(Opcode::kRngBitGenerator, {key.value()}, std::move(a),
                      Shape::Tuple({Shape(DType::kU64, {2}), Shape(word, dims)}), /*index=*/1);
  ir::Value shift = ScalarValue(word_bits - mantissa_bits, word, dims, /*bake=*/true);
  ir::Value top = lazy::ConvertValue(Op(Opcode::kShiftRightLogical, {bits, shift}), compute);
  return Op(Opcode::kMultiply,
            {top, ScalarValue(std::ldexp(1.0, -mantissa_bits), compute, dims, /*bake=*/true)});
}

// The largest value of floating `dtype` below `high`.
double LargestBelow(DType dtype, double high) {
  if (dtype == DType::kF64) return std::nextafter(high, -INFINITY);
  if (dtype == DType::kF32) {
    float f = static_cast<float>(high);
    return f < high ? f : std::nextafter(f, -INFINITY);
  }
  // f16 / bf16 are sign-magnitude: the next value down steps the bits
  // toward -infinity.
  bool half = dtype == DType::kF16;
  auto to_bits = [&](float f) { return half ? hlo::FloatToHalf(f) : hlo::FloatToBFloat16(f); };
  auto from_bits = [&](uint16_t b) { return half ? hlo::HalfToFloat(b) : hlo::BFloat16ToFloat(b); };
  uint16_t bits = to_bits(static_cast<float>(high));
  while (from_bits(bits) >= high) {
    if (bits == 0x0000) {
      bits = 0x8001;
    } else if (bits & 0x8000) {
      ++bits;
    } else {
      --bits;
    }
  }
  return from_bits(bits);
}

// The dtype random values are computed in before conversion to `dtype`.
DType RandomComputeType(std::string_view op, DType dtype) {
  if (!IsFloating(dtype)) Fail("[{}] needs a floating-point dtype, got {}", op, DTypeName(dtype));
  return dtype == DType::kF64 ? DType::kF64 : DType::kF32;
}

}  // namespace

Tensor zeros(std::vector<int64_t> dims, DType dtype) {
  CheckDims("zeros", dims);
  return Wrap(ScalarValue(0, dtype, dims));
}

Tensor ones(std::vector<int64_t> dims, DType dtype) {
  CheckDims("ones", dims);
  return Wrap(ScalarValue(1, dtype, dims));
}

Tensor full(std::vector<int64_t> dims, double value, DType dtype) {
  CheckDims("full", dims);
  return Wrap(ScalarValue(value, dtype, dims));
}

Tensor arange(int64_t end, DType dtype) {
  if (end < 0) Fail("[arange] end must be non-negative, got {}", end);
  if (dtype == DType::kPred) Fail("[arange] needs a numeric dtype, got pred");
  return Wrap(Iota(dtype, {end}, 0));
}

Tensor arange(double start, double end, double step, DType dtype) {
  if (step == 0) Fail("[arange] step must be nonzero");
  if (!std::isfinite(start) || !std::isfinite(end) || !std::isfinite(step)) {
    Fail("[arange] start, end and step must be finite, got ({}, {}, {})", start, end, step);
  }
  if (dtype == DType::kPred) Fail("[arange] needs a numeric dtype, got pred");
  double length = std::ceil((end - start) / step);
  if (length < 0) {
    Fail(
        "[arange] the range [{}, {}) is empty in the direction of step {}; expected a non-negative "
        "length",
        start, end, step);
  }
  auto n = static_cast<int64_t>(length);
  // As torch, element i is start + i * step computed in double, then cast;
  // a narrow integer dtype gets it through int64, so it wraps as torch's
  // arange(0, 300, dtype=int8) does rather than saturating.
  ir::Value i = Iota(DType::kF64, {n}, 0);
  ir::Value scaled = Op(Opcode::kMultiply, {i, ScalarValue(step, DType::kF64, {n})});
  ir::Value shifted = Op(Opcode::kAdd, {scaled, ScalarValue(start, DType::kF64, {n})});
  if (IsInteger(dtype) && dtype != DType::kS64) shifted = lazy::ConvertValue(shifted, DType::kS64);
  return Wrap(lazy::ConvertValue(shifted, dtype));
}

Tensor eye(int64_t n, DType dtype) {
  if (n < 0) Fail("[eye] n must be non-negative, got {}", n);
  hlo::Attributes a;
  a.direction = hlo::Comparison::kEq;
  ir::Value diagonal =
      Op(Opcode::kCompare, {Iota(DType::kS64, {n, n}, 0), Iota(DType::kS64, {n, n}, 1)}, a);
  return Wrap(lazy::ConvertValue(diagonal, dtype));
}

Tensor constant(double value, DType dtype) {
  return Wrap(ScalarValue(value, dtype, {}, /*bake=*/true));
}

Tensor scalar(double value, DType dtype) {
  if (BakeScalars::active()) return constant(value, dtype);
  return Wrap(ir::Value{ir::Node::MakeScalar(hlo::Literal::ScalarOf(dtype, value))});
}

Tensor integer_scalar(int64_t value, DType dtype) {
  if (BakeScalars::active()) return integer_constant(value, dtype);
  return Wrap(ir::Value{ir::Node::MakeScalar(hlo::Literal::IntegerOf(dtype, value))});
}

Tensor integer_constant(int64_t value, DType dtype) {
  return Wrap(ir::Value{ir::Node::MakeConstant(hlo::Literal::IntegerOf(dtype, value))});
}

Tensor integer_full(std::vector<int64_t> dims, int64_t value, DType dtype) {
  CheckDims("full", dims);
  if (!IsInteger(dtype)) return full(std::move(dims), static_cast<double>(value), dtype);
  ir::Value v{ir::Node::MakeScalar(hlo::Literal::IntegerOf(dtype, value))};
  return Wrap(dims.empty() ? v : lazy::BroadcastValue(v, dims));
}

Tensor random_key(uint64_t seed) { return Tensor::FromVector<uint64_t>({seed, 0}, {2}); }

// Child keys are fresh Philox words drawn from the parent with the top bit of
// its counter flipped, so they never coincide with the words uniform/normal
// draw from the parent itself; each child is {word_i, 0}.
std::vector<Tensor> split_key(const Tensor& key, int64_t count) {
  CheckKey("split_key", key);
  if (count < 0) Fail("[split_key] count must be non-negative, got {}", count);
  if (count == 0) return {};
  const std::vector<uint64_t> offset = {0, uint64_t{1} << 63};
  ir::Value offset_value{ir::Node::MakeConstant(hlo::Literal::Vector<uint64_t>(offset, {2}))};
  ir::Value state = Op(Opcode::kAdd, {key.value(), offset_value});
  hlo::Attributes a;
  a.rng_algorithm = "rng_philox";
  ir::Value words = Op(Opcode::kRngBitGenerator, {state}, std::move(a),
                       Shape::Tuple({Shape(DType::kU64, {2}), Shape(DType::kU64, {count, 1})}), 1);
  hlo::Attributes cat;
  cat.dimensions = {1};
  Tensor keys = Wrap(
      Op(Opcode::kConcatenate, {words, ScalarValue(0, DType::kU64, {count, 1})}, std::move(cat)));
  std::vector<Tensor> out;
  for (int64_t i = 0; i < count; ++i) out.push_back(reshape(slice(keys, 0, i, i + 1), {2}));
  return out;
}

Tensor uniform(const Tensor& key, std::vector<int64_t> dims, double low, double high, DType dtype) {
  CheckKey("uniform", key);
  CheckDims("uniform", dims);
  DType compute = RandomComputeType("uniform", dtype);
  if (!(low <= high)) Fail("[uniform] expected low <= high, got low={} high={}", low, high);
  Tensor u = Wrap(UnitUniform(key, dims, compute, dtype));
  if (low != 0 || high != 1) {
    u = u * (high - low) + low;
    // Rounding (of the affine map, or to `dtype`) can land on `high`; clamping
    // to the largest `dtype` value below it keeps the interval half-open.
    if (low < high) u = minimum(u, scalar(LargestBelow(dtype, high), compute));
  }
  return astype(u, dtype);
}

Tensor normal(const Tensor& key, std::vector<int64_t> dims, double mean, double stddev,
              DType dtype) {
  CheckKey("normal", key);
  CheckDims("normal", dims);
  DType compute = RandomComputeType("normal", dtype);
  if (!(stddev >= 0)) Fail("[normal] expected stddev >= 0, got {}", stddev);
  // Box-Muller from 2n uniforms: r = sqrt(-2 log u1) with u1 in (0, 1], angle 2 pi u2.
  int64_t n = Product(dims);
  Tensor u = Wrap(UnitUniform(key, {2, n}, compute, compute));
  Tensor u1 = 1.0 - reshape(slice(u, 0, 0, 1), {n});
  Tensor u2 = reshape(slice(u, 0, 1, 2), {n});
  Tensor radius = sqrt(log(u1) * constant(-2, compute));
  Tensor z = radius * cos(u2 * constant(2 * std::numbers::pi, compute));
  if (stddev != 1) z = z * stddev;
  if (mean != 0) z = z + mean;
  return astype(reshape(z, dims), dtype);
}

Tensor uniform(uint64_t seed, std::vector<int64_t> dims, double low, double high, DType dtype) {
  return uniform(random_key(seed), std::move(dims), low, high, dtype);
}

Tensor normal(uint64_t seed, std::vector<int64_t> dims, double mean, double stddev, DType dtype) {
  return normal(random_key(seed), std::move(dims), mean, stddev, dtype);
}

}  // namespace strata
