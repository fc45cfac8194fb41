#include "strata/io/files.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <system_error>

#include "strata/core/error.h"

namespace strata::io {

std::string ReadWholeFile(const std::filesystem::path& path, std::string_view prefix) {
  std::error_code error;
  const std::filesystem::file_status status = std::filesystem::status(path, error);
  if (error) Fail("{} cannot read '{}': {}", prefix, path.string(), error.message());
  if (!std::filesystem::is_regular_file(status)) {
    Fail("{} cannot read '{}': {}", prefix, path.string(),
         std::filesystem::is_directory(status) ? "it is a directory" : "it is not a regular file");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) Fail("{} cannot read '{}': {}", prefix, path.string(), std::strerror(errno));
  try {
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (in.bad()) Fail("{} cannot read '{}': a read failed", prefix, path.string());
    return text;
  } catch (const std::ios_base::failure& e) {  // the stream buffer's own, e.g. EISDIR
    Fail("{} cannot read '{}': {}", prefix, path.string(), e.what());
  }
}

}  // namespace strata::io
