// SPMD training steps over in-process devices, three measurements:
//
//   BM_BytesPerStep/plan      collective bytes partition 0 sends in one Llama
//                             training step, per sharding plan, against the
//                             analytical minimum of that plan (goal <= 1.05x)
//   BM_PartitionCompile/n     spmd::Partition + Executable::Compile of one
//                             fsdp training step on a mesh of n = 1..64
//                             devices, paired with n = 1 (goal: <= 1.2x)
//   BM_TwoDevicesVsOne/plan   one training step on 2 devices x 1 thread
//                             (mesh data=2) against 1 device x 2 threads, the
//                             same global batch, alternating (goal >= 0.9x)
//
// A step is what train::Trainer::Step runs: forward, loss, the gradient of
// every parameter, clip_grad_norm, AdamW, synced as one graph with buffer
// donation. The minimum formulas are in MinimumBytes below and in
// bench/RESULTS.md.
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "llama_bench_config.h"
#include "strata/autograd/grad.h"
#include "strata/compiler/compile.h"
#include "strata/hlo/module.h"
#include "strata/lazy/context.h"
#include "strata/lazy/ops.h"
#include "strata/nn/llama.h"
#include "strata/nn/optim.h"
#include "strata/nn/sharding_plan.h"
#include "strata/runtime/device.h"
#include "strata/runtime/thread_pool.h"
#include "strata/spmd/partitioner.h"
#include "strata/train/trainer.h"

namespace strata {
namespace {

struct ModelSize {
  int64_t vocab, hidden, heads, kv_heads, intermediate, layers, batch, seq;
};

// strata train's model at hidden 256 (its byte vocabulary, 8/4 heads, I = 8/3 H
// rounded up to 32), 4 layers, batch 8 x 128: every sharded dim divides by 4.
constexpr ModelSize kSmall{256, 256, 8, 4, 704, 4, 8, 128};
// The bench config (bench/llama_bench_config.h) at 2 layers, batch 4 x 256.
constexpr ModelSize kBench{4096, 512, 8, 4, 1536, 2, 4, 256};
// The same model for the compile benchmark, batch 64 so the batch splits 64 ways.
constexpr ModelSize kCompile{4096, 512, 8, 4, 1536, 2, 64, 64};

io::LlamaConfig ConfigOf(const ModelSize& s) {
  io::LlamaConfig c = bench::BenchConfig(s.layers);
  c.vocab_size = s.vocab;
  c.hidden_size = s.hidden;
  c.intermediate_size = s.intermediate;
  c.num_attention_heads = s.heads;
  c.num_key_value_heads = s.kv_heads;
  return c;
}

ir::Mesh MeshOf(const std::string& spec) {  // "data=2,model=2", as strata train's --mesh
  train::TrainOptions options;
  options.mesh = spec;
  return *options.Mesh();
}

double LoadAverage() {
  double load = -1;
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf", &load) != 1) load = -1;
    std::fclose(f);
  }
  return load;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0 : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// A Llama model with AdamW, optionally sharded by a plan over a mesh, and its
// training step as train::Trainer::Step builds it (apply_layers saving each
// layer's input, strata train's default --remat carries; clip 1.0; the same
// AdamW options). The batch is fixed: the data does not change the bytes.
class StepRunner {
 public:
  StepRunner(const ModelSize& size, const std::string& mesh, const std::string& plan)
      : size_(size), model_(ConfigOf(size), random_key(2)) {
    model_.layer_mode = nn::LayerMode::kScan;
    model_.layer_remat = Remat::kSaveCarries;
    for (auto& [name, tensor] : model_.named_parameters()) {
      names_.push_back(name);
      params_.push_back(tensor);
    }
    adam_ = std::make_unique<nn::AdamW>(
        params_, nn::AdamWOptions{
                     .lr = 3e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1});
    state_ = params_;
    for (Tensor& t : adam_->exp_avg()) state_.push_back(&t);
    for (Tensor& t : adam_->exp_avg_sq()) state_.push_back(&t);
    ids_ = bench::Tokens(size.batch, size.seq, size.vocab, 3);
    // As the trainer: the plan marks the initial weights before they are
    // first synced, so they are made sharded.
    if (!mesh.empty()) MarkSharding(nn::LlamaShardingPlan(plan, MeshOf(mesh)));
    sync(state_);
  }

  // Marks the parameters by `plan`, the moments like their parameters and
  // the batch by plan.batch (what the trainer does). On synced data the
  // buffers stay; the next step is a program over plan.mesh.
  void MarkSharding(const nn::ShardingPlan& plan) {
    plan_ = plan;
    plan_->Apply(model_);
    for (size_t i = 0; i < params_.size(); ++i) {
      mark_sharding(adam_->exp_avg()[i], plan_->mesh, params_[i]->sharding()->spec());
      mark_sharding(adam_->exp_avg_sq()[i], plan_->mesh, params_[i]->sharding()->spec());
    }
    mark_sharding(ids_, plan_->mesh, plan_->batch);
  }

  // Builds the next step's graph (nothing runs).
  void Build() {
    Tensor loss = model_.loss(model_.forward(ids_), ids_);
    std::vector<Tensor> values;
    for (Tensor* p : params_) values.push_back(*p);
    std::vector<Tensor> grads = gradients(loss, values);
    values.clear();
    Tensor norm = nn::clip_grad_norm(grads, 1.0);
    adam_->step(grads);
    loss_ = loss;
    norm_ = norm;
  }
  // Everything the step syncs, as values (for LoweringContext).
  std::vector<Tensor> RootValues() const {
    std::vector<Tensor> roots;
    for (Tensor* t : state_) roots.push_back(*t);
    roots.push_back(loss_);
    roots.push_back(norm_);
    return roots;
  }
  // Runs the built step with buffer donation, as the trainer does.
  void Sync() {
    std::vector<Tensor*> roots = state_;
    roots.push_back(&loss_);
    roots.push_back(&norm_);
    lazy::Context& context = lazy::Context::Get();
    const bool donating = context.buffer_donation();
    context.set_buffer_donation(true);
    sync(roots);
    context.set_buffer_donation(donating);
  }
  void Step() {
    Build();
    Sync();
  }

  float loss() const { return loss_.item<float>(); }  // the last step's
  const std::optional<nn::ShardingPlan>& plan() const { return plan_; }
  const std::vector<std::string>& names() const { return names_; }
  const std::vector<Tensor*>& params() const { return params_; }
  const ModelSize& size() const { return size_; }
  int64_t tokens() const { return size_.batch * size_.seq; }

 private:
  ModelSize size_;
  nn::LlamaForCausalLM model_;
  std::optional<nn::ShardingPlan> plan_;
  std::vector<std::string> names_;
  std::vector<Tensor*> params_;
  std::unique_ptr<nn::AdamW> adam_;
  std::vector<Tensor*> state_;  // parameters and moments
  Tensor ids_, loss_, norm_;
};

// ---------------------------------------------------------------------------
// 1. Bytes per device per step against the analytical minimum.

// Bandwidth-optimal bytes one member sends (the Communicator's accounting),
// for a collective over n members; `bytes` is the full (unsharded) array.
double AllReduce(int64_t n, double bytes) { return 2.0 * (n - 1) / n * bytes; }
double AllGather(int64_t n, double bytes) { return (n - 1) * bytes / n; }      // bytes = gathered
double ReduceScatter(int64_t n, double bytes) { return (n - 1) * bytes / n; }  // bytes = input

struct ParameterCounts {
  double layers = 0;  // the stacked decoder matrices (q, k, v, o, gate, up, down)
  double norms = 0;   // every RMSNorm weight (replicated by every plan)
  double embed = 0, head = 0;
  double total() const { return layers + norms + embed + head; }
};

ParameterCounts CountParameters(const StepRunner& runner) {
  ParameterCounts c;
  for (size_t i = 0; i < runner.params().size(); ++i) {
    const std::string& name = runner.names()[i];
    const double n = static_cast<double>(runner.params()[i]->shape().num_elements());
    if (name.find("norm") != std::string::npos) {
      c.norms += n;
    } else if (name.find("embed_tokens") != std::string::npos) {
      c.embed += n;
    } else if (name.find("lm_head") != std::string::npos) {
      c.head += n;
    } else {
      c.layers += n;
    }
  }
  return c;
}

// The least bytes one device must send in a step of `plan` on d data x m
// model devices (f32 throughout; A = 4 B S H bytes, one [B, S, H] activation;
// N = 4 B (S - 1) bytes, one value per loss position; AR / AG / RS of a full
// array's bytes as the Communicator counts them). Each term is a collective
// the plan cannot avoid:
//   dp:      all-reduce of every gradient, and of the loss's sum and count.
//   fsdp:    each decoder matrix all-gathered for the forward and once more
//            for the backward (its recompute and its input gradient share
//            one gather), its gradient reduce-scattered: 3 (n-1)/n 4 P_layers;
//            lm_head gathered once (the backward reuses it) and its gradient
//            reduce-scattered; the embedding's lookup the cheaper of gathering
//            the table or reduce-scattering the looked-up [B, S, H], its
//            gradient reduce-scattered; the replicated norms' gradients
//            all-reduced; the loss's two scalars and the squared-norm sum.
//   tp:      Megatron's five products per layer whose inputs are split on
//            their contracting dim: o_proj in the forward and in the
//            recompute, down_proj in the forward (dead in the recompute),
//            and the input gradients of the attention (the sum of three
//            products through q, k, v) and of the MLP (through gate and up)
//            in the backward. Each is the cheaper of all-reducing its
//            [B, S, H] partial sums and gathering its split inputs and
//            weights to compute it whole (o_proj at H < B S). The
//            vocabulary-parallel embedding (the cheaper of all-reducing A or
//            gathering the table) and lm_head's input gradient (as a
//            product above); the loss's max, sum of exp and target logit
//            ([N] each); the squared-norm sum.
//   fsdp+tp: the fsdp terms over data on each device's 1/m of the weights,
//            the tp terms over model on a batch of B/d.
struct Minimum {
  double bytes = 0;
  std::string formula;
};

Minimum MinimumBytes(const std::string& plan, int64_t d, int64_t m, const ParameterCounts& p,
                     const ModelSize& s) {
  const double A = 4.0 * s.batch * s.seq * s.hidden, N = 4.0 * s.batch * (s.seq - 1);
  const double L = static_cast<double>(s.layers);
  const int64_t n = d * m;
  // The tp products over model on a batch of B/d (activations of H wide are
  // a = A/d; I wide a I/H, the k/v projections' kv wide a kv/H).
  const double H = static_cast<double>(s.hidden), I = static_cast<double>(s.intermediate);
  const double kv = H / s.heads * s.kv_heads, a = A / d;
  auto product = [&](double inputs, double weights) {  // the cheaper of AR and gathering
    return std::min(AllReduce(m, a), AllGather(m, inputs) + AllGather(m, weights));
  };
  const double per_layer = 2 * product(a, 4 * H * H) + product(a * I / H, 4 * I * H) +
                           product(a + 2 * a * kv / H, 4 * H * H + 2 * 4 * kv * H) +
                           product(2 * a * I / H, 2 * 4 * I * H);
  const double lm_head_input_gradient = product(a * s.vocab / H, 4.0 * s.vocab * H);
  Minimum r;
  if (plan == "dp") {
    r.bytes = AllReduce(d, 4 * p.total()) + 2 * AllReduce(d, 4);
    r.formula = "AR(4P) + 2 AR(4)";
  } else if (plan == "fsdp" || plan == "fsdp+tp") {
    // The lookup: gather the whole table, or (fsdp) reduce-scatter the
    // looked-up rows, or (fsdp+tp) gather over data and all-reduce over model.
    const double lookup = m == 1 ? std::min(AllGather(d, 4 * p.embed), ReduceScatter(d, A))
                                 : std::min(AllGather(n, 4 * p.embed),
                                            AllGather(d, 4 * p.embed / m) + AllReduce(m, A / d));
    r.bytes = 2 * AllGather(d, 4 * p.layers / m) + ReduceScatter(d, 4 * p.layers / m) + lookup +
              ReduceScatter(d, 4 * p.embed / m) + AllGather(d, 4 * p.head / m) +
              ReduceScatter(d, 4 * p.head / m) + AllReduce(d, 4 * p.norms) + 3 * AllReduce(n, 4);
    r.formula =
        "2 AG_d(4 Pl/m) + RS_d(4 Pl/m) + lookup + RS_d(4 Pe/m) + AG_d(4 Ph/m) + RS_d(4 Ph/m) + "
        "AR_d(4 Pn) + 3 AR(4)";
    if (m > 1) {
      r.bytes += L * per_layer + lm_head_input_gradient + 3 * AllReduce(m, N / d);
      r.formula += " + L layer_m + head_m + 3 AR_m(N/d)";
    }
  } else if (plan == "tp") {
    r.bytes = L * per_layer + std::min(AllReduce(m, A), AllGather(m, 4 * p.embed)) +
              lm_head_input_gradient + 3 * AllReduce(m, N) + AllReduce(m, 4);
    r.formula =
        "L layer + min(AR(A), AG(4 Pe)) + head + 3 AR(N) + AR(4); layer = 5 products, each "
        "min(AR(A), AG(inputs) + AG(weights))";
  }
  return r;
}

struct PlanCase {
  const char* plan;
  const char* mesh;
  int64_t data, model;
};
const PlanCase kPlans[] = {
    {"dp", "data=2", 2, 1},
    {"dp", "data=4", 4, 1},
    {"fsdp", "data=2", 2, 1},
    {"fsdp", "data=4", 4, 1},
    {"tp", "model=2", 1, 2},
    {"tp", "model=4", 1, 4},
    {"fsdp+tp", "data=2,model=2", 2, 2},
};

// The partitioner's collectives (bytes x runs: a loop body's run once per
// iteration), summed by the computation of the op they serve and by kind,
// then the largest single records, printed to stderr; the whole report goes
// to $SPMD_BENCH_REPORT_DIR/<plan>-<mesh>.txt when that is set.
void SummarizeReport(const PlanCase& c, const spmd::PartitionReport& report,
                     const hlo::Module& module) {
  std::unordered_map<std::string, std::string> computation_of;
  for (const auto& comp : module.computations()) {
    for (const auto& inst : comp->instructions()) computation_of[inst->name()] = comp->name();
  }
  std::map<std::pair<std::string, std::string>, std::pair<int64_t, int64_t>> groups;
  for (const spmd::CollectiveRecord& r : report.collectives) {
    auto it = computation_of.find(r.serves.substr(0, r.serves.find(' ')));
    const std::string where = it == computation_of.end()             ? "?"
                              : it->second == module.entry()->name() ? "entry"
                                                                     : it->second;
    auto& g = groups[{where, r.collective}];
    g.first += 1;
    g.second += r.bytes * r.runs;
  }
  std::string text = fmt::format("[{} on {}] {} B per device per step; by computation:\n", c.plan,
                                 c.mesh, report.bytes_per_device());
  for (const auto& [key, value] : groups) {
    text += fmt::format("  {:<14} {:<16} {:>4} x {:>12} B\n", key.first, key.second, value.first,
                        value.second);
  }
  std::vector<const spmd::CollectiveRecord*> largest;
  for (const spmd::CollectiveRecord& r : report.collectives) largest.push_back(&r);
  std::stable_sort(largest.begin(), largest.end(),
                   [](auto* a, auto* b) { return a->bytes * a->runs > b->bytes * b->runs; });
  text += "  largest:\n";
  for (size_t i = 0; i < std::min<size_t>(8, largest.size()); ++i) {
    const spmd::CollectiveRecord& r = *largest[i];
    text += fmt::format("    {:<15} {:>9} B x {} for {}: {}\n", r.collective, r.bytes, r.runs,
                        r.serves, r.reason);
  }
  for (const std::string& s : report.full_rematerializations)
    text += "  replicated whole: " + s + "\n";
  std::fputs(text.c_str(), stderr);
  if (const char* dir = std::getenv("SPMD_BENCH_REPORT_DIR")) {
    std::string mesh = c.mesh;
    std::replace(mesh.begin(), mesh.end(), ',', '_');
    std::ofstream(fmt::format("{}/{}-{}.txt", dir, c.plan, mesh)) << text << "\n"
                                                                  << report.ToString();
  }
}

// The loss of the third step on one device: every plan must reproduce it.
float ReferenceLoss() {
  static const float loss = [] {
    StepRunner one(kSmall, "", "");
    for (int i = 0; i < 3; ++i) one.Step();
    return one.loss();
  }();
  return loss;
}

void BM_BytesPerStep(benchmark::State& state) {
  const PlanCase& c = kPlans[state.range(0)];
  const float reference = ReferenceLoss();
  StepRunner runner(kSmall, c.mesh, c.plan);
  runner.Step();  // compiles
  // The report of the step about to run, from the same lowering.
  runner.Build();
  int64_t report_bytes = 0;
  {
    lazy::LoweringContext lowering(runner.RootValues());
    spmd::PartitionedModule partitioned = spmd::Partition(lowering.module(), runner.plan()->mesh);
    SummarizeReport(c, partitioned.report, lowering.module());
    report_bytes = partitioned.report.bytes_per_device();
  }
  runner.Sync();
  lazy::Metrics& metrics = lazy::Context::Get().metrics();
  int64_t bytes = 0;
  double seconds = 0;
  for (auto _ : state) {
    const int64_t before = metrics.bytes_collective.load();
    const int64_t compiles = metrics.compiles.load();
    const auto start = std::chrono::steady_clock::now();
    runner.Step();
    seconds = Seconds(start);
    bytes = metrics.bytes_collective.load() - before;
    if (metrics.compiles.load() != compiles) state.SkipWithError("the step recompiled");
  }
  const ParameterCounts p = CountParameters(runner);
  const Minimum minimum = MinimumBytes(c.plan, c.data, c.model, p, kSmall);
  state.counters["MB"] = static_cast<double>(bytes) / 1e6;
  state.counters["min_MB"] = minimum.bytes / 1e6;
  state.counters["ratio"] = static_cast<double>(bytes) / minimum.bytes;
  state.counters["report_MB"] =
      static_cast<double>(report_bytes) / 1e6;  // the partitioner's estimate
  state.counters["step_ms"] = seconds * 1e3;
  // Step 3's loss against one device's (the same initial weights and batch).
  state.counters["loss"] = runner.loss();
  state.counters["loss_rel_diff"] = std::abs(runner.loss() - reference) / std::abs(reference);
  state.counters["load1"] = LoadAverage();
  state.SetLabel(
      fmt::format("{} on {}; P={:.0f} (layers {:.0f}, norms {:.0f}, embed {:.0f}, "
                  "head {:.0f}); min = {}",
                  c.plan, c.mesh, p.total(), p.layers, p.norms, p.embed, p.head, minimum.formula));
}
BENCHMARK(BM_BytesPerStep)
    ->DenseRange(0, std::size(kPlans) - 1)
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// ---------------------------------------------------------------------------
// 2. Partition + compile time against the number of devices.

// The HLO of one fsdp training step (the bench config at 2 layers, batch 64
// x 64) on the 1-D mesh data=n. The weights and moments are synced on one
// device first, so the program is the step alone. Built once per n.
const hlo::Module& FsdpStepModule(int64_t n) {
  static std::map<int64_t, std::unique_ptr<hlo::Module>> modules;
  auto& module = modules[n];
  if (!module) {
    StepRunner runner(kCompile, "", "");
    runner.MarkSharding(nn::LlamaShardingPlan("fsdp", spmd::Mesh::Line(n, "data")));
    runner.Build();
    lazy::LoweringContext lowering(runner.RootValues());
    module = lowering.module().Clone();
  }
  return *module;
}

runtime::Client& ClientFor(int64_t n) {  // as lazy::Context makes them: n devices, 2/n threads
  static std::map<int64_t, std::unique_ptr<runtime::Client>> clients;
  auto& client = clients[n];
  if (!client) {
    const int threads =
        std::max(1, runtime::Client::Default().thread_pool().num_threads() / static_cast<int>(n));
    client = std::make_unique<runtime::Client>(static_cast<int>(n), threads);
  }
  return *client;
}

struct CompileTimes {
  double partition = 0, compile = 0;
  int64_t collectives = 0, instructions = 0, propagated_text_bytes = 0;
};

int64_t InstructionCount(const hlo::Module& module) {
  int64_t n = 0;
  for (const auto& c : module.computations()) n += c->instruction_count();
  return n;
}

CompileTimes PartitionAndCompile(int64_t n) {
  const hlo::Module& module = FsdpStepModule(n);
  const spmd::Mesh mesh = spmd::Mesh::Line(n, "data");
  CompileTimes t;
  auto start = std::chrono::steady_clock::now();
  spmd::PartitionedModule partitioned = spmd::Partition(module, mesh);
  t.partition = Seconds(start);
  start = std::chrono::steady_clock::now();
  compiler::CompileOptions options;
  options.client = &ClientFor(n);
  std::unique_ptr<runtime::Executable> exe = compiler::Compile(*partitioned.module, options);
  t.compile = Seconds(start);
  benchmark::DoNotOptimize(exe.get());
  t.collectives = static_cast<int64_t>(partitioned.report.collectives.size());
  t.instructions = InstructionCount(*partitioned.module);
  t.propagated_text_bytes = static_cast<int64_t>(partitioned.propagated_text.size());
  return t;
}

// Sharding propagation alone (the first half of Partition).
double PropagateSeconds(int64_t n) {
  const hlo::Module& module = FsdpStepModule(n);
  const spmd::Mesh mesh = spmd::Mesh::Line(n, "data");
  auto start = std::chrono::steady_clock::now();
  spmd::ShardingMap map = spmd::PropagateShardings(module, mesh);
  const double seconds = Seconds(start);
  benchmark::DoNotOptimize(map.size());
  return seconds;
}

void BM_PartitionCompile(benchmark::State& state) {
  const int64_t n = state.range(0);
  FsdpStepModule(1);
  FsdpStepModule(n);
  PartitionAndCompile(n);  // warm: first-touch allocations, kernel caches
  std::vector<double> partition, compile, total, one, ratios, propagate;
  CompileTimes last;
  int64_t round = 0;
  for (auto _ : state) {
    // n devices and 1 device alternately, each going first in turn.
    CompileTimes mine, base;
    if (round++ % 2 == 0) {
      mine = PartitionAndCompile(n);
      base = PartitionAndCompile(1);
    } else {
      base = PartitionAndCompile(1);
      mine = PartitionAndCompile(n);
    }
    partition.push_back(mine.partition * 1e3);
    compile.push_back(mine.compile * 1e3);
    total.push_back((mine.partition + mine.compile) * 1e3);
    one.push_back((base.partition + base.compile) * 1e3);
    ratios.push_back((mine.partition + mine.compile) / (base.partition + base.compile));
    state.SetIterationTime(mine.partition + mine.compile);
    last = mine;
    state.PauseTiming();
    propagate.push_back(PropagateSeconds(n) * 1e3);
    state.ResumeTiming();
  }
  state.counters["partition_ms"] = Median(partition);
  state.counters["compile_ms"] = Median(compile);
  state.counters["total_ms"] = Median(total);
  state.counters["one_device_ms"] = Median(one);
  state.counters["vs_1_device"] = Median(total) / Median(one);
  state.counters["median_ratio"] = Median(ratios);
  state.counters["propagate_ms"] = Median(propagate);
  state.counters["collectives"] = static_cast<double>(last.collectives);
  state.counters["instructions"] = static_cast<double>(last.instructions);
  state.counters["propagated_text_kB"] = static_cast<double>(last.propagated_text_bytes) / 1e3;
  state.counters["load1"] = LoadAverage();
}
BENCHMARK(BM_PartitionCompile)
    ->RangeMultiplier(2)
    ->Range(1, 64)
    ->Iterations(15)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// ---------------------------------------------------------------------------
// 3. Two devices x one thread against one device x two threads.

void BM_TwoDevicesVsOne(benchmark::State& state) {
  const std::string plan = state.range(0) == 0 ? "dp" : "fsdp";
  const int rounds = static_cast<int>(state.range(1));
  StepRunner one(kBench, "", "");
  StepRunner two(kBench, "data=2", plan);
  one.Step();  // compile both
  two.Step();
  one.Step();  // and run each once more before timing
  two.Step();
  std::vector<double> one_tps, two_tps, ratios;
  std::atomic<int64_t>& donated = lazy::Context::Get().metrics().bytes_donated;
  int64_t donated_one = 0, donated_two = 0;  // bytes a step's results took from its arguments
  for (auto _ : state) {
    for (int r = 0; r < rounds; ++r) {
      double t1 = 0, t2 = 0;
      for (int k = 0; k < 2; ++k) {
        const bool first_one = (r + k) % 2 == 0;
        const int64_t before = donated.load();
        const auto start = std::chrono::steady_clock::now();
        (first_one ? one : two).Step();
        (first_one ? t1 : t2) = Seconds(start);
        (first_one ? donated_one : donated_two) = donated.load() - before;
      }
      one_tps.push_back(one.tokens() / t1);
      two_tps.push_back(two.tokens() / t2);
      ratios.push_back(t1 / t2);
    }
  }
  state.counters["one_dev_2t_tok_s"] = Median(one_tps);
  state.counters["two_dev_1t_tok_s"] = Median(two_tps);
  state.counters["ratio"] = Median(two_tps) / Median(one_tps);
  state.counters["median_round_ratio"] = Median(ratios);
  state.counters["min_round_ratio"] = *std::min_element(ratios.begin(), ratios.end());
  state.counters["max_round_ratio"] = *std::max_element(ratios.begin(), ratios.end());
  state.counters["one_donated_MB"] = static_cast<double>(donated_one) / 1e6;
  state.counters["two_donated_MB"] = static_cast<double>(donated_two) / 1e6;
  state.counters["load1"] = LoadAverage();
  std::string rows;
  for (size_t i = 0; i < ratios.size(); ++i)
    rows += fmt::format("{}{:.0f}/{:.0f}", i ? " " : "", one_tps[i], two_tps[i]);
  state.SetLabel(fmt::format("{} on data=2; per round 1dev/2dev tok/s: {}", plan, rows));
}
BENCHMARK(BM_TwoDevicesVsOne)
    ->Args({0, 10})
    ->Args({1, 10})
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace strata

BENCHMARK_MAIN();
