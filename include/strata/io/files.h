// Reading a whole file the user named (a corpus, a JSON file of a
// checkpoint), where the path may name a directory, a device or nothing, and
// making a directory the user named (an output or dump directory).
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace strata::io {

// The bytes of the regular file `path`. Anything else, or a read that fails,
// is a strata::Error "<prefix> cannot read '<path>': <why>" (a directory
// would otherwise surface as the standard library's own exception).
std::string ReadWholeFile(const std::filesystem::path& path, std::string_view prefix);

// Makes `path` and its missing parents. A part that is a file, a directory
// that cannot be made, or one that is not writable is a strata::Error
// "<prefix> cannot make '<path>': <why>", never the standard library's
// filesystem_error.
void MakeDirectories(const std::filesystem::path& path, std::string_view prefix);

}  // namespace strata::io
