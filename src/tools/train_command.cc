// `strata train`: trains a small Llama on a byte-level corpus, with a progress
// bar, held-out evaluation, checkpoints and --resume, samples at the end, a
// loss curve as SVG and a summary of where the time went.
#include <fmt/core.h>
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>

#include "commands.h"
#include "strata/core/error.h"
#include "strata/distributed/mpi.h"
#include "strata/io/files.h"
#include "strata/io/safetensors.h"
#include "strata/lazy/context.h"
#include "strata/runtime/process_group.h"
#include "strata/train/trainer.h"

namespace strata::tools {
namespace {

namespace fs = std::filesystem;

std::string Duration(double seconds) {
  if (!(seconds >= 0) || seconds > 360000) return "--:--";
  int64_t s = static_cast<int64_t>(seconds + 0.5);
  if (s >= 3600) return fmt::format("{}:{:02d}:{:02d}", s / 3600, s / 60 % 60, s % 60);
  return fmt::format("{}:{:02d}", s / 60, s % 60);
}

std::string Rate(double tokens_per_second) {
  if (tokens_per_second >= 1e6) return fmt::format("{:.2f}M", tokens_per_second / 1e6);
  if (tokens_per_second >= 1e3) return fmt::format("{:.1f}k", tokens_per_second / 1e3);
  return fmt::format("{:.0f}", tokens_per_second);
}

// Printable text for the terminal: bytes outside printable ASCII (other than
// newlines) shown as escapes.
std::string Printable(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    if (c == '\n' || (c >= 32 && c < 127)) {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("\\x{:02x}", c);
    }
  }
  return out;
}

// The progress line: redrawn in place on a terminal, every few steps in a log.
class Progress {
 public:
  Progress(int64_t total, int64_t tokens_per_step, bool quiet)
      : total_(total), tokens_per_step_(tokens_per_step), quiet_(quiet), tty_(isatty(1)) {}

  void Update(const train::StepStats& s) {
    // Tokens/s and the ETA from the steps since the first one of this run
    // (which compiles).
    if (++seen_ > 1) {
      timed_seconds_ += s.seconds;
      ++timed_steps_;
    }
    if (quiet_) return;
    const double per_step = timed_steps_ > 0 ? timed_seconds_ / timed_steps_ : s.seconds;
    const double eta = per_step * static_cast<double>(total_ - s.step);
    const int width = 24;
    const int filled = total_ > 0 ? static_cast<int>(width * s.step / total_) : width;
    std::string bar = std::string(filled, '#') + std::string(width - filled, '.');
    std::string line =
        fmt::format("step {:>{}}/{} [{}] loss {:.4f} | lr {:.2e} | {} tok/s | ETA {}", s.step,
                    std::to_string(total_).size(), total_, bar, s.loss, s.lr,
                    Rate(static_cast<double>(tokens_per_step_) / per_step), Duration(eta));
    if (tty_) {
      fmt::print("\r{}\x1b[K", line);
      std::fflush(stdout);
      open_line_ = true;
    } else if (s.step == total_ || s.step % std::max<int64_t>(1, total_ / 20) == 0 || seen_ == 1) {
      fmt::print("{}\n", line);
      std::fflush(stdout);
    }
  }
  // A message on its own line (the progress line is redrawn after it).
  void Note(const std::string& text) {
    if (quiet_) return;
    if (open_line_) fmt::print("\r\x1b[K");
    fmt::print("{}\n", text);
    std::fflush(stdout);
  }
  void Finish() {
    if (open_line_ && !quiet_) fmt::print("\n");
    open_line_ = false;
  }
  double timed_seconds() const { return timed_seconds_; }
  int64_t timed_steps() const { return timed_steps_; }

 private:
  int64_t total_, tokens_per_step_;
  bool quiet_, tty_, open_line_ = false;
  int64_t seen_ = 0, timed_steps_ = 0;
  double timed_seconds_ = 0;
};

// Ctrl-C (SIGINT), SIGTERM or SIGUSR1: the step running finishes, a
// checkpoint is written, and the run stops; a second signal stops at once.
// (mpirun forwards SIGUSR1 to every process as it is; Ctrl-C it turns into
// SIGTERM, then SIGKILL a second later.)
volatile std::sig_atomic_t stop_requested = 0;

extern "C" void RequestStop(int signal) {
  if (stop_requested) {
    std::signal(signal, SIG_DFL);
    std::raise(signal);
    return;
  }
  stop_requested = 1;
}

// Installs RequestStop for the run and puts the old handlers back after.
class StopOnSignal {
 public:
  StopOnSignal() {
    stop_requested = 0;
    old_int_ = std::signal(SIGINT, RequestStop);
    old_term_ = std::signal(SIGTERM, RequestStop);
    old_usr1_ = std::signal(SIGUSR1, RequestStop);
  }
  ~StopOnSignal() {
    std::signal(SIGINT, old_int_);
    std::signal(SIGTERM, old_term_);
    std::signal(SIGUSR1, old_usr1_);
  }
  StopOnSignal(const StopOnSignal&) = delete;
  StopOnSignal& operator=(const StopOnSignal&) = delete;

 private:
  void (*old_int_)(int);
  void (*old_term_)(int);
  void (*old_usr1_)(int);
};

// `dir` (and its parents) made if missing and `create`; an Error naming `what` if a part
// of it is a file, or it cannot be made or written.
void EnsureWritableDirectory(const fs::path& dir, const std::string& what, bool create) {
  for (fs::path part = dir; !part.empty(); part = part.parent_path()) {
    std::error_code ec;
    if (fs::exists(part, ec) && !fs::is_directory(part, ec)) {
      Fail("[train] {}: '{}' is a file, not a directory", what, part.string());
    }
    if (part == part.parent_path()) break;
  }
  std::error_code ec;
  if (!create && !fs::exists(dir, ec)) return;
  fs::create_directories(dir, ec);
  if (ec) Fail("[train] {}: cannot create '{}': {}", what, dir.string(), ec.message());
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    Fail("[train] {}: '{}' is not writable", what, dir.string());
  }
}

}  // namespace

std::string BundledCorpus() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path installed = exe.parent_path().parent_path() / STRATA_INSTALLED_CORPUS;
    if (fs::is_regular_file(installed, ec)) return installed.string();
  }
  if (fs::is_regular_file(STRATA_SOURCE_CORPUS, ec)) return STRATA_SOURCE_CORPUS;
  Fail(
      "[train] no --corpus given and the bundled corpus is missing (looked for '{}' beside the "
      "program and '{}')",
      (exe.parent_path().parent_path() / STRATA_INSTALLED_CORPUS).string(), STRATA_SOURCE_CORPUS);
}

// What the run is: the model, the data, the optimizer, the devices.
void PrintRunHeader(const train::TrainOptions& o, const TrainCommandOptions& options,
                    const train::Trainer& trainer, int64_t processes,
                    const std::string& corpus_path, size_t train_bytes, size_t heldout_bytes,
                    const fs::path& checkpoints) {
  const int64_t tokens_per_step = o.batch * o.seq;
  const io::LlamaConfig config = o.ModelConfig();
  fmt::print(
      "strata train: Llama, {} layers ({}), hidden {}, {} heads ({} kv), MLP {}, "
      "{:.2f}M parameters\n",
      o.num_layers, o.layers == "scan" ? "apply_layers" : "unrolled", o.hidden, o.heads, o.kv_heads,
      config.intermediate_size, static_cast<double>(trainer.parameter_count()) / 1e6);
  fmt::print(
      "  data: {} ({} training / {} held-out bytes), batch {} x {} = {} tokens per step\n"
      "  AdamW lr {:g} (warm-up {}, cosine to {:g}), weight decay {:g}, clip {:g}, seed {}\n",
      corpus_path, train_bytes, heldout_bytes, o.batch, o.seq, tokens_per_step, o.lr, o.warmup,
      o.min_lr, o.weight_decay, o.clip, o.seed);
  if (o.dtype == "bf16")
    fmt::print("  mixed precision: bf16 activations and products (summed in f32), f32 weights\n");
  if (std::optional<ir::Mesh> mesh = o.Mesh()) {
    if (processes > 1) {
      fmt::print("  SPMD: {} devices ({}) over {} processes, sharding {}\n", mesh->size(),
                 mesh->ToString(), processes, o.sharding);
    } else {
      fmt::print("  SPMD: {} in-process devices ({}), sharding {}\n", mesh->size(),
                 mesh->ToString(), o.sharding);
    }
  }
  if (options.resume)
    fmt::print("  resumed from step {} ({})\n", trainer.step(), checkpoints.string());
  std::fflush(stdout);
}

// What the run did: losses, samples, where its time and memory went.
void PrintSummary(const train::TrainOptions& o, const TrainCommandOptions& options,
                  const train::Trainer& trainer, const Progress& progress, int64_t first,
                  float held, const std::string& greedy, const std::string& sampled,
                  int64_t sampling_compiles, double train_seconds, double total_seconds,
                  const fs::path& svg, const std::string& last_checkpoint) {
  const auto& metrics = lazy::Context::Get().metrics();
  const int64_t tokens_per_step = o.batch * o.seq;
  const auto& history = trainer.history();
  if (!history.empty()) {
    const train::StepStats& last = history.back();
    fmt::print("loss {:.4f} -> {:.4f} (training), held-out {:.4f} at step {}\n",
               history.front().loss, last.loss, held, last.step);
  }
  if (options.sample_tokens > 0) {
    fmt::print("\n--- greedy ---\n{}{}\n", Printable(options.prompt), Printable(greedy));
    fmt::print("\n--- temperature {:g} ---\n{}{}\n\n", options.temperature,
               Printable(options.prompt), Printable(sampled));
  }
  const int64_t steps_run = trainer.step() - first;
  auto ms = [](int64_t ns) { return static_cast<double>(ns) / 1e9; };
  const double build = trainer.build_seconds(), walk = ms(metrics.trace_ns.load()),
               lower = ms(metrics.lower_ns.load()), compile = ms(metrics.compile_ns.load()),
               execute = ms(metrics.execute_ns.load());
  const double other = total_seconds - build - walk - lower - compile - execute;
  auto pct = [&](double part) { return 100 * part / total_seconds; };
  fmt::print("summary: {} steps, {} tokens in {} ({} tok/s after the first step)\n", steps_run,
             steps_run * tokens_per_step, Duration(train_seconds),
             progress.timed_steps() > 0
                 ? Rate(static_cast<double>(tokens_per_step * progress.timed_steps()) /
                        progress.timed_seconds())
                 : std::string("-"));
  fmt::print("  graphs: {} compiled, {} cache hits ({} compiled while sampling {} tokens twice)\n",
             metrics.compiles.load(), metrics.cache_hits.load(), sampling_compiles,
             options.sample_tokens);
  fmt::print(
      "  time: trace {:.2f} s ({:.1f}%: model code {:.2f} s, graph walk {:.2f} s), lower {:.2f} "
      "s "
      "({:.1f}%), compile {:.2f} s ({:.1f}%), execute {:.2f} s ({:.1f}%), other {:.2f} s "
      "({:.1f}%: data, evaluation reads, checkpoints, sampling)\n",
      build + walk, pct(build + walk), build, walk, lower, pct(lower), compile, pct(compile),
      execute, pct(execute), other, pct(other));
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  fmt::print(
      "  memory: peak RSS {:.0f} MiB; each step wrote its new weights and moments over the old "
      "ones ({:.1f} MiB per step donated)\n",
      static_cast<double>(usage.ru_maxrss) / 1024.0,
      steps_run > 0 ? static_cast<double>(metrics.bytes_donated.load()) / (1 << 20) /
                          static_cast<double>(steps_run)
                    : 0.0);
  fmt::print("  wrote {} (loss curve) and {} (resume with --resume)\n", svg.string(),
             last_checkpoint);
}

int RunTrain(const TrainCommandOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  train::TrainOptions o = options.train;
  if (options.devices > 0) {
    if (!o.mesh.empty()) Fail("[train] give --devices or --mesh, not both");
    o.mesh = fmt::format("data={}", options.devices);
  }
  // Under an MPI launcher every process runs this same job on its block of
  // the mesh's devices (one device each unless --devices / --mesh says more).
  // Process 0 alone prints and writes the loss curve; every process writes
  // its own part of each checkpoint.
  const distributed::ProcessGroup& job = distributed::Processes();
  if (job.size > 1) {
    lazy::Context::Get().set_process_group(distributed::MpiProcessGroup());
    if (o.mesh.empty()) o.mesh = fmt::format("data={}", job.size);
  }
  const bool writes = job.rank == 0;
  o.Validate();
  if (options.checkpoint_every < 0) Fail("[train] --checkpoint-every must not be negative");
  if (options.fall_back && !options.resume) Fail("[train] --fall-back goes with --resume");
  if (options.sample_tokens < 0) Fail("[train] --sample-tokens must not be negative");
  if (!(options.temperature >= 0) || !std::isfinite(options.temperature))
    Fail("[train] --temperature must be finite and >= 0 (0 samples greedily), got {}",
         options.temperature);
  if (options.out.empty()) Fail("[train] --out must name a directory, got an empty path");
  if (options.prompt.empty()) Fail("[train] --prompt must not be empty");
  const std::string corpus_path = options.corpus.empty() ? BundledCorpus() : options.corpus;
  train::Corpus corpus = train::LoadCorpus(corpus_path, o.heldout, o.seq + 1);
  StopOnSignal on_signal;  // before anything is printed: a signal after the header is handled
  const size_t train_bytes = corpus.train.size(), heldout_bytes = corpus.heldout.size();
  const fs::path out(options.out);
  const fs::path checkpoints = out / "checkpoints";
  // Where the run writes is checked before its first step, not found
  // unwritable at its first checkpoint with the steps before it lost.
  // (--resume makes nothing: a missing directory is "no checkpoint" below.)
  EnsureWritableDirectory(checkpoints, fmt::format("--out '{}'", options.out), !options.resume);

  auto& metrics = lazy::Context::Get().metrics();
  metrics.compiles = 0;
  metrics.bytes_donated = 0;
  metrics.cache_hits = 0;
  std::unique_ptr<train::Trainer> trainer =
      options.resume
          ? train::Trainer::Resume(checkpoints.string(), o, std::move(corpus), options.fall_back)
          : std::make_unique<train::Trainer>(o, std::move(corpus));
  if (writes && !trainer->resume_note().empty())
    fmt::print(stderr, "strata: warning: {}\n", trainer->resume_note());
  const int64_t tokens_per_step = o.batch * o.seq;
  const bool say = !options.quiet && writes;
  if (say) {
    PrintRunHeader(o, options, *trainer, job.size, corpus_path, train_bytes, heldout_bytes,
                   checkpoints);
  }

  Progress progress(o.steps, tokens_per_step, !say);
  // Every process saves (each writes its own part of the checkpoint).
  auto save = [&]() { return trainer->SaveCheckpoint(checkpoints.string()); };
  // A stop asked of any process stops them all after the same step: a
  // signal reaches the processes of a job at different moments.
  auto stopping = [&]() {
    if (job.size == 1) return stop_requested != 0;
    const std::vector<int64_t> asked = runtime::AllGatherFromProcesses(
        *lazy::Context::Get().process_group(), stop_requested ? 1 : 0);
    return std::find(asked.begin(), asked.end(), 1) != asked.end();
  };
  std::string last_checkpoint;
  const int64_t first = trainer->step();
  while (trainer->step() < o.steps) {
    if (stopping()) {
      progress.Finish();
      last_checkpoint = save();
      if (say) {
        fmt::print("interrupted after step {} of {}: saved {}; continue with --resume\n",
                   trainer->step(), o.steps, last_checkpoint);
      }
      return 130;  // as a shell reports a run stopped by SIGINT
    }
    train::StepStats s = trainer->Step();
    if (!std::isfinite(s.loss)) {
      progress.Finish();
      Fail("[train] the loss is {} at step {} (lr {:g}); lower --lr or raise --warmup", s.loss,
           s.step, s.lr);
    }
    progress.Update(s);
    if (o.eval_every > 0 && s.step % o.eval_every == 0 && s.step < o.steps) {
      float held = trainer->Evaluate();
      progress.Note(
          fmt::format("step {}: held-out loss {:.4f} (training {:.4f})", s.step, held, s.loss));
    }
    if (options.checkpoint_every > 0 && s.step % options.checkpoint_every == 0 &&
        s.step < o.steps) {
      last_checkpoint = save();
    }
  }
  progress.Finish();
  const double train_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  // The end of the run: a last evaluation, a checkpoint, the curve, samples.
  float held = trainer->Evaluate();
  last_checkpoint = save();
  const fs::path svg = out / "loss.svg";
  if (writes) {
    io::MakeDirectories(out, "[train] --out:");
    std::string curve =
        train::LossCurveSvg(trainer->history(), trainer->evals(),
                            fmt::format("strata train: {} layers, hidden {}, batch {} x {}",
                                        o.num_layers, o.hidden, o.batch, o.seq));
    io::WriteFileAtomically(svg.string(), {curve});
  }

  train::ByteTokenizer tokenizer;
  std::vector<int64_t> prompt = tokenizer.Encode(options.prompt);
  const int64_t compiles_before_sampling = metrics.compiles.load();
  std::string greedy, sampled;
  if (options.sample_tokens > 0) {
    greedy = tokenizer.Decode(trainer->Sample(prompt, options.sample_tokens, 0, o.seed));
    sampled = tokenizer.Decode(
        trainer->Sample(prompt, options.sample_tokens, options.temperature, o.seed));
  }
  const int64_t sampling_compiles = metrics.compiles.load() - compiles_before_sampling;
  const double total_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  if (say) {
    PrintSummary(o, options, *trainer, progress, first, held, greedy, sampled, sampling_compiles,
                 train_seconds, total_seconds, svg, last_checkpoint);
  }
  return 0;
}

}  // namespace strata::tools
