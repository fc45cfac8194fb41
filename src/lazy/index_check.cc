#include "strata/lazy/index_check.h"

#include <fmt/core.h>

#include "strata/lazy/context.h"
#include "strata/lazy/ops.h"

namespace strata::lazy {

namespace {

// `result` carrying `check`, whose value is {the first position where `bad`
// holds (-1 when none), the element of `flat` there}: two small reductions.
Tensor WithCheck(const Tensor& result, const Tensor& flat, const Tensor& bad,
                 ir::IndexCheck check) {
  const int64_t n = flat.numel();
  Tensor position = arange(n);
  Tensor none = full({}, static_cast<double>(n), DType::kS64);
  Tensor first = min(where(bad, position, none));
  Tensor value = sum(where(eq(position, first), flat, zeros({}, DType::kS64)));
  Tensor found = where(lt(first, none), first, full({}, -1, DType::kS64));
  check.value = stack({found, value}).value();
  const ir::Value& v = result.value();
  return Tensor(ir::Value{
      v.node->WithIndexCheck(std::make_shared<const ir::IndexCheck>(std::move(check))), v.index});
}

}  // namespace

Tensor WithIndexCheck(const Tensor& result, const Tensor& index, int64_t bound,
                      const std::string& op, const std::string& range,
                      std::optional<int64_t> allowed) {
  if (!Context::Get().index_checks()) return result;
  const int64_t n = index.numel();
  if (n == 0) return result;  // nothing to read, nothing to check
  Tensor flat = reshape(astype(index, DType::kS64), {n});
  Tensor bad = logical_or(lt(flat, zeros({}, DType::kS64)),
                          ge(flat, full({}, static_cast<double>(bound), DType::kS64)));
  if (allowed)
    bad = logical_and(bad, ne(flat, full({}, static_cast<double>(*allowed), DType::kS64)));
  return WithCheck(
      result, flat, bad,
      {.op = op, .range = fmt::format("[0, {}) ({})", bound, range), .index_shape = index.shape()});
}

Tensor WithDivisorCheck(const Tensor& result, const Tensor& divisor, const std::string& op) {
  if (!Context::Get().index_checks() || !IsInteger(result.dtype())) return result;
  const int64_t n = divisor.numel();
  if (n == 0) return result;
  Tensor flat = reshape(astype(divisor, DType::kS64), {n});
  return WithCheck(result, flat, eq(flat, zeros({}, DType::kS64)),
                   {.op = op, .index_shape = divisor.shape(), .divisor = true});
}

}  // namespace strata::lazy
