// LlamaForCausalLM against a plain-loop reference of Hugging Face's math,
// apply_layers against unrolled layers, and save/load of a Hugging Face
// directory.
#include "strata/nn/llama.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <string>

#include "strata/autograd/grad.h"
#include "strata/io/safetensors.h"
#include "strata/lazy/ops.h"

namespace strata::nn {
namespace {

io::LlamaConfig TinyConfig() {
  io::LlamaConfig c;
  c.vocab_size = 11;
  c.hidden_size = 12;
  c.intermediate_size = 20;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 3;
  c.num_key_value_heads = 1;  // grouped-query: 3 query heads share one kv head
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 500.0;
  return c;
}

using Mat = std::vector<double>;  // row-major

Mat Values(const Tensor& t) { return astype(t, DType::kF64).to_vector<double>(); }

// y[r, o] = sum_i x[r, i] * w[o, i]  (x @ w^T)
Mat Linear(const Mat& x, const Mat& w, int64_t rows, int64_t in, int64_t out) {
  Mat y(rows * out, 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o)
      for (int64_t i = 0; i < in; ++i) y[r * out + o] += x[r * in + i] * w[o * in + i];
  return y;
}

Mat RmsNorm(const Mat& x, const Mat& w, int64_t rows, int64_t dim, double eps) {
  Mat y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double ms = 0;
    for (int64_t i = 0; i < dim; ++i) ms += x[r * dim + i] * x[r * dim + i];
    double inv = 1.0 / std::sqrt(ms / dim + eps);
    for (int64_t i = 0; i < dim; ++i) y[r * dim + i] = x[r * dim + i] * inv * w[i];
  }
  return y;
}

// Hugging Face's LlamaForCausalLM forward, written out with loops.
Mat ReferenceLogits(LlamaForCausalLM& model, const io::LlamaConfig& c,
                    const std::vector<int64_t>& ids, int64_t batch, int64_t seq) {
  std::map<std::string, Mat> w;
  for (auto& [name, t] : model.state_dict()) w[name] = Values(t);  // per-layer names
  const int64_t h = c.hidden_size, heads = c.num_attention_heads, kv = c.num_key_value_heads;
  const int64_t d = h / heads, rows = batch * seq, inter = c.intermediate_size;
  Mat x(rows * h);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < h; ++i) x[r * h + i] = w["model.embed_tokens.weight"][ids[r] * h + i];
  auto rope = [&](Mat& t, int64_t n) {  // t [rows, n*d], rotate each head at its position
    for (int64_t r = 0; r < rows; ++r) {
      int64_t pos = r % seq;
      for (int64_t head = 0; head < n; ++head) {
        double* v = &t[r * n * d + head * d];
        std::vector<double> out(d);
        for (int64_t k = 0; k < d; ++k) {
          double angle = pos * std::pow(c.rope_theta, -2.0 * (k % (d / 2)) / d);
          double rotated = k < d / 2 ? -v[k + d / 2] : v[k - d / 2];
          out[k] = v[k] * std::cos(angle) + rotated * std::sin(angle);
        }
        std::copy(out.begin(), out.end(), v);
      }
    }
  };
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    std::string p = "model.layers." + std::to_string(l) + ".";
    Mat a = RmsNorm(x, w[p + "input_layernorm.weight"], rows, h, c.rms_norm_eps);
    Mat q = Linear(a, w[p + "self_attn.q_proj.weight"], rows, h, heads * d);
    Mat k = Linear(a, w[p + "self_attn.k_proj.weight"], rows, h, kv * d);
    Mat v = Linear(a, w[p + "self_attn.v_proj.weight"], rows, h, kv * d);
    rope(q, heads);
    rope(k, kv);
    Mat att(rows * heads * d, 0.0);
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t head = 0; head < heads; ++head) {
        int64_t g = head / (heads / kv);
        for (int64_t i = 0; i < seq; ++i) {
          std::vector<double> score(i + 1);
          double top = -1e300, total = 0;
          for (int64_t j = 0; j <= i; ++j) {
            double dot = 0;
            for (int64_t e = 0; e < d; ++e)
              dot +=
                  q[((b * seq + i) * heads + head) * d + e] * k[((b * seq + j) * kv + g) * d + e];
            score[j] = dot / std::sqrt(static_cast<double>(d));
            top = std::max(top, score[j]);
          }
          for (double& s : score) total += (s = std::exp(s - top));
          for (int64_t j = 0; j <= i; ++j)
            for (int64_t e = 0; e < d; ++e)
              att[((b * seq + i) * heads + head) * d + e] +=
                  score[j] / total * v[((b * seq + j) * kv + g) * d + e];
        }
      }
    Mat o = Linear(att, w[p + "self_attn.o_proj.weight"], rows, heads * d, h);
    for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];
    Mat m = RmsNorm(x, w[p + "post_attention_layernorm.weight"], rows, h, c.rms_norm_eps);
    Mat gate = Linear(m, w[p + "mlp.gate_proj.weight"], rows, h, inter);
    Mat up = Linear(m, w[p + "mlp.up_proj.weight"], rows, h, inter);
    for (size_t i = 0; i < gate.size(); ++i) gate[i] = gate[i] / (1 + std::exp(-gate[i])) * up[i];
    Mat down = Linear(gate, w[p + "mlp.down_proj.weight"], rows, inter, h);
    for (size_t i = 0; i < x.size(); ++i) x[i] += down[i];
  }
  x = RmsNorm(x, w["model.norm.weight"], rows, h, c.rms_norm_eps);
  return Linear(x, w[c.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight"], rows,
                h, c.vocab_size);
}

Tensor Ids(int64_t batch, int64_t seq, int64_t vocab, int64_t salt) {
  std::vector<int64_t> ids(batch * seq);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = (i * 7 + salt * 3 + 1) % vocab;
  return Tensor::FromVector(ids, {batch, seq});
}

void ExpectClose(const Mat& a, const Mat& b, double tol) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_NEAR(a[i], b[i], tol * std::max(1.0, std::abs(b[i]))) << i;
}

TEST(Llama, LogitsMatchAPlainLoopReferenceOfHuggingFacesMath) {
  for (bool tied : {false, true}) {
    SCOPED_TRACE(tied ? "tied embeddings" : "separate lm_head");
    io::LlamaConfig c = TinyConfig();
    c.tie_word_embeddings = tied;
    LlamaForCausalLM model(c, random_key(4));
    // Larger weights than the 0.02 init, so attention is far from uniform.
    for (auto& [name, t] : model.named_parameters()) {
      if (name.find("norm") == std::string::npos) *t = *t * 20.0;
    }
    EXPECT_EQ(model.lm_head == nullptr, tied);
    Tensor ids = Ids(2, 5, c.vocab_size, 1);
    Mat expected = ReferenceLogits(model, c, ids.to_vector<int64_t>(), 2, 5);
    for (LayerMode mode : {LayerMode::kScan, LayerMode::kUnrolled}) {
      model.layer_mode = mode;
      ExpectClose(Values(model.forward(ids)), expected, 1e-4);
    }
  }
}

TEST(Llama, ScanAndUnrolledGiveTheSameLogitsAndGradients) {
  io::LlamaConfig c = TinyConfig();
  c.num_hidden_layers = 3;
  LlamaForCausalLM model(c, random_key(5));
  Tensor ids = Ids(2, 6, c.vocab_size, 2), labels = Ids(2, 6, c.vocab_size, 3);
  std::vector<Tensor> params;
  for (Tensor* t : model.parameters()) params.push_back(*t);
  std::vector<std::vector<Mat>> results;
  for (LayerMode mode : {LayerMode::kScan, LayerMode::kUnrolled}) {
    model.layer_mode = mode;
    Tensor logits = model.forward(ids);
    Tensor loss = model.loss(logits, labels);
    std::vector<Tensor> outs = gradients(loss, params);
    outs.insert(outs.begin(), {logits, loss});
    std::vector<Tensor*> all;
    for (Tensor& t : outs) all.push_back(&t);
    sync(all);  // one program
    std::vector<Mat> r;
    for (const Tensor& t : outs) r.push_back(Values(t));
    results.push_back(std::move(r));
  }
  for (size_t i = 0; i < results[0].size(); ++i) {
    SCOPED_TRACE(i);
    ExpectClose(results[0][i], results[1][i], 1e-5);
  }
}

// One naming for users: named_parameters() holds the decoder layers stacked
// ("model.layers.*.mlp.up_proj.weight" [L, ...]); unstack_entries turns it,
// or anything named like it (gradients), into state_dict()'s per-layer
// Hugging Face names. The expected names are written out from Hugging
// Face's LlamaForCausalLM layout.
TEST(Llama, NamedParametersUnstackToTheStateDictsHuggingFaceNames) {
  io::LlamaConfig c = TinyConfig();
  LlamaForCausalLM model(c, random_key(8));
  std::vector<std::string> expected = {"model.embed_tokens.weight"};
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    for (const char* part : {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                             "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj",
                             "input_layernorm", "post_attention_layernorm"})
      expected.push_back(fmt::format("model.layers.{}.{}.weight", l, part));
  }
  expected.push_back("model.norm.weight");
  expected.push_back("lm_head.weight");
  std::vector<std::pair<std::string, Tensor>> by_name;
  for (auto& [name, p] : model.named_parameters()) by_name.emplace_back(name, *p);
  std::vector<std::pair<std::string, Tensor>> unstacked = unstack_entries(by_name);
  std::map<std::string, Tensor> state = model.state_dict();
  std::vector<std::string> names, state_names;
  for (const auto& [name, t] : unstacked) names.push_back(name);
  for (const auto& [name, t] : state) state_names.push_back(name);
  std::sort(expected.begin(), expected.end());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, expected);
  EXPECT_EQ(state_names, expected);
  for (const auto& [name, t] : unstacked) {
    ASSERT_TRUE(state.count(name)) << name;
    EXPECT_EQ(t.bytes(), state.at(name).bytes()) << name;
  }
  // Gradients come named like named_parameters: the same call names them.
  std::vector<Tensor> params;
  for (auto& [name, p] : model.named_parameters()) params.push_back(*p);
  Tensor ids = Ids(1, 4, c.vocab_size, 9);
  std::vector<Tensor> grads = gradients(model.loss(model.forward(ids), ids), params);
  std::vector<std::pair<std::string, Tensor>> named_grads;
  for (size_t i = 0; i < grads.size(); ++i) named_grads.emplace_back(by_name[i].first, grads[i]);
  std::vector<std::string> grad_names;
  for (const auto& [name, g] : unstack_entries(named_grads)) {
    grad_names.push_back(name);
    EXPECT_EQ(g.shape().dims(), state.at(name).shape().dims()) << name;
  }
  std::sort(grad_names.begin(), grad_names.end());
  EXPECT_EQ(grad_names, expected);
}

TEST(Llama, SavedDirectoryLoadsBackBitIdentical) {
  io::LlamaConfig c = TinyConfig();
  c.torch_dtype = DType::kBF16;
  LlamaForCausalLM model(c, random_key(6));
  auto dir = std::filesystem::temp_directory_path() / "strata_llama_test";
  std::filesystem::remove_all(dir);
  SaveLlama(model, dir.string());
  auto loaded = LoadLlama(dir.string());
  EXPECT_EQ(loaded->model.config, model.model.config);
  auto a = model.named_parameters(), b = loaded->named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_EQ(b[i].second->dtype(), DType::kBF16);
    EXPECT_EQ(a[i].second->bytes(), b[i].second->bytes()) << a[i].first;
  }
  Tensor ids = Ids(1, 4, c.vocab_size, 4);
  EXPECT_EQ(model.forward(ids).bytes(), loaded->forward(ids).bytes());

  // A checkpoint missing a tensor, or with a wrong shape, is an error naming it.
  io::SafetensorsFile file = io::SafetensorsFile::Open((dir / "model.safetensors").string());
  std::vector<io::TensorData> kept;
  for (const std::string& name : file.names()) {
    const io::TensorView& v = file.Get(name);
    if (name == "model.norm.weight") continue;
    std::vector<int64_t> shape = v.shape;
    std::vector<uint8_t> bytes(v.data.begin(), v.data.end());
    if (name == "lm_head.weight") {  // drop a row
      shape[0] -= 1;
      bytes.resize(bytes.size() - shape[1] * 2);
    }
    kept.push_back({name, v.dtype, shape, bytes});
  }
  io::WriteSafetensors((dir / "model.safetensors").string(), kept);
  try {
    LoadLlama(dir.string());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("missing: model.norm.weight"), std::string::npos) << m;
    EXPECT_NE(m.find("lm_head.weight (expected bf16[11,12], found bf16[10,12])"), std::string::npos)
        << m;
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace strata::nn
