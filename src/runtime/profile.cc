#include "strata/runtime/profile.h"

#include <fmt/core.h>

#include <algorithm>

namespace strata::runtime {

void KernelProfile::Add(std::string_view opcode, const Shape& shape, int64_t ns) {
  std::pair<std::string, std::string> key(opcode, shape.ToString());
  std::lock_guard<std::mutex> lock(mutex_);
  Entry& e = entries_[std::move(key)];
  e.ns += ns;
  ++e.count;
}

std::vector<KernelProfile::Row> KernelProfile::Rows() const {
  std::vector<Row> rows;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [key, e] : entries_) rows.push_back(Row{key.first, key.second, e.ns, e.count});
  }
  std::stable_sort(rows.begin(), rows.end(),
                   [](const Row& a, const Row& b) { return a.ns > b.ns; });
  return rows;
}

int64_t KernelProfile::total_ns() const {
  std::lock_guard<std::mutex> lock(mutex_);
  int64_t total = 0;
  for (const auto& [key, e] : entries_) total += e.ns;
  return total;
}

std::string KernelProfile::Report(size_t max_rows) const {
  std::vector<Row> rows = Rows();
  int64_t total = 0;
  for (const Row& r : rows) total += r.ns;
  std::string out = fmt::format("strata kernel profile: {:.1f} ms in kernels\n", total / 1e6);
  for (size_t i = 0; i < rows.size() && i < max_rows; ++i) {
    const Row& r = rows[i];
    out +=
        fmt::format("{:>6.1f}% {:>10.1f} ms {:>8} x  {:<22} {}\n",
                    total > 0 ? 100.0 * r.ns / total : 0.0, r.ns / 1e6, r.count, r.opcode, r.shape);
  }
  return out;
}

void KernelProfile::Reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  entries_.clear();
}

}  // namespace strata::runtime
