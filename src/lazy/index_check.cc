#include "strata/lazy/index_check.h"

#include <fmt/core.h>

#include "strata/lazy/context.h"
#include "strata/lazy/ops.h"

namespace strata::lazy {

Tensor WithIndexCheck(const Tensor& result, const Tensor& index, int64_t bound,
                      const std::string& op, const std::string& range,
                      std::optional<int64_t> allowed) {
  if (!Context::Get().index_checks()) return result;
  const int64_t n = index.numel();
  if (n == 0) return result;  // nothing to read, nothing to check
  // The first position holding an index out of range (n when none), and
  // the index there: two small reductions over the indices.
  Tensor flat = reshape(astype(index, DType::kS64), {n});
  Tensor bad = logical_or(lt(flat, zeros({}, DType::kS64)),
                          ge(flat, full({}, static_cast<double>(bound), DType::kS64)));
  if (allowed)
    bad = logical_and(bad, ne(flat, full({}, static_cast<double>(*allowed), DType::kS64)));
  Tensor position = arange(n);
  Tensor none = full({}, static_cast<double>(n), DType::kS64);
  Tensor first = min(where(bad, position, none));
  Tensor value = sum(where(eq(position, first), flat, zeros({}, DType::kS64)));
  Tensor found = where(lt(first, none), first, full({}, -1, DType::kS64));
  auto check = std::make_shared<ir::IndexCheck>(ir::IndexCheck{
      .value = stack({found, value}).value(),
      .op = op,
      .range = fmt::format("[0, {}) ({})", bound, range),
      .index_shape = index.shape(),
  });
  const ir::Value& v = result.value();
  return Tensor(ir::Value{v.node->WithIndexCheck(std::move(check)), v.index});
}

}  // namespace strata::lazy
