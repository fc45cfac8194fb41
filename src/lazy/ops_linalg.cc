// matmul with torch.matmul's rules for 1-D operands and broadcast batch dims.
#include "strata/lazy/op_builder.h"

namespace strata {

using hlo::Opcode;

namespace {

std::vector<int64_t> Prefix(const std::vector<int64_t>& dims, size_t drop) {
  return std::vector<int64_t>(dims.begin(), dims.end() - static_cast<std::ptrdiff_t>(drop));
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  const Shape& sa = a.shape();
  const Shape& sb = b.shape();
  if (sa.rank() == 0 || sb.rank() == 0) {
    Fail("[matmul] both arguments need at least one dimension, got {} and {}", sa.ToString(),
         sb.ToString());
  }
  // The contracted dims: a's last; b's only one or its second to last.
  int64_t a_k = sa.rank() - 1;
  int64_t b_k = sb.rank() == 1 ? 0 : sb.rank() - 2;
  if (sa.dim(a_k) != sb.dim(b_k)) {
    if (sa.rank() == 1 && sb.rank() == 1) {
      Fail("[matmul] 1-D inputs must have the same size, got {} and {}", sa.ToString(),
           sb.ToString());
    }
    Fail(
        "[matmul] last dimension of the first input with shape {} must match {} dimension of the "
        "second input "
        "with shape {}",
        sa.ToString(), sb.rank() == 1 ? "the only" : "the second to last", sb.ToString());
  }
  DType t = lazy::PromoteTypes(a.dtype(), b.dtype());
  if (t == DType::kPred)
    Fail("[matmul] is not defined for bool tensors ({} and {})", sa.ToString(), sb.ToString());
  // bf16 stays bf16: the runtime's dot multiplies bf16 values itself,
  // summing in f32 and rounding once (its bf16 GEMM); f16 computes in f32.
  DType compute = t == DType::kBF16 ? t : lazy::ComputeType(t);
  ir::Value x = lazy::ConvertValue(a.value(), compute);
  ir::Value y = lazy::ConvertValue(b.value(), compute);
  hlo::DotDims dims;
  if (sa.rank() == 1 || sb.rank() <= 2) {
    // No batch dims needed: dot keeps a's free dims, then b's, in order.
    dims.lhs_contracting = {a_k};
    dims.rhs_contracting = {b_k};
  } else {
    // Both batched (a rank >= 2, b rank >= 3): broadcast the batch dims.
    std::vector<int64_t> a_batch = Prefix(sa.dims(), 2), b_batch = Prefix(sb.dims(), 2);
    size_t rank = std::max(a_batch.size(), b_batch.size());
    std::vector<int64_t> batch(rank);
    for (size_t i = 0; i < rank; ++i) {
      int64_t da = i < rank - a_batch.size() ? 1 : a_batch[i - (rank - a_batch.size())];
      int64_t db = i < rank - b_batch.size() ? 1 : b_batch[i - (rank - b_batch.size())];
      if (da != db && da != 1 && db != 1) {
        Fail("[matmul] batch dimensions of {} and {} cannot be broadcast together: {} vs {}",
             sa.ToString(), sb.ToString(), DimsToString(a_batch), DimsToString(b_batch));
      }
      batch[i] = da == 1 ? db : da;
    }
    std::vector<int64_t> x_dims = batch, y_dims = batch;
    x_dims.insert(x_dims.end(), {sa.dim(sa.rank() - 2), sa.dim(a_k)});
    y_dims.insert(y_dims.end(), {sb.dim(b_k), sb.dim(sb.rank() - 1)});
    x = lazy::BroadcastValue(x, x_dims);
    y = lazy::BroadcastValue(y, y_dims);
    auto b_rank = static_cast<int64_t>(rank);
    for (int64_t i = 0; i < b_rank; ++i) {
      dims.lhs_batch.push_back(i);
      dims.rhs_batch.push_back(i);
    }
    dims.lhs_contracting = {b_rank + 1};
    dims.rhs_contracting = {b_rank};
  }
  hlo::Attributes attrs;
  attrs.dot = std::move(dims);
  return lazy::Wrap(lazy::ConvertValue(lazy::Op(Opcode::kDot, {x, y}, std::move(attrs)), t));
}

}  // namespace strata
