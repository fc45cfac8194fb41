// The one place strata reads its environment variables.
#include "strata/core/config.h"

#include <atomic>
#include <cctype>
#include <cstdlib>
#include <mutex>
#include <string>
#include <string_view>

#include "strata/core/error.h"

namespace strata {
namespace {

const char* Env(const char* name) {
  const char* v = std::getenv(name);  // NOLINT: the only reader of the environment
  return v;
}

long long Integer(const char* name, long long low, long long high, const char* what) {
  const char* env = Env(name);
  char* end = nullptr;
  const long long n = std::strtoll(env, &end, 10);
  if (end == env || *end != '\0' || n < low || n > high)
    Fail("[config] {} must be {}, got '{}'", name, what, env);
  return n;
}

// A switch: "1" / "true" / "yes" / "on" or "0" / "false" / "no" / "off"
// (any case); anything else is an error rather than a guess.
bool Switch(const char* name) {
  std::string v = Env(name);
  for (char& c : v) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  if (v == "0" || v == "false" || v == "no" || v == "off") return false;
  Fail("[config] {} must be 1 or 0 (true/false, yes/no, on/off), got '{}'", name, Env(name));
}

std::mutex config_mutex;
Config* process_config = nullptr;  // never freed: read until exit
std::atomic<bool> process_settings_read{false};

Config& ProcessConfig() {
  if (!process_config) process_config = new Config(Config::FromEnvironment());
  return *process_config;
}

}  // namespace

Config Config::FromEnvironment() {
  Config c;
  if (Env("STRATA_CPU_DEVICES"))
    c.cpu_devices =
        static_cast<int>(Integer("STRATA_CPU_DEVICES", 1, 1024, "an integer in [1, 1024]"));
  if (Env("STRATA_PROFILE")) c.profile = Switch("STRATA_PROFILE");
  // Fusion has two spellings: STRATA_FUSION=0 and STRATA_NO_FUSION=1.
  if (Env("STRATA_NO_FUSION")) c.fusion = !Switch("STRATA_NO_FUSION");
  if (Env("STRATA_FUSION")) {
    const bool fusion = Switch("STRATA_FUSION");
    if (Env("STRATA_NO_FUSION") && fusion != c.fusion)
      Fail("[config] STRATA_FUSION='{}' and STRATA_NO_FUSION='{}' disagree", Env("STRATA_FUSION"),
           Env("STRATA_NO_FUSION"));
    c.fusion = fusion;
  }
  if (Env("STRATA_OVERLAP_COLLECTIVES"))
    c.overlap_collectives = Switch("STRATA_OVERLAP_COLLECTIVES");
  if (const char* v = Env("STRATA_TRACE")) c.trace_path = v;
  if (const char* v = Env("STRATA_ISA")) c.isa = v;
  if (Env("STRATA_COLLECTIVE_TIMEOUT_MS")) {
    c.collective_timeout = std::chrono::milliseconds(
        Integer("STRATA_COLLECTIVE_TIMEOUT_MS", 1, 1LL << 40, "a positive number of milliseconds"));
  }
  if (Env("STRATA_PEER_TIMEOUT_MS")) {
    c.peer_timeout = std::chrono::milliseconds(Integer(
        "STRATA_PEER_TIMEOUT_MS", 0, 1LL << 40, "a number of milliseconds (0: not watched)"));
  }
  if (Env("STRATA_JOIN_TIMEOUT_MS")) {
    c.join_timeout = std::chrono::milliseconds(Integer(
        "STRATA_JOIN_TIMEOUT_MS", 0, 1LL << 40, "a number of milliseconds (0: wait forever)"));
  }
  if (const char* v = Env("STRATA_DUMP_DIR")) c.dump_dir = v;
  if (const char* v = Env("STRATA_CACHE_DIR")) c.cache_dir = v;
  if (Env("STRATA_INDEX_CHECKS")) c.index_checks = Switch("STRATA_INDEX_CHECKS");
  if (Env("STRATA_DEVICE_THREADS"))
    c.device_threads =
        static_cast<int>(Integer("STRATA_DEVICE_THREADS", 1, 1024, "an integer in [1, 1024]"));
  if (Env("STRATA_SPMD_TRACE")) c.spmd_trace = Switch("STRATA_SPMD_TRACE");
  if (const char* v = Env("OMPI_COMM_WORLD_RANK")) {
    c.launcher_rank = v;
  } else if (const char* p = Env("PMI_RANK")) {
    c.launcher_rank = p;
  }
  c.launched_by_mpi = LaunchedByMpi();
  return c;
}

bool LaunchedByMpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"}) {
    if (Env(v) != nullptr) return true;
  }
  return false;
}

Config GetConfig() {
  std::lock_guard<std::mutex> lock(config_mutex);
  return ProcessConfig();
}

void SetConfig(const Config& config) {
  std::lock_guard<std::mutex> lock(config_mutex);
  Config& current = ProcessConfig();
  if (process_settings_read.load()) {
    auto check = [](const char* field, bool same) {
      if (!same) {
        Fail(
            "[config] {} is read once per process, when the first kernel or client is made; "
            "set it before that (or in the environment)",
            field);
      }
    };
    check("cpu_devices", config.cpu_devices == current.cpu_devices);
    check("profile", config.profile == current.profile);
    check("isa", config.isa == current.isa);
  }
  if (config.trace_path != current.trace_path) {
    Fail(
        "[config] trace_path is read when strata loads, to trace the whole process; set "
        "STRATA_TRACE instead (or strata::trace::Start / Stop for a part of it)");
  }
  if (config.cpu_devices < 1 || config.cpu_devices > 1024)
    Fail("[config] cpu_devices must be in [1, 1024], got {}", config.cpu_devices);
  if (config.device_threads < 0 || config.device_threads > 1024)
    Fail("[config] device_threads must be in [0, 1024], got {}", config.device_threads);
  if (config.collective_timeout.count() < 1)
    Fail("[config] collective_timeout must be positive, got {} ms",
         config.collective_timeout.count());
  current = config;
}

void MarkProcessSettingsRead() { process_settings_read = true; }

}  // namespace strata
