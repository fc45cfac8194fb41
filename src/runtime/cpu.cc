#include "strata/runtime/cpu.h"

#include <atomic>
#include <cstdlib>
#include <string>

#include "strata/core/config.h"
#include "strata/core/error.h"

namespace strata::runtime {
namespace {

Isa Detect() {
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("fma")) {
    return __builtin_cpu_supports("avx512bf16") ? Isa::kAvx512Bf16 : Isa::kAvx512;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::kAvx2;
  return Isa::kPortable;
}

std::optional<Isa> IsaFromName(std::string_view name) {
  for (Isa isa : {Isa::kPortable, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Bf16}) {
    if (IsaName(isa) == name) return isa;
  }
  return std::nullopt;
}

void CheckSupported(Isa isa, std::string_view by) {
  if (static_cast<int>(isa) > static_cast<int>(CpuIsa())) {
    Fail("[runtime] {} asks for {} kernels, but this CPU runs at most {}", by, IsaName(isa),
         IsaName(CpuIsa()));
  }
}

// STRATA_ISA, read once; the CPU's own when unset.
Isa EnvironmentIsa() {
  static const Isa isa = [] {
    const std::string env = GetConfig().isa;
    MarkProcessSettingsRead();
    if (env.empty()) return CpuIsa();
    std::optional<Isa> named = IsaFromName(env);
    if (!named)
      Fail("[runtime] STRATA_ISA must be portable, avx2, avx512 or avx512bf16, got '{}'", env);
    CheckSupported(*named, "STRATA_ISA");
    return *named;
  }();
  return isa;
}

// Per process: the kernels are chosen for the CPU this process runs on;
// CapIsa lowers that for every context at once (a test or benchmark asking
// for a narrower variant).
constexpr int kNoCap = -1;
std::atomic<int> cap{kNoCap};

}  // namespace

std::string_view IsaName(Isa isa) {
  switch (isa) {
    case Isa::kPortable:
      return "portable";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAvx512Bf16:
      return "avx512bf16";
  }
  return "portable";
}

Isa CpuIsa() {
  static const Isa isa = Detect();
  return isa;
}

Isa KernelIsa() {
  int capped = cap.load(std::memory_order_relaxed);
  return capped == kNoCap ? EnvironmentIsa() : static_cast<Isa>(capped);
}

std::vector<Isa> SupportedIsas() {
  std::vector<Isa> isas;
  for (int i = 0; i <= static_cast<int>(CpuIsa()); ++i) isas.push_back(static_cast<Isa>(i));
  return isas;
}

void CapIsa(std::optional<Isa> isa) {
  if (isa) CheckSupported(*isa, "CapIsa");
  cap.store(isa ? static_cast<int>(*isa) : kNoCap, std::memory_order_relaxed);
}

namespace {
constexpr int kCpuChoice = -1;
std::atomic<int> paired_override{kCpuChoice};
}  // namespace

bool PairedBf16Dots() {
  if (KernelIsa() != Isa::kAvx512Bf16) return false;
  static const bool cpu_pairs = !__builtin_cpu_is("intel");
  const int forced = paired_override.load(std::memory_order_relaxed);
  return forced == kCpuChoice ? cpu_pairs : forced != 0;
}

void PairBf16Dots(std::optional<bool> paired) {
  paired_override.store(paired ? static_cast<int>(*paired) : kCpuChoice, std::memory_order_relaxed);
}

}  // namespace strata::runtime
