// A full training step (forward, backward, AdamW) of the Llama bench config
// (V=4096, H=512, 8 heads, 4 kv heads, I=1536, batch 4, seq 256) at a given
// number of layers: tokens per second and the process's peak RSS. Run one
// configuration per process (--benchmark_filter=BM_TrainStep/8/1/) so the
// peak is that configuration's; bench/run_train_bench.sh runs it beside the
// PyTorch peer (bench/train_torch.py).
#include <benchmark/benchmark.h>
#include <sys/resource.h>

#include <string>

#include "llama_bench_config.h"
#include "strata/autograd/grad.h"
#include "strata/lazy/context.h"
#include "strata/lazy/ops.h"
#include "strata/nn/llama.h"
#include "strata/nn/mixed_precision.h"
#include "strata/nn/optim.h"
#include "strata/runtime/device.h"
#include "strata/runtime/profile.h"

namespace strata {
namespace {

using bench::BenchConfig;
using bench::Tokens;

constexpr int64_t kBatch = 4, kSeq = 256;

// Runs the step in `state`'s loop. mode 0: unrolled layers; 1: apply_layers
// saving each layer's input; 2: apply_layers also saving its matrix
// products (no GEMM recomputed); 3: apply_layers saving the products
// without batch dims (projections).
// keep_loss_graph = false detaches the loss before the sync, so its computed
// data keeps no origin (the graph that computed it). `compute` bf16 is
// strata train --dtype bf16: f32 weights and moments, the step computing
// with bf16 copies of the weights (nn::ComputeIn).
void RunTrainSteps(benchmark::State& state, int64_t layers, int64_t mode,
                   bool keep_loss_graph = true, DType compute = DType::kF32) {
  io::LlamaConfig c = BenchConfig(layers);
  nn::LlamaForCausalLM model(c, random_key(2));
  model.layer_mode = mode == 0 ? nn::LayerMode::kUnrolled : nn::LayerMode::kScan;
  model.layer_remat = mode == 2   ? Remat::kSaveDots
                      : mode == 3 ? Remat::kSaveDotsWithNoBatchDims
                                  : Remat::kSaveCarries;
  std::vector<Tensor*> params = model.parameters();
  nn::AdamW adam(params, {.lr = 1e-4});
  std::vector<Tensor*> live = params;
  for (Tensor& t : adam.exp_avg()) live.push_back(&t);
  for (Tensor& t : adam.exp_avg_sq()) live.push_back(&t);
  sync(live);  // initial weights and moments are data, as in training
  // The step's new weights and moments take the old ones' buffers, as
  // strata train's steps do (buffer donation).
  lazy::Context::Get().set_buffer_donation(true);
  Tensor ids = Tokens(kBatch, kSeq, c.vocab_size, 3),
         labels = Tokens(kBatch, kSeq, c.vocab_size, 4);
  auto step = [&] {
    std::vector<Tensor> values;
    for (Tensor* p : params) values.push_back(*p);
    Tensor loss = [&] {
      nn::ComputeIn in(params, compute);
      return model.loss(model.forward(ids), labels);
    }();
    adam.step(gradients(loss, values));
    // As Trainer::Step: no handle on the old weights outlives the update, so
    // the sync may give their buffers to the new ones.
    values.clear();
    if (!keep_loss_graph) loss = detach(loss);
    std::vector<Tensor*> roots = live;
    roots.push_back(&loss);
    sync(roots);
  };
  step();  // compile
  // Under STRATA_PROFILE the kernel profile covers the timed steps alone: not
  // the weights' initialization, nor the warm-up step's first touch of the
  // arena and packing space (a zero-filled stack looks 5-10x slower then).
  if (runtime::KernelProfile* profile = runtime::Client::Default().profile()) profile->Reset();
  rusage before{};
  getrusage(RUSAGE_SELF, &before);
  for (auto _ : state) step();
  state.counters["tokens_per_s"] = benchmark::Counter(
      static_cast<double>(kBatch * kSeq), benchmark::Counter::kIsIterationInvariantRate);
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  // Pages the kernel had to map (and zero) during the timed steps: memory
  // a step frees and takes again instead of reusing.
  state.counters["page_faults_per_step"] = static_cast<double>(usage.ru_minflt - before.ru_minflt) /
                                           static_cast<double>(state.iterations());
  state.counters["peak_rss_mib"] = static_cast<double>(usage.ru_maxrss) / 1024.0;
  lazy::Context::Get().set_buffer_donation(false);
}

std::string ModeLabel(int64_t mode) {
  return mode == 0   ? "unrolled"
         : mode == 1 ? "apply_layers, save carries"
         : mode == 2 ? "apply_layers, save dots"
                     : "apply_layers, save dots without batch dims";
}

void BM_TrainStep(benchmark::State& state) {
  const int64_t mode = state.range(1);
  RunTrainSteps(state, state.range(0), mode);
  state.SetLabel(ModeLabel(mode));
}
BENCHMARK(BM_TrainStep)
    ->ArgsProduct({{2, 8, 32}, {1, 2, 3, 0}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(3);

// The same step in mixed precision (bf16 compute, f32 weights and AdamW).
void BM_TrainStepBf16(benchmark::State& state) {
  const int64_t mode = state.range(1);
  RunTrainSteps(state, state.range(0), mode, true, DType::kBF16);
  state.SetLabel("bf16, " + ModeLabel(mode));
}
BENCHMARK(BM_TrainStepBf16)
    ->ArgsProduct({{2, 8, 32}, {1, 2, 3, 0}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(3);

// The cost of checked indexing (lazy::Context::set_index_checks): the same
// step of 2 layers with the embedding's and the loss's index checks (1) and
// without (0). Run with --benchmark_repetitions and
// --benchmark_enable_random_interleaving so the two alternate.
void BM_TrainStepIndexChecks(benchmark::State& state) {
  lazy::Context::Get().set_index_checks(state.range(0) != 0);
  RunTrainSteps(state, 2, 1);
  lazy::Context::Get().set_index_checks(true);
  state.SetLabel(state.range(0) ? "index checks on" : "index checks off");
}
BENCHMARK(BM_TrainStepIndexChecks)
    ->Arg(1)
    ->Arg(0)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(10);

// The cost of materialized data keeping its origin: the same step of 2
// layers with the synced loss keeping the forward graph that computed it
// (1, as every synced differentiable value does) and detached first (0).
// Run one arg per process for the peak RSS.
void BM_TrainStepLossOrigin(benchmark::State& state) {
  RunTrainSteps(state, 2, 1, state.range(0) != 0);
  state.SetLabel(state.range(0) ? "loss keeps its graph" : "loss detached");
}
BENCHMARK(BM_TrainStepLossOrigin)
    ->Arg(1)
    ->Arg(0)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(10);

}  // namespace
}  // namespace strata

BENCHMARK_MAIN();
