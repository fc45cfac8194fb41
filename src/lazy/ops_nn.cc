// Neural-network functions as compositions of primitives.
#include <fmt/core.h>

#include "strata/lazy/index_check.h"
#include "strata/lazy/op_builder.h"

namespace strata {

using hlo::Opcode;

namespace {

// softmax / log_softmax work in a floating type (ints and bool -> f32, as
// torch) and f16 / bf16 in f32, rounding once at the end.
DType FloatComputeType(DType t) { return lazy::ComputeType(IsFloating(t) ? t : DType::kF32); }
DType ResultType(DType t) { return IsFloating(t) ? t : DType::kF32; }

// x - max(x, dim): exp of it cannot overflow. softmax and log_softmax do
// not change when every x moves by the same amount, so the max carries no
// gradient (as in jax.nn.softmax): the backward pass computes no argmax
// mask of the max (a compare, a select and a reduction over all of x).
Tensor Shifted(const Tensor& x, int64_t dim) {
  const ir::Value m = max(x, {dim}, /*keepdim=*/true).value();
  return x - Tensor(ir::Value{m.node->CloneStoppingGradient(), m.index});
}

// softmax's own reverse rule, in terms of its result y: the cotangent of x
// is y * (g - sum(g * y, dim)), as torch's softmax backward computes it.
// Differentiating y = e / sum(e) op by op instead keeps e for the backward
// pass beside y, writes it out in the forward pass (the sum and the divide
// both read it) and takes two row sums and a square in the backward.
class SoftmaxGradient final : public ir::GradientRule {
 public:
  explicit SoftmaxGradient(int64_t dim) : dim_(dim) {}
  // Operands: y (its own graph gets no cotangent here), x.
  std::vector<ir::Value> Vjp(const ir::NodePtr& node, const std::vector<ir::Value>& cotangents,
                             const std::vector<bool>& needed) const override {
    std::vector<ir::Value> grads(node->operands().size());
    if (!cotangents[0]) return grads;
    const Tensor y(node->operands()[0]), g(cotangents[0]);
    grads[1] = (y * (g - sum(g * y, {dim_}, /*keepdim=*/true))).value();
    return grads;
  }

 private:
  int64_t dim_;
};

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) {
  int64_t d = lazy::NormalizeDim("softmax", dim, x.shape());
  Tensor v = astype(x, FloatComputeType(x.dtype()));
  if (x.numel() == 0) return astype(v, ResultType(x.dtype()));
  Tensor e = exp(Shifted(v, d));
  const Tensor y = e / sum(e, {d}, /*keepdim=*/true);
  ir::NodePtr routed =
      ir::Node::MakeWithGradientRule({y.value(), v.value()}, std::make_shared<SoftmaxGradient>(d));
  return astype(Tensor(ir::Value{routed, 0}), ResultType(x.dtype()));
}

Tensor log_softmax(const Tensor& x, int64_t dim) {
  int64_t d = lazy::NormalizeDim("log_softmax", dim, x.shape());
  Tensor v = astype(x, FloatComputeType(x.dtype()));
  if (x.numel() == 0) return astype(v, ResultType(x.dtype()));
  Tensor shifted = Shifted(v, d);
  return astype(shifted - log(sum(exp(shifted), {d}, /*keepdim=*/true)), ResultType(x.dtype()));
}

// Out-of-range indices are an error at the sync that runs the op (checked
// indexing); with checks off they give all-zero rows.
Tensor one_hot(const Tensor& index, int64_t num_classes, DType dtype) {
  if (!IsInteger(index.dtype())) {
    Fail("[one_hot] index must be an integer tensor, got {}", index.shape().ToString());
  }
  if (num_classes < 0) {
    Fail(
        "[one_hot] num_classes must be given and non-negative (inferring it needs the data), got "
        "{} for index {}",
        num_classes, index.shape().ToString());
  }
  std::vector<int64_t> dims = index.shape().dims();
  dims.push_back(num_classes);
  std::vector<int64_t> index_map(index.rank());
  for (int64_t i = 0; i < index.rank(); ++i) index_map[i] = i;
  hlo::Attributes broadcast;
  broadcast.dimensions = std::move(index_map);
  ir::Value expanded =
      lazy::Op(Opcode::kBroadcast, {lazy::ConvertValue(index.value(), DType::kS64)},
               std::move(broadcast), Shape(DType::kS64, dims));
  hlo::Attributes iota;
  iota.dimensions = {index.rank()};
  ir::Value classes = lazy::Op(Opcode::kIota, {}, std::move(iota), Shape(DType::kS64, dims));
  hlo::Attributes compare;
  compare.direction = hlo::Comparison::kEq;
  return lazy::WithIndexCheck(
      lazy::Wrap(lazy::ConvertValue(
          lazy::Op(Opcode::kCompare, {expanded, classes}, std::move(compare)), dtype)),
      index, num_classes, "one_hot", fmt::format("{} classes", num_classes));
}

}  // namespace strata
