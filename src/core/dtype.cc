#include "strata/core/dtype.h"

namespace strata {

std::string_view DTypeName(DType dtype) {
  switch (dtype) {
#define STRATA_DTYPE_NAME(e, name, size) \
  case DType::e:                         \
    return name;
    STRATA_DTYPES(STRATA_DTYPE_NAME)
#undef STRATA_DTYPE_NAME
  }
  return "?";
}

std::optional<DType> DTypeFromName(std::string_view name) {
#define STRATA_DTYPE_FROM(e, n, size) \
  if (name == n) return DType::e;
  STRATA_DTYPES(STRATA_DTYPE_FROM)
#undef STRATA_DTYPE_FROM
  return std::nullopt;
}

int64_t DTypeSize(DType dtype) {
  switch (dtype) {
#define STRATA_DTYPE_SIZE(e, name, size) \
  case DType::e:                         \
    return size;
    STRATA_DTYPES(STRATA_DTYPE_SIZE)
#undef STRATA_DTYPE_SIZE
  }
  return 0;
}

}  // namespace strata
