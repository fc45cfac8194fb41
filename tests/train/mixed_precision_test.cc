// Mixed precision (strata train --dtype bf16, nn::ComputeIn): a step that
// computes with bf16 copies of the f32 weights against the same step in f32.
//
// The tolerances, from bf16's unit roundoff u = 2^-8 (8 significant bits,
// rounding to nearest). Each value on the way to the loss went through R
// roundings to bf16 (per layer: the two norms' outputs, q, k, v, the rotary
// products, the scores and probabilities, attention's output and
// projection, the residual adds, gate, up, SiLU, their product, down: about
// 16; plus the embedding, the final norm and the logits), each a relative
// error of at most u, independent and with mean 0, so a value's relative
// error is about u * sqrt(R) (a random walk; R * u is the worst case).
// - The loss is a cross entropy in f32 of the logits z: its derivative in
//   each logit is (softmax - one-hot) / tokens, whose absolute values sum to
//   at most 2 per token, so |dL| <= 2 * max |dz| <= 2 * u * sqrt(R) * max |z|.
// - A weight's gradient is a sum of products of a forward value and a
//   backward one, each carrying about u * sqrt(R): its relative error is about
//   2 * u * sqrt(2 R) (the backward pass rounds as often as the forward).
// The test asserts those bounds; it also asserts that the bf16 step did
// compute in bf16 (its loss is not the f32 loss's bits).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "strata/autograd/grad.h"
#include "strata/io/safetensors.h"
#include "strata/lazy/ops.h"
#include "strata/nn/llama.h"
#include "strata/nn/mixed_precision.h"
#include "strata/train/trainer.h"

namespace strata::train {
namespace {

namespace fs = std::filesystem;

constexpr double kU = 0x1p-8;  // bf16's unit roundoff

TrainOptions Small() {
  TrainOptions o;
  o.hidden = 64;
  o.num_layers = 2;
  o.heads = 4;
  o.kv_heads = 2;
  o.intermediate = 160;
  o.batch = 4;
  o.seq = 32;
  o.steps = 60;
  o.warmup = 6;
  o.lr = 3e-3;
  o.min_lr = 3e-4;
  o.eval_every = 0;
  o.seed = 5;
  return o;
}

Corpus TestCorpus(const TrainOptions& o) {
  return LoadCorpus(STRATA_SOURCE_DIR "/data/corpus.txt", 0.1, o.seq + 1);
}

struct StepResult {
  float loss = 0;
  float max_logit = 0;
  std::vector<std::vector<float>> grads;
  std::vector<DType> grad_types;
};

// The loss and gradients of batch 0 with the model computing in `dtype`.
StepResult LossAndGradients(const TrainOptions& o, DType dtype) {
  Corpus corpus = TestCorpus(o);
  nn::LlamaForCausalLM model(o.ModelConfig(), random_key(o.seed));
  std::vector<Tensor*> params = model.parameters();
  sync(params);
  Tensor ids = MakeBatch(
      corpus.train,
      WindowStarts(o.seed, 0, o.batch, o.seq, static_cast<int64_t>(corpus.train.size())), o.seq);
  std::vector<Tensor> weights;
  for (Tensor* p : params) weights.push_back(*p);
  Tensor logits, loss;
  {
    nn::ComputeIn compute(params, dtype);
    logits = model.forward(ids);
    loss = model.loss(logits, ids);
  }
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_EQ(params[i]->dtype(), DType::kF32) << "the f32 weights are back after the scope";
  }
  std::vector<Tensor> grads = gradients(loss, weights);
  StepResult r;
  r.loss = loss.item<float>();
  r.max_logit = max(abs(astype(logits, DType::kF32))).item<float>();
  for (Tensor& g : grads) {
    r.grad_types.push_back(g.dtype());
    r.grads.push_back(astype(g, DType::kF32).to_vector<float>());
  }
  return r;
}

TEST(MixedPrecision, ABf16StepIsTheF32StepWithinBf16Rounding) {
  const TrainOptions o = Small();
  const StepResult f32 = LossAndGradients(o, DType::kF32);
  const StepResult bf16 = LossAndGradients(o, DType::kBF16);
  const double rounds = 16.0 * static_cast<double>(o.num_layers) + 3;
  const double walk = kU * std::sqrt(rounds);
  // It computed in bf16 at all, and stayed near f32.
  EXPECT_NE(std::memcmp(&f32.loss, &bf16.loss, sizeof(float)), 0);
  const double loss_bound = 2 * walk * f32.max_logit;
  EXPECT_LE(std::abs(bf16.loss - f32.loss), loss_bound)
      << "f32 " << f32.loss << " bf16 " << bf16.loss << " (max |logit| " << f32.max_logit << ")";
  ASSERT_EQ(f32.grads.size(), bf16.grads.size());
  const double grad_bound = 2 * kU * std::sqrt(2 * rounds);
  for (size_t i = 0; i < f32.grads.size(); ++i) {
    EXPECT_EQ(bf16.grad_types[i], DType::kF32) << "the gradient of f32 weight " << i;
    double diff = 0, norm = 0;
    for (size_t j = 0; j < f32.grads[i].size(); ++j) {
      const double d = static_cast<double>(bf16.grads[i][j]) - f32.grads[i][j];
      diff += d * d;
      norm += static_cast<double>(f32.grads[i][j]) * f32.grads[i][j];
    }
    EXPECT_LE(std::sqrt(diff), grad_bound * std::sqrt(norm))
        << "parameter " << i << ": |g16 - g32| / |g32| = " << std::sqrt(diff / norm);
  }
  std::printf("loss f32 %.6f bf16 %.6f (bound %.4f); gradient bound %.4f\n", f32.loss, bf16.loss,
              loss_bound, grad_bound);
}

// The trainer's --dtype bf16: weights and AdamW's moments stay f32, its
// first step's loss is the bf16 loss above, and its held-out loss (the mean
// over 8 fixed batches) after 60 steps is near the f32 run's: within 0.03
// nats (about 1% of where it ends) on average over four seeds, and within
// 0.1 for each. The two runs' trajectories part after a few dozen steps, and
// one run can land apart by chance (seeds 6 to 8 end within 0.004; seed 5
// within 0.064, bf16 the higher; in 300-step runs of seed 5 the held-out
// losses stayed within 0.02, bf16's sometimes the lower), so one seed's
// distance says little and the mean is the measure.
TEST(MixedPrecision, TheTrainersBf16RunFollowsTheF32Run) {
  double total = 0;
  const uint64_t seeds[] = {5, 6, 7, 8};
  for (uint64_t seed : seeds) {
    TrainOptions o = Small();
    o.seed = seed;
    o.eval_batches = 8;
    Trainer f32(o, TestCorpus(o));
    o.dtype = "bf16";
    Trainer bf16(o, TestCorpus(o));
    std::vector<float> losses;
    for (int64_t i = 0; i < o.steps; ++i) {
      f32.Step();
      losses.push_back(bf16.Step().loss);
    }
    const float a = f32.Evaluate(), b = bf16.Evaluate();
    std::printf("seed %llu: held-out f32 %.4f bf16 %.4f\n", static_cast<unsigned long long>(seed),
                a, b);
    EXPECT_LE(std::abs(a - b), 0.1) << "seed " << seed << ": f32 " << a << ", bf16 " << b;
    total += std::abs(a - b);
    EXPECT_LT(losses.back(), losses.front() - 1.0) << "the bf16 run learns";
    for (Tensor* p : bf16.model().parameters()) EXPECT_EQ(p->dtype(), DType::kF32);
    if (seed == Small().seed) {
      const StepResult first = LossAndGradients(Small(), DType::kBF16);
      EXPECT_NEAR(losses[0], first.loss, 1e-6 * first.loss);
    }
  }
  EXPECT_LE(total / std::size(seeds), 0.03);
}

// A bf16 run's checkpoint holds the f32 weights and moments; resumed, it
// gives the losses of the run that never stopped, bit for bit. Resuming it
// in f32 is refused (the updates would differ), and a checkpoint from before
// --dtype existed (no "dtype" in its options) resumes as f32.
TEST(MixedPrecision, ABf16RunResumesAndItsDtypeIsPartOfTheCheckpoint) {
  TrainOptions o = Small();
  o.steps = 6;
  o.dtype = "bf16";
  Trainer whole(o, TestCorpus(o));
  for (int i = 0; i < 6; ++i) whole.Step();
  const fs::path dir =
      fs::temp_directory_path() / ("strata_mixed_precision_test_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  std::string step_dir;
  {
    Trainer first(o, TestCorpus(o));
    for (int i = 0; i < 3; ++i) first.Step();
    step_dir = first.SaveCheckpoint(dir.string());
  }
  const io::SafetensorsFile weights =
      io::SafetensorsFile::Open((fs::path(step_dir) / "model.safetensors").string());
  for (const std::string& name : weights.names())
    EXPECT_EQ(weights.Layout(name).dtype, DType::kF32) << name;
  std::unique_ptr<Trainer> resumed = Trainer::Resume(dir.string(), o, TestCorpus(o));
  for (int i = 0; i < 3; ++i) resumed->Step();
  for (int i = 0; i < 6; ++i) {
    const float a = whole.history()[i].loss, b = resumed->history()[i].loss;
    EXPECT_EQ(std::memcmp(&a, &b, sizeof a), 0) << "step " << i + 1 << ": " << a << " vs " << b;
  }
  TrainOptions f32 = o;
  f32.dtype = "f32";
  try {
    Trainer::Resume(dir.string(), f32, TestCorpus(f32));
    ADD_FAILURE() << "resuming a bf16 run in f32 must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--dtype \"bf16\", this run asks for --dtype \"f32\""),
              std::string::npos)
        << e.what();
  }
  // The same checkpoint with "dtype" taken out of its options: an f32 run's.
  const fs::path state = fs::path(step_dir) / "trainer_state.json";
  std::ifstream in(state);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  in.close();
  const std::string field = "\"dtype\": \"bf16\",";
  const size_t at = text.find(field);
  ASSERT_NE(at, std::string::npos) << text;
  text.erase(at, field.size());
  std::ofstream(state) << text;
  EXPECT_NO_THROW(Trainer::Resume(dir.string(), f32, TestCorpus(f32)));
  fs::remove_all(dir);
}

TEST(MixedPrecision, AnUnknownDtypeIsAnError) {
  TrainOptions o = Small();
  o.dtype = "f16";
  try {
    Trainer t(o, TestCorpus(o));
    ADD_FAILURE() << "--dtype f16 must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--dtype must be f32 or bf16"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace strata::train
