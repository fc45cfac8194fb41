// `strata lm` end to end: a saved Hugging Face directory in, logits / loss /
// gradients out; the loss is recomputed here from the written logits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "strata/autograd/grad.h"
#include "strata/io/safetensors.h"
#include "strata/nn/llama.h"

namespace fs = std::filesystem;

namespace strata {
namespace {

class LmCommand : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("strata_lm_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    config_.vocab_size = 13;
    config_.hidden_size = 8;
    config_.intermediate_size = 12;
    config_.num_hidden_layers = 2;
    config_.num_attention_heads = 2;
    config_.num_key_value_heads = 1;
    model_ = std::make_unique<nn::LlamaForCausalLM>(config_, random_key(3));
    nn::SaveLlama(*model_, Path("model"));
    WriteIds("tokens.safetensors", "input_ids", {3, 1, 4, 1, 5, 9, 2, 6}, {2, 4});
    WriteIds("labels.safetensors", "labels", {1, 4, 1, 5, -100, 2, 6, 5}, {2, 4});
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  void WriteIds(const std::string& file, const std::string& name, std::vector<int64_t> ids,
                std::vector<int64_t> shape) const {
    io::TensorData t{name, DType::kS64, shape, std::vector<uint8_t>(ids.size() * 8)};
    if (!ids.empty()) std::memcpy(t.bytes.data(), ids.data(), t.bytes.size());
    io::WriteSafetensors(Path(file), {t});
  }

  int Run(const std::string& args, std::string* err) const {
    std::string command =
        std::string(STRATA_BINARY) + " lm " + args + " --quiet 2> " + Path("stderr.txt");
    int status = std::system(command.c_str());
    std::ifstream in(Path("stderr.txt"));
    std::stringstream ss;
    ss << in.rdbuf();
    *err = ss.str();
    return WEXITSTATUS(status);
  }

  static std::vector<float> Floats(const io::SafetensorsFile& f, const std::string& name) {
    const io::TensorView& v = f.Get(name);
    EXPECT_EQ(v.dtype, DType::kF32) << name;
    std::vector<float> out(v.data.size() / 4);
    if (!out.empty()) std::memcpy(out.data(), v.data.data(), v.data.size());
    return out;
  }

  fs::path dir_;
  io::LlamaConfig config_;
  std::unique_ptr<nn::LlamaForCausalLM> model_;
};

TEST_F(LmCommand, WritesLogitsLossAndGradients) {
  std::string err;
  for (const char* layers : {"scan", "unrolled"}) {
    SCOPED_TRACE(layers);
    ASSERT_EQ(Run(fmt::format("--model {} --tokens {} --labels {} --output {} --grads --layers {}",
                              Path("model"), Path("tokens.safetensors"), Path("labels.safetensors"),
                              Path("out.safetensors"), layers),
                  &err),
              0)
        << err;
    io::SafetensorsFile out = io::SafetensorsFile::Open(Path("out.safetensors"));
    std::vector<float> logits = Floats(out, "logits");
    ASSERT_EQ(out.Get("logits").shape, (std::vector<int64_t>{2, 4, 13}));
    // The same model in this process.
    Tensor ids = Tensor::FromVector<int64_t>({3, 1, 4, 1, 5, 9, 2, 6}, {2, 4});
    std::vector<float> expected = model_->forward(ids).to_vector<float>();
    for (size_t i = 0; i < logits.size(); ++i) EXPECT_NEAR(logits[i], expected[i], 1e-5);
    // The loss from the written logits: position s predicts labels[s + 1];
    // -100 is skipped.
    std::vector<int64_t> labels = {1, 4, 1, 5, -100, 2, 6, 5};
    double total = 0;
    int count = 0;
    for (int b = 0; b < 2; ++b) {
      for (int s = 0; s < 3; ++s) {
        int64_t target = labels[b * 4 + s + 1];
        if (target == -100) continue;
        const float* row = &logits[(b * 4 + s) * 13];
        double top = *std::max_element(row, row + 13), z = 0;
        for (int v = 0; v < 13; ++v) z += std::exp(row[v] - top);
        total += -(row[target] - top - std::log(z));
        ++count;
      }
    }
    EXPECT_NEAR(Floats(out, "loss")[0], total / count, 1e-5);
    // One gradient per checkpoint tensor (per layer), shaped like it.
    for (auto& [name, t] : model_->state_entries()) {
      ASSERT_TRUE(out.contains("grad." + name)) << name;
      EXPECT_EQ(out.Get("grad." + name).shape, t.shape().dims()) << name;
    }
  }
}

// An empty sequence (or batch) gives empty logits (it once killed the
// process with SIGFPE in the fusion pass's view of a zero-size tensor).
TEST_F(LmCommand, AnEmptySequenceOrBatchGivesEmptyLogits) {
  for (const std::vector<int64_t>& shape : {std::vector<int64_t>{1, 0}, {0, 4}}) {
    SCOPED_TRACE(fmt::format("[{}]", fmt::join(shape, ", ")));
    WriteIds("empty.safetensors", "input_ids", {}, shape);
    std::string err;
    for (const char* layers : {"scan", "unrolled"}) {
      ASSERT_EQ(Run(fmt::format("--model {} --tokens {} --output {} --layers {}", Path("model"),
                                Path("empty.safetensors"), Path("empty_out.safetensors"), layers),
                    &err),
                0)
          << err;
      io::SafetensorsFile out = io::SafetensorsFile::Open(Path("empty_out.safetensors"));
      const io::TensorView& logits = out.Get("logits");
      EXPECT_EQ(logits.shape, (std::vector<int64_t>{shape[0], shape[1], config_.vocab_size}));
      EXPECT_TRUE(logits.data.empty());
    }
  }
}

TEST_F(LmCommand, BadInputsAreClearErrors) {
  std::string err;
  std::string base = fmt::format("--model {} --output {}", Path("model"), Path("o.safetensors"));
  WriteIds("wrong_name.safetensors", "ids", {1, 2}, {1, 2});
  EXPECT_EQ(Run(base + " --tokens " + Path("wrong_name.safetensors"), &err), 1);
  EXPECT_NE(err.find("no tensor named 'input_ids' (it has: ids)"), std::string::npos) << err;
  WriteIds("out_of_range.safetensors", "input_ids", {1, 13}, {1, 2});
  EXPECT_EQ(Run(base + " --tokens " + Path("out_of_range.safetensors"), &err), 1);
  EXPECT_NE(err.find("token id 13 is outside the vocabulary"), std::string::npos) << err;
  // Labels past the vocabulary (13 tokens): PyTorch raises, so does strata
  // (checked indexing), rather than returning the clamped label's loss.
  for (int64_t bad : {13, 100000, -5}) {
    WriteIds("bad_labels.safetensors", "labels", {1, 4, 1, 5, 2, bad, 6, 5}, {2, 4});
    EXPECT_EQ(Run(base + " --tokens " + Path("tokens.safetensors") + " --labels " +
                      Path("bad_labels.safetensors"),
                  &err),
              1);
    EXPECT_NE(err.find(fmt::format("[cross_entropy] index {} is out of range [0, 13)", bad)),
              std::string::npos)
        << err;
    EXPECT_FALSE(fs::exists(Path("o.safetensors")));
  }
  WriteIds("flat.safetensors", "input_ids", {1, 2}, {2});
  EXPECT_EQ(Run(base + " --tokens " + Path("flat.safetensors"), &err), 1);
  EXPECT_NE(err.find("must be I64 [batch, seq]"), std::string::npos) << err;
  EXPECT_EQ(Run(base + " --tokens " + Path("tokens.safetensors") + " --grads", &err), 1);
  EXPECT_NE(err.find("--grads needs --labels"), std::string::npos) << err;
  EXPECT_EQ(Run(fmt::format("--model {} --tokens {} --output {}", Path("nowhere"),
                            Path("tokens.safetensors"), Path("o.safetensors")),
                &err),
            1);
  EXPECT_NE(err.find("config"), std::string::npos) << err;
}

}  // namespace
}  // namespace strata
