// Every setting strata takes from the environment, read in one place into
// typed fields (docs/configuration.md lists them: name, meaning, default).
//
// The process holds one Config (GetConfig), read from the environment at
// first use; SetConfig replaces it. A lazy Context takes its own copy when
// it is made and reads its fields from that (dump_dir, index_checks,
// device_threads), so two contexts may differ. The settings below the
// context (the default client's devices and profile, the kernels'
// instruction set) are per process by nature: they are read once, when the
// default client or the first kernel is made, and changing them after that
// is an Error (MarkProcessSettingsRead). The trace file is read when the
// library loads (it traces the whole process): only the environment sets it.
#pragma once

#include <chrono>
#include <string>

namespace strata {

struct Config {
  int cpu_devices = 1;   // STRATA_CPU_DEVICES: virtual devices of the default client
  bool profile = false;  // STRATA_PROFILE (set): per-kernel profile printed at exit
  bool fusion = true;    // STRATA_NO_FUSION (set): compile without fusion
  // STRATA_OVERLAP_COLLECTIVES (0: off): all-gathers and all-reduces run
  // while the program computes (compiler::OverlapCollectives)
  bool overlap_collectives = true;
  std::string trace_path;  // STRATA_TRACE: Chrome trace file ("": none)
  std::string isa;         // STRATA_ISA: portable, avx2, avx512, avx512bf16 ("": the CPU's)
  std::chrono::milliseconds collective_timeout{300000};  // STRATA_COLLECTIVE_TIMEOUT_MS
  std::chrono::milliseconds peer_timeout{20000};         // STRATA_PEER_TIMEOUT_MS (0: not watched)
  std::chrono::milliseconds join_timeout{30000};         // STRATA_JOIN_TIMEOUT_MS (0: wait forever)
  std::string dump_dir;          // STRATA_DUMP_DIR: each compiled graph's HLO written there
  std::string cache_dir;         // STRATA_CACHE_DIR: the persistent compile cache ("": none)
  bool index_checks = true;      // STRATA_INDEX_CHECKS (0: off): gathers check their indices
  int device_threads = 0;        // STRATA_DEVICE_THREADS: threads per mesh device (0: shared out)
  bool spmd_trace = false;       // STRATA_SPMD_TRACE (set): log sharding propagation
  std::string launcher_rank;     // OMPI_COMM_WORLD_RANK or PMI_RANK: names per-rank trace files
  bool launched_by_mpi = false;  // OMPI_COMM_WORLD_SIZE, PMIX_RANK, PMI_RANK or PMI_SIZE set

  // The environment's settings; a malformed value is an Error naming the
  // variable, what it must be and what it is.
  static Config FromEnvironment();
  bool operator==(const Config&) const = default;
};

// A copy: another thread may SetConfig meanwhile.
Config GetConfig();
// Replaces the process's Config; an Error when it changes a per-process
// setting that has already been read.
void SetConfig(const Config& config);
// Whether an MPI launcher started the process (Config::launched_by_mpi),
// read on its own: it never throws, so error paths may ask it even when
// another variable is malformed.
bool LaunchedByMpi();
// Called where the per-process settings are first read (the default client,
// the kernel instruction set, the trace file).
void MarkProcessSettingsRead();

}  // namespace strata
