// Reading a whole file the user named (a corpus, a JSON file of a
// checkpoint), where the path may name a directory, a device or nothing.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace strata::io {

// The bytes of the regular file `path`. Anything else, or a read that fails,
// is a strata::Error "<prefix> cannot read '<path>': <why>" (a directory
// would otherwise surface as the standard library's own exception).
std::string ReadWholeFile(const std::filesystem::path& path, std::string_view prefix);

}  // namespace strata::io
