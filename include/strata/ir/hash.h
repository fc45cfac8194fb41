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
  size_t operator()(const Hash128& h) const {
    return static_cast<size_t>(h.low ^ (h.high * 0x9e3779b97f4a7c15ull));
  }
};

// Collects bytes and hashes them once: cheaper than a streaming state for
// the few dozen bytes a node contributes. Small inputs stay on the stack.
class HashBuilder {
 public:
  HashBuilder() = default;
  HashBuilder(const HashBuilder&) = delete;
  HashBuilder& operator=(const HashBuilder&) = delete;
  template <typename T>
  requires std::is_trivially_copyable_v<T> HashBuilder& Add(const T& value) {
    Append(&value, sizeof(T));
    return *this;
  }
  template <typename T>
  HashBuilder& AddSpan(std::span<const T> values) {
    Add<uint64_t>(values.size());
    Append(values.data(), values.size_bytes());
    return *this;
  }
  HashBuilder& AddString(std::string_view s) {
    Add<uint64_t>(s.size());
    Append(s.data(), s.size());
    return *this;
  }
  HashBuilder& AddHash(const Hash128& h) { return Add(h.low).Add(h.high); }
  Hash128 Finish() const;

 private:
  void Append(const void* data, size_t size) {
    if (size == 0) return;  // an empty span's data() may be null: memcpy must not see it
    if (size_ + size <= sizeof(inline_) && heap_.empty()) {
      std::memcpy(inline_ + size_, data, size);
    } else {
      if (heap_.empty()) heap_.assign(inline_, inline_ + size_);
      const auto* p = static_cast<const uint8_t*>(data);
      heap_.insert(heap_.end(), p, p + size);
    }
    size_ += size;
  }
  uint8_t inline_[256];
  size_t size_ = 0;
  std::vector<uint8_t> heap_;
};

Hash128 HashBytes(const void* data, size_t size);

}  // namespace strata::ir
