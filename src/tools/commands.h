// Subcommands of the `strata` program.
#pragma once

#include <string>

#include "strata/train/trainer.h"

namespace strata::tools {

// Builds a small program, prints its HLO text and runs it.
int RunDemo();
// Prints one line per device of the default client.
int ListDevices();

struct RunOptions {
  std::string program;  // HLO text file
  std::string inputs;   // safetensors file (may be empty when no parameters)
  std::string output;   // safetensors file to write
  bool quiet = false;
};
// `strata run`: parses, compiles and runs an HLO program on named inputs.
int RunProgram(const RunOptions& options);

struct LmOptions {
  std::string model;   // Hugging Face Llama directory
  std::string tokens;  // safetensors with an integer [batch, seq] "input_ids"
  std::string labels;  // optional: safetensors with "labels"
  std::string output;  // safetensors to write
  bool grads = false;
  std::string layers = "scan";  // or "unrolled"
  bool quiet = false;
};
// The corpus shipped with strata: share/strata/corpus.txt beside the
// installed program, else data/corpus.txt of the source tree it was built from.
std::string BundledCorpus();

// `strata lm`: loads a Llama checkpoint, runs forward (and backward) and
// writes logits, loss and gradients.
int RunLm(const LmOptions& options);

struct TrainCommandOptions {
  train::TrainOptions train;
  std::string corpus;              // empty: the corpus installed with strata (BundledCorpus())
  std::string out = "runs/train";  // checkpoints/ and loss.svg go here
  int64_t checkpoint_every = 100;  // 0: only at the end
  bool resume = false;             // continue from <out>/checkpoints/latest
  bool fall_back = false;          // ... or from the newest intact one when it is damaged
  int64_t sample_tokens = 300;
  double temperature = 0.8;
  std::string prompt = "Tom ";
  bool quiet = false;
  int64_t devices = 0;  // > 0: --mesh data=N
};
// `strata train`: trains a byte-level Llama on a text corpus.
int RunTrain(const TrainCommandOptions& options);

}  // namespace strata::tools
