#include "strata/ir/hash.h"

#include <fmt/format.h>
#include <xxhash.h>

namespace strata::ir {

std::string Hash128::ToString() const { return fmt::format("{:016x}{:016x}", high, low); }

Hash128 HashBytes(const void* data, size_t size) {
  XXH128_hash_t h = XXH3_128bits(data, size);
  return {h.low64, h.high64};
}

Hash128 HashBuilder::Finish() const {
  return heap_.empty() ? HashBytes(inline_, size_) : HashBytes(heap_.data(), heap_.size());
}

}  // namespace strata::ir
