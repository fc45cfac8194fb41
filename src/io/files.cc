#include "strata/io/files.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <system_error>

#include <unistd.h>

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

void MakeDirectories(const std::filesystem::path& path, std::string_view prefix) {
  for (std::filesystem::path part = path; !part.empty(); part = part.parent_path()) {
    std::error_code error;
    if (std::filesystem::exists(part, error) && !std::filesystem::is_directory(part, error)) {
      Fail("{} cannot make '{}': '{}' is a file, not a directory", prefix, path.string(),
           part.string());
    }
    if (part == part.parent_path()) break;
  }
  std::error_code error;
  std::filesystem::create_directories(path, error);
  if (error) Fail("{} cannot make '{}': {}", prefix, path.string(), error.message());
  if (::access(path.c_str(), W_OK | X_OK) != 0) {
    Fail("{} cannot write into '{}': {}", prefix, path.string(), std::strerror(errno));
  }
}

}  // namespace strata::io
