// JSON files of checkpoints, read with a nesting limit: errors name the file.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>

#include "strata/core/error.h"
#include "strata/io/files.h"
#include "strata/io/json_depth.h"

namespace strata::train {

inline nlohmann::json ReadJsonFile(const std::filesystem::path& path) {
  using json = nlohmann::json;
  const std::string text = io::ReadWholeFile(path, "[train]");
  auto depth_limit = [&](int depth, json::parse_event_t, json&) {
    if (depth > io::kMaxJsonDepth) {
      Fail("[train] '{}' nests deeper than {} levels", path.string(), io::kMaxJsonDepth);
    }
    return true;
  };
  try {
    return json::parse(text, depth_limit);
  } catch (const json::exception& e) {
    Fail("[train] '{}' is not valid JSON: {}", path.string(), e.what());
  }
}

}  // namespace strata::train
