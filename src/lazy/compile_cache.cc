#include "compile_cache.h"

#include <fmt/core.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "context_entry.h"
#include "strata/compiler/compile.h"
#include "strata/hlo/text.h"
#include "strata/runtime/cpu.h"

namespace strata::lazy {

namespace {

constexpr std::string_view kFormat = "// strata compile cache 1";

std::string Checksum(std::string_view text) {
  return ir::HashBuilder().AddString(text).Finish().ToString();
}

std::string HeaderOf(const ir::Hash128& key, std::string_view body) {
  return fmt::format("{}\n// key {} version {} isa {} checksum {}\n", kFormat, key.ToString(),
                     context_detail::kVersion, runtime::IsaName(runtime::KernelIsa()),
                     Checksum(body));
}

std::filesystem::path EntryPath(const std::string& dir, const ir::Hash128& key) {
  return std::filesystem::path(dir) / (key.ToString() + ".hlo");
}

void Warn(const std::filesystem::path& path, std::string_view why) {
  fmt::print(stderr, "strata: warning: [compile cache] not using {}: {}; compiling instead\n",
             path.string(), why);
}

}  // namespace

ir::Hash128 DiskCacheKey(const ir::Hash128& key) {
  return ir::HashBuilder()
      .AddHash(key)
      .AddString(runtime::IsaName(runtime::KernelIsa()))
      .AddString(kFormat)
      .Finish();
}

std::unique_ptr<runtime::Executable> LoadCompiled(const std::string& dir, const ir::Hash128& key) {
  const std::filesystem::path path = EntryPath(dir, key);
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error)) return nullptr;  // a miss
  std::ifstream in(path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  if (!in) {
    Warn(path, "it cannot be read");
    return nullptr;
  }
  const std::string text = bytes.str();
  // The two header lines, then the module.
  const size_t first = text.find('\n');
  const size_t second = first == std::string::npos ? first : text.find('\n', first + 1);
  if (second == std::string::npos || text.compare(0, first, kFormat) != 0) {
    Warn(path, "it is not a strata compile cache entry of this format");
    return nullptr;
  }
  const std::string_view body = std::string_view(text).substr(second + 1);
  if (text.substr(0, second + 1) != HeaderOf(key, body)) {
    Warn(path,
         "its header does not match (another key, strata version or instruction set, or a "
         "damaged file whose checksum differs)");
    return nullptr;
  }
  try {
    std::unique_ptr<hlo::Module> module = hlo::ParseModule(body);
    compiler::CompileOptions options;
    options.run_passes = false;  // the module is what the passes made
    return compiler::Compile(*module, options);
  } catch (const Error& e) {
    Warn(path, e.what());
    return nullptr;
  }
}

void StoreCompiled(const std::string& dir, const ir::Hash128& key,
                   const runtime::Executable& executable) {
  const std::filesystem::path path = EntryPath(dir, key);
  const std::string body = hlo::ToText(executable.module());
  const std::filesystem::path temporary =
      path.string() + fmt::format(".tmp{}", static_cast<int64_t>(getpid()));
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out << HeaderOf(key, body) << body;
    out.flush();
    if (!out) {
      fmt::print(stderr, "strata: warning: [compile cache] cannot write {}\n", temporary.string());
      std::filesystem::remove(temporary, error);
      return;
    }
  }
  std::filesystem::rename(temporary, path, error);
  if (error) {
    fmt::print(stderr, "strata: warning: [compile cache] cannot write {}: {}\n", path.string(),
               error.message());
    std::filesystem::remove(temporary, error);
  }
}

}  // namespace strata::lazy
