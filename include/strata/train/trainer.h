// Training a Llama model on a byte-level corpus: the engine behind
// `strata train`. One step (forward, backward, gradient clipping, AdamW with
// a warm-up + cosine rate) is one cached graph; evaluation and sampling are
// one more graph each, whatever the prompt length.
//
// Checkpoints are directories: <dir>/step-NNNNNNN/ holds config.json and
// model.safetensors (a Hugging Face Llama directory: `strata lm` reads it),
// optimizer.safetensors (AdamW's moments) and trainer_state.json (options,
// step, loss history). A job of several processes writes, instead of the
// two safetensors files, one file of tiles per process and an index written
// last (train/checkpoint_shards.h); ExportCheckpoint makes a Hugging Face
// directory of it. <dir>/latest names the newest complete one and is
// replaced atomically after it is written, so a crash leaves the previous
// checkpoint in place.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "strata/io/llama_config.h"
#include "strata/nn/llama.h"
#include "strata/nn/optim.h"
#include "strata/nn/sharding_plan.h"
#include "strata/train/checkpoint_shards.h"
#include "strata/train/data.h"

namespace strata::train {

struct TrainOptions {
  // The model (vocabulary: the 256 bytes).
  int64_t hidden = 128;
  int64_t num_layers = 4;
  int64_t heads = 4;
  int64_t kv_heads = 2;
  int64_t intermediate = 0;     // 0: Llama's 8/3 * hidden, rounded up to a multiple of 32
  std::string layers = "scan";  // "scan" (apply_layers) or "unrolled"
  // What the backward pass of the layer loop keeps: "carries" (each layer's
  // input; least memory), "dots" (also its matrix products; no GEMM runs
  // twice) or "dots-no-batch" (only the products without batch dims: the
  // projections are kept, attention's products recomputed). The same
  // numbers either way.
  std::string remat = "carries";
  // What the step computes in: "f32", or "bf16" (mixed precision: the
  // weights, AdamW's moments and the update stay f32; each step computes
  // with bf16 copies of the weights, its activations and gradients bf16,
  // matrix products and reductions summed in f32, the loss in f32).
  std::string dtype = "f32";
  // Data.
  int64_t batch = 16;
  int64_t seq = 128;  // tokens per window; also the sampling context
  double heldout = 0.1;
  // Optimization.
  int64_t steps = 400;
  int64_t warmup = 40;  // linear warm-up steps (at most `steps`)
  double lr = 3e-3;
  double min_lr = 3e-4;
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double clip = 1.0;  // global gradient norm; 0 = no clipping
  uint64_t seed = 1234;
  // Evaluation: the held-out loss every `eval_every` steps (0 = never) over
  // `eval_batches` fixed batches.
  int64_t eval_every = 100;
  int64_t eval_batches = 4;

  // SPMD: the device mesh ("" is one device; "data=2", "data=2,model=2"),
  // run as that many in-process devices, and the Llama sharding plan on it
  // (nn::LlamaShardingPlan: dp, fsdp, tp, fsdp+tp). The same numbers as one
  // device; a resumed run may change both.
  std::string mesh;
  std::string sharding = "dp";

  // Errors name the first option out of range.
  void Validate() const;
  // The Llama configuration these options describe.
  io::LlamaConfig ModelConfig() const;
  // The mesh `mesh` names (devices 0..n-1), or none for one device.
  std::optional<ir::Mesh> Mesh() const;
};

struct StepStats {
  int64_t step = 0;  // 1-based: the number of updates done after it
  float loss = 0;
  float grad_norm = 0;  // before clipping
  double lr = 0;
  double seconds = 0;  // wall time of the step
};

struct EvalPoint {
  int64_t step = 0;
  float loss = 0;
};

class Trainer {
 public:
  // A new model initialized from options.seed.
  Trainer(const TrainOptions& options, Corpus corpus);
  // Continues from a checkpoint: a step directory, or a checkpoint directory
  // whose `latest` names one. The options that shape the model, the data or
  // the updates must equal the checkpoint's (an error names the first that
  // differs); `steps` may grow, and evaluation options are free, as are the
  // mesh, the sharding and the number of processes: tensors are re-split.
  //
  // A damaged newest checkpoint (a file cut short, a checksum that fails, a
  // `latest` naming nothing whole) is an error naming it, what is wrong and
  // the newest intact checkpoint of the directory; with `fall_back`, the run
  // resumes from that one instead (resume_note() says so).
  static std::unique_ptr<Trainer> Resume(const std::string& checkpoint, const TrainOptions& options,
                                         Corpus corpus, bool fall_back = false);
  // Set when Resume fell back past a damaged checkpoint: what it skipped.
  const std::string& resume_note() const { return resume_note_; }

  // One update on batch number step(); returns its statistics.
  StepStats Step();
  // Mean loss over the held-out batches (model in eval mode, no gradients);
  // recorded in evals().
  float Evaluate();
  // Writes <dir>/step-NNNNNNN atomically and points <dir>/latest at it;
  // keeps the newest `keep` step directories. Returns the step directory.
  // In a job of several processes (lazy::Context::process_group) every
  // process calls it, in the same step: each writes its own tiles, and the
  // checkpoint counts (the index is written, `latest` moves) only once all
  // have; an error on any process is an error on all.
  std::string SaveCheckpoint(const std::string& dir, int keep = 2) const;
  // `count` tokens continuing `prompt` (not included in the result).
  // temperature 0 is greedy; otherwise tokens are drawn from
  // softmax(logits / temperature) by a generator seeded with `seed`. The
  // model reads a fixed window of the last `seq` tokens, so sampling
  // compiles once whatever the length.
  std::vector<int64_t> Sample(const std::vector<int64_t>& prompt, int64_t count, double temperature,
                              uint64_t seed);

  int64_t step() const { return step_; }
  const TrainOptions& options() const { return options_; }
  const std::vector<StepStats>& history() const { return history_; }
  const std::vector<EvalPoint>& evals() const { return evals_; }
  nn::LlamaForCausalLM& model() { return *model_; }
  int64_t parameter_count() const;
  // Host time spent building step graphs (model code, autodiff, optimizer).
  double build_seconds() const { return build_seconds_; }

 private:
  Trainer(const TrainOptions& options, Corpus corpus, std::unique_ptr<nn::LlamaForCausalLM> model);

  // One step directory, checked against `options`.
  static std::unique_ptr<Trainer> LoadStep(const std::filesystem::path& dir,
                                           const TrainOptions& options, Corpus corpus);

  TrainOptions options_;
  Corpus corpus_;
  std::string resume_note_;
  // The files of a one-process checkpoint (model, moments, trainer state)
  // into `dir`.
  void WriteCheckpointFiles(const std::filesystem::path& dir) const;
  void WriteTrainerState(const std::filesystem::path& dir) const;
  // Every parameter and its two moments, by their checkpoint names.
  std::vector<NamedTensor> StateTensors() const;
  std::optional<nn::ShardingPlan> plan_;  // set when options.mesh names a mesh
  std::unique_ptr<nn::LlamaForCausalLM> model_;
  std::vector<Tensor*> params_;
  std::vector<std::string> names_;
  std::unique_ptr<nn::AdamW> optimizer_;
  int64_t step_ = 0;
  std::vector<StepStats> history_;
  std::vector<EvalPoint> evals_;
  double build_seconds_ = 0;
};

// The model of a checkpoint (a step directory, or a checkpoint directory
// whose `latest` names one; of one process or of many) as one Hugging Face
// directory `out`: config.json and model.safetensors, as `strata lm` reads.
void ExportCheckpoint(const std::string& checkpoint, const std::string& out);

// One token drawn from softmax(logits / temperature) (temperature > 0) by
// inverting the cumulative distribution at rng.Uniform(); the first maximum
// when temperature is 0.
int64_t DrawToken(const std::vector<float>& logits, double temperature, SplitMix64& rng);

// A loss curve as a standalone SVG: the training loss per step (raw, faint,
// and smoothed) and the held-out points, with labelled axes.
std::string LossCurveSvg(const std::vector<StepStats>& history, const std::vector<EvalPoint>& evals,
                         const std::string& title);

}  // namespace strata::train
