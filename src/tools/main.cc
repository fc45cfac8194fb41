// The `strata` command line.
#include <fmt/core.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <new>

#include "commands.h"
#include "strata/core/error.h"
#include "strata/distributed/mpi.h"

namespace {

// An integer option read as text, before CLI11 converts it (CLI11 saturates
// an integer beyond 64 bits, so 99999999999999999999999 steps would run
// forever): whole, in [low, high], or an error naming the range.
CLI::Validator IntegerIn(long long low, long long high) {
  return CLI::Validator(
      [low, high](std::string& text) -> std::string {
        errno = 0;
        char* end = nullptr;
        const long long n = std::strtoll(text.c_str(), &end, 10);
        if (text.empty() || end != text.c_str() + text.size() || errno == ERANGE || n < low ||
            n > high) {
          return fmt::format("must be an integer in [{}, {}], got '{}'", low, high, text);
        }
        return "";
      },
      fmt::format("INT in [{}, {}]", low, high));
}

constexpr long long kSizeLimit = 1LL << 24;   // widths, batch, sequence length
constexpr long long kCountLimit = 1LL << 40;  // steps and intervals

}  // namespace

// Long by design: the command line, one block of options per subcommand.
int main(int argc, char** argv) {
  // A file-size limit (RLIMIT_FSIZE) must fail the write that crosses it
  // (EFBIG, reported with the file's name), not kill the process silently.
  std::signal(SIGXFSZ, SIG_IGN);
  CLI::App app{"strata: a lazy-tensor compiler for the CPU"};
  app.set_version_flag("--version", "strata " STRATA_VERSION);
  app.require_subcommand(1);

  auto* demo = app.add_subcommand("demo", "build a small program, print its HLO text and run it");
  auto* devices =
      app.add_subcommand("devices", "list the devices (STRATA_CPU_DEVICES sets how many)");

  strata::tools::RunOptions run_options;
  auto* run =
      app.add_subcommand("run", "run an HLO text program on tensors from a safetensors file");
  run->add_option("program", run_options.program, "HLO text file")->required();
  run->add_option("--inputs", run_options.inputs,
                  "safetensors file with one tensor per parameter, named like the parameter");
  run->add_option("--output", run_options.output, "safetensors file for the results")->required();
  run->add_flag("--quiet", run_options.quiet, "print nothing on success");

  strata::tools::LmOptions lm_options;
  auto* lm = app.add_subcommand(
      "lm", "run a Hugging Face Llama checkpoint: logits, and with labels the loss (and grads)");
  lm->add_option("--model", lm_options.model, "model directory (config.json + safetensors)")
      ->required();
  lm->add_option("--tokens", lm_options.tokens, "safetensors file with I64 [batch, seq] input_ids")
      ->required();
  lm->add_option("--labels", lm_options.labels, "safetensors file with I64 [batch, seq] labels");
  lm->add_option("--output", lm_options.output, "safetensors file for the results")->required();
  lm->add_flag("--grads", lm_options.grads, "also write grad.<name> for every parameter");
  lm->add_option("--layers", lm_options.layers, "scan (apply_layers, default) or unrolled")
      ->check(CLI::IsMember({"scan", "unrolled"}));
  lm->add_flag("--quiet", lm_options.quiet, "print nothing on success");

  strata::tools::TrainCommandOptions train_options;
  strata::train::TrainOptions& t = train_options.train;
  auto* train = app.add_subcommand(
      "train", "train a small Llama on a text corpus (byte tokens), evaluate, checkpoint, sample");
  // A later occurrence of an option wins (scripts append overrides).
  train->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  train->add_option("--corpus", train_options.corpus,
                    "text file to train on (default: the bundled corpus, "
                    "share/strata/corpus.txt beside the program)");
  train->add_option("--out", train_options.out, "directory for checkpoints/ and loss.svg")
      ->capture_default_str();
  train->add_option("--hidden", t.hidden, "model width")
      ->check(IntegerIn(0, kSizeLimit))
      ->capture_default_str();
  train->add_option("--num-layers", t.num_layers, "decoder layers")
      ->check(IntegerIn(0, 1 << 16))
      ->capture_default_str();
  train->add_option("--heads", t.heads, "attention heads")
      ->check(IntegerIn(0, kSizeLimit))
      ->capture_default_str();
  train->add_option("--kv-heads", t.kv_heads, "key/value heads (grouped-query attention)")
      ->check(IntegerIn(0, kSizeLimit))
      ->capture_default_str();
  train->add_option("--intermediate", t.intermediate, "MLP width (0: 8/3 hidden, rounded to 32)")
      ->check(IntegerIn(0, kSizeLimit))
      ->capture_default_str();
  train->add_option("--layers", t.layers, "scan (apply_layers) or unrolled")
      ->check(CLI::IsMember({"scan", "unrolled"}))
      ->capture_default_str();
  train
      ->add_option("--remat", t.remat,
                   "what backward keeps of the layer loop: carries (least memory), dots (also "
                   "the matrix products: no GEMM runs twice) or dots-no-batch (the projections' "
                   "products; attention's are recomputed)")
      ->check(CLI::IsMember({"carries", "dots", "dots-no-batch"}))
      ->capture_default_str();
  train
      ->add_option("--dtype", t.dtype,
                   "what the step computes in: f32, or bf16 (mixed precision: f32 weights and "
                   "AdamW state, bf16 activations and products summed in f32)")
      ->check(CLI::IsMember({"f32", "bf16"}))
      ->capture_default_str();
  train->add_option("--mesh", t.mesh,
                    "SPMD device mesh, e.g. data=2 or data=2,model=2: the step runs partitioned "
                    "on that many in-process devices (default: one device)");
  train->add_option("--devices", train_options.devices, "shorthand for --mesh data=N")
      ->check(IntegerIn(1, 1024));
  train
      ->add_option("--sharding", t.sharding,
                   "how the mesh splits the model: dp (batch), fsdp (batch and weights), tp "
                   "(Megatron, on 'model'), fsdp+tp (a data x model mesh)")
      ->check(CLI::IsMember({"dp", "fsdp", "tp", "fsdp+tp"}))
      ->capture_default_str();
  train->add_option("--batch", t.batch, "windows per step")
      ->check(IntegerIn(0, kSizeLimit))
      ->capture_default_str();
  train->add_option("--seq", t.seq, "tokens per window (and the sampling context)")
      ->check(IntegerIn(0, kSizeLimit))
      ->capture_default_str();
  train->add_option("--heldout", t.heldout, "fraction of the corpus held out (its end)")
      ->capture_default_str();
  train->add_option("--steps", t.steps, "training steps")
      ->check(IntegerIn(0, kCountLimit))
      ->capture_default_str();
  train->add_option("--warmup", t.warmup, "linear warm-up steps")
      ->check(IntegerIn(0, kCountLimit))
      ->capture_default_str();
  train->add_option("--lr", t.lr, "peak learning rate")->capture_default_str();
  train->add_option("--min-lr", t.min_lr, "learning rate at the end of the cosine")
      ->capture_default_str();
  train->add_option("--weight-decay", t.weight_decay, "AdamW's decoupled weight decay")
      ->capture_default_str();
  train->add_option("--beta1", t.beta1, "AdamW beta1")->capture_default_str();
  train->add_option("--beta2", t.beta2, "AdamW beta2")->capture_default_str();
  train->add_option("--clip", t.clip, "clip the global gradient norm to this (0: off)")
      ->capture_default_str();
  train->add_option("--seed", t.seed, "seeds the weights, the batches and sampling")
      ->check(IntegerIn(0, LLONG_MAX))
      ->capture_default_str();
  train->add_option("--eval-every", t.eval_every, "held-out loss every N steps (0: at the end)")
      ->check(IntegerIn(0, kCountLimit))
      ->capture_default_str();
  train->add_option("--eval-batches", t.eval_batches, "held-out batches per evaluation")
      ->check(IntegerIn(0, kSizeLimit))
      ->capture_default_str();
  train
      ->add_option("--checkpoint-every", train_options.checkpoint_every,
                   "checkpoint every N steps (0: at the end only)")
      ->check(IntegerIn(0, kCountLimit))
      ->capture_default_str();
  train->add_flag("--resume", train_options.resume,
                  "continue from the latest checkpoint in <out>/checkpoints");
  train->add_flag("--fall-back", train_options.fall_back,
                  "with --resume: when the latest checkpoint is damaged, continue from the "
                  "newest intact one");
  train
      ->add_option("--sample-tokens", train_options.sample_tokens,
                   "bytes to generate at the end (greedy, then with --temperature)")
      ->check(IntegerIn(0, kSizeLimit))
      ->capture_default_str();
  train->add_option("--temperature", train_options.temperature, "sampling temperature")
      ->capture_default_str();
  train->add_option("--prompt", train_options.prompt, "text the samples continue")
      ->capture_default_str();
  train->add_flag("--quiet", train_options.quiet, "print nothing on success");

  std::string export_checkpoint, export_out;
  auto* export_command = app.add_subcommand(
      "export",
      "write a training checkpoint's model (of one process or of an MPI job's shards) as one "
      "Hugging Face directory");
  export_command
      ->add_option("checkpoint", export_checkpoint,
                   "a step directory, or a checkpoints directory (its latest step)")
      ->required();
  export_command->add_option("--out", export_out, "the directory to write")->required();

  CLI11_PARSE(app, argc, argv);
  try {
    if (*demo) return strata::tools::RunDemo();
    if (*devices) return strata::tools::ListDevices();
    if (*run) return strata::tools::RunProgram(run_options);
    if (*lm) return strata::tools::RunLm(lm_options);
    if (*train) return strata::tools::RunTrain(train_options);
    if (*export_command) {
      strata::train::ExportCheckpoint(export_checkpoint, export_out);
      return 0;
    }
  } catch (const strata::Error& e) {
    fmt::print(stderr, "strata: error: {}\n", e.what());
    strata::distributed::EndJobOnError(1);
    return 1;
  } catch (const std::bad_alloc&) {
    fmt::print(stderr,
               "strata: error: out of memory: the run needs more than this machine has (lower "
               "--batch, --seq, --hidden or --num-layers, or give inputs that are smaller)\n");
    strata::distributed::EndJobOnError(1);
    return 1;
  } catch (const std::filesystem::filesystem_error& e) {  // one strata does not name itself
    fmt::print(stderr, "strata: error: '{}': {}\n", e.path1().string(), e.code().message());
    strata::distributed::EndJobOnError(1);
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "strata: unexpected error: {}\n", e.what());
    strata::distributed::EndJobOnError(2);
    return 2;
  }
  return 0;
}
