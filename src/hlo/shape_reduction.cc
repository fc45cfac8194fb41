// Shape rules of reductions and dots.
#include <fmt/ranges.h>

#include <algorithm>
#include <set>

#include "shape_rules.h"
#include "strata/hlo/convolution.h"
#include "strata/hlo/dot_algorithm.h"

namespace strata::hlo::shape_rules {
namespace {

void CheckReducer(const View& inst, const Computation& f, const std::vector<Shape>& results,
                  std::string_view role);

// The N results of reducing N operands shaped like `first` with N scalar
// inits (operands 0..N-1, then the inits) to `out_dims`.
std::vector<Shape> ReducedShapes(const View& inst, const Shape& first,
                                 const std::vector<int64_t>& out_dims) {
  const int64_t n = inst.operand_count() / 2;
  std::vector<Shape> results;
  for (int64_t i = 0; i < n; ++i) {
    const Shape& x = ArrayOperand(inst, i);
    const Shape& init = ArrayOperand(inst, n + i);
    if (x.dims() != first.dims()) {
      Reject(inst, "operand {} has dimensions {} but operand 0 has {}", i, DimsToString(x.dims()),
             DimsToString(first.dims()));
    }
    if (!init.is_scalar() || init.dtype() != x.dtype()) {
      Reject(inst, "init value {} must be a {} scalar, got {}", i, DTypeName(x.dtype()),
             init.ToString());
    }
    results.push_back(Shape(x.dtype(), out_dims));
  }
  return results;
}

Shape InferReduce(const View& inst) {
  int64_t n = inst.operand_count() / 2;
  if (inst.operand_count() < 2 || inst.operand_count() % 2 != 0) {
    Reject(inst, "expected N operands and N init values, got {} operands", inst.operand_count());
  }
  if (inst.attrs.called.size() != 1) Reject(inst, "expected one to_apply computation");
  const Shape& first = ArrayOperand(inst, 0);
  CheckDimensions(inst, inst.attrs.dimensions, first.rank(), "reduced dimension");
  std::vector<int64_t> out_dims;
  for (int64_t d = 0; d < first.rank(); ++d) {
    if (std::find(inst.attrs.dimensions.begin(), inst.attrs.dimensions.end(), d) ==
        inst.attrs.dimensions.end()) {
      out_dims.push_back(first.dim(d));
    }
  }
  const std::vector<Shape> results = ReducedShapes(inst, first, out_dims);
  CheckReducer(inst, *inst.attrs.called[0], results, "to_apply");
  return n == 1 ? results[0] : Shape::Tuple(results);
}

// A reducer of N values: (acc_0..acc_{n-1}, x_0..x_{n-1}) -> the N acc
// scalars (a tuple when N > 1).
void CheckReducer(const View& inst, const Computation& f, const std::vector<Shape>& results,
                  std::string_view role) {
  const int64_t n = static_cast<int64_t>(results.size());
  auto params = f.parameters();
  if (static_cast<int64_t>(params.size()) != 2 * n) {
    Reject(inst, "{} {} must take {} scalar parameters, takes {}", role, f.name(), 2 * n,
           params.size());
  }
  std::vector<Shape> scalars;
  for (int64_t i = 0; i < n; ++i) scalars.push_back(Shape::Scalar(results[i].dtype()));
  for (int64_t i = 0; i < 2 * n; ++i) {
    if (params[i]->shape() != scalars[i % n]) {
      Reject(inst, "{} {} parameter {} must be {}, is {}", role, f.name(), i,
             scalars[i % n].ToString(), params[i]->shape().ToString());
    }
  }
  Shape expected_root = n == 1 ? scalars[0] : Shape::Tuple(scalars);
  if (f.root() && f.root()->shape() != expected_root) {
    Reject(inst, "{} {} must return {}, returns {}", role, f.name(), expected_root.ToString(),
           f.root()->shape().ToString());
  }
}

// The window's positions over each dim of `operand` (as a convolution's).
std::vector<int64_t> WindowedDims(const View& inst, const Shape& operand) {
  const std::vector<WindowDim>& window = inst.attrs.window;
  if (static_cast<int64_t>(window.size()) != operand.rank()) {
    Reject(inst, "the window has {} dims, the operand {}", window.size(), operand.rank());
  }
  std::vector<int64_t> dims;
  int64_t taps = 1;
  for (int64_t d = 0; d < operand.rank(); ++d) {
    const WindowDim& w = window[d];
    if (__builtin_mul_overflow(taps, w.size, &taps)) {
      Reject(inst, "the window's sizes multiply past 2^63 elements");
    }
    if (w.window_reversal) Reject(inst, "window dim {} is reversed (only convolutions reverse)", d);
    const int64_t dilated = DilatedSize(operand.dim(d), w.base_dilation);
    DilatedSize(w.size, w.window_dilation);  // throws past int64
    if (static_cast<__int128>(dilated) + w.pad_low + w.pad_high < 0) {
      Reject(inst, "dim {}: padding {}_{} trims more than its {} elements", d, w.pad_low,
             w.pad_high, dilated);
    }
    dims.push_back(ConvolutionOutputSize(operand.dim(d), w));
  }
  return dims;
}

// reduce-window(x_0..x_{n-1}, init_0..init_{n-1}): each window reduced by to_apply.
Shape InferReduceWindow(const View& inst) {
  const int64_t n = inst.operand_count() / 2;
  if (inst.operand_count() < 2 || inst.operand_count() % 2 != 0) {
    Reject(inst, "expected N operands and N init values, got {} operands", inst.operand_count());
  }
  if (inst.attrs.called.size() != 1) Reject(inst, "expected one to_apply computation");
  const Shape& first = ArrayOperand(inst, 0);
  const std::vector<int64_t> dims = WindowedDims(inst, first);
  const std::vector<Shape> results = ReducedShapes(inst, first, dims);
  CheckReducer(inst, *inst.attrs.called[0], results, "to_apply");
  return n == 1 ? results[0] : Shape::Tuple(results);
}

// select-and-scatter(operand, source, init): each window of operand picks an
// element by `select` ((a, b) -> pred: keep a), which gathers that window's
// source value by `scatter`; the result is operand-shaped, starting at init.
Shape InferSelectAndScatter(const View& inst) {
  ExpectOperands(inst, 3);
  if (inst.attrs.called.size() != 2) Reject(inst, "expected select and scatter computations");
  const Shape& operand = ArrayOperand(inst, 0);
  const Shape& source = ArrayOperand(inst, 1);
  const Shape& init = ArrayOperand(inst, 2);
  for (const WindowDim& w : inst.attrs.window) {
    if (w.base_dilation != 1) Reject(inst, "the window cannot dilate the operand (lhs_dilate)");
  }
  const std::vector<int64_t> windows = WindowedDims(inst, operand);
  if (source.dims() != windows) {
    Reject(inst, "source has dimensions {}; the window's positions over the operand are {}",
           DimsToString(source.dims()), DimsToString(windows));
  }
  if (source.dtype() != operand.dtype() || !init.is_scalar() || init.dtype() != operand.dtype()) {
    Reject(inst, "operand, source and init must share one element type ({} scalar init)",
           DTypeName(operand.dtype()));
  }
  const Computation& select = *inst.attrs.called[0];
  const Shape scalar = Shape::Scalar(operand.dtype());
  auto params = select.parameters();
  if (params.size() != 2 || params[0]->shape() != scalar || params[1]->shape() != scalar ||
      !select.root() || select.root()->shape() != Shape::Scalar(DType::kPred)) {
    Reject(inst, "select {} must take two {} scalars and return pred", select.name(),
           DTypeName(operand.dtype()));
  }
  CheckReducer(inst, *inst.attrs.called[1], {scalar}, "scatter");
  return operand;
}

// An algorithm= on a dot: known (hlo/dot_algorithm.h), and over operands it
// takes. f8 algorithms name a type strata does not have.
void CheckDotAlgorithm(const View& inst, DType operands) {
  const std::string& a = inst.attrs.algorithm;
  if (a.empty()) return;
  if (a.rfind("dot_any_f8", 0) == 0) {
    Reject(inst, "algorithm={} multiplies f8 values, a type strata does not have", a);
  }
  const std::optional<DType> input = DotAlgorithmInput(a);
  if (!input) Reject(inst, "unknown algorithm={} (strata runs {})", a, DotAlgorithmNames());
  const bool half = *input == DType::kF16 || *input == DType::kBF16;
  if (operands != *input && !(half && operands == DType::kF32)) {
    Reject(inst, "algorithm={} takes {}{} operands, got {}", a, DTypeName(*input),
           half ? " or f32" : "", DTypeName(operands));
  }
}

Shape InferDot(const View& inst) {
  ExpectOperands(inst, 2);
  const Shape& lhs = ArrayOperand(inst, 0);
  const Shape& rhs = ArrayOperand(inst, 1);
  const DotDims& d = inst.attrs.dot;
  if (lhs.dtype() != rhs.dtype()) {
    Reject(inst, "operands must have one element type, got {} and {}", DTypeName(lhs.dtype()),
           DTypeName(rhs.dtype()));
  }
  CheckDotAlgorithm(inst, lhs.dtype());
  if (lhs.dtype() == DType::kPred) Reject(inst, "pred operands are not supported");
  if (d.lhs_batch.size() != d.rhs_batch.size() ||
      d.lhs_contracting.size() != d.rhs_contracting.size()) {
    Reject(inst, "lhs and rhs must have as many batch and contracting dimensions");
  }
  std::vector<int64_t> lhs_used = d.lhs_batch, rhs_used = d.rhs_batch;
  lhs_used.insert(lhs_used.end(), d.lhs_contracting.begin(), d.lhs_contracting.end());
  rhs_used.insert(rhs_used.end(), d.rhs_contracting.begin(), d.rhs_contracting.end());
  CheckDimensions(inst, lhs_used, lhs.rank(), "lhs batch/contracting dimension");
  CheckDimensions(inst, rhs_used, rhs.rank(), "rhs batch/contracting dimension");
  for (size_t i = 0; i < d.lhs_batch.size(); ++i) {
    if (lhs.dim(d.lhs_batch[i]) != rhs.dim(d.rhs_batch[i])) {
      Reject(inst, "batch dimension sizes differ: lhs {} vs rhs {}", lhs.dim(d.lhs_batch[i]),
             rhs.dim(d.rhs_batch[i]));
    }
  }
  for (size_t i = 0; i < d.lhs_contracting.size(); ++i) {
    if (lhs.dim(d.lhs_contracting[i]) != rhs.dim(d.rhs_contracting[i])) {
      Reject(inst,
             "contracting dimension sizes differ: lhs dimension {} is {}, rhs dimension {} is {}",
             d.lhs_contracting[i], lhs.dim(d.lhs_contracting[i]), d.rhs_contracting[i],
             rhs.dim(d.rhs_contracting[i]));
    }
  }
  std::vector<int64_t> out;
  for (int64_t b : d.lhs_batch) out.push_back(lhs.dim(b));
  for (int64_t i = 0; i < lhs.rank(); ++i) {
    if (std::find(lhs_used.begin(), lhs_used.end(), i) == lhs_used.end()) out.push_back(lhs.dim(i));
  }
  for (int64_t i = 0; i < rhs.rank(); ++i) {
    if (std::find(rhs_used.begin(), rhs_used.end(), i) == rhs_used.end()) out.push_back(rhs.dim(i));
  }
  return Shape(AccumulationType(inst, lhs.dtype(), out), out);
}

}  // namespace

Shape ReductionShape(const View& inst) {
  [[maybe_unused]] const Shape& declared = inst.declared;
  switch (inst.op) {
    case Opcode::kReduce:
      return InferReduce(inst);
    case Opcode::kDot:
      return InferDot(inst);
    case Opcode::kReduceWindow:
      return InferReduceWindow(inst);
    case Opcode::kSelectAndScatter:
      return InferSelectAndScatter(inst);
    default:
      Reject(inst, "is not a reduction");
  }
}

}  // namespace strata::hlo::shape_rules

namespace strata::hlo {

namespace {
struct KnownAlgorithm {
  const char* name;
  DType input;
};
constexpr KnownAlgorithm kDotAlgorithms[] = {
    {"dot_f16_f16_f16", DType::kF16},      {"dot_f16_f16_f32", DType::kF16},
    {"dot_bf16_bf16_bf16", DType::kBF16},  {"dot_bf16_bf16_f32", DType::kBF16},
    {"dot_bf16_bf16_f32_x3", DType::kF32}, {"dot_bf16_bf16_f32_x6", DType::kF32},
    {"dot_bf16_bf16_f32_x9", DType::kF32}, {"dot_tf32_tf32_f32", DType::kF32},
    {"dot_tf32_tf32_f32_x3", DType::kF32}, {"dot_f32_f32_f32", DType::kF32},
    {"dot_f64_f64_f64", DType::kF64},
};
}  // namespace

std::optional<DType> DotAlgorithmInput(std::string_view algorithm) {
  for (const KnownAlgorithm& k : kDotAlgorithms) {
    if (algorithm == k.name) return k.input;
  }
  return std::nullopt;
}

std::string DotAlgorithmNames() {
  std::string names;
  for (const KnownAlgorithm& k : kDotAlgorithms)
    names += (names.empty() ? "" : ", ") + std::string(k.name);
  return names;
}

}  // namespace strata::hlo
