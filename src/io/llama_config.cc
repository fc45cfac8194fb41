#include "strata/io/llama_config.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <system_error>
#include <utility>

#include "strata/core/error.h"
#include "strata/io/json_depth.h"
#include "strata/io/safetensors.h"

namespace strata::io {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A config.json is a few kilobytes; a bigger file is almost certainly the wrong one
// (model.safetensors passed by mistake), and reading it whole would take a while.
constexpr int64_t kMaxConfigBytes = 16 << 20;

constexpr std::pair<DType, std::string_view> kTorchDTypeNames[] = {
    {DType::kF32, "float32"},
    {DType::kF16, "float16"},
    {DType::kBF16, "bfloat16"},
    {DType::kF64, "float64"},
};

template <typename... Args>
[[noreturn]] void FailIn(std::string_view source, fmt::format_string<Args...> format,
                         Args&&... args) {
  Fail("[config] {}: {}", source, fmt::format(format, std::forward<Args>(args)...));
}

std::string ErrnoMessage(int err) {
  return std::error_code(err, std::generic_category()).message();
}

// A JSON value and its kind for an error message, cut short so garbage input stays readable:
// `"4" (string)`, `2048.0 (float)`, `null`.
std::string Found(const json& value) {
  if (value.is_null()) return "null";
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > 60) text = text.substr(0, 60) + "...";
  std::string_view kind = value.is_number_integer() ? "integer"
                          : value.is_number_float() ? "float"
                                                    : value.type_name();
  return fmt::format("{} ({})", text, kind);
}

// An integer that fits int64; nullopt for floats, huge unsigned values and non-numbers.
std::optional<int64_t> AsInt64(const json& value) {
  if (value.is_number_unsigned()) {
    uint64_t u = value.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  if (value.is_number_integer()) return value.get<int64_t>();
  return std::nullopt;
}

std::string TorchDTypeList() {
  std::string out;
  for (const auto& [dtype, name] : kTorchDTypeNames) {
    out += fmt::format("{}\"{}\"", out.empty() ? "" : ", ", name);
  }
  return out;
}

// Reads typed keys from the top-level object, naming the key in every error.
class KeyReader {
 public:
  KeyReader(const json& root, std::string_view source) : root_(root), source_(source) {}

  template <typename... Args>
  [[noreturn]] void FailAt(std::string_view key, fmt::format_string<Args...> format,
                           Args&&... args) const {
    FailIn(source_, "{}: {}", key, fmt::format(format, std::forward<Args>(args)...));
  }

  // The value at `key`, or nullptr when absent. For keys whose transformers default is None,
  // null means "use the default" too.
  const json* Find(std::string_view key, bool null_is_absent = false) const {
    auto it = root_.find(key);
    if (it == root_.end() || (null_is_absent && it->is_null())) return nullptr;
    return &*it;
  }

  int64_t PositiveInt(std::string_view key, const json& value) const {
    std::optional<int64_t> result = AsInt64(value);
    if (!result || *result <= 0) {
      FailAt(key, "expected a positive integer{}, got {}",
             result                       ? ""
             : value.is_number_unsigned() ? " below 2^63"
                                          : "",
             Found(value));
    }
    return *result;
  }

  int64_t RequiredSize(std::string_view key) const {
    const json* value = Find(key);
    if (value == nullptr) FailAt(key, "required key is missing (expected a positive integer)");
    return PositiveInt(key, *value);
  }

  std::optional<int64_t> OptionalSize(std::string_view key) const {
    const json* value = Find(key, /*null_is_absent=*/true);
    if (value == nullptr) return std::nullopt;
    return PositiveInt(key, *value);
  }

  int64_t SizeOr(std::string_view key, int64_t fallback) const {
    const json* value = Find(key);
    return value == nullptr ? fallback : PositiveInt(key, *value);
  }

  double PositiveNumber(std::string_view key, const json& value) const {
    // JSON has no inf or NaN literals, and nlohmann rejects numbers that overflow a double.
    if (!value.is_number() || value.get<double>() <= 0) {
      FailAt(key, "expected a positive number, got {}", Found(value));
    }
    return value.get<double>();
  }

  double PositiveNumberOr(std::string_view key, double fallback) const {
    const json* value = Find(key);
    return value == nullptr ? fallback : PositiveNumber(key, *value);
  }

  bool BoolOr(std::string_view key, bool fallback) const {
    const json* value = Find(key);
    if (value == nullptr) return fallback;
    if (!value->is_boolean()) FailAt(key, "expected true or false, got {}", Found(*value));
    return value->get<bool>();
  }

  std::string StringOr(std::string_view key, std::string_view fallback) const {
    const json* value = Find(key);
    if (value == nullptr) return std::string(fallback);
    if (!value->is_string()) FailAt(key, "expected a string, got {}", Found(*value));
    return value->get<std::string>();
  }

  // Absent gives `fallback`, null gives nullopt. Ids are not range-checked: old conversions
  // wrote pad_token_id -1.
  std::optional<int64_t> TokenId(std::string_view key, std::optional<int64_t> fallback) const {
    const json* value = Find(key);
    if (value == nullptr) return fallback;
    if (value->is_null()) return std::nullopt;
    if (value->is_array()) {
      FailAt(key, "expected one integer token id or null, got {} (lists of ids are not supported)",
             Found(*value));
    }
    std::optional<int64_t> id = AsInt64(*value);
    if (!id) FailAt(key, "expected an integer token id or null, got {}", Found(*value));
    return *id;
  }

 private:
  const json& root_;
  std::string_view source_;
};

json ParseJsonText(std::string_view text, std::string_view source) {
  // nlohmann stops at a NUL byte as if the input ended, which would hide what follows.
  if (size_t nul = text.find('\0'); nul != std::string_view::npos) {
    FailIn(source, "not valid JSON: NUL byte at byte {}", nul);
  }
  auto depth_limit = [&](int depth, json::parse_event_t, json&) {
    if (depth > kMaxJsonDepth) FailIn(source, "nests deeper than {} levels", kMaxJsonDepth);
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), depth_limit);
  } catch (const json::parse_error& e) {
    FailIn(source, "not valid JSON at byte {}: {}", e.byte, e.what());
  } catch (const json::exception& e) {  // e.g. a number too large for a double
    FailIn(source, "not valid JSON: {}", e.what());
  }
}

// Refuses configs of other model families, which would parse but mean something else.
void CheckModelIsLlama(const KeyReader& keys) {
  const json* architectures = keys.Find("architectures", /*null_is_absent=*/true);
  bool lists_llama = false;
  if (architectures != nullptr) {
    if (!architectures->is_array()) {
      keys.FailAt("architectures", "expected a list of class names, got {}", Found(*architectures));
    }
    for (const json& name : *architectures) {
      if (!name.is_string()) {
        keys.FailAt("architectures", "expected a list of class names, got {}",
                    Found(*architectures));
      }
      lists_llama |= name.get_ref<const std::string&>() == "LlamaForCausalLM";
    }
  }
  if (const json* model_type = keys.Find("model_type")) {
    if (!model_type->is_string() || model_type->get_ref<const std::string&>() != "llama") {
      keys.FailAt("model_type", "expected \"llama\" (only LlamaForCausalLM is supported), got {}",
                  Found(*model_type));
    }
  } else if (architectures != nullptr && !lists_llama) {
    keys.FailAt("architectures",
                "expected a list containing \"LlamaForCausalLM\" (model_type is absent), got {}",
                Found(*architectures));
  }
}

// rope_theta, from the top level or, as transformers >= 5 writes it, from rope_parameters.
// Any scaling is refused rather than ignored: it changes every position's rotation.
double ReadRopeTheta(const KeyReader& keys) {
  if (const json* scaling = keys.Find("rope_scaling", /*null_is_absent=*/true)) {
    keys.FailAt("rope_scaling", "expected null (RoPE scaling is not supported yet), got {}",
                Found(*scaling));
  }
  double theta = keys.PositiveNumberOr("rope_theta", 10000.0);
  const json* parameters = keys.Find("rope_parameters", /*null_is_absent=*/true);
  if (parameters == nullptr) return theta;
  if (!parameters->is_object()) {
    keys.FailAt("rope_parameters", "expected an object, got {}", Found(*parameters));
  }
  for (const auto& [key, value] : parameters->items()) {
    if (key == "rope_type" && value == "default") continue;
    if (key == "rope_theta") {
      double inner = keys.PositiveNumber("rope_parameters.rope_theta", value);
      if (keys.Find("rope_theta") != nullptr && inner != theta) {
        keys.FailAt("rope_parameters.rope_theta", "is {} but the top-level rope_theta is {}", inner,
                    theta);
      }
      theta = inner;
      continue;
    }
    keys.FailAt(fmt::format("rope_parameters.{}", key),
                "only rope_type \"default\" and rope_theta are supported (RoPE scaling is not "
                "supported yet), got {}",
                Found(value));
  }
  return theta;
}

DType ReadTorchDType(const KeyReader& keys) {
  // transformers >= 4.56 writes "dtype"; older versions "torch_dtype".
  const json* torch_dtype = keys.Find("torch_dtype", /*null_is_absent=*/true);
  const json* dtype = keys.Find("dtype", /*null_is_absent=*/true);
  if (torch_dtype != nullptr && dtype != nullptr && *torch_dtype != *dtype) {
    keys.FailAt("dtype", "is {} but torch_dtype is {}; expected them to agree", Found(*dtype),
                Found(*torch_dtype));
  }
  std::string_view key = torch_dtype != nullptr ? "torch_dtype" : "dtype";
  const json* value = torch_dtype != nullptr ? torch_dtype : dtype;
  if (value == nullptr) return DType::kF32;
  if (value->is_string()) {
    for (const auto& [d, name] : kTorchDTypeNames) {
      if (value->get_ref<const std::string&>() == name) return d;
    }
  }
  keys.FailAt(key, "expected one of {}, got {}", TorchDTypeList(), Found(*value));
}

// The checks that involve more than one field, or that a hand-built config can violate.
void Validate(const LlamaConfig& config, std::string_view source) {
  auto positive = [&](std::string_view key, int64_t value) {
    if (value <= 0) FailIn(source, "{}: expected a positive integer, got {}", key, value);
  };
  positive("vocab_size", config.vocab_size);
  positive("hidden_size", config.hidden_size);
  positive("intermediate_size", config.intermediate_size);
  positive("num_hidden_layers", config.num_hidden_layers);
  positive("num_attention_heads", config.num_attention_heads);
  positive("num_key_value_heads", config.num_key_value_heads);
  positive("head_dim", config.head_dim);
  positive("max_position_embeddings", config.max_position_embeddings);
  if (!std::isfinite(config.rms_norm_eps) || config.rms_norm_eps <= 0) {
    FailIn(source, "rms_norm_eps: expected a positive number, got {}", config.rms_norm_eps);
  }
  if (!std::isfinite(config.rope_theta) || config.rope_theta <= 0) {
    FailIn(source, "rope_theta: expected a positive number, got {}", config.rope_theta);
  }
  if (config.num_attention_heads % config.num_key_value_heads != 0) {
    FailIn(source, "num_key_value_heads: expected a divisor of num_attention_heads ({}), got {}",
           config.num_attention_heads, config.num_key_value_heads);
  }
  if (config.hidden_act != "silu") {
    FailIn(source, "hidden_act: expected \"silu\" (the only activation supported), got \"{}\"",
           config.hidden_act);
  }
}

std::string_view TorchDTypeName(DType dtype, std::string_view source) {
  for (const auto& [d, name] : kTorchDTypeNames) {
    if (d == dtype) return name;
  }
  FailIn(source, "torch_dtype: expected f32, f16, bf16 or f64, got {}", DTypeName(dtype));
}

// `source` names the config in validation errors.
std::string ToJsonFor(const LlamaConfig& config, std::string_view source) {
  Validate(config, source);
  auto token_id = [](const std::optional<int64_t>& id) { return id ? json(*id) : json(nullptr); };
  // nlohmann::json keeps keys sorted, as transformers writes them (sort_keys=True).
  json out = {
      {"architectures", json::array({"LlamaForCausalLM"})},
      {"attention_bias", config.attention_bias},
      {"bos_token_id", token_id(config.bos_token_id)},
      {"eos_token_id", token_id(config.eos_token_id)},
      {"head_dim", config.head_dim},
      {"hidden_act", config.hidden_act},
      {"hidden_size", config.hidden_size},
      {"intermediate_size", config.intermediate_size},
      {"max_position_embeddings", config.max_position_embeddings},
      {"mlp_bias", config.mlp_bias},
      {"model_type", "llama"},
      {"num_attention_heads", config.num_attention_heads},
      {"num_hidden_layers", config.num_hidden_layers},
      {"num_key_value_heads", config.num_key_value_heads},
      {"pad_token_id", token_id(config.pad_token_id)},
      {"rms_norm_eps", config.rms_norm_eps},
      {"rope_scaling", nullptr},
      {"rope_theta", config.rope_theta},
      {"tie_word_embeddings", config.tie_word_embeddings},
      {"torch_dtype", TorchDTypeName(config.torch_dtype, source)},
      {"vocab_size", config.vocab_size},
  };
  return out.dump(2) + "\n";
}

}  // namespace

LlamaConfig ParseLlamaConfig(std::string_view json_text, std::string_view source) {
  json root = ParseJsonText(json_text, source);
  if (!root.is_object()) FailIn(source, "expected a JSON object, got {}", Found(root));
  KeyReader keys(root, source);
  CheckModelIsLlama(keys);

  LlamaConfig config;
  config.vocab_size = keys.RequiredSize("vocab_size");
  config.hidden_size = keys.RequiredSize("hidden_size");
  config.intermediate_size = keys.RequiredSize("intermediate_size");
  config.num_hidden_layers = keys.RequiredSize("num_hidden_layers");
  config.num_attention_heads = keys.RequiredSize("num_attention_heads");
  config.num_key_value_heads =
      keys.OptionalSize("num_key_value_heads").value_or(config.num_attention_heads);
  if (std::optional<int64_t> head_dim = keys.OptionalSize("head_dim")) {
    config.head_dim = *head_dim;  // may differ from hidden_size / heads, as transformers allows
  } else if (config.hidden_size % config.num_attention_heads != 0) {
    keys.FailAt("hidden_size",
                "expected a multiple of num_attention_heads ({}) when head_dim is absent, got {}",
                config.num_attention_heads, config.hidden_size);
  } else {
    config.head_dim = config.hidden_size / config.num_attention_heads;
  }
  config.max_position_embeddings =
      keys.SizeOr("max_position_embeddings", config.max_position_embeddings);
  config.rms_norm_eps = keys.PositiveNumberOr("rms_norm_eps", config.rms_norm_eps);
  config.rope_theta = ReadRopeTheta(keys);
  config.tie_word_embeddings = keys.BoolOr("tie_word_embeddings", config.tie_word_embeddings);
  config.attention_bias = keys.BoolOr("attention_bias", config.attention_bias);
  config.mlp_bias = keys.BoolOr("mlp_bias", config.mlp_bias);
  config.hidden_act = keys.StringOr("hidden_act", config.hidden_act);
  config.torch_dtype = ReadTorchDType(keys);
  config.bos_token_id = keys.TokenId("bos_token_id", config.bos_token_id);
  config.eos_token_id = keys.TokenId("eos_token_id", config.eos_token_id);
  config.pad_token_id = keys.TokenId("pad_token_id", config.pad_token_id);
  Validate(config, source);
  return config;
}

LlamaConfig ReadLlamaConfig(const fs::path& file) {
  std::error_code ec;
  const fs::path path = fs::is_directory(file, ec) ? file / "config.json" : file;
  const std::string label = path.string();
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    FailIn(label, "cannot open: {}", ErrnoMessage(err));
  }
  struct stat info;
  if (::fstat(fd, &info) != 0) {
    int err = errno;
    ::close(fd);
    FailIn(label, "cannot stat: {}", ErrnoMessage(err));
  }
  if (!S_ISREG(info.st_mode) || info.st_size > kMaxConfigBytes) {
    ::close(fd);
    if (!S_ISREG(info.st_mode)) FailIn(label, "expected a regular file");
    FailIn(label, "is {} bytes, over the {}-byte limit for a config.json (wrong file?)",
           static_cast<int64_t>(info.st_size), kMaxConfigBytes);
  }
  std::string text(static_cast<size_t>(info.st_size), '\0');
  size_t filled = 0;
  while (filled < text.size()) {
    ssize_t n = ::read(fd, text.data() + filled, text.size() - filled);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      FailIn(label, "cannot read: {}", ErrnoMessage(err));
    }
    if (n == 0) break;  // truncated while reading: parse what is there
    filled += static_cast<size_t>(n);
  }
  ::close(fd);
  text.resize(filled);
  return ParseLlamaConfig(text, label);
}

std::string ToJson(const LlamaConfig& config) { return ToJsonFor(config, "<LlamaConfig>"); }

void WriteLlamaConfig(const fs::path& file, const LlamaConfig& config) {
  std::string text = ToJsonFor(config, file.string());  // validates before touching disk
  WriteFileAtomically(file.string(), {text});
}

}  // namespace strata::io
