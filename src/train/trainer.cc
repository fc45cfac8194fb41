#include "strata/train/trainer.h"

#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "json_file.h"
#include "strata/autograd/grad.h"
#include "strata/core/error.h"
#include "strata/io/files.h"
#include "strata/io/safetensors.h"
#include "strata/lazy/context.h"
#include "strata/lazy/ops.h"
#include "strata/nn/mixed_precision.h"
#include "strata/runtime/process_group.h"
#include "strata/runtime/trace.h"
#include "strata/train/checkpoint_shards.h"

namespace strata::train {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr const char* kStateFormat = "strata-train-1";

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// The options as JSON, keyed by their command-line names.
json OptionsToJson(const TrainOptions& o) {
  return json{{"hidden", o.hidden},
              {"num-layers", o.num_layers},
              {"heads", o.heads},
              {"kv-heads", o.kv_heads},
              {"intermediate", o.intermediate},
              {"layers", o.layers},
              {"remat", o.remat},
              {"dtype", o.dtype},
              {"batch", o.batch},
              {"seq", o.seq},
              {"heldout", o.heldout},
              {"steps", o.steps},
              {"warmup", o.warmup},
              {"lr", o.lr},
              {"min-lr", o.min_lr},
              {"weight-decay", o.weight_decay},
              {"beta1", o.beta1},
              {"beta2", o.beta2},
              {"clip", o.clip},
              {"seed", o.seed},
              {"eval-every", o.eval_every},
              {"eval-batches", o.eval_batches},
              {"mesh", o.mesh},
              {"sharding", o.sharding}};
}

// Options a resumed run may change: they do not touch the updates.
bool FreeOnResume(const std::string& key) {
  return key == "steps" || key == "eval-every" || key == "eval-batches" || key == "mesh" ||
         key == "sharding";
}

template <typename T>
T Field(const json& object, const char* key, const fs::path& file) {
  auto it = object.find(key);
  if (it == object.end()) Fail("[train] '{}' has no \"{}\"", file.string(), key);
  try {
    return it->get<T>();
  } catch (const json::exception&) {
    Fail("[train] \"{}\" in '{}' has the wrong type: {}", key, file.string(), it->dump());
  }
}

// Whether a step directory was written whole: one process's has its weights
// and then its state; many processes' have the index of their files, which
// process 0 writes last.
bool IsComplete(const fs::path& dir) {
  return fs::exists(dir / "trainer_state.json") &&
         (fs::exists(dir / "model.safetensors") || fs::exists(dir / kShardIndexName));
}

// The processes of the job, when there are several.
const runtime::ProcessGroup* Job() {
  const runtime::ProcessGroup* group = lazy::Context::Get().process_group();
  return group && group->size() > 1 ? group : nullptr;
}

// Runs `part` (a part of `what` every process takes) on this process; in a
// job of several, then learns whether it worked on every process
// (runtime::AgreeAcrossProcesses).
template <typename Part>
void OnEveryProcess(const char* what, Part&& part) {
  std::exception_ptr error;
  try {
    part();
  } catch (...) {
    error = std::current_exception();
  }
  if (const runtime::ProcessGroup* job = Job()) {
    runtime::AgreeAcrossProcesses(*job, error, what);
  } else if (error) {
    std::rethrow_exception(error);
  }
}

// The step directory a checkpoint path names: itself, or what its `latest`
// file points at.
fs::path StepDirectory(const fs::path& checkpoint) {
  if (!fs::exists(checkpoint)) Fail("[train] no checkpoint at '{}'", checkpoint.string());
  if (fs::exists(checkpoint / "trainer_state.json")) {
    if (!IsComplete(checkpoint))
      Fail("[train] '{}' is not a complete checkpoint: its save was interrupted",
           checkpoint.string());
    return checkpoint;
  }
  fs::path latest = checkpoint / "latest";
  if (!fs::exists(latest)) {
    Fail(
        "[train] '{}' is not a checkpoint: expected trainer_state.json in it (a step directory) "
        "or a 'latest' file naming one",
        checkpoint.string());
  }
  std::ifstream in(latest);
  std::string name;
  std::getline(in, name);
  if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..")
    Fail("[train] '{}' should name a step directory, found '{}'", latest.string(), name);
  fs::path dir = checkpoint / name;
  // A save interrupted while re-saving this step: the new directory is
  // complete in step-N.tmp, or the old one waits in step-N.old. Put the
  // complete one in place.
  if (!fs::exists(dir)) {
    for (const char* suffix : {".tmp", ".old"}) {
      fs::path candidate = checkpoint / (name + suffix);
      if (IsComplete(candidate)) {
        fs::rename(candidate, dir);
        break;
      }
    }
  }
  if (!IsComplete(dir))
    Fail("[train] '{}' names '{}', which is not a complete checkpoint", latest.string(), name);
  return dir;
}

// The model in eval mode without gradients for a scope, then back in the
// mode it was in (also when the scope throws).
class EvalScope {
 public:
  explicit EvalScope(nn::Module& model) : model_(model), was_training_(model.is_training()) {
    model_.eval();
  }
  ~EvalScope() { model_.train(was_training_); }
  EvalScope(const EvalScope&) = delete;
  EvalScope& operator=(const EvalScope&) = delete;

 private:
  NoGrad no_grad_;
  nn::Module& model_;
  bool was_training_;
};

// What the step computes in: --dtype.
DType ComputeType(const TrainOptions& o) { return o.dtype == "bf16" ? DType::kBF16 : DType::kF32; }

bool IsStepDirectoryName(const std::string& name) {
  return name.size() == 12 && name.rfind("step-", 0) == 0 &&
         std::all_of(name.begin() + 5, name.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

void TrainOptions::Validate() const {
  auto require = [](bool ok, const char* what, auto value) {
    if (!ok) Fail("[train] {} (got {})", what, value);
  };
  require(hidden > 0, "--hidden must be positive", hidden);
  require(num_layers > 0, "--num-layers must be positive", num_layers);
  require(heads > 0 && hidden % heads == 0, "--heads must divide --hidden", heads);
  require((hidden / std::max<int64_t>(heads, 1)) % 2 == 0,
          "hidden / heads (the head size) must be even for rotary embeddings", hidden / heads);
  require(kv_heads > 0 && heads % kv_heads == 0, "--kv-heads must divide --heads", kv_heads);
  require(intermediate >= 0, "--intermediate must be positive (or 0 for 8/3 hidden)", intermediate);
  require(layers == "scan" || layers == "unrolled", "--layers must be scan or unrolled", layers);
  require(remat == "carries" || remat == "dots" || remat == "dots-no-batch",
          "--remat must be carries, dots or dots-no-batch", remat);
  require(dtype == "f32" || dtype == "bf16", "--dtype must be f32 or bf16", dtype);
  require(batch > 0, "--batch must be positive", batch);
  require(seq >= 2, "--seq must be at least 2 (a token and the one it predicts)", seq);
  require(heldout > 0 && heldout < 1, "--heldout must be in (0, 1)", heldout);
  require(steps >= 0, "--steps must not be negative", steps);
  require(warmup >= 0, "--warmup must not be negative", warmup);
  require(lr > 0 && std::isfinite(lr), "--lr must be positive", lr);
  require(min_lr >= 0 && min_lr <= lr, "--min-lr must be in [0, lr]", min_lr);
  require(weight_decay >= 0 && std::isfinite(weight_decay),
          "--weight-decay must be finite and not negative", weight_decay);
  require(beta1 >= 0 && beta1 < 1, "--beta1 must be in [0, 1)", beta1);
  require(beta2 >= 0 && beta2 < 1, "--beta2 must be in [0, 1)", beta2);
  require(clip >= 0, "--clip must not be negative (0 turns clipping off)", clip);
  require(eval_every >= 0, "--eval-every must not be negative (0 turns evaluation off)",
          eval_every);
  require(eval_batches > 0, "--eval-batches must be positive", eval_batches);
  if (std::optional<ir::Mesh> m = Mesh()) {
    nn::LlamaShardingPlan(sharding, *m);  // names a bad plan
    // Megatron splits attention by heads: each device holds whole heads.
    const std::vector<std::string>& names = m->axis_names();
    for (size_t i = 0; i < names.size(); ++i) {
      if (names[i] != "model" || sharding.find("tp") == std::string::npos) continue;
      const int64_t model = m->shape()[i];
      if (heads % model != 0 || kv_heads % model != 0) {
        Fail(
            "[train] --sharding {} splits attention heads over the 'model' axis: --heads ({}) and "
            "--kv-heads ({}) must both be multiples of its size {}",
            sharding, heads, kv_heads, model);
      }
    }
  }
}

std::optional<ir::Mesh> TrainOptions::Mesh() const {
  if (mesh.empty()) return std::nullopt;
  std::vector<int64_t> shape;
  std::vector<std::string> names;
  size_t start = 0;
  while (start <= mesh.size()) {
    size_t end = mesh.find(',', start);
    if (end == std::string::npos) end = mesh.size();
    std::string part = mesh.substr(start, end - start);
    size_t eq = part.find('=');
    int64_t size = 0;
    if (eq != std::string::npos && eq > 0) {
      try {
        size_t used = 0;
        size = std::stoll(part.substr(eq + 1), &used);
        if (used != part.size() - eq - 1) size = 0;
      } catch (const std::exception&) {
        size = 0;
      }
    }
    if (size > 1024) {
      Fail("[train] --mesh axis '{}' asks for {} devices; at most 1024 run in one process", part,
           size);
    }
    if (size < 1) {
      Fail("[train] --mesh takes axis=size pairs such as data=2,model=2; '{}' is not one", part);
    }
    names.push_back(part.substr(0, eq));
    shape.push_back(size);
    start = end + 1;
  }
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  if (n > 1024) Fail("[train] --mesh {} has {} devices; at most 1024", mesh, n);
  std::vector<int64_t> ids(n);
  for (int64_t i = 0; i < n; ++i) ids[i] = i;
  return ir::Mesh(ids, shape, names);
}

io::LlamaConfig TrainOptions::ModelConfig() const {
  io::LlamaConfig c;
  c.vocab_size = ByteTokenizer::kVocabSize;
  c.hidden_size = hidden;
  c.intermediate_size = intermediate > 0 ? intermediate : (8 * hidden / 3 + 31) / 32 * 32;
  c.num_hidden_layers = num_layers;
  c.num_attention_heads = heads;
  c.num_key_value_heads = kv_heads;
  c.head_dim = hidden / heads;
  c.max_position_embeddings = seq;
  c.rms_norm_eps = 1e-5;
  c.bos_token_id = std::nullopt;  // bytes: no special tokens
  c.eos_token_id = std::nullopt;
  c.torch_dtype = DType::kF32;
  return c;
}

Trainer::Trainer(const TrainOptions& options, Corpus corpus)
    : Trainer(options, std::move(corpus), [&] {
        options.Validate();
        return std::make_unique<nn::LlamaForCausalLM>(options.ModelConfig(),
                                                      random_key(options.seed));
      }()) {
  // The initial weights and moments become data now, so the first step runs
  // the same cached graph as every later one.
  std::vector<Tensor*> state = params_;
  for (Tensor& t : optimizer_->exp_avg()) state.push_back(&t);
  for (Tensor& t : optimizer_->exp_avg_sq()) state.push_back(&t);
  sync(state);
}

Trainer::Trainer(const TrainOptions& options, Corpus corpus,
                 std::unique_ptr<nn::LlamaForCausalLM> model)
    : options_(options), corpus_(std::move(corpus)), model_(std::move(model)) {
  options_.Validate();
  const int64_t need = options_.seq;
  if (static_cast<int64_t>(corpus_.train.size()) < need ||
      static_cast<int64_t>(corpus_.heldout.size()) < need) {
    Fail("[train] the corpus has {} training and {} held-out tokens; a window needs {}",
         corpus_.train.size(), corpus_.heldout.size(), need);
  }
  model_->layer_mode =
      options_.layers == "unrolled" ? nn::LayerMode::kUnrolled : nn::LayerMode::kScan;
  model_->layer_remat = options_.remat == "dots"            ? Remat::kSaveDots
                        : options_.remat == "dots-no-batch" ? Remat::kSaveDotsWithNoBatchDims
                                                            : Remat::kSaveCarries;
  if (std::optional<ir::Mesh> mesh = options_.Mesh()) {
    plan_ = nn::LlamaShardingPlan(options_.sharding, *mesh);
    plan_->Apply(*model_);
  }
  for (auto& [name, tensor] : model_->named_parameters()) {
    names_.push_back(name);
    params_.push_back(tensor);
  }
  optimizer_ = std::make_unique<nn::AdamW>(params_, nn::AdamWOptions{
                                                        .lr = options_.lr,
                                                        .beta1 = options_.beta1,
                                                        .beta2 = options_.beta2,
                                                        .eps = 1e-8,
                                                        .weight_decay = options_.weight_decay,
                                                    });
  if (plan_) {  // AdamW's moments are laid out like their parameters
    for (size_t i = 0; i < params_.size(); ++i) {
      mark_sharding(optimizer_->exp_avg()[i], plan_->mesh, params_[i]->sharding()->spec());
      mark_sharding(optimizer_->exp_avg_sq()[i], plan_->mesh, params_[i]->sharding()->spec());
    }
  }
}

int64_t Trainer::parameter_count() const {
  int64_t n = 0;
  for (const Tensor* p : params_) n += p->shape().num_elements();
  return n;
}

StepStats Trainer::Step() {
  trace::Span span("train", fmt::format("step {}", step_ + 1));
  const auto start = std::chrono::steady_clock::now();
  const double lr = nn::warmup_cosine_lr(step_, std::min(options_.warmup, options_.steps),
                                         options_.steps, options_.lr, options_.min_lr);
  optimizer_->set_lr(lr);
  const std::vector<int64_t> starts =
      WindowStarts(options_.seed, step_, options_.batch, options_.seq,
                   static_cast<int64_t>(corpus_.train.size()));
  Tensor ids =
      plan_ ? MakeShardedBatch(corpus_.train, starts, options_.seq, plan_->mesh, plan_->batch)
            : MakeBatch(corpus_.train, starts, options_.seq);
  std::vector<Tensor> values;
  for (Tensor* p : params_) values.push_back(*p);
  // Hugging Face's loss with labels = input_ids: position s predicts s + 1.
  Tensor loss = [&] {
    nn::ComputeIn compute(params_, ComputeType(options_));
    return model_->loss(model_->forward(ids), ids);
  }();
  std::vector<Tensor> grads = gradients(loss, values);
  values.clear();
  Tensor norm = nn::clip_grad_norm(
      grads, options_.clip > 0 ? options_.clip : std::numeric_limits<double>::infinity());
  optimizer_->step(grads);
  grads.clear();
  build_seconds_ += Seconds(start);

  // Everything the next step reads, plus what we report: one graph. The old
  // weights and moments are read by nothing else, so the new ones may take
  // their buffers (donation): a step does not hold two copies of them.
  std::vector<Tensor*> roots = params_;
  for (Tensor& t : optimizer_->exp_avg()) roots.push_back(&t);
  for (Tensor& t : optimizer_->exp_avg_sq()) roots.push_back(&t);
  roots.push_back(&loss);
  roots.push_back(&norm);
  lazy::Context& context = lazy::Context::Get();
  const bool donating = context.buffer_donation();
  context.set_buffer_donation(true);
  try {
    sync(roots);
  } catch (...) {
    context.set_buffer_donation(donating);
    throw;
  }
  context.set_buffer_donation(donating);

  ++step_;
  StepStats stats{.step = step_,
                  .loss = loss.item<float>(),
                  .grad_norm = norm.item<float>(),
                  .lr = lr,
                  .seconds = Seconds(start)};
  history_.push_back(stats);
  return stats;
}

float Trainer::Evaluate() {
  EvalScope eval(*model_);
  nn::ComputeIn compute(params_, ComputeType(options_));
  const int64_t b = options_.batch;
  std::vector<int64_t> starts = EvenWindowStarts(options_.eval_batches * b, options_.seq,
                                                 static_cast<int64_t>(corpus_.heldout.size()));
  double total = 0;
  for (int64_t i = 0; i < options_.eval_batches; ++i) {
    std::vector<int64_t> part(starts.begin() + i * b, starts.begin() + (i + 1) * b);
    Tensor ids =
        plan_ ? MakeShardedBatch(corpus_.heldout, part, options_.seq, plan_->mesh, plan_->batch)
              : MakeBatch(corpus_.heldout, part, options_.seq);
    total += model_->loss(model_->forward(ids), ids).item<float>();
  }
  float mean = static_cast<float>(total / static_cast<double>(options_.eval_batches));
  evals_.push_back({step_, mean});
  return mean;
}

std::vector<int64_t> Trainer::Sample(const std::vector<int64_t>& prompt, int64_t count,
                                     double temperature, uint64_t seed) {
  if (prompt.empty()) Fail("[sample] the prompt must hold at least one token");
  if (count < 0) Fail("[sample] cannot sample {} tokens", count);
  if (!(temperature >= 0) || !std::isfinite(temperature))
    Fail("[sample] the temperature must be >= 0 (0 is greedy), got {}", temperature);
  const int64_t vocab = ByteTokenizer::kVocabSize;
  for (int64_t id : prompt) {
    if (id < 0 || id >= vocab) Fail("[sample] prompt token {} is outside [0, {})", id, vocab);
  }
  EvalScope eval(*model_);
  nn::ComputeIn compute(params_, ComputeType(options_));
  const int64_t window = options_.seq;
  SplitMix64 rng(seed);
  std::vector<int64_t> context = prompt, generated;
  for (int64_t i = 0; i < count; ++i) {
    // The last `window` tokens, left-aligned and padded after: attention is
    // causal, so the padding never reaches the position we read.
    const int64_t n = std::min<int64_t>(window, static_cast<int64_t>(context.size()));
    std::vector<int64_t> ids(context.end() - n, context.end());
    ids.resize(window, 0);
    Tensor logits = model_->forward(Tensor::FromVector(ids, {1, window}));
    Tensor row = index_select(reshape(logits, {window, vocab}), 0,
                              Tensor::FromVector<int64_t>({n - 1}, {1}));
    const int64_t next = DrawToken(astype(row, DType::kF32).to_vector<float>(), temperature, rng);
    context.push_back(next);
    generated.push_back(next);
  }
  return generated;
}

int64_t DrawToken(const std::vector<float>& logits, double temperature, SplitMix64& rng) {
  if (logits.empty()) Fail("[sample] no logits to draw from");
  if (!(temperature >= 0) || !std::isfinite(temperature))
    Fail("[sample] the temperature must be >= 0 (0 is greedy), got {}", temperature);
  const auto top = std::max_element(logits.begin(), logits.end());
  if (!std::isfinite(*top)) Fail("[sample] the logits are not finite (largest: {})", *top);
  if (temperature == 0) return top - logits.begin();
  std::vector<double> weights(logits.size());
  double sum = 0;
  for (size_t j = 0; j < logits.size(); ++j)
    sum += weights[j] = std::exp((static_cast<double>(logits[j]) - *top) / temperature);
  double u = rng.Uniform() * sum;
  for (size_t j = 0; j < logits.size(); ++j) {
    if ((u -= weights[j]) < 0) return static_cast<int64_t>(j);
  }
  return top - logits.begin();  // u landed on the rounding slack: the likeliest token
}

void Trainer::WriteCheckpointFiles(const fs::path& dir) const {
  nn::SaveLlama(*model_, dir.string());
  std::vector<io::TensorData> moments;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& m = optimizer_->exp_avg()[i];
    const Tensor& v = optimizer_->exp_avg_sq()[i];
    moments.push_back({"exp_avg." + names_[i], m.dtype(), m.shape().dims(), m.bytes()});
    moments.push_back({"exp_avg_sq." + names_[i], v.dtype(), v.shape().dims(), v.bytes()});
  }
  std::map<std::string, std::string> metadata = io::ChecksumMetadata(moments);
  metadata["step"] = std::to_string(step_);
  io::WriteSafetensors((dir / "optimizer.safetensors").string(), moments, metadata);
  WriteTrainerState(dir);
}

std::vector<NamedTensor> Trainer::StateTensors() const {
  std::vector<NamedTensor> state;
  for (size_t i = 0; i < params_.size(); ++i) {
    state.push_back({names_[i], params_[i]});
    state.push_back({"exp_avg." + names_[i], &optimizer_->exp_avg()[i]});
    state.push_back({"exp_avg_sq." + names_[i], &optimizer_->exp_avg_sq()[i]});
  }
  return state;
}

void Trainer::WriteTrainerState(const fs::path& dir) const {
  json state;
  state["format"] = kStateFormat;
  state["step"] = step_;
  state["options"] = OptionsToJson(options_);
  json history = json::array();
  for (const StepStats& s : history_)
    history.push_back({s.step, s.loss, s.grad_norm, s.lr, s.seconds});
  state["history"] = std::move(history);  // [step, loss, grad_norm, lr, seconds]
  json evals = json::array();
  for (const EvalPoint& e : evals_) evals.push_back({e.step, e.loss});
  state["evals"] = std::move(evals);  // [step, held-out loss]
  std::string text = state.dump(1);
  io::WriteFileAtomically((dir / "trainer_state.json").string(), {text});
}

namespace {

// Puts the written step directory `tmp` in place as root/name, points
// `latest` at it and keeps the newest `keep` step directories.
void CommitStep(const fs::path& root, const std::string& name, const fs::path& tmp, int keep) {
  // The step directory appears whole or not at all; then `latest` moves. A
  // re-save of the same step first moves the old directory aside (rename is
  // atomic; a directory cannot be renamed over a non-empty one), so a crash
  // at any point leaves a complete step-N, step-N.tmp or step-N.old that
  // StepDirectory recovers.
  const fs::path final_dir = root / name;
  const fs::path old_dir = root / (name + ".old");
  fs::remove_all(old_dir);
  if (fs::exists(final_dir)) fs::rename(final_dir, old_dir);
  fs::rename(tmp, final_dir);
  std::string latest = name + "\n";
  io::WriteFileAtomically((root / "latest").string(), {latest});
  fs::remove_all(old_dir);

  std::vector<std::string> steps;
  for (const fs::directory_entry& entry : fs::directory_iterator(root)) {
    std::string n = entry.path().filename().string();
    if (!entry.is_directory()) continue;
    if (IsStepDirectoryName(n)) {
      steps.push_back(n);
    } else if (n.size() > 4 && n.ends_with(".tmp") && IsStepDirectoryName(n.substr(0, 12))) {
      fs::remove_all(entry.path());  // left by an interrupted save
    }
  }
  std::sort(steps.begin(), steps.end());
  for (size_t i = 0; i + keep < steps.size(); ++i) {
    if (steps[i] != name) fs::remove_all(root / steps[i]);
  }
}

}  // namespace

std::string Trainer::SaveCheckpoint(const std::string& dir, int keep) const {
  if (keep < 1) Fail("[checkpoint] must keep at least one checkpoint, got {}", keep);
  const runtime::ProcessGroup* job = Job();
  const bool leader = !job || job->rank() == 0;
  const fs::path root(dir);
  const std::string name = fmt::format("step-{:07d}", step_);
  const fs::path tmp = root / (name + ".tmp");
  // Every tile must be data to be written (a resumed model's stacked layers
  // may still be a pending graph); a no-op after a step.
  std::vector<Tensor*> state = params_;
  for (Tensor& t : optimizer_->exp_avg()) state.push_back(&t);
  for (Tensor& t : optimizer_->exp_avg_sq()) state.push_back(&t);
  sync(state);
  OnEveryProcess("checkpoint", [&] {
    if (!leader) return;
    io::MakeDirectories(root, "[train] checkpoint:");
    fs::remove_all(tmp);
    io::MakeDirectories(tmp, "[train] checkpoint:");
  });
  // A save that fails (a full disk, a file-size limit, a process that could
  // not write its part) leaves no partial step-N.tmp behind; the previous
  // checkpoint and `latest` are untouched. In a job of several processes
  // each writes its own tiles; process 0 writes the index (the mark that
  // the checkpoint is whole) only once every process has written its part.
  try {
    OnEveryProcess("checkpoint", [&] {
      if (!job) {
        WriteCheckpointFiles(tmp);
        return;
      }
      // Made by process 0 already when the processes share the directory;
      // made here when they do not, so that process 0 names the problem.
      io::MakeDirectories(tmp, "[train] checkpoint:");
      WriteShardFile(tmp, StateTensors(), job->rank(), job->size());
      if (leader) {
        io::WriteLlamaConfig(tmp / "config.json", model_->model.config);
        WriteTrainerState(tmp);
      }
    });
    OnEveryProcess("checkpoint", [&] {
      if (job && leader) WriteShardIndex(tmp, StateTensors(), job->size());
    });
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(tmp, ignored);  // by each process: their directories may not be one
    throw;
  }
  OnEveryProcess("checkpoint", [&] {
    if (leader) CommitStep(root, name, tmp, keep);
  });
  return (root / name).string();
}

namespace {

// Options of this run that the checkpoint's updates do not fit: the user's
// to change, not damage (no older checkpoint would fit them either).
class OptionsDoNotFit : public Error {
 public:
  using Error::Error;
};

// The complete step directories under a checkpoint directory, newest first.
std::vector<fs::path> CompleteSteps(const fs::path& root) {
  std::vector<fs::path> steps;
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(root, error)) {
    if (entry.is_directory() && IsStepDirectoryName(entry.path().filename().string()) &&
        IsComplete(entry.path()))
      steps.push_back(entry.path());
  }
  std::sort(steps.rbegin(), steps.rend());
  return steps;
}

// Whether every process of the job did what `ok` says this one did.
bool EveryProcess(bool ok) {
  const runtime::ProcessGroup* job = Job();
  if (!job) return ok;
  const std::vector<int64_t> flags = runtime::AllGatherFromProcesses(*job, ok ? 1 : 0);
  return std::find(flags.begin(), flags.end(), 0) == flags.end();
}

}  // namespace

std::unique_ptr<Trainer> Trainer::Resume(const std::string& checkpoint, const TrainOptions& options,
                                         Corpus corpus, bool fall_back) {
  options.Validate();
  // Process 0 first: it may put the directory of an interrupted save in place.
  fs::path dir;
  std::string latest_error;
  const bool root = !fs::exists(fs::path(checkpoint) / "trainer_state.json");
  OnEveryProcess("resume", [&] {
    if (Job() && Job()->rank() != 0) return;
    try {
      dir = StepDirectory(checkpoint);
    } catch (const Error& e) {  // a `latest` naming nothing whole: damage too
      if (!root || CompleteSteps(checkpoint).empty()) throw;
      latest_error = e.what();
    }
  });
  if (Job() && Job()->rank() != 0) {
    try {
      dir = StepDirectory(checkpoint);
    } catch (const Error& e) {
      latest_error = e.what();
    }
  }
  // The newest checkpoint, then (for a checkpoint directory) the older
  // complete ones: the first every process reads whole is resumed from.
  std::vector<fs::path> candidates;
  if (!dir.empty()) candidates.push_back(dir);
  if (root) {
    for (const fs::path& step : CompleteSteps(checkpoint)) {
      if (step != dir) candidates.push_back(step);
    }
  }
  const std::string newest =
      dir.empty() ? (fs::path(checkpoint) / "latest").string() : dir.string();
  std::string damage = latest_error;
  for (size_t i = 0; i < candidates.size(); ++i) {
    std::unique_ptr<Trainer> trainer;
    std::exception_ptr error;
    try {
      trainer = LoadStep(candidates[i], options, Corpus(corpus));
    } catch (const OptionsDoNotFit&) {
      throw;
    } catch (const Error& e) {
      error = std::current_exception();
      if (damage.empty()) damage = e.what();
    }
    const bool loaded = EveryProcess(!error);
    if (!loaded && i == 0 && damage.empty())
      damage = "another process of the job could not read it";
    if (!loaded && candidates.size() == 1 && latest_error.empty()) {
      if (error) std::rethrow_exception(error);
      Fail("[train] '{}' is damaged: {}", newest, damage);
    }
    if (!loaded) continue;
    if (i == 0 && latest_error.empty()) return trainer;
    if (!fall_back) {
      Fail(
          "[train] the newest checkpoint '{}' is damaged: {}. The newest intact one is '{}': "
          "resume from it with --fall-back",
          newest, damage, candidates[i].string());
    }
    trainer->resume_note_ = fmt::format(
        "the newest checkpoint '{}' is damaged ({}); resumed from '{}', the newest intact one",
        newest, damage, candidates[i].string());
    return trainer;
  }
  Fail("[train] the newest checkpoint '{}' is damaged: {}; no older checkpoint in '{}' is intact",
       newest, damage, checkpoint);
}

std::unique_ptr<Trainer> Trainer::LoadStep(const fs::path& dir, const TrainOptions& options,
                                           Corpus corpus) {
  const fs::path state_file = dir / "trainer_state.json";
  json state = ReadJsonFile(state_file);
  if (!state.is_object() || state.value("format", "") != kStateFormat) {
    Fail("[train] '{}' is not a strata training state (expected \"format\": \"{}\")",
         state_file.string(), kStateFormat);
  }
  const int64_t step = Field<int64_t>(state, "step", state_file);
  if (step < 0) Fail("[train] '{}' has a negative step {}", state_file.string(), step);
  json saved = Field<json>(state, "options", state_file);
  json given = OptionsToJson(options);
  for (auto& [key, value] : given.items()) {
    if (FreeOnResume(key)) continue;
    auto it = saved.find(key);
    if (it == saved.end() && key == "dtype") it = saved.emplace(key, "f32").first;  // older runs
    if (it == saved.end()) Fail("[train] '{}' lacks the option \"{}\"", state_file.string(), key);
    if (*it != value) {
      throw OptionsDoNotFit(fmt::format(
          "[train] the checkpoint in '{}' was trained with --{} {}, this run asks for --{} {}; "
          "resume with the checkpoint's options",
          dir.string(), key, it->dump(), key, value.dump()));
    }
  }
  if (step > options.steps) {
    throw OptionsDoNotFit(
        fmt::format("[train] the checkpoint is at step {}, past --steps {}", step, options.steps));
  }

  std::unique_ptr<Trainer> trainer;
  if (fs::exists(dir / kShardIndexName)) {
    // Written by many processes: each tensor is read in the layout this run
    // gives it, each process reading the tiles its own partitions overlap.
    // The new model's random initialization is a graph never run.
    CheckpointShards shards = CheckpointShards::Open(dir);
    trainer.reset(new Trainer(
        options, std::move(corpus),
        std::make_unique<nn::LlamaForCausalLM>(options.ModelConfig(), random_key(options.seed))));
    const size_t n = trainer->params_.size();
    if (shards.names().size() != 3 * n) {
      Fail("[train] '{}' holds {} tensors, expected {} (each parameter and its two moments)",
           shards.label(), shards.names().size(), 3 * n);
    }
    for (size_t i = 0; i < n; ++i) {
      Tensor& p = *trainer->params_[i];
      const bool trainable = requires_grad(p);
      p = shards.Load(trainer->names_[i], p);
      requires_grad_(p, trainable);
      Tensor& m = trainer->optimizer_->exp_avg()[i];
      m = shards.Load("exp_avg." + trainer->names_[i], m);
      Tensor& v = trainer->optimizer_->exp_avg_sq()[i];
      v = shards.Load("exp_avg_sq." + trainer->names_[i], v);
    }
  } else {
    trainer.reset(new Trainer(options, std::move(corpus), nn::LoadLlama(dir.string())));
    const fs::path moments_file = dir / "optimizer.safetensors";
    io::SafetensorsFile moments = io::SafetensorsFile::Open(moments_file.string());
    auto load = [&](const std::string& key, Tensor& slot) {
      if (!moments.contains(key))
        Fail("[train] '{}' has no tensor '{}'", moments_file.string(), key);
      const io::TensorView& v = moments.Get(key);
      if (v.dtype != slot.dtype() || v.shape != slot.shape().dims()) {
        Fail("[train] '{}' in '{}' is {}, its parameter {}", key, moments_file.string(),
             Shape(v.dtype, v.shape).ToString(), slot.shape().ToString());
      }
      std::optional<ir::Sharding> sharding = slot.sharding();
      slot = Tensor::FromBytes(Shape(v.dtype, v.shape), v.data);
      if (sharding) mark_sharding(slot, sharding->mesh(), sharding->spec());
    };
    if (moments.names().size() != 2 * trainer->params_.size()) {
      Fail("[train] '{}' holds {} tensors, expected {} (two moments per parameter)",
           moments_file.string(), moments.names().size(), 2 * trainer->params_.size());
    }
    for (size_t i = 0; i < trainer->params_.size(); ++i) {
      load("exp_avg." + trainer->names_[i], trainer->optimizer_->exp_avg()[i]);
      load("exp_avg_sq." + trainer->names_[i], trainer->optimizer_->exp_avg_sq()[i]);
    }
  }
  trainer->optimizer_->set_steps(step);
  trainer->step_ = step;

  json history = Field<json>(state, "history", state_file);
  json evals = Field<json>(state, "evals", state_file);
  try {
    for (const json& h : history) {
      trainer->history_.push_back({.step = h.at(0).get<int64_t>(),
                                   .loss = h.at(1).get<float>(),
                                   .grad_norm = h.at(2).get<float>(),
                                   .lr = h.at(3).get<double>(),
                                   .seconds = h.at(4).get<double>()});
    }
    for (const json& e : evals)
      trainer->evals_.push_back({.step = e.at(0).get<int64_t>(), .loss = e.at(1).get<float>()});
  } catch (const json::exception& e) {
    Fail("[train] the history in '{}' is malformed: {}", state_file.string(), e.what());
  }
  if (static_cast<int64_t>(trainer->history_.size()) != step) {
    Fail("[train] '{}' records {} steps of history for step {}", state_file.string(),
         trainer->history_.size(), step);
  }
  return trainer;
}

void ExportCheckpoint(const std::string& checkpoint, const std::string& out) {
  if (out.empty()) Fail("[export] --out must name a directory, got an empty path");
  const fs::path dir = StepDirectory(checkpoint);
  io::MakeDirectories(out, "[export] --out:");  // before the reading, which may be long
  std::unique_ptr<nn::LlamaForCausalLM> model;
  if (fs::exists(dir / kShardIndexName)) {
    CheckpointShards shards = CheckpointShards::Open(dir);
    model = std::make_unique<nn::LlamaForCausalLM>(io::ReadLlamaConfig(dir / "config.json"),
                                                   random_key(0));
    for (auto& [name, slot] : model->named_parameters()) *slot = shards.Load(name, *slot);
  } else {
    model = nn::LoadLlama(dir.string());  // checks every tensor's checksum
  }
  nn::SaveLlama(*model, out);
}

}  // namespace strata::train
