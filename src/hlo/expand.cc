// ExpandXlaOps: XLA's ops that strata computes with other ops.
#include "strata/hlo/expand.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <unordered_set>

#include "strata/core/error.h"
#include "strata/hlo/builder.h"
#include "strata/hlo/library_calls.h"

namespace strata::hlo {

bool RunsAsynchronously(const Instruction& inst) {
  switch (inst.opcode()) {
    case Opcode::kAllGatherStart:
      return inst.operand_count() == 1 && inst.operand(0)->shape().is_array();
    case Opcode::kAllReduceStart:
      for (const Instruction* op : inst.operands()) {
        if (!op->shape().is_array()) return false;
      }
      return inst.operand_count() > 0;
    case Opcode::kAllGatherDone:
    case Opcode::kAllReduceDone:
      return inst.operand_count() == 1 && RunsAsynchronously(*inst.operand(0));
    default:
      return false;
  }
}

namespace {

bool Expanded(const Instruction& inst, bool keep_async_collectives) {
  if (KernelOf(inst.opcode()) == Kernel::kCollective) {
    const bool paired =
        inst.opcode() == Opcode::kAllGatherStart || inst.opcode() == Opcode::kAllGatherDone ||
        inst.opcode() == Opcode::kAllReduceStart || inst.opcode() == Opcode::kAllReduceDone;
    return paired && !(keep_async_collectives && RunsAsynchronously(inst));
  }
  if (inst.opcode() == Opcode::kCustomCall) {
    auto call = LibraryCallOf(inst.custom_call_target);
    return call && !IsKernelLibraryCall(*call);
  }
  if (inst.opcode() == Opcode::kGather) return !inst.gather.operand_batching_dims.empty();
  if (inst.opcode() == Opcode::kScatter) return !inst.scatter.input_batching_dims.empty();
  return KernelOf(inst.opcode()) == Kernel::kExpanded;
}

// Builds the replacement of one instruction inside its computation.
class Expansion {
 public:
  Expansion(Module& module, Computation& computation, Instruction& inst)
      : module_(module), computation_(computation), inst_(inst), b_(&computation) {}

  Instruction* Run();

 private:
  Instruction* BatchNormTraining();
  Instruction* BatchNormInference();
  Instruction* BatchNormGrad();
  Instruction* Map();
  Instruction* ReducePrecision();
  Instruction* Library(LibraryCall call);
  Instruction* NextAfter(Instruction* x, Instruction* toward);
  Instruction* MatrixDiagonal();
  Instruction* Einsum();
  Instruction* WithoutBatchingDims();

  // Scalars of the operand's type broadcast to its dims, and a few ops on them.
  Instruction* Un(Opcode op, Instruction* x) { return b_.Unary(op, x); }
  Instruction* Bin(Opcode op, Instruction* a, Instruction* b) { return b_.Binary(op, a, b); }
  Instruction* Cmp(Instruction* a, Instruction* b, Comparison c) { return b_.Compare(a, b, c); }

  Instruction* operand(int64_t i) const { return inst_.operand(i); }
  const Shape& x_shape() const { return operand(0)->shape(); }
  DType dtype() const { return x_shape().dtype(); }
  // A scalar of the operand's type, broadcast to the operand's dims.
  Instruction* Splat(double value) {
    return b_.Broadcast(b_.Constant(Literal::ScalarOf(dtype(), value)), x_shape().dims(), {});
  }
  // A [C] vector broadcast along the feature dimension.
  Instruction* AlongFeatures(Instruction* v) {
    return b_.Broadcast(v, x_shape().dims(), {inst_.feature_index});
  }
  // A new (a, b) -> a + b computation of type t.
  Computation* Adder(DType t);
  // Sum over every dimension but the feature one: [C].
  Instruction* SumOverFeatures(Instruction* x);
  // The number of elements per feature, as a [C] vector.
  Instruction* CountPerFeature() {
    double n = static_cast<double>(x_shape().num_elements()) /
               static_cast<double>(x_shape().dim(inst_.feature_index));
    return b_.Broadcast(b_.Constant(Literal::ScalarOf(dtype(), n)),
                        {x_shape().dim(inst_.feature_index)}, {});
  }
  Instruction* InverseDeviation(Instruction* variance) {  // rsqrt(variance + epsilon)
    Instruction* eps = b_.Broadcast(b_.Constant(Literal::ScalarOf(dtype(), inst_.epsilon)),
                                    variance->shape().dims(), {});
    return b_.Unary(Opcode::kRsqrt, b_.Add(variance, eps));
  }

  Module& module_;
  Computation& computation_;
  Instruction& inst_;
  Builder b_;
  Computation* add_ = nullptr;
};

Computation* Expansion::Adder(DType t) {
  std::string name = inst_.name() + ".add";
  while (module_.FindComputation(name)) name += "_";
  return module_.AddComputationBefore(MakeScalarBinaryComputation(name, Opcode::kAdd, t),
                                      &computation_);
}

Instruction* Expansion::SumOverFeatures(Instruction* x) {
  if (!add_) add_ = Adder(dtype());
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < x->shape().rank(); ++d) {
    if (d != inst_.feature_index) dims.push_back(d);
  }
  return b_.Reduce(x, b_.Constant(Literal::ScalarOf(dtype(), 0)), dims, add_);
}

// The batch's mean and (biased) variance per feature; the output normalized,
// scaled and offset with them.
Instruction* Expansion::BatchNormTraining() {
  Instruction* n = CountPerFeature();
  Instruction* mean = b_.Divide(SumOverFeatures(operand(0)), n);
  Instruction* centered = b_.Subtract(operand(0), AlongFeatures(mean));
  Instruction* variance = b_.Divide(SumOverFeatures(b_.Multiply(centered, centered)), n);
  Instruction* scale = b_.Multiply(InverseDeviation(variance), operand(1));
  Instruction* out = b_.Add(b_.Multiply(centered, AlongFeatures(scale)), AlongFeatures(operand(2)));
  return b_.Tuple({out, mean, variance});
}

// (operand, scale, offset, mean, variance): normalized with the given statistics.
Instruction* Expansion::BatchNormInference() {
  Instruction* centered = b_.Subtract(operand(0), AlongFeatures(operand(3)));
  Instruction* scale = b_.Multiply(InverseDeviation(operand(4)), operand(1));
  return b_.Add(b_.Multiply(centered, AlongFeatures(scale)), AlongFeatures(operand(2)));
}

// (operand, scale, mean, variance, grad_output) -> (grad_operand, grad_scale,
// grad_offset), the statistics being the batch's own:
//   xhat = (x - mean) * inv,  inv = rsqrt(variance + epsilon)
//   grad_offset = sum(dy),  grad_scale = sum(dy * xhat)
//   grad_operand = scale * inv * (dy - grad_offset / N - xhat * grad_scale / N)
Instruction* Expansion::BatchNormGrad() {
  Instruction* dy = operand(4);
  Instruction* inv = InverseDeviation(operand(3));
  Instruction* xhat =
      b_.Multiply(b_.Subtract(operand(0), AlongFeatures(operand(2))), AlongFeatures(inv));
  Instruction* grad_offset = SumOverFeatures(dy);
  Instruction* grad_scale = SumOverFeatures(b_.Multiply(dy, xhat));
  Instruction* n = CountPerFeature();
  Instruction* mean_dy = AlongFeatures(b_.Divide(grad_offset, n));
  Instruction* mean_dy_xhat = AlongFeatures(b_.Divide(grad_scale, n));
  Instruction* inner = b_.Subtract(b_.Subtract(dy, mean_dy), b_.Multiply(xhat, mean_dy_xhat));
  Instruction* grad_operand = b_.Multiply(inner, AlongFeatures(b_.Multiply(operand(1), inv)));
  return b_.Tuple({grad_operand, grad_scale, grad_offset});
}

// map(x_0, ..., x_{n-1}), to_apply=f: f's scalar ops applied to whole arrays
// (f's parameters become the operands, its constants broadcasts of them).
Instruction* Expansion::Map() {
  const Computation& f = *inst_.called.at(0);
  const std::vector<int64_t>& dims = x_shape().dims();
  std::unordered_map<const Instruction*, Instruction*> made;
  for (const auto& scalar : f.instructions()) {
    const Opcode op = scalar->opcode();
    Instruction* array = nullptr;
    if (op == Opcode::kParameter) {
      array = operand(scalar->parameter_number);
    } else if (op == Opcode::kConstant) {
      array = b_.Broadcast(b_.Constant(scalar->literal), dims, {});
    } else if (IsElementwiseUnary(op) || IsElementwiseBinary(op) || op == Opcode::kCompare ||
               op == Opcode::kSelect || op == Opcode::kClamp || op == Opcode::kConvert ||
               op == Opcode::kBitcastConvert || op == Opcode::kIsFinite || op == Opcode::kCopy) {
      std::vector<Instruction*> operands;
      for (const Instruction* o : scalar->operands()) operands.push_back(made.at(o));
      auto copy = std::make_unique<Instruction>(op, Shape(scalar->shape().dtype(), dims),
                                                std::move(operands));
      static_cast<Attributes&>(*copy) = scalar->attributes();
      array = b_.Add(std::move(copy));
    } else {
      Fail(
          "[map] {} applies {}, whose instruction {} ({}) is not elementwise: strata runs a "
          "map of elementwise scalar functions",
          inst_.name(), f.name(), scalar->name(), OpcodeName(op));
    }
    made[scalar.get()] = array;
  }
  return made.at(f.root());
}

// The elementwise math of XLA's client library, in forms that keep
// precision at the ends of each domain (where the textbook formula
// overflows or cancels).
Instruction* Expansion::Library(LibraryCall call) {
  Instruction* x = operand(0);
  const double big = dtype() == DType::kF64 ? 1e150 : dtype() == DType::kF32 ? 1e18 : 1e2;
  auto sqrt = [&](Instruction* v) { return Un(Opcode::kSqrt, v); };
  // (1 - x)(1 + x): 1 - x is exact near 1, where 1 - x^2 cancels.
  auto one_minus_square = [&] {
    return b_.Multiply(b_.Subtract(Splat(1), x), b_.Add(Splat(1), x));
  };
  switch (call) {
    case LibraryCall::kAtan:
      return Bin(Opcode::kAtan2, x, Splat(1));
    case LibraryCall::kAsin:  // 2 atan2(x, 1 + sqrt(1 - x^2))
      return b_.Multiply(Splat(2),
                         Bin(Opcode::kAtan2, x, b_.Add(Splat(1), sqrt(one_minus_square()))));
    case LibraryCall::kAcos:  // 2 atan2(sqrt(1 - x^2), 1 + x), and pi at -1
      return b_.Select(
          Cmp(x, Splat(-1), Comparison::kNe),
          b_.Multiply(Splat(2), Bin(Opcode::kAtan2, sqrt(one_minus_square()), b_.Add(Splat(1), x))),
          Splat(3.14159265358979323846));
    case LibraryCall::kCosh: {  // h h / 2 + 1 / (2 h h), h = e^(|x| / 2): finite up to the max
      Instruction* h = Un(Opcode::kExp, b_.Multiply(Un(Opcode::kAbs, x), Splat(0.5)));
      return b_.Add(b_.Multiply(b_.Multiply(h, Splat(0.5)), h),
                    b_.Divide(Splat(0.5), b_.Multiply(h, h)));
    }
    case LibraryCall::kAsinh: {  // sign(x) asinh(|x|)
      Instruction* a = Un(Opcode::kAbs, x);
      Instruction* a2 = b_.Multiply(a, a);
      Instruction* moderate = Un(
          Opcode::kLog1p, b_.Add(a, b_.Divide(a2, b_.Add(Splat(1), sqrt(b_.Add(Splat(1), a2))))));
      Instruction* large = b_.Add(Un(Opcode::kLog, a), Splat(0.69314718055994530942));
      Instruction* magnitude = b_.Select(Cmp(a, Splat(big), Comparison::kGt), large, moderate);
      return b_.Multiply(Un(Opcode::kSign, x), magnitude);
    }
    case LibraryCall::kAcosh: {  // log1p(y + sqrt(y (y + 2))), y = x - 1; NaN below 1
      Instruction* y = b_.Subtract(x, Splat(1));
      Instruction* moderate =
          Un(Opcode::kLog1p, b_.Add(y, sqrt(b_.Multiply(y, b_.Add(y, Splat(2))))));
      Instruction* large = b_.Add(Un(Opcode::kLog, x), Splat(0.69314718055994530942));
      Instruction* value = b_.Select(Cmp(x, Splat(big), Comparison::kGt), large, moderate);
      return b_.Select(Cmp(x, Splat(1), Comparison::kLt),
                       Splat(std::numeric_limits<double>::quiet_NaN()), value);
    }
    case LibraryCall::kNextAfter:
      return NextAfter(x, operand(1));
    case LibraryCall::kMatrixDiagonal:
      return MatrixDiagonal();
    case LibraryCall::kEinsum:
      return Einsum();
    default:
      Fail("[expand] {} runs as a kernel, not rewritten", inst_.custom_call_target);
  }
}

// The float after x in the direction of `toward` (C's nextafter): x's bits
// as an integer of its width, one step up or down.
Instruction* Expansion::NextAfter(Instruction* x, Instruction* toward) {
  const int64_t width = DTypeSize(dtype());
  const DType bits = width == 8 ? DType::kS64 : width == 4 ? DType::kS32 : DType::kS16;
  const std::vector<int64_t>& dims = x_shape().dims();
  auto integer = [&](int64_t v) {
    return b_.Broadcast(b_.Constant(Literal::IntegerOf(bits, v)), dims, {});
  };
  Instruction* xi = b_.BitcastConvert(x, bits);
  Instruction* ti = b_.BitcastConvert(toward, bits);
  // Away from zero (a larger magnitude) when x < toward and x > 0, or both false.
  Instruction* away =
      Cmp(Cmp(x, toward, Comparison::kLt), Cmp(x, Splat(0), Comparison::kGt), Comparison::kEq);
  Instruction* stepped = b_.Add(xi, b_.Select(away, integer(1), integer(-1)));
  // From zero: the smallest subnormal with toward's sign.
  Instruction* sign =
      Bin(Opcode::kAnd, ti, integer(std::numeric_limits<int64_t>::min() >> (64 - 8 * width)));
  Instruction* from_zero = Bin(Opcode::kOr, sign, integer(1));
  Instruction* moved =
      b_.BitcastConvert(b_.Select(Cmp(x, Splat(0), Comparison::kEq), from_zero, stepped), dtype());
  Instruction* result = b_.Select(Cmp(x, toward, Comparison::kEq), toward, moved);
  Instruction* nan =
      Bin(Opcode::kOr, Cmp(x, x, Comparison::kNe), Cmp(toward, toward, Comparison::kNe));
  return b_.Select(nan, Splat(std::numeric_limits<double>::quiet_NaN()), result);
}

// The main diagonal of each matrix [..., m, n]: the leading k x k block
// (k = min(m, n)), its off-diagonal elements replaced by zeros, summed
// along its rows.
Instruction* Expansion::MatrixDiagonal() {
  const Shape& x = x_shape();
  const int64_t r = x.rank(), k = std::min(x.dim(r - 2), x.dim(r - 1));
  std::vector<int64_t> starts(r, 0), limits = x.dims();
  limits[r - 2] = limits[r - 1] = k;
  Instruction* block = b_.Slice(operand(0), starts, limits);
  const Shape square(DType::kS32, limits);
  Instruction* on_diagonal = Cmp(b_.Iota(square, r - 2), b_.Iota(square, r - 1), Comparison::kEq);
  Instruction* zeros = b_.Broadcast(b_.Constant(Literal::ScalarOf(dtype(), 0)), limits, {});
  Instruction* kept = b_.Select(on_diagonal, block, zeros);
  return b_.Reduce(kept, b_.Constant(Literal::ScalarOf(dtype(), 0)), {r - 1}, Adder(dtype()));
}

// a and b's dims labelled by the config: labels in both and in the result
// are batch dims, in both but not the result contracted, in one only and
// not the result summed first; the dot's result [batch, a's, b's] is then
// transposed to the result's order.
Instruction* Expansion::Einsum() {
  const EinsumSpec spec = ParseEinsumConfig(inst_.backend_config);
  auto in = [](const std::string& s, char c) { return s.find(c) != std::string::npos; };
  // Sums the dims of `x` whose labels are in neither the other operand nor the result.
  auto reduce_alone = [&](Instruction* x, std::string labels, const std::string& other) {
    std::vector<int64_t> dims;
    std::string kept;
    for (size_t d = 0; d < labels.size(); ++d) {
      if (in(other, labels[d]) || in(spec.out, labels[d])) {
        kept += labels[d];
      } else {
        dims.push_back(static_cast<int64_t>(d));
      }
    }
    if (dims.empty()) return std::pair{x, labels};
    const DType t = x->shape().dtype();
    return std::pair{b_.Reduce(x, b_.Constant(Literal::ScalarOf(t, 0)), dims, Adder(t)), kept};
  };
  auto [a, a_labels] = reduce_alone(operand(0), spec.a, spec.b);
  auto [b, b_labels] = reduce_alone(operand(1), spec.b, spec.a);
  DotDims dims;
  std::string order;  // the dot result's labels
  for (size_t d = 0; d < a_labels.size(); ++d) {
    const char c = a_labels[d];
    if (!in(b_labels, c)) continue;
    const int64_t bd = static_cast<int64_t>(b_labels.find(c));
    if (in(spec.out, c)) {
      dims.lhs_batch.push_back(static_cast<int64_t>(d));
      dims.rhs_batch.push_back(bd);
      order += c;
    } else {
      dims.lhs_contracting.push_back(static_cast<int64_t>(d));
      dims.rhs_contracting.push_back(bd);
    }
  }
  for (char c : a_labels) {
    if (!in(b_labels, c)) order += c;
  }
  for (char c : b_labels) {
    if (!in(a_labels, c)) order += c;
  }
  Instruction* product = b_.Dot(a, b, dims);
  std::vector<int64_t> permutation;
  for (char c : spec.out) permutation.push_back(static_cast<int64_t>(order.find(c)));
  return b_.Transpose(product, permutation);
}

// A gather (scatter) with batching dims as one without: each batching pair
// becomes one more index component, the position along the indices' batch
// dim (an iota), mapped to the operand's dim, which is then collapsed
// (inserted) like any indexed dim of slice size 1.
Instruction* Expansion::WithoutBatchingDims() {
  const bool gather = inst_.opcode() == Opcode::kGather;
  Instruction* indices = operand(1);
  int64_t vector_dim = gather ? inst_.gather.index_vector_dim : inst_.scatter.index_vector_dim;
  const std::vector<int64_t>& operand_dims =
      gather ? inst_.gather.operand_batching_dims : inst_.scatter.input_batching_dims;
  const std::vector<int64_t>& index_dims = gather ? inst_.gather.start_indices_batching_dims
                                                  : inst_.scatter.scatter_indices_batching_dims;
  std::vector<int64_t> dims = indices->shape().dims();
  if (vector_dim == static_cast<int64_t>(dims.size())) {  // an implicit vector of one
    dims.push_back(1);
    indices = b_.Reshape(indices, dims);
  }
  std::vector<int64_t> position_dims = dims;
  position_dims[vector_dim] = 1;
  std::vector<Instruction*> parts = {indices};
  for (int64_t d : index_dims) {
    parts.push_back(b_.Iota(Shape(indices->shape().dtype(), position_dims), d));
  }
  Instruction* widened = b_.Concatenate(parts, vector_dim);
  auto with_batch = [&](std::vector<int64_t> dims_list, bool sorted) {
    dims_list.insert(dims_list.end(), operand_dims.begin(), operand_dims.end());
    if (sorted) std::sort(dims_list.begin(), dims_list.end());
    return dims_list;
  };
  std::vector<Instruction*> operands = inst_.operands();
  operands[1] = widened;
  auto plain = std::make_unique<Instruction>(inst_.opcode(), inst_.shape(), operands);
  static_cast<Attributes&>(*plain) = inst_.attributes();
  if (gather) {
    GatherDims& g = plain->gather;
    g.collapsed_slice_dims = with_batch(g.collapsed_slice_dims, true);
    g.start_index_map = with_batch(g.start_index_map, false);
    g.index_vector_dim = vector_dim;
    g.operand_batching_dims.clear();
    g.start_indices_batching_dims.clear();
  } else {
    ScatterDims& s = plain->scatter;
    s.inserted_window_dims = with_batch(s.inserted_window_dims, true);
    s.scatter_dims_to_operand_dims = with_batch(s.scatter_dims_to_operand_dims, false);
    s.index_vector_dim = vector_dim;
    s.input_batching_dims.clear();
    s.scatter_indices_batching_dims.clear();
  }
  return b_.Add(std::move(plain));
}

// XLA's reduce-precision: x rounded (to nearest, ties to even) to a float
// format of exponent_bits and mantissa_bits, kept in x's type. Integer work
// on x's bits: round the mantissa, then send exponents past the narrow
// format's range to signed infinity and those below its smallest normal to
// signed zero (its subnormals included, as XLA does). NaN stays x's own NaN,
// or becomes +inf when the format keeps no mantissa bit (no NaN exists there).
Instruction* Expansion::ReducePrecision() {
  Instruction* x = operand(0);
  const DType t = dtype();
  const int bits = static_cast<int>(8 * DTypeSize(t));
  const int src_mantissa = t == DType::kF16    ? 10
                           : t == DType::kBF16 ? 7
                           : t == DType::kF32  ? 23
                                               : 52;
  const int src_exponent = bits - 1 - src_mantissa;
  const int64_t mantissa = inst_.mantissa_bits, exponent = inst_.exponent_bits;
  if (mantissa >= src_mantissa && exponent >= src_exponent) return x;  // nothing narrower

  const DType u = bits == 16 ? DType::kU16 : bits == 32 ? DType::kU32 : DType::kU64;
  const uint64_t all = bits == 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1;
  auto splat = [&](uint64_t v) {
    Literal scalar = bits == 16   ? Literal::Scalar<uint16_t>(static_cast<uint16_t>(v))
                     : bits == 32 ? Literal::Scalar<uint32_t>(static_cast<uint32_t>(v))
                                  : Literal::Scalar<uint64_t>(v);
    return b_.Broadcast(b_.Constant(std::move(scalar)), x_shape().dims(), {});
  };
  const uint64_t sign_mask = uint64_t{1} << (bits - 1);
  const uint64_t exponent_mask = ((uint64_t{1} << src_exponent) - 1) << src_mantissa;

  Instruction* v = b_.BitcastConvert(x, u);
  Instruction* is_nan =
      Cmp(Bin(Opcode::kAnd, v, splat(all & ~sign_mask)), splat(exponent_mask), Comparison::kGt);
  if (mantissa < src_mantissa) {
    // Adding 0111... (plus the last kept bit, for ties to even) carries into
    // the kept bits exactly when the dropped ones round up; a carry out of
    // the mantissa bumps the exponent, which is right too.
    const int dropped = src_mantissa - static_cast<int>(mantissa);
    const uint64_t last_kept = uint64_t{1} << dropped;
    Instruction* last_bit =
        Bin(Opcode::kShiftRightLogical, Bin(Opcode::kAnd, v, splat(last_kept)), splat(dropped));
    Instruction* bias = Bin(Opcode::kAdd, last_bit, splat((last_kept >> 1) - 1));
    v = Bin(Opcode::kAnd, Bin(Opcode::kAdd, v, bias), splat(all & ~(last_kept - 1)));
  }
  if (exponent < src_exponent) {
    // Biased exponents of x's type: the narrow format's largest is
    // bias + narrow_bias, its zero / subnormal one bias - narrow_bias.
    const uint64_t bias = (uint64_t{1} << (src_exponent - 1)) - 1;
    const uint64_t narrow_bias = (uint64_t{1} << (exponent - 1)) - 1;
    Instruction* biased = Bin(Opcode::kAnd, v, splat(exponent_mask));
    Instruction* overflows =
        Cmp(biased, splat((bias + narrow_bias) << src_mantissa), Comparison::kGt);
    Instruction* underflows =
        Cmp(biased, splat((bias - narrow_bias) << src_mantissa), Comparison::kLe);
    Instruction* signed_zero = Bin(Opcode::kAnd, v, splat(sign_mask));
    Instruction* signed_inf = Bin(Opcode::kOr, signed_zero, splat(exponent_mask));
    v = b_.Select(underflows, signed_zero, b_.Select(overflows, signed_inf, v));
  }
  Instruction* nan = mantissa > 0 ? x : Splat(std::numeric_limits<double>::infinity());
  return b_.Select(is_nan, nan, b_.BitcastConvert(v, t));
}

Instruction* Expansion::Run() {
  if (inst_.opcode() == Opcode::kGather || inst_.opcode() == Opcode::kScatter) {
    return WithoutBatchingDims();
  }
  if (inst_.opcode() == Opcode::kCustomCall) {
    return Library(*LibraryCallOf(inst_.custom_call_target));
  }
  switch (inst_.opcode()) {
    case Opcode::kBatchNormTraining:
      return BatchNormTraining();
    case Opcode::kBatchNormInference:
      return BatchNormInference();
    case Opcode::kBatchNormGrad:
      return BatchNormGrad();
    case Opcode::kMap:
      return Map();
    case Opcode::kReducePrecision:
      return ReducePrecision();
    case Opcode::kAllReduceStart:
    case Opcode::kAllGatherStart:
    case Opcode::kCollectivePermuteStart: {
      // The collective itself, then the tuple its -done reads.
      const Opcode op = inst_.opcode() == Opcode::kAllReduceStart   ? Opcode::kAllReduce
                        : inst_.opcode() == Opcode::kAllGatherStart ? Opcode::kAllGather
                                                                    : Opcode::kCollectivePermute;
      const Shape& shape = inst_.shape();
      const bool tupled = op != Opcode::kAllReduce;
      auto sync = std::make_unique<Instruction>(op, tupled ? shape.tuple_shape(1) : shape,
                                                inst_.operands());
      static_cast<Attributes&>(*sync) = inst_.attributes();
      Instruction* result = b_.AddShaped(std::move(sync));
      if (!tupled) return result;
      std::vector<Instruction*> elements = {operand(0), result};
      for (int64_t i = 2; i < shape.tuple_size(); ++i) {
        elements.push_back(b_.Constant(Literal::IntegerOf(DType::kU32, 0)));
      }
      return b_.Tuple(elements);
    }
    case Opcode::kCopyStart:
      return b_.Tuple(
          {b_.Copy(operand(0)), operand(0), b_.Constant(Literal::IntegerOf(DType::kU32, 0))});
    case Opcode::kAllReduceDone:
      return operand(0);
    case Opcode::kAllGatherDone:
    case Opcode::kCollectivePermuteDone:
      return b_.GetTupleElement(operand(0), 1);
    case Opcode::kCopyDone:
      return b_.GetTupleElement(operand(0), 0);
    default:
      Fail("[expand] {} ({}) has no expansion", OpcodeName(inst_.opcode()), inst_.name());
  }
}

// Names the instructions an expansion added after the one they replace.
void NameAdded(Computation& c, size_t first, const std::string& base,
               std::unordered_set<std::string>& names) {
  int64_t k = 0;
  for (size_t i = first; i < c.instructions().size(); ++i) {
    std::string name;
    do {
      name = fmt::format("{}.{}", base, k++);
    } while (names.count(name));
    names.insert(name);
    c.instructions()[i]->set_name(std::move(name));
  }
}

}  // namespace

bool HasOpsToExpand(const Module& module, bool keep_async_collectives) {
  for (const auto& c : module.computations()) {
    for (const auto& inst : c->instructions()) {
      if (Expanded(*inst, keep_async_collectives)) return true;
    }
  }
  return false;
}

bool ExpandXlaOps(Module& module, bool keep_async_collectives) {
  bool changed = false;
  std::vector<Computation*> computations;
  for (const auto& c : module.computations()) computations.push_back(c.get());
  for (Computation* c : computations) {
    std::vector<Instruction*> found;
    std::unordered_set<std::string> names;
    for (const auto& inst : c->instructions()) {
      names.insert(inst->name());
      if (Expanded(*inst, keep_async_collectives)) found.push_back(inst.get());
    }
    if (found.empty()) continue;
    for (Instruction* inst : found) {  // operands come first: a -done sees its -start replaced
      const size_t first = c->instructions().size();
      Instruction* replacement = Expansion(module, *c, *inst).Run();
      NameAdded(*c, first, inst->name(), names);
      c->ReplaceAllUsesWith(inst, replacement);
      const bool made = std::any_of(c->instructions().begin() + first, c->instructions().end(),
                                    [&](const auto& added) { return added.get() == replacement; });
      if (made && replacement->sharding.empty()) replacement->sharding = inst->sharding;
    }
    c->RemoveDeadInstructions();
    c->SortTopologically();
    changed = true;
  }
  return changed;
}

}  // namespace strata::hlo
