// pad, dynamic_slice, dynamic_update_slice, index_add: the data-dependent
// window ops (what scan slices its xs and writes its ys with).
#include "strata/ir/node.h"
#include "strata/lazy/index_check.h"
#include "strata/lazy/op_builder.h"

namespace strata {

using hlo::Opcode;
using lazy::Op;
using lazy::Wrap;

namespace {

// Start tensors as the operands of a dynamic-slice family op.
std::vector<ir::Value> StartValues(std::string_view op, const Tensor& x,
                                   const std::vector<Tensor>& starts) {
  if (static_cast<int64_t>(starts.size()) != x.rank()) {
    Fail("[{}] needs one start per dimension of {}, got {}", op, x.shape().ToString(),
         starts.size());
  }
  std::vector<ir::Value> values;
  for (size_t i = 0; i < starts.size(); ++i) {
    if (!starts[i].defined() || starts[i].rank() != 0 || !IsInteger(starts[i].dtype())) {
      Fail("[{}] start {} must be a rank-0 integer tensor, got {}", op, i,
           starts[i].defined() ? starts[i].shape().ToString() : "an undefined tensor");
    }
    values.push_back(starts[i].value());
  }
  return values;
}

}  // namespace

Tensor pad(const Tensor& x, std::vector<int64_t> low, std::vector<int64_t> high, double value) {
  if (static_cast<int64_t>(low.size()) != x.rank() ||
      static_cast<int64_t>(high.size()) != x.rank()) {
    Fail("[pad] needs low and high padding for each of the {} dims of {}, got {} and {}", x.rank(),
         x.shape().ToString(), low.size(), high.size());
  }
  hlo::Attributes a;
  for (int64_t d = 0; d < x.rank(); ++d) {
    if (low[d] < 0 || high[d] < 0) {
      Fail("[pad] padding must be non-negative, got low {} high {} for dim {} of {}", low[d],
           high[d], d, x.shape().ToString());
    }
    a.padding.push_back({low[d], high[d], 0});
  }
  ir::Value fill = lazy::ScalarValue(value, x.dtype(), {});
  return Wrap(Op(Opcode::kPad, {x.value(), fill}, std::move(a)));
}

Tensor dynamic_slice(const Tensor& x, const std::vector<Tensor>& starts,
                     std::vector<int64_t> sizes) {
  std::vector<ir::Value> operands = StartValues("dynamic_slice", x, starts);
  if (static_cast<int64_t>(sizes.size()) != x.rank()) {
    Fail("[dynamic_slice] needs one size per dimension of {}, got {}", x.shape().ToString(),
         sizes.size());
  }
  for (int64_t d = 0; d < x.rank(); ++d) {
    if (sizes[d] < 0 || sizes[d] > x.shape().dim(d)) {
      Fail("[dynamic_slice] size {} of dim {} must be in [0, {}] for {}", sizes[d], d,
           x.shape().dim(d), x.shape().ToString());
    }
  }
  operands.insert(operands.begin(), x.value());
  hlo::Attributes a;
  a.dynamic_slice_sizes = std::move(sizes);
  return Wrap(Op(Opcode::kDynamicSlice, std::move(operands), std::move(a)));
}

Tensor dynamic_update_slice(const Tensor& x, const Tensor& update,
                            const std::vector<Tensor>& starts) {
  std::vector<ir::Value> operands = StartValues("dynamic_update_slice", x, starts);
  if (update.rank() != x.rank()) {
    Fail("[dynamic_update_slice] update {} must have the rank of {}", update.shape().ToString(),
         x.shape().ToString());
  }
  for (int64_t d = 0; d < x.rank(); ++d) {
    if (update.shape().dim(d) > x.shape().dim(d)) {
      Fail("[dynamic_update_slice] update {} does not fit in {} (dim {})",
           update.shape().ToString(), x.shape().ToString(), d);
    }
  }
  operands.insert(operands.begin(), {x.value(), lazy::ConvertValue(update.value(), x.dtype())});
  return Wrap(Op(Opcode::kDynamicUpdateSlice, std::move(operands)));
}

Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source,
                 double alpha) {
  if (!IsInteger(index.dtype()) || index.rank() != 1) {
    Fail("[index_add] index must be a 1-D integer tensor, got {}", index.shape().ToString());
  }
  if (x.rank() == 0) Fail("[index_add] cannot add into a rank-0 tensor");
  int64_t d = lazy::NormalizeDim("index_add", dim, x.shape());
  std::vector<int64_t> expected = x.shape().dims();
  expected[d] = index.numel();
  if (source.shape().dims() != expected) {
    Fail("[index_add] source {} must be {} for index {} into {} along dim {}",
         source.shape().ToString(), DimsToString(expected), index.shape().ToString(),
         x.shape().ToString(), d);
  }
  if (x.numel() == 0 || index.numel() == 0) return x;  // nothing to add (nor a window to scatter)
  // Half types are storage only: add in f32 and round once.
  DType compute = lazy::ComputeType(x.dtype());
  Tensor base = astype(x, compute);
  Tensor updates = astype(alpha == 1 ? source : source * alpha, compute);
  hlo::Attributes a;
  a.scatter.index_vector_dim = 1;
  a.scatter.scatter_dims_to_operand_dims = {d};
  a.scatter.inserted_window_dims = {d};
  for (int64_t k = 0; k < x.rank(); ++k) {
    if (k != d) a.scatter.update_window_dims.push_back(k);
  }
  a.called = {ir::ScalarCombiner(Opcode::kAdd, compute)};
  Tensor sum =
      Wrap(Op(Opcode::kScatter, {base.value(), index.value(), updates.value()}, std::move(a)));
  // As torch (and every other indexing op here): an index out of range is an
  // error, not a row the scatter silently drops.
  return lazy::WithIndexCheck(astype(sum, x.dtype()), index, x.shape().dim(d), "index_add",
                              fmt::format("dimension {} of {}", d, x.shape().ToString()));
}

}  // namespace strata
