// The training engine behind `strata train`: the step against a hand-written
// reference, reproducibility, resume, evaluation, sampling, checkpoints and
// flat memory over 1000 steps.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include "strata/autograd/grad.h"
#include "strata/core/error.h"
#include "strata/io/safetensors.h"
#include "strata/lazy/context.h"
#include "strata/lazy/ops.h"
#include "strata/train/trainer.h"

namespace strata::train {
namespace {

namespace fs = std::filesystem;

TrainOptions Tiny() {
  TrainOptions o;
  o.hidden = 16;
  o.num_layers = 2;
  o.heads = 2;
  o.kv_heads = 1;
  o.intermediate = 32;
  o.batch = 2;
  o.seq = 8;
  o.steps = 6;
  o.warmup = 2;
  o.lr = 1e-2;
  o.min_lr = 1e-3;
  o.eval_batches = 2;
  o.seed = 11;
  return o;
}

Corpus TestCorpus() { return LoadCorpus(STRATA_SOURCE_DIR "/data/corpus.txt", 0.1, 9); }

fs::path TempDir(const std::string& name) {
  fs::path dir = fs::temp_directory_path() /
                 ("strata_trainer_test_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(dir);
  return dir;
}

// Bit-for-bit equality of floats (NaN-safe, -0 != +0).
bool SameBits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

std::vector<float> Values(const Tensor& t) { return Tensor(t).to_vector<float>(); }

TEST(Trainer, FirstStepIsClippedAdamWOnTheLossGradient) {
  // The reference composes the same step by hand: the loss of batch 0 on a
  // model initialized from the same seed, its gradients, the global norm and
  // clip coefficient in double on the host, and AdamW's first update
  // (m = (1-b1) g, v = (1-b2) g^2, bias-corrected: g / (|g| + eps)).
  TrainOptions o = Tiny();
  o.clip = 0.05;  // small enough to clip
  Corpus corpus = TestCorpus();
  nn::LlamaForCausalLM reference(o.ModelConfig(), random_key(o.seed));
  std::vector<Tensor*> ref_params = reference.parameters();
  sync(ref_params);
  Tensor ids = MakeBatch(
      corpus.train,
      WindowStarts(o.seed, 0, o.batch, o.seq, static_cast<int64_t>(corpus.train.size())), o.seq);
  Tensor loss = reference.loss(reference.forward(ids), ids);
  std::vector<Tensor> values;
  for (Tensor* p : ref_params) values.push_back(*p);
  std::vector<Tensor> grads = gradients(loss, values);
  double sq = 0;
  std::vector<std::vector<float>> g(grads.size()), p0(grads.size());
  for (size_t i = 0; i < grads.size(); ++i) {
    g[i] = Values(grads[i]);
    p0[i] = Values(values[i]);
    for (float x : g[i]) sq += static_cast<double>(x) * x;
  }
  const double norm = std::sqrt(sq);
  const double coef = std::min(1.0, o.clip / (norm + 1e-6));
  ASSERT_LT(coef, 1.0) << "the test wants clipping to happen; norm " << norm;
  const double lr0 = o.lr * 1.0 / static_cast<double>(o.warmup);  // warm-up step 0

  Trainer trainer(o, TestCorpus());
  StepStats s = trainer.Step();
  EXPECT_EQ(s.step, 1);
  EXPECT_DOUBLE_EQ(s.lr, lr0);
  EXPECT_NEAR(s.loss, loss.item<float>(), 1e-6);
  EXPECT_NEAR(s.grad_norm, norm, 1e-5 * norm);
  std::vector<Tensor*> params = trainer.model().parameters();
  ASSERT_EQ(params.size(), grads.size());
  for (size_t i = 0; i < params.size(); ++i) {
    std::vector<float> p1 = Values(*params[i]);
    for (size_t j = 0; j < p1.size(); ++j) {
      const double cg = coef * g[i][j];
      const double expected =
          p0[i][j] * (1 - lr0 * o.weight_decay) - lr0 * cg / (std::abs(cg) + 1e-8);
      // Where |g| is near eps the ratio is sensitive to the last bit of g.
      const double tol = std::abs(cg) < 1e-6 ? 0.05 * lr0 : 1e-6;
      ASSERT_NEAR(p1[j], expected, tol) << "parameter " << i << " element " << j;
    }
  }
}

TEST(Trainer, SavingMatrixProductsGivesTheSameLosses) {
  // --remat dots keeps the forward's products instead of recomputing them,
  // dots-no-batch only the projections': the same numbers, from a different
  // program than saving carries (it compiles its own step; the same graph
  // would be a cache hit). With attention fused, a layer has no batched
  // product left, so both policies keep the same values: dots-no-batch's
  // step is dots' program, a cache hit.
  TrainOptions o = Tiny();
  Trainer carries(o, TestCorpus());
  std::vector<StepStats> reference;
  for (int i = 0; i < 4; ++i) reference.push_back(carries.Step());
  for (const char* remat : {"dots", "dots-no-batch"}) {
    SCOPED_TRACE(remat);
    o.remat = remat;
    Trainer saving(o, TestCorpus());
    const int64_t compiles = lazy::Context::Get().metrics().compiles.load();
    for (int i = 0; i < 4; ++i) {
      StepStats b = saving.Step();
      if (i == 0 && std::string(remat) == "dots") {
        EXPECT_GT(lazy::Context::Get().metrics().compiles.load(), compiles);
      }
      EXPECT_NEAR(reference[i].loss, b.loss, 1e-6 * std::abs(b.loss)) << i;
      EXPECT_NEAR(reference[i].grad_norm, b.grad_norm, 1e-5 * std::abs(b.grad_norm)) << i;
    }
  }
  o.remat = "everything";
  EXPECT_THROW(Trainer(o, TestCorpus()), Error);
}

TEST(Trainer, SameSeedSameLossesBitForBit) {
  TrainOptions o = Tiny();
  Trainer a(o, TestCorpus()), b(o, TestCorpus());
  for (int i = 0; i < 5; ++i) {
    StepStats x = a.Step(), y = b.Step();
    EXPECT_TRUE(SameBits(x.loss, y.loss)) << i << ": " << x.loss << " vs " << y.loss;
    EXPECT_TRUE(SameBits(x.grad_norm, y.grad_norm)) << i;
  }
  o.seed += 1;
  Trainer c(o, TestCorpus());
  EXPECT_NE(c.Step().loss, a.history()[0].loss);  // another seed: other weights and batches
}

TEST(Trainer, ResumeEqualsTheRunThatNeverStopped) {
  TrainOptions o = Tiny();
  Trainer whole(o, TestCorpus());
  for (int i = 0; i < 6; ++i) whole.Step();

  fs::path dir = TempDir("resume");
  {
    Trainer first(o, TestCorpus());
    for (int i = 0; i < 3; ++i) first.Step();
    first.Evaluate();
    first.SaveCheckpoint(dir.string());
  }  // the first process is gone: only the checkpoint remains
  std::unique_ptr<Trainer> resumed = Trainer::Resume(dir.string(), o, TestCorpus());
  EXPECT_EQ(resumed->step(), 3);
  ASSERT_EQ(resumed->history().size(), 3u);  // the history came back too
  ASSERT_EQ(resumed->evals().size(), 1u);
  for (int i = 0; i < 3; ++i) resumed->Step();
  for (int i = 0; i < 6; ++i) {
    const StepStats &x = whole.history()[i], &y = resumed->history()[i];
    EXPECT_EQ(x.step, y.step);
    EXPECT_TRUE(SameBits(x.loss, y.loss)) << "step " << i + 1 << ": " << x.loss << " vs " << y.loss;
    EXPECT_TRUE(SameBits(x.grad_norm, y.grad_norm)) << i;
    EXPECT_EQ(x.lr, y.lr);
  }
  auto a = whole.model().named_parameters(), b = resumed->model().named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_EQ(a[i].second->bytes(), b[i].second->bytes()) << a[i].first;
  }
}

TEST(Trainer, ResumeRejectsOtherOptionsAndBrokenCheckpoints) {
  TrainOptions o = Tiny();
  fs::path dir = TempDir("reject");
  Trainer t(o, TestCorpus());
  t.Step();
  std::string step_dir = t.SaveCheckpoint(dir.string());

  auto error_of = [&](const TrainOptions& options, const std::string& path) {
    try {
      Trainer::Resume(path, options, TestCorpus());
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  TrainOptions other = o;
  other.batch = 4;
  EXPECT_NE(error_of(other, dir.string()).find("--batch 2, this run asks for --batch 4"),
            std::string::npos)
      << error_of(other, dir.string());
  other = o;
  other.steps = 10;  // more steps may be asked for
  other.eval_every = 3;
  EXPECT_NO_THROW(Trainer::Resume(dir.string(), other, TestCorpus()));
  EXPECT_NE(error_of(o, (dir / "nothing").string()).find("no checkpoint"), std::string::npos);
  fs::create_directories(dir / "empty");
  EXPECT_NE(error_of(o, (dir / "empty").string()).find("not a checkpoint"), std::string::npos);

  // A moment missing from optimizer.safetensors is named.
  fs::path broken = dir / "broken";
  fs::copy(step_dir, broken, fs::copy_options::recursive);
  {
    io::SafetensorsFile moments =
        io::SafetensorsFile::Open((broken / "optimizer.safetensors").string());
    std::vector<io::TensorData> kept;
    for (const std::string& name : moments.names()) {
      if (name == "exp_avg_sq.model.norm.weight") continue;
      const io::TensorView& v = moments.Get(name);
      kept.push_back({name, v.dtype, v.shape, std::vector<uint8_t>(v.data.begin(), v.data.end())});
    }
    kept.push_back({"exp_avg_sq.extra", DType::kF32, {1}, std::vector<uint8_t>(4)});
    io::WriteSafetensors((broken / "optimizer.safetensors").string(), kept);
  }
  EXPECT_NE(error_of(o, broken.string()).find("no tensor 'exp_avg_sq.model.norm.weight'"),
            std::string::npos)
      << error_of(o, broken.string());

  // A truncated model file is an error, not garbage weights.
  fs::path truncated = dir / "truncated";
  fs::copy(step_dir, truncated, fs::copy_options::recursive);
  fs::resize_file(truncated / "model.safetensors",
                  fs::file_size(truncated / "model.safetensors") / 2);
  EXPECT_NE(error_of(o, truncated.string()), "no error");

  // A state file that is not JSON.
  fs::path garbled = dir / "garbled";
  fs::copy(step_dir, garbled, fs::copy_options::recursive);
  std::ofstream(garbled / "trainer_state.json") << "{\"step\": 1,";
  EXPECT_NE(error_of(o, garbled.string()).find("not valid JSON"), std::string::npos);
}

TEST(Trainer, CheckpointsAreCompleteAndPruned) {
  TrainOptions o = Tiny();
  fs::path dir = TempDir("layout");
  Trainer t(o, TestCorpus());
  fs::create_directories(dir / "step-0000009.tmp");  // an interrupted save
  std::vector<std::string> written;
  for (int i = 0; i < 3; ++i) {
    t.Step();
    written.push_back(t.SaveCheckpoint(dir.string(), /*keep=*/2));
  }
  EXPECT_FALSE(fs::exists(written[0]));  // pruned
  EXPECT_TRUE(fs::exists(written[1]));
  EXPECT_TRUE(fs::exists(written[2]));
  EXPECT_FALSE(fs::exists(dir / "step-0000009.tmp"));
  std::ifstream latest(dir / "latest");
  std::string name;
  std::getline(latest, name);
  EXPECT_EQ(name, "step-0000003");
  for (const char* file :
       {"config.json", "model.safetensors", "optimizer.safetensors", "trainer_state.json"}) {
    EXPECT_TRUE(fs::exists(fs::path(written[2]) / file)) << file;
  }
  // The model half is a Hugging Face Llama directory: it loads and gives
  // the trainer's logits.
  auto loaded = nn::LoadLlama(written[2]);
  Tensor ids = Tensor::FromVector<int64_t>({84, 111, 109, 32, 115, 97, 105, 100}, {1, 8});
  std::vector<float> want = Values(t.model().forward(ids)), got = Values(loaded->forward(ids));
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(want[i], got[i]) << i;
}

TEST(Trainer, AStepIsOneCachedGraph) {
  Trainer t(Tiny(), TestCorpus());
  t.Step();
  t.Step();
  auto& m = lazy::Context::Get().metrics();
  for (int i = 0; i < 3; ++i) {
    int64_t compiles = m.compiles.load(), hits = m.cache_hits.load();
    t.Step();
    EXPECT_EQ(m.compiles.load(), compiles) << i;
    EXPECT_EQ(m.cache_hits.load(), hits + 1) << i;
  }
}

TEST(Trainer, EvaluateIsTheHeldOutMeanAndLeavesTrainingAlone) {
  TrainOptions o = Tiny();
  Trainer with_eval(o, TestCorpus()), without(o, TestCorpus());
  with_eval.Step();
  without.Step();
  float held = with_eval.Evaluate();
  // The reference: each held-out window's mean next-byte cross-entropy from
  // logits read back to the host, averaged over the batches.
  Corpus corpus = TestCorpus();
  std::vector<int64_t> starts = EvenWindowStarts(o.eval_batches * o.batch, o.seq,
                                                 static_cast<int64_t>(corpus.heldout.size()));
  double total = 0;
  for (int64_t b = 0; b < o.eval_batches; ++b) {
    double batch_sum = 0;
    for (int64_t w = 0; w < o.batch; ++w) {
      int64_t start = starts[b * o.batch + w];
      std::vector<int64_t> window(corpus.heldout.begin() + start,
                                  corpus.heldout.begin() + start + o.seq);
      std::vector<float> logits =
          Values(with_eval.model().forward(Tensor::FromVector(window, {1, o.seq})));
      for (int64_t s = 0; s + 1 < o.seq; ++s) {
        const float* row = logits.data() + s * 256;
        double top = *std::max_element(row, row + 256), z = 0;
        for (int v = 0; v < 256; ++v) z += std::exp(row[v] - top);
        batch_sum += top + std::log(z) - row[window[s + 1]];
      }
    }
    total += batch_sum / static_cast<double>(o.batch * (o.seq - 1));
  }
  EXPECT_NEAR(held, total / static_cast<double>(o.eval_batches), 1e-5);
  ASSERT_EQ(with_eval.evals().size(), 1u);
  EXPECT_EQ(with_eval.evals()[0].step, 1);
  EXPECT_TRUE(with_eval.model().is_training());
  for (int i = 0; i < 2; ++i) {
    EXPECT_TRUE(SameBits(with_eval.Step().loss, without.Step().loss)) << i;
  }
}

TEST(Trainer, GreedySamplingMatchesAnUnpaddedForwardAndCompilesOnce) {
  // A corpus whose next byte is known by hand: the alphabet, over and over.
  // A model trained on it continues "abc" with "defg...", and only if
  // sampling reads the right position of its padded window.
  std::string alphabet;
  for (int i = 0; i < 400; ++i) alphabet += "abcdefghijklmnopqrstuvwxyz";
  Corpus corpus;
  corpus.train = ByteTokenizer().Encode(alphabet);
  corpus.heldout = ByteTokenizer().Encode(alphabet.substr(0, 260));
  TrainOptions o = Tiny();
  o.steps = 150;
  o.warmup = 10;
  o.batch = 4;
  Trainer t(o, corpus);
  for (int i = 0; i < o.steps; ++i) t.Step();
  std::vector<int64_t> prompt = ByteTokenizer().Encode("abc");
  const int64_t count = o.seq + 5;  // past the window: the context slides
  auto& m = lazy::Context::Get().metrics();
  int64_t compiles = m.compiles.load();
  std::vector<int64_t> greedy = t.Sample(prompt, count, 0, 1);
  EXPECT_LE(m.compiles.load() - compiles, 1);  // one graph for every position
  compiles = m.compiles.load();
  EXPECT_EQ(t.Sample(prompt, count, 0, 2), greedy);  // greedy ignores the seed
  EXPECT_EQ(m.compiles.load(), compiles);
  ASSERT_EQ(static_cast<int64_t>(greedy.size()), count);
  EXPECT_EQ(ByteTokenizer().Decode(greedy), "defghijklmnop");

  // Reference: the model on exactly the last min(seq, n) tokens, no padding,
  // read at the last position; each greedy token must be its maximum (or
  // within rounding of it).
  NoGrad no_grad;
  t.model().eval();
  std::vector<int64_t> context = prompt;
  for (int64_t i = 0; i < count; ++i) {
    int64_t n = std::min<int64_t>(o.seq, static_cast<int64_t>(context.size()));
    std::vector<int64_t> window(context.end() - n, context.end());
    std::vector<float> logits = Values(t.model().forward(Tensor::FromVector(window, {1, n})));
    const float* row = logits.data() + (n - 1) * 256;
    float top = *std::max_element(row, row + 256);
    EXPECT_GE(row[greedy[i]], top - 1e-4f) << "token " << i;
    context.push_back(greedy[i]);
  }
  t.model().train();
}

TEST(Trainer, TemperatureSamplingIsSeededAndSharpensToGreedy) {
  TrainOptions o = Tiny();
  Trainer t(o, TestCorpus());
  for (int i = 0; i < 5; ++i) t.Step();
  std::vector<int64_t> prompt = {84};
  std::vector<int64_t> a = t.Sample(prompt, 40, 1.0, 7);
  EXPECT_EQ(t.Sample(prompt, 40, 1.0, 7), a);
  EXPECT_NE(t.Sample(prompt, 40, 1.0, 8), a);
  EXPECT_EQ(t.Sample(prompt, 20, 1e-6, 7), t.Sample(prompt, 20, 0, 7));
  EXPECT_THROW(t.Sample({}, 3, 1.0, 1), Error);
  EXPECT_THROW(t.Sample({300}, 3, 1.0, 1), Error);
  EXPECT_THROW(t.Sample(prompt, 3, -1.0, 1), Error);
}

TEST(DrawToken, FollowsTheSoftmaxOfTheScaledLogits) {
  std::vector<float> logits = {1.0f, 0.0f, 2.0f, -1.0f};
  for (double temperature : {1.0, 0.5, 2.0}) {
    std::vector<double> p(4);
    double z = 0;
    for (int i = 0; i < 4; ++i) z += p[i] = std::exp(logits[i] / temperature);
    SplitMix64 rng(3);
    std::vector<int> counts(4);
    const int n = 40000;
    for (int k = 0; k < n; ++k) ++counts[DrawToken(logits, temperature, rng)];
    for (int i = 0; i < 4; ++i) {
      double q = p[i] / z, sigma = std::sqrt(q * (1 - q) / n);
      EXPECT_NEAR(counts[i] / static_cast<double>(n), q, 5 * sigma + 1e-4)
          << "temperature " << temperature << " token " << i;
    }
  }
  SplitMix64 rng(1);
  EXPECT_EQ(DrawToken({0.5f, 3.0f, 3.0f}, 0, rng), 1);  // greedy: first maximum
  EXPECT_THROW(DrawToken({}, 1.0, rng), Error);
  EXPECT_THROW(DrawToken({NAN, NAN}, 1.0, rng), Error);
}

int64_t RssBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

TEST(Trainer, AThousandStepsKeepMemoryFlat) {
  TrainOptions o = Tiny();
  o.num_layers = 1;
  o.steps = 1000;
  Trainer t(o, TestCorpus());
  auto& context = lazy::Context::Get();
  size_t live_at_100 = 0;
  int64_t rss_at_200 = 0;
  for (int i = 1; i <= 1000; ++i) {
    t.Step();
    if (i == 100) live_at_100 = context.LiveValues().size();
    if (i == 200) rss_at_200 = RssBytes();
  }
  EXPECT_EQ(context.LiveValues().size(), live_at_100);  // no tensor accumulates
  const int64_t growth = RssBytes() - rss_at_200;
  EXPECT_LT(growth, 4 << 20) << "RSS grew " << growth << " bytes over 800 steps";
  EXPECT_LT(t.history().back().loss, t.history().front().loss);
}

TEST(LossCurveSvg, PlotsEveryStepAndEvaluation) {
  std::vector<StepStats> history;
  for (int i = 1; i <= 50; ++i) history.push_back({.step = i, .loss = 5.0f / i});
  std::vector<EvalPoint> evals = {{25, 0.5f}, {50, 0.3f}};
  std::string svg = LossCurveSvg(history, evals, "a <title> & more");
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_NE(svg.find("a &lt;title&gt; &amp; more"), std::string::npos);
  // The raw polyline has one point per step.
  size_t line = svg.find("<polyline points=\"");
  ASSERT_NE(line, std::string::npos);
  size_t end = svg.find('"', line + 18);
  std::string points = svg.substr(line + 18, end - line - 18);
  EXPECT_EQ(std::count(points.begin(), points.end(), ','), 50);
  size_t circles = 0;
  for (size_t at = svg.find("<circle"); at != std::string::npos; at = svg.find("<circle", at + 1))
    ++circles;
  EXPECT_EQ(circles, 2u + 1u);  // the evaluations and the legend's marker
}

TEST(Trainer, AKillInsideAResaveOfTheSameStepStillResumes) {
  // Issue 14's finding: re-saving step N removed step-N before renaming
  // step-N.tmp into place, so a kill between the two left `latest` naming
  // nothing. Recreate that moment: the new checkpoint complete in
  // step-N.tmp, step-N gone.
  fs::path dir = TempDir("resave");
  TrainOptions o = Tiny();
  std::vector<float> uninterrupted;
  {
    Trainer t(o, TestCorpus());
    for (int i = 0; i < 6; ++i) uninterrupted.push_back(t.Step().loss);
  }
  {
    Trainer t(o, TestCorpus());
    for (int i = 0; i < 3; ++i) t.Step();
    t.SaveCheckpoint(dir.string());
    t.SaveCheckpoint(dir.string());  // the same step again: the old one is replaced whole
  }
  EXPECT_FALSE(fs::exists(dir / "step-0000003.old"));
  fs::rename(dir / "step-0000003", dir / "step-0000003.tmp");
  auto resumed = Trainer::Resume(dir.string(), o, TestCorpus());
  ASSERT_EQ(resumed->step(), 3);
  for (int i = 3; i < 6; ++i) EXPECT_TRUE(SameBits(resumed->Step().loss, uninterrupted[i])) << i;
  EXPECT_TRUE(fs::exists(dir / "step-0000003" / "trainer_state.json"));
  fs::remove_all(dir);
}

TEST(Trainer, DeeplyNestedTrainerStateIsAnErrorNotACrash) {
  fs::path dir = TempDir("deep");
  TrainOptions o = Tiny();
  {
    Trainer t(o, TestCorpus());
    t.Step();
    t.SaveCheckpoint(dir.string());
  }
  std::ofstream(dir / "step-0000001" / "trainer_state.json")
      << std::string(65000, '[') << std::string(65000, ']');
  try {
    Trainer::Resume(dir.string(), o, TestCorpus());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nests deeper than 64 levels"), std::string::npos)
        << e.what();
  }
  fs::remove_all(dir);
}

TEST(Trainer, ACorruptCheckpointIsAnErrorNamingTheFile) {
  // Issue 14: a flipped byte in a checkpoint's weights was accepted.
  fs::path dir = TempDir("corrupt");
  TrainOptions o = Tiny();
  {
    Trainer t(o, TestCorpus());
    t.Step();
    t.SaveCheckpoint(dir.string());
  }
  fs::path weights = dir / "step-0000001" / "model.safetensors";
  {
    std::fstream f(weights, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-5, std::ios::end);  // inside the last tensor's bytes
    char c = 0;
    f.read(&c, 1);
    f.seekp(-5, std::ios::end);
    c ^= 0x10;
    f.write(&c, 1);
  }
  try {
    Trainer::Resume(dir.string(), o, TestCorpus());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not match its checksum"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("model.safetensors"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

// Flips one byte `from_end` bytes before the end of `file`.
void FlipByte(const fs::path& file, int from_end) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(-from_end, std::ios::end);
  char c = 0;
  f.read(&c, 1);
  f.seekp(-from_end, std::ios::end);
  c ^= 0x10;
  f.write(&c, 1);
}

TEST(Trainer, ADamagedNewestCheckpointNamesTheNewestIntactOneAndCanFallBackToIt) {
  // Checkpoints after steps 3 and 6 of 9; then the one of step 6 is damaged
  // three ways. Each is an error naming it, what is wrong and step 3; with
  // fall_back the run resumes from step 3 and ends as the uninterrupted run.
  TrainOptions o = Tiny();
  o.steps = 9;
  std::vector<float> whole;
  {
    Trainer t(o, TestCorpus());
    for (int i = 0; i < 9; ++i) whole.push_back(t.Step().loss);
  }
  struct Damage {
    const char* what;
    const char* expected;  // in the error
    std::function<void(const fs::path& step)> apply;
  };
  const std::vector<Damage> damages = {
      {"a flipped byte in the weights", "does not match its checksum",
       [](const fs::path& step) { FlipByte(step / "model.safetensors", 5); }},
      {"the moments cut short", "optimizer.safetensors",
       [](const fs::path& step) {
         fs::resize_file(step / "optimizer.safetensors",
                         fs::file_size(step / "optimizer.safetensors") - 100);
       }},
      {"latest naming nothing", "which is not a complete checkpoint",
       [](const fs::path& step) { fs::remove_all(step); }},
  };
  for (const Damage& damage : damages) {
    SCOPED_TRACE(damage.what);
    fs::path dir = TempDir("damaged");
    {
      Trainer t(o, TestCorpus());
      for (int i = 0; i < 6; ++i) {
        t.Step();
        if (t.step() % 3 == 0) t.SaveCheckpoint(dir.string());
      }
    }
    damage.apply(dir / "step-0000006");
    try {
      Trainer::Resume(dir.string(), o, TestCorpus());
      ADD_FAILURE() << "expected an error";
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("step-0000006"), std::string::npos) << message;
      EXPECT_NE(message.find(damage.expected), std::string::npos) << message;
      EXPECT_NE(message.find("The newest intact one is '" + (dir / "step-0000003").string()),
                std::string::npos)
          << message;
      EXPECT_NE(message.find("--fall-back"), std::string::npos) << message;
    }
    std::unique_ptr<Trainer> resumed = Trainer::Resume(dir.string(), o, TestCorpus(), true);
    EXPECT_EQ(resumed->step(), 3);
    EXPECT_NE(resumed->resume_note().find("resumed from '" + (dir / "step-0000003").string()),
              std::string::npos)
        << resumed->resume_note();
    for (int i = 3; i < 9; ++i) EXPECT_TRUE(SameBits(resumed->Step().loss, whole[i])) << i;
    fs::remove_all(dir);
  }
}

TEST(Trainer, OptionsThatDoNotFitAreNotDamageToFallBackPast) {
  TrainOptions o = Tiny();
  fs::path dir = TempDir("options");
  {
    Trainer t(o, TestCorpus());
    t.Step();
    t.SaveCheckpoint(dir.string());
    t.Step();
    t.SaveCheckpoint(dir.string());
  }
  TrainOptions other = o;
  other.lr = 5e-3;
  try {
    Trainer::Resume(dir.string(), other, TestCorpus(), true);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("was trained with --lr"), std::string::npos) << e.what();
  }
  // Nothing older is intact: the error says so.
  FlipByte(dir / "step-0000002" / "model.safetensors", 5);
  FlipByte(dir / "step-0000001" / "model.safetensors", 5);
  try {
    Trainer::Resume(dir.string(), o, TestCorpus(), true);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no older checkpoint"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace strata::train
