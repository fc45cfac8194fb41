// Execution traces in Chrome's trace-event JSON (opens in Perfetto and
// chrome://tracing): each sync's trace, lower, compile and execute stages,
// every kernel, every while loop and each of its iterations, on one track
// per thread.
//
// Recording is off by default and then costs one relaxed atomic load per
// span. STRATA_TRACE=file.json records from the start of the process and
// writes the file at exit (in a job started by mpirun each rank writes
// file.rank<N>.json). trace::Start() and trace::Stop(path) record a region
// from code.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

namespace strata::trace {

namespace internal {
extern std::atomic<bool> recording;
}

inline bool Enabled() { return internal::recording.load(std::memory_order_relaxed); }

// Starts recording, dropping whatever was recorded before.
void Start();
// Stops recording and writes the events since Start as JSON to `path`.
// Throws strata::Error if the file cannot be written.
void Stop(const std::string& path);
// The same, returned as text.
std::string StopToString();

// Names the calling thread's track ("main", "partition 1", ...).
void SetThreadName(std::string name);

// A complete event ("ph": "X") from construction to destruction, on the
// calling thread's track. `category` must outlive the recording (a literal).
class Span {
 public:
  Span(const char* category, std::string_view name) {
    if (Enabled()) Begin(category, name);
  }
  ~Span() {
    if (start_ns_ >= 0) End();
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

  bool active() const { return start_ns_ >= 0; }
  // Members of the event's "args" object, as JSON text without the braces
  // (`"shape": "f32[2,3]", "i": 4`). Only call while active().
  void set_args(std::string members) { args_ = std::move(members); }

 private:
  void Begin(const char* category, std::string_view name);
  void End();

  const char* category_ = nullptr;
  std::string name_;
  std::string args_;
  int64_t start_ns_ = -1;
};

// `text` as the inside of a JSON string (quotes, backslashes and control
// characters escaped).
std::string Escape(std::string_view text);

}  // namespace strata::trace
