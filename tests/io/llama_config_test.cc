#include "strata/io/llama_config.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <nlohmann/json.hpp>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "strata/core/error.h"

namespace strata::io {

// Found by gtest through argument-dependent lookup, so it must live in strata::io itself.
static void PrintTo(const LlamaConfig& c, std::ostream* os) {
  auto id = [](const std::optional<int64_t>& v) { return v ? std::to_string(*v) : "null"; };
  *os << fmt::format(
      "{{vocab {}, hidden {}, intermediate {}, layers {}, heads {}, kv_heads {}, head_dim {}, "
      "max_pos {}, eps {}, theta {}, tie {}, attn_bias {}, mlp_bias {}, act {}, dtype {}, "
      "bos {}, eos {}, pad {}}}",
      c.vocab_size, c.hidden_size, c.intermediate_size, c.num_hidden_layers, c.num_attention_heads,
      c.num_key_value_heads, c.head_dim, c.max_position_embeddings, c.rms_norm_eps, c.rope_theta,
      c.tie_word_embeddings, c.attention_bias, c.mlp_bias, c.hidden_act, DTypeName(c.torch_dtype),
      id(c.bos_token_id), id(c.eos_token_id), id(c.pad_token_id));
}

namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// The config.json of TinyLlama/TinyLlama-1.1B-Chat-v1.0 as transformers 4.35 wrote it.
constexpr std::string_view kTinyLlamaJson = R"({
  "architectures": [
    "LlamaForCausalLM"
  ],
  "attention_bias": false,
  "bos_token_id": 1,
  "eos_token_id": 2,
  "hidden_act": "silu",
  "hidden_size": 2048,
  "initializer_range": 0.02,
  "intermediate_size": 5632,
  "max_position_embeddings": 2048,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 22,
  "num_key_value_heads": 4,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": null,
  "rope_theta": 10000.0,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.35.0",
  "use_cache": true,
  "vocab_size": 32000
}
)";

LlamaConfig TinyLlama() {
  LlamaConfig c;
  c.vocab_size = 32000;
  c.hidden_size = 2048;
  c.intermediate_size = 5632;
  c.num_hidden_layers = 22;
  c.num_attention_heads = 32;
  c.num_key_value_heads = 4;
  c.head_dim = 64;  // 2048 / 32
  c.max_position_embeddings = 2048;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 10000.0;
  c.tie_word_embeddings = false;
  c.attention_bias = false;
  c.mlp_bias = false;
  c.hidden_act = "silu";
  c.torch_dtype = DType::kBF16;
  c.bos_token_id = 1;
  c.eos_token_id = 2;
  c.pad_token_id = std::nullopt;
  return c;
}

// The message of the strata::Error `body` throws, or "<no error>".
std::string ErrorOf(const std::function<void()>& body) {
  try {
    body();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

// The TinyLlama config with `key` set to the JSON `value`, or removed when `value` is empty.
std::string TinyLlamaWith(const std::string& key, const std::string& value) {
  nlohmann::json config = nlohmann::json::parse(kTinyLlamaJson);
  if (value.empty()) {
    config.erase(key);
  } else {
    config[key] = nlohmann::json::parse(value);
  }
  return config.dump(2);
}

std::string ReadText(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void WriteText(const fs::path& path, std::string_view text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

std::set<std::string> Listing(const fs::path& dir) {
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.insert(entry.path().filename());
  return names;
}

TEST(LlamaConfigParse, TinyLlama) { EXPECT_EQ(ParseLlamaConfig(kTinyLlamaJson), TinyLlama()); }

TEST(LlamaConfigParse, DefaultsForMissingKeys) {
  LlamaConfig c = ParseLlamaConfig(R"({"vocab_size": 100, "hidden_size": 48,
      "intermediate_size": 96, "num_hidden_layers": 3, "num_attention_heads": 6})");
  EXPECT_EQ(c.vocab_size, 100);
  EXPECT_EQ(c.hidden_size, 48);
  EXPECT_EQ(c.intermediate_size, 96);
  EXPECT_EQ(c.num_hidden_layers, 3);
  EXPECT_EQ(c.num_attention_heads, 6);
  EXPECT_EQ(c.num_key_value_heads, 6);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.max_position_embeddings, 2048);
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_FALSE(c.mlp_bias);
  EXPECT_EQ(c.hidden_act, "silu");
  EXPECT_EQ(c.torch_dtype, DType::kF32);
  EXPECT_EQ(c.bos_token_id, 1);  // transformers' LlamaConfig defaults
  EXPECT_EQ(c.eos_token_id, 2);
  EXPECT_EQ(c.pad_token_id, std::nullopt);
}

TEST(LlamaConfigParse, NullMeansDefaultWhereTransformersDefaultsToNone) {
  LlamaConfig c = ParseLlamaConfig(R"({"vocab_size": 100, "hidden_size": 48,
      "intermediate_size": 96, "num_hidden_layers": 3, "num_attention_heads": 6,
      "num_key_value_heads": null, "head_dim": null, "torch_dtype": null, "rope_scaling": null,
      "architectures": null, "bos_token_id": null, "eos_token_id": null, "pad_token_id": null})");
  EXPECT_EQ(c.num_key_value_heads, 6);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.torch_dtype, DType::kF32);
  EXPECT_EQ(c.bos_token_id, std::nullopt);
  EXPECT_EQ(c.eos_token_id, std::nullopt);
  EXPECT_EQ(c.pad_token_id, std::nullopt);
}

TEST(LlamaConfigParse, EveryFieldSetToSomethingOtherThanItsDefault) {
  LlamaConfig c = ParseLlamaConfig(R"({
    "model_type": "llama", "vocab_size": 7, "hidden_size": 10, "intermediate_size": 11,
    "num_hidden_layers": 12, "num_attention_heads": 6, "num_key_value_heads": 2, "head_dim": 5,
    "max_position_embeddings": 13, "rms_norm_eps": 0.25, "rope_theta": 500000,
    "tie_word_embeddings": true, "attention_bias": true, "mlp_bias": true, "hidden_act": "silu",
    "torch_dtype": "float64", "bos_token_id": 3, "eos_token_id": 4, "pad_token_id": -1})");
  EXPECT_EQ(c.vocab_size, 7);
  EXPECT_EQ(c.hidden_size, 10);
  EXPECT_EQ(c.intermediate_size, 11);
  EXPECT_EQ(c.num_hidden_layers, 12);
  EXPECT_EQ(c.num_attention_heads, 6);
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_EQ(c.head_dim, 5);  // explicit, so 10 need not be 6 * 5
  EXPECT_EQ(c.max_position_embeddings, 13);
  EXPECT_EQ(c.rms_norm_eps, 0.25);
  EXPECT_EQ(c.rope_theta, 500000.0);  // an integer is a fine number
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_TRUE(c.attention_bias);
  EXPECT_TRUE(c.mlp_bias);
  EXPECT_EQ(c.torch_dtype, DType::kF64);
  EXPECT_EQ(c.bos_token_id, 3);
  EXPECT_EQ(c.eos_token_id, 4);
  EXPECT_EQ(c.pad_token_id, -1);  // old LLaMA conversions wrote this
}

TEST(LlamaConfigParse, TorchDTypeNames) {
  const std::pair<const char*, DType> cases[] = {
      {"float32", DType::kF32},
      {"float16", DType::kF16},
      {"bfloat16", DType::kBF16},
      {"float64", DType::kF64},
  };
  for (const auto& [name, dtype] : cases) {
    std::string json = fmt::format("\"{}\"", name);
    EXPECT_EQ(ParseLlamaConfig(TinyLlamaWith("torch_dtype", json)).torch_dtype, dtype) << name;
  }
}

TEST(LlamaConfigParse, NewerTransformersSpellings) {
  // transformers >= 4.56 writes "dtype"; >= 5 moves rope_theta into rope_parameters.
  nlohmann::json config = nlohmann::json::parse(kTinyLlamaJson);
  config.erase("torch_dtype");
  config.erase("rope_theta");
  config.erase("rope_scaling");
  config["dtype"] = "float16";
  config["rope_parameters"] = {{"rope_theta", 500000.0}, {"rope_type", "default"}};
  LlamaConfig c = ParseLlamaConfig(config.dump());
  EXPECT_EQ(c.torch_dtype, DType::kF16);
  EXPECT_EQ(c.rope_theta, 500000.0);

  config["torch_dtype"] = "float16";  // both spellings, agreeing
  config["rope_theta"] = 500000.0;
  EXPECT_EQ(ParseLlamaConfig(config.dump()), c);
}

TEST(LlamaConfigParse, ModelIdentity) {
  nlohmann::json config = nlohmann::json::parse(kTinyLlamaJson);
  config.erase("model_type");  // architectures alone says Llama
  EXPECT_EQ(ParseLlamaConfig(config.dump()), TinyLlama());
  config["architectures"] = {"SomethingElse", "LlamaForCausalLM"};
  EXPECT_EQ(ParseLlamaConfig(config.dump()), TinyLlama());
  config.erase("architectures");  // nothing says otherwise
  EXPECT_EQ(ParseLlamaConfig(config.dump()), TinyLlama());
  config["model_type"] = "llama";  // model_type decides over architectures
  config["architectures"] = {"LlamaModel"};
  EXPECT_EQ(ParseLlamaConfig(config.dump()), TinyLlama());
}

TEST(LlamaConfigParse, UnknownKeysAreIgnored) {
  nlohmann::json config = nlohmann::json::parse(kTinyLlamaJson);
  config["attention_dropout"] = 0.0;
  config["quantization_config"] = {{"bits", 4}};
  config["auto_map"] = {{"AutoConfig", "x.Y"}};
  EXPECT_EQ(ParseLlamaConfig(config.dump()), TinyLlama());
}

TEST(LlamaConfigJson, TinyLlamaText) {
  // Keys sorted, two-space indent, trailing newline: what transformers writes.
  constexpr std::string_view kExpected = R"({
  "architectures": [
    "LlamaForCausalLM"
  ],
  "attention_bias": false,
  "bos_token_id": 1,
  "eos_token_id": 2,
  "head_dim": 64,
  "hidden_act": "silu",
  "hidden_size": 2048,
  "intermediate_size": 5632,
  "max_position_embeddings": 2048,
  "mlp_bias": false,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 22,
  "num_key_value_heads": 4,
  "pad_token_id": null,
  "rms_norm_eps": 1e-05,
  "rope_scaling": null,
  "rope_theta": 10000.0,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "vocab_size": 32000
}
)";
  EXPECT_EQ(ToJson(TinyLlama()), kExpected);
}

TEST(LlamaConfigJson, RoundTrip) {
  LlamaConfig odd;
  odd.vocab_size = 128256;
  odd.hidden_size = 10;
  odd.intermediate_size = 1;
  odd.num_hidden_layers = 1;
  odd.num_attention_heads = 6;
  odd.num_key_value_heads = 3;
  odd.head_dim = 7;
  odd.max_position_embeddings = (int64_t{1} << 40) + 1;
  odd.rms_norm_eps = 0.1 + 0.2;  // not exactly representable in few digits
  odd.rope_theta = 1.0 / 3.0;
  odd.tie_word_embeddings = true;
  odd.attention_bias = true;
  odd.mlp_bias = true;
  odd.torch_dtype = DType::kF16;
  odd.bos_token_id = std::nullopt;
  odd.eos_token_id = 128009;
  odd.pad_token_id = 0;

  LlamaConfig defaults = ParseLlamaConfig(R"({"vocab_size": 1, "hidden_size": 1,
      "intermediate_size": 1, "num_hidden_layers": 1, "num_attention_heads": 1})");
  for (const LlamaConfig& c : {TinyLlama(), odd, defaults}) {
    std::string text = ToJson(c);
    EXPECT_EQ(ParseLlamaConfig(text), c) << text;
    EXPECT_EQ(ToJson(ParseLlamaConfig(text)), text);
  }
}

TEST(LlamaConfigJson, RejectsInvalidConfigs) {
  LlamaConfig c = TinyLlama();
  c.head_dim = 0;
  EXPECT_EQ(ErrorOf([&] { ToJson(c); }),
            "[config] <LlamaConfig>: head_dim: expected a positive integer, got 0");
  c = TinyLlama();
  c.num_key_value_heads = 5;
  EXPECT_THAT(ErrorOf([&] { ToJson(c); }), HasSubstr("num_key_value_heads: expected a divisor"));
  c = TinyLlama();
  c.torch_dtype = DType::kS32;
  EXPECT_THAT(ErrorOf([&] { ToJson(c); }),
              HasSubstr("torch_dtype: expected f32, f16, bf16 or f64, got s32"));
  c = TinyLlama();
  c.hidden_act = "gelu";
  EXPECT_THAT(ErrorOf([&] { ToJson(c); }), HasSubstr("hidden_act: expected \"silu\""));
  c = TinyLlama();
  c.rms_norm_eps = std::nan("");
  EXPECT_THAT(ErrorOf([&] { ToJson(c); }), HasSubstr("rms_norm_eps: expected a positive number"));
}

class LlamaConfigFile : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> counter{0};
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("strata_llama_config_" + std::to_string(::getpid()) + "_" +
                                        info->name() + "_" + std::to_string(counter++));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(LlamaConfigFile, WriteThenRead) {
  fs::path path = dir_ / "config.json";
  WriteLlamaConfig(path, TinyLlama());
  EXPECT_EQ(Listing(dir_), std::set<std::string>{"config.json"});  // no temporary left behind
  EXPECT_EQ(ReadText(path), ToJson(TinyLlama()));
  EXPECT_EQ(ReadLlamaConfig(path), TinyLlama());
  EXPECT_EQ(ReadLlamaConfig(dir_), TinyLlama());  // a directory means its config.json

  LlamaConfig other = TinyLlama();
  other.num_hidden_layers = 2;
  WriteLlamaConfig(path, other);  // replaces the file
  EXPECT_EQ(ReadLlamaConfig(path), other);
  EXPECT_EQ(Listing(dir_), std::set<std::string>{"config.json"});
}

TEST_F(LlamaConfigFile, ReadsWhatTransformersWrote) {
  WriteText(dir_ / "config.json", kTinyLlamaJson);
  EXPECT_EQ(ReadLlamaConfig(dir_ / "config.json"), TinyLlama());
}

TEST_F(LlamaConfigFile, InvalidConfigLeavesTheOldFile) {
  fs::path path = dir_ / "config.json";
  WriteText(path, "old");
  LlamaConfig bad = TinyLlama();
  bad.num_attention_heads = 0;
  EXPECT_EQ(ErrorOf([&] { WriteLlamaConfig(path, bad); }),
            fmt::format("[config] {}: num_attention_heads: expected a positive integer, got 0",
                        path.string()));
  EXPECT_EQ(ReadText(path), "old");
  EXPECT_EQ(Listing(dir_), std::set<std::string>{"config.json"});
}

TEST_F(LlamaConfigFile, Errors) {
  fs::path missing = dir_ / "nope" / "config.json";
  EXPECT_EQ(ErrorOf([&] { ReadLlamaConfig(missing); }),
            fmt::format("[config] {}: cannot open: No such file or directory", missing.string()));
  EXPECT_THAT(ErrorOf([&] { WriteLlamaConfig(missing, TinyLlama()); }),
              HasSubstr("creating temporary file"));
  EXPECT_THAT(ErrorOf([&] { ReadLlamaConfig(dir_); }),  // a directory without config.json
              HasSubstr("config.json: cannot open"));

  fs::path bad = dir_ / "bad.json";
  WriteText(bad, TinyLlamaWith("num_key_value_heads", "\"4\""));
  EXPECT_EQ(ErrorOf([&] { ReadLlamaConfig(bad); }),
            fmt::format("[config] {}: num_key_value_heads: expected a positive integer, got \"4\" "
                        "(string)",
                        bad.string()));

  fs::path big = dir_ / "model.safetensors";  // passed by mistake
  WriteText(big, "");
  fs::resize_file(big, 17 << 20);  // sparse
  EXPECT_THAT(ErrorOf([&] { ReadLlamaConfig(big); }),
              HasSubstr("is 17825792 bytes, over the 16777216-byte limit for a config.json"));
}

struct BadConfig {
  std::string json;
  std::vector<std::string> expected;  // substrings of the message, the key among them
};

TEST(LlamaConfigParse, RejectsBadConfigs) {
  const BadConfig cases[] = {
      // Not JSON, or not an object.
      // nlohmann counts bytes from 1, and the end of input as one more byte.
      {R"({"vocab_size": 32000,)", {"not valid JSON at byte 22", "unexpected end of input"}},
      {R"({"vocab_size": 32000} x)", {"not valid JSON at byte 23", "line 1, column 23"}},
      {std::string("{\"vocab_size\": 1}\0{", 19), {"NUL byte at byte 17"}},
      {R"({"vocab_size": 1e400})", {"not valid JSON", "1e400"}},
      {"[1, 2]", {"expected a JSON object, got [1,2] (array)"}},
      // Required keys.
      {TinyLlamaWith("vocab_size", ""), {"vocab_size: required key is missing"}},
      {TinyLlamaWith("hidden_size", ""), {"hidden_size: required key is missing"}},
      {TinyLlamaWith("intermediate_size", ""), {"intermediate_size: required key is missing"}},
      {TinyLlamaWith("num_hidden_layers", ""), {"num_hidden_layers: required key is missing"}},
      {TinyLlamaWith("num_attention_heads", ""), {"num_attention_heads: required key is missing"}},
      // Wrong JSON types.
      {TinyLlamaWith("vocab_size", R"("32000")"),
       {"vocab_size: expected a positive integer, got \"32000\" (string)"}},
      {TinyLlamaWith("hidden_size", "2048.0"),
       {"hidden_size: expected a positive integer, got 2048.0 (float)"}},
      {TinyLlamaWith("num_hidden_layers", "null"),
       {"num_hidden_layers: expected a positive integer, got null"}},
      {TinyLlamaWith("num_attention_heads", "true"),
       {"num_attention_heads: expected a positive integer, got true (boolean)"}},
      {TinyLlamaWith("max_position_embeddings", "[2048]"),
       {"max_position_embeddings: expected a positive integer, got [2048] (array)"}},
      {TinyLlamaWith("rms_norm_eps", R"("1e-5")"),
       {"rms_norm_eps: expected a positive number, got \"1e-5\" (string)"}},
      {TinyLlamaWith("rope_theta", "null"), {"rope_theta: expected a positive number, got null"}},
      {TinyLlamaWith("tie_word_embeddings", R"("false")"),
       {"tie_word_embeddings: expected true or false, got \"false\" (string)"}},
      {TinyLlamaWith("attention_bias", "0"),
       {"attention_bias: expected true or false, got 0 (integer)"}},
      {TinyLlamaWith("mlp_bias", "null"), {"mlp_bias: expected true or false, got null"}},
      {TinyLlamaWith("hidden_act", R"(["silu"])"),
       {"hidden_act: expected a string, got [\"silu\"] (array)"}},
      {TinyLlamaWith("bos_token_id", "1.5"),
       {"bos_token_id: expected an integer token id or null, got 1.5 (float)"}},
      {TinyLlamaWith("eos_token_id", "[128001, 128009]"),
       {"eos_token_id: expected one integer token id or null", "[128001,128009] (array)",
        "lists of ids are not supported"}},
      {TinyLlamaWith("pad_token_id", R"("0")"), {"pad_token_id: expected an integer token id"}},
      {TinyLlamaWith("architectures", R"("LlamaForCausalLM")"),
       {"architectures: expected a list of class names, got \"LlamaForCausalLM\" (string)"}},
      {TinyLlamaWith("architectures", "[1]"), {"architectures: expected a list of class names"}},
      // Non-positive or out-of-range sizes.
      {TinyLlamaWith("num_hidden_layers", "0"),
       {"num_hidden_layers: expected a positive integer, got 0 (integer)"}},
      {TinyLlamaWith("intermediate_size", "-1"),
       {"intermediate_size: expected a positive integer, got -1 (integer)"}},
      {TinyLlamaWith("vocab_size", "18446744073709551615"),
       {"vocab_size: expected a positive integer below 2^63, got 18446744073709551615"}},
      {TinyLlamaWith("num_key_value_heads", "0"),
       {"num_key_value_heads: expected a positive integer, got 0"}},
      {TinyLlamaWith("head_dim", "0"), {"head_dim: expected a positive integer, got 0"}},
      {TinyLlamaWith("max_position_embeddings", "0"),
       {"max_position_embeddings: expected a positive integer, got 0"}},
      {TinyLlamaWith("rms_norm_eps", "0"), {"rms_norm_eps: expected a positive number, got 0"}},
      {TinyLlamaWith("rope_theta", "-10000.0"),
       {"rope_theta: expected a positive number, got -10000.0 (float)"}},
      // Shapes that do not fit together.
      {TinyLlamaWith("hidden_size", "2050"),
       {"hidden_size: expected a multiple of num_attention_heads (32) when head_dim is absent, "
        "got 2050"}},
      {TinyLlamaWith("num_key_value_heads", "5"),
       {"num_key_value_heads: expected a divisor of num_attention_heads (32), got 5"}},
      {TinyLlamaWith("num_key_value_heads", "64"),
       {"num_key_value_heads: expected a divisor of num_attention_heads (32), got 64"}},
      // Other model families and unsupported features.
      {TinyLlamaWith("model_type", R"("mistral")"),
       {"model_type: expected \"llama\"", "got \"mistral\" (string)"}},
      {TinyLlamaWith("model_type", "null"), {"model_type: expected \"llama\"", "got null"}},
      {[] {
         nlohmann::json config = nlohmann::json::parse(kTinyLlamaJson);
         config.erase("model_type");
         config["architectures"] = {"MistralForCausalLM"};
         return config.dump();
       }(),
       {"architectures: expected a list containing \"LlamaForCausalLM\" (model_type is absent)",
        "got [\"MistralForCausalLM\"] (array)"}},
      {TinyLlamaWith("rope_scaling", R"({"type": "linear", "factor": 2.0})"),
       {"rope_scaling: expected null (RoPE scaling is not supported yet)",
        R"(got {"factor":2.0,"type":"linear"} (object))"}},
      {TinyLlamaWith("rope_parameters", R"({"rope_type": "llama3", "factor": 8.0})"),
       {"rope_parameters.factor:", "RoPE scaling is not supported yet", "got 8.0 (float)"}},
      {TinyLlamaWith("rope_parameters", R"({"rope_theta": 500000.0})"),
       {"rope_parameters.rope_theta: is 500000 but the top-level rope_theta is 10000"}},
      {TinyLlamaWith("rope_parameters", "[]"), {"rope_parameters: expected an object"}},
      {TinyLlamaWith("hidden_act", R"("gelu")"),
       {"hidden_act: expected \"silu\" (the only activation supported), got \"gelu\""}},
      {TinyLlamaWith("torch_dtype", R"("int8")"),
       {R"(torch_dtype: expected one of "float32", "float16", "bfloat16", "float64", got "int8")"}},
      {TinyLlamaWith("torch_dtype", "16"), {"torch_dtype: expected one of", "got 16 (integer)"}},
      {TinyLlamaWith("dtype", R"("float16")"),
       {R"(dtype: is "float16" (string) but torch_dtype is "bfloat16" (string))"}},
  };
  for (const BadConfig& c : cases) {
    std::string message = ErrorOf([&] { ParseLlamaConfig(c.json); });
    EXPECT_THAT(message, ::testing::StartsWith("[config] config.json: ")) << c.json;
    for (const std::string& part : c.expected) EXPECT_THAT(message, HasSubstr(part)) << c.json;
  }
}

TEST(LlamaConfigParse, SourceNamesTheInput) {
  EXPECT_EQ(ErrorOf([] { ParseLlamaConfig("{}", "models/tiny/config.json"); }),
            "[config] models/tiny/config.json: vocab_size: required key is missing (expected a "
            "positive integer)");
}

TEST(LlamaConfigErrors, DeeplyNestedJsonIsAnErrorNotACrash) {
  std::string text = "{\"x\":" + std::string(65000, '[') + std::string(65000, ']') + "}";
  try {
    ParseLlamaConfig(text, "deep/config.json");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nests deeper than 64 levels"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("deep/config.json"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace strata::io
