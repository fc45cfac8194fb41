// The persistent compile cache (STRATA_CACHE_DIR, Config::cache_dir): a
// program compiled in one process is written to disk as the module the
// passes made, and another process that misses on the same key reads it
// back instead of running the passes again (JAX's compilation cache,
// torch_xla's XLA_PERSISTENT_CACHE_PATH).
//
// An entry is `<dir>/<key>.hlo`: two header lines naming the format, the
// key, strata's version, the kernels' instruction set and an XXH3 checksum
// of the text below them, then the optimized module as HLO text. The key
// covers the graph hash and everything else the lazy cache keys on, plus
// the instruction set. A file that is damaged, written by another version
// or machine, or names another key is never loaded: a warning says why,
// and the program compiles (and is written again).
#pragma once

#include <memory>
#include <string>

#include "strata/ir/hash.h"
#include "strata/runtime/executable.h"

namespace strata::lazy {

// The entry's key: `key` (Context::CacheKey) and the kernels' ISA.
ir::Hash128 DiskCacheKey(const ir::Hash128& key);

// The executable cached under `key` in `dir`, or nullptr when there is
// none or it cannot be used (a warning on stderr then says why).
std::unique_ptr<runtime::Executable> LoadCompiled(const std::string& dir, const ir::Hash128& key);

// Writes `executable`'s module under `key` (atomically: a reader sees the
// whole file or none). A failure to write is a warning, never an error:
// the cache only saves time.
void StoreCompiled(const std::string& dir, const ir::Hash128& key,
                   const runtime::Executable& executable);

}  // namespace strata::lazy
