// Where kernel time goes: the total time and count of every kernel a client
// runs, per opcode and result shape. A client adds to the profile it is
// given (Client::set_profile); STRATA_PROFILE=1 gives the default client one
// that prints at exit. A developer's tool: it adds a clock read per kernel.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "strata/core/shape.h"

namespace strata::runtime {

class KernelProfile {
 public:
  struct Row {
    std::string opcode;
    std::string shape;  // the kernel's result
    int64_t ns = 0;     // total time in this kernel
    int64_t count = 0;  // times it ran
  };

  // Safe to call from many threads at once.
  void Add(std::string_view opcode, const Shape& shape, int64_t ns);
  // Every row, largest total time first.
  std::vector<Row> Rows() const;
  int64_t total_ns() const;
  // The rows as a table of at most `max_rows` lines under a total.
  std::string Report(size_t max_rows = 60) const;
  void Reset();

 private:
  struct Entry {
    int64_t ns = 0, count = 0;
  };
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, std::string>, Entry> entries_;
};

}  // namespace strata::runtime
