// A Llama config.json, as `strata lm` and checkpoints read it: parsed and
// validated, then written as transformers writes it and parsed again, which
// must give the same configuration (the documented round trip).
#include <fmt/core.h>

#include <string_view>

#include "harnesses.h"
#include "strata/core/error.h"
#include "strata/io/llama_config.h"

namespace strata::fuzz {

void LlamaConfigJson(Bytes input) {
  std::string_view text(reinterpret_cast<const char*>(input.data()), input.size());
  io::LlamaConfig config = io::ParseLlamaConfig(text, "fuzz");
  std::string json;
  try {
    json = io::ToJson(config);
  } catch (const Error& e) {
    throw Finding(fmt::format("a config that parses does not write: {}", e.what()));
  }
  io::LlamaConfig again;
  try {
    again = io::ParseLlamaConfig(json, "written");
  } catch (const Error& e) {
    throw Finding(fmt::format("a written config does not parse: {}\n{}", e.what(), json));
  }
  if (!(again == config)) {
    throw Finding(fmt::format("writing and reading the config changes it:\n{}", json));
  }
}

}  // namespace strata::fuzz
