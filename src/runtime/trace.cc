#include "strata/runtime/trace.h"

#include <fmt/format.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <mutex>
#include <vector>

#include "strata/core/config.h"
#include "strata/core/error.h"

namespace strata::trace {

namespace internal {
std::atomic<bool> recording{false};
}

namespace {

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct Event {
  const char* category;
  std::string name, args;
  int64_t start_ns, duration_ns;
};

// One per thread that recorded something; the registry keeps it after the
// thread ends, so a pool worker's events survive the pool.
struct Track {
  int64_t tid = 0;
  std::string name;
  std::mutex mutex;  // the owner appends, Stop reads
  std::vector<Event> events;
};

struct Registry {
  std::mutex mutex;
  std::vector<std::shared_ptr<Track>> tracks;
  int64_t origin_ns = NowNs();  // ts 0 of the file
};

// Per process: a trace file is one process's time line, every thread of
// every context on it (Chrome's trace format has one per process).
Registry& TheRegistry() {
  static Registry* registry = new Registry;  // never destroyed: spans may end during exit
  return *registry;
}

Track& MyTrack() {
  thread_local std::shared_ptr<Track> track = [] {
    auto t = std::make_shared<Track>();
    t->tid = static_cast<int64_t>(::syscall(SYS_gettid));
    t->name = t->tid == ::getpid() ? "main" : fmt::format("thread {}", t->tid);
    Registry& r = TheRegistry();
    std::lock_guard<std::mutex> lock(r.mutex);
    r.tracks.push_back(t);
    return t;
  }();
  return *track;
}

std::string Collect() {
  internal::recording.store(false);
  Registry& r = TheRegistry();
  std::lock_guard<std::mutex> lock(r.mutex);
  const int64_t pid = ::getpid();
  std::string out = "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  bool first = true;
  auto add = [&](const std::string& event) {
    out += first ? "" : ",\n";
    out += event;
    first = false;
  };
  add(fmt::format(R"({{"ph": "M", "name": "process_name", "pid": {}, "tid": 0, )"
                  R"("args": {{"name": "strata"}}}})",
                  pid));
  for (const auto& track : r.tracks) {
    std::lock_guard<std::mutex> track_lock(track->mutex);
    if (track->events.empty()) continue;
    add(fmt::format(R"({{"ph": "M", "name": "thread_name", "pid": {}, "tid": {}, )"
                    R"("args": {{"name": "{}"}}}})",
                    pid, track->tid, Escape(track->name)));
    for (const Event& e : track->events) {
      add(fmt::format(R"({{"ph": "X", "cat": "{}", "name": "{}", "pid": {}, "tid": {}, )"
                      R"("ts": {:.3f}, "dur": {:.3f}, "args": {{{}}}}})",
                      e.category, Escape(e.name), pid, track->tid,
                      static_cast<double>(e.start_ns - r.origin_ns) / 1e3,
                      static_cast<double>(e.duration_ns) / 1e3, e.args));
    }
    track->events.clear();
  }
  out += "\n]}\n";
  return out;
}

// STRATA_TRACE=path: record the whole process, write at exit.
std::string& EnvironmentPath() {
  static std::string* path = new std::string;
  return *path;
}

struct FromEnvironment {
  FromEnvironment() {
    // At load, before main: a malformed variable is not thrown here (it would
    // terminate the process) but at the first use of the configuration.
    Config config;
    try {
      config = GetConfig();
    } catch (const Error&) {
      return;
    }
    if (config.trace_path.empty()) return;
    std::string p = config.trace_path;
    const std::string& rank = config.launcher_rank;
    if (!rank.empty()) {
      const size_t dot = p.rfind('.');
      const std::string suffix = fmt::format(".rank{}", rank);
      if (dot != std::string::npos && p.find('/', dot) == std::string::npos) {
        p.insert(dot, suffix);
      } else {
        p += suffix;
      }
    }
    EnvironmentPath() = p;
    TheRegistry();
    internal::recording.store(true);
    std::atexit([] {
      try {
        Stop(EnvironmentPath());
      } catch (const std::exception& e) {
        std::fprintf(stderr, "strata: STRATA_TRACE: %s\n", e.what());
      }
    });
  }
};
const FromEnvironment from_environment;

}  // namespace

void Start() {
  Registry& r = TheRegistry();
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    for (const auto& track : r.tracks) {
      std::lock_guard<std::mutex> track_lock(track->mutex);
      track->events.clear();
    }
    r.origin_ns = NowNs();
  }
  internal::recording.store(true);
}

std::string StopToString() { return Collect(); }

void Stop(const std::string& path) {
  std::string text = Collect();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) Fail("[trace] cannot write the trace to '{}'", path);
}

void SetThreadName(std::string name) {
  Track& track = MyTrack();
  std::lock_guard<std::mutex> lock(track.mutex);
  track.name = std::move(name);
}

void Span::Begin(const char* category, std::string_view name) {
  category_ = category;
  name_ = name;
  start_ns_ = NowNs();
}

void Span::End() {
  const int64_t end = NowNs();
  if (!Enabled()) return;  // stopped meanwhile
  Track& track = MyTrack();
  std::lock_guard<std::mutex> lock(track.mutex);
  track.events.push_back(
      Event{category_, std::move(name_), std::move(args_), start_ns_, end - start_ns_});
}

std::string Escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
        } else {
          out += c;
        }
    }
  }
  return out;
}

}  // namespace strata::trace
