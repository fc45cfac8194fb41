// 128-bit structural hashes (XXH3-128) for the lazy IR.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace strata::ir {

struct Hash128 {
  uint64_t low = 0, high = 0;
  bool operator==(const Hash128&) const = default;
  bool operator<(const Hash128& o) const { return high != o.high ? high < o.high : low < o.low; }
  std::string ToString() const;  // 32 hex digits
};

struct Hash128Hasher {
  size_t operator()(const Hash128& h) const { return static_cast<size_t>(h.low ^ (h.high * 0x9e3779b97f4a7c15ull)); }
};

// Collects bytes and hashes them once: cheaper than a streaming state for
// the few dozen bytes a node contributes.
class HashBuilder {
 public:
  HashBuilder() { bytes_.reserve(128); }
  template <typename T>
    requires std::is_trivially_copyable_v<T>
  HashBuilder& Add(const T& value) {
    const auto* p = reinterpret_cast<const uint8_t*>(&value);
    bytes_.insert(bytes_.end(), p, p + sizeof(T));
    return *this;
  }
  template <typename T>
  HashBuilder& AddSpan(std::span<const T> values) {
    Add<uint64_t>(values.size());
    const auto* p = reinterpret_cast<const uint8_t*>(values.data());
    bytes_.insert(bytes_.end(), p, p + values.size_bytes());
    return *this;
  }
  HashBuilder& AddString(std::string_view s) {
    Add<uint64_t>(s.size());
    bytes_.insert(bytes_.end(), s.begin(), s.end());
    return *this;
  }
  HashBuilder& AddHash(const Hash128& h) { return Add(h.low).Add(h.high); }
  Hash128 Finish() const;

 private:
  std::vector<uint8_t> bytes_;
};

Hash128 HashBytes(const void* data, size_t size);

}  // namespace strata::ir
