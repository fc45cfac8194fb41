// Llama benchmarks (issue 6):
//  - compile time of one training step (forward + backward) against the
//    number of layers, apply_layers (scan) vs unrolled;
//  - forward and forward + backward at V=4096, H=512, 8 heads, 4 kv heads,
//    I=1536, batch 4, seq 256, with 2 and 8 layers (the peer is
//    bench/llama_torch.py, run side by side by bench/run_llama_bench.sh).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <memory>

#include "llama_bench_config.h"
#include "strata/autograd/grad.h"
#include "strata/compiler/compile.h"
#include "strata/lazy/context.h"
#include "strata/lazy/ops.h"
#include "strata/nn/llama.h"

namespace strata {
namespace {

using bench::BenchConfig;
using bench::Tokens;

// The training-step graph (loss and every parameter's gradient).
std::vector<Tensor> TrainStep(nn::LlamaForCausalLM& model, const Tensor& ids,
                              const Tensor& labels) {
  Tensor loss = model.loss(model.forward(ids), labels);
  std::vector<Tensor> params;
  for (Tensor* t : model.parameters()) params.push_back(*t);
  std::vector<Tensor> out = gradients(loss, params);
  out.push_back(loss);
  return out;
}

// One model of `layers` layers for the compile benchmark, weights as data.
struct CompileModel {
  CompileModel(int64_t layers, bool scan) : config(BenchConfig(layers)) {
    config.vocab_size = 256;  // compile time does not depend on sizes; keep setup cheap
    config.hidden_size = 64;
    config.intermediate_size = 128;
    model = std::make_unique<nn::LlamaForCausalLM>(config, random_key(1));
    model->layer_mode = scan ? nn::LayerMode::kScan : nn::LayerMode::kUnrolled;
    sync(model->parameters());  // weights are data, as in training (not their init graph)
  }
  io::LlamaConfig config;
  std::unique_ptr<nn::LlamaForCausalLM> model;
};

struct CompileTimes {
  double trace_ms = 0, lower_ms = 0, total_ms = 0, instructions = 0;
};

// Trace (forward, loss, gradients), lower and compile one training step.
CompileTimes CompileStep(nn::LlamaForCausalLM& model, const Tensor& ids, const Tensor& labels) {
  auto since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
  };
  CompileTimes times;
  auto t0 = std::chrono::steady_clock::now();
  std::vector<Tensor> roots = TrainStep(model, ids, labels);
  times.trace_ms = since(t0);
  auto t1 = std::chrono::steady_clock::now();
  lazy::LoweringContext lowering(roots);
  times.lower_ms = since(t1);
  compiler::CompileOptions options;
  options.verify_input = false;  // as lazy::Context compiles what its lowering built
  auto exe = compiler::Compile(lowering.module(), options);
  times.total_ms = since(t0);
  for (const auto& comp : exe->module().computations())
    times.instructions += static_cast<double>(comp->instruction_count());
  return times;
}

// The compile time of an N-layer step, and of a 1-layer step measured
// alternately with it in the same process: both models are built before
// either is timed, so both compile against the same heap. (Building a deep
// model leaves glibc's heap with many free chunks, which makes every later
// small allocation slower; timed in separate processes that alone made the
// 64-layer step look 1.5-2x slower than the 1-layer one with the same
// instructions.) The time is the N-layer step's; `vs_1_layer` the ratio.
void BM_CompileTrainStep(benchmark::State& state) {
  const int64_t layers = state.range(0);
  const bool scan = state.range(1) == 1;
  CompileModel one(1, scan), deep(layers, scan);
  Tensor ids = Tokens(2, 16, 256, 1), labels = Tokens(2, 16, 256, 2);
  std::vector<double> one_ms, deep_ms;
  CompileTimes last;
  for (auto _ : state) {
    one_ms.push_back(CompileStep(*one.model, ids, labels).total_ms);
    last = CompileStep(*deep.model, ids, labels);
    deep_ms.push_back(last.total_ms);
    state.SetIterationTime(last.total_ms / 1e3);
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  state.counters["one_layer_ms"] = median(one_ms);
  state.counters["vs_1_layer"] = median(deep_ms) / median(one_ms);
  state.counters["trace_ms"] = last.trace_ms;
  state.counters["lower_ms"] = last.lower_ms;
  state.counters["instructions"] = last.instructions;
  state.SetLabel(scan ? "apply_layers" : "unrolled");
}
BENCHMARK(BM_CompileTrainStep)
    ->ArgsProduct({{1, 2, 4, 8, 16, 32, 64}, {1, 0}})
    ->Unit(benchmark::kMillisecond)
    ->UseManualTime()
    ->Iterations(5)
    ->Repetitions(3);

// Forward (logits) or a full forward + backward at the bench config.
void RunModel(benchmark::State& state, bool backward) {
  const int64_t layers = state.range(0);
  io::LlamaConfig c = BenchConfig(layers);
  nn::LlamaForCausalLM model(c, random_key(2));
  std::vector<Tensor*> params = model.parameters();
  sync(params);  // materialize the initial weights once
  Tensor ids = Tokens(4, 256, c.vocab_size, 3), labels = Tokens(4, 256, c.vocab_size, 4);
  auto step = [&] {
    std::vector<Tensor> out =
        backward ? TrainStep(model, ids, labels) : std::vector<Tensor>{model.forward(ids)};
    std::vector<Tensor*> ptrs;
    for (Tensor& t : out) ptrs.push_back(&t);
    sync(ptrs);
  };
  step();  // compile
  for (auto _ : state) step();
  double flops = 2.0 * 4 * 256 *
                 (layers * (512.0 * 512 * 2 + 512.0 * 256 * 2 + 512.0 * 1536 * 3) + 512.0 * 4096);
  flops += layers * 2.0 * 4 * 8 * 256.0 * 256 * 64 * 2;  // attention scores and values
  if (backward) flops *= 3;
  state.counters["GFLOPS"] = benchmark::Counter(flops / 1e9, benchmark::Counter::kIsRate);
}
void BM_Forward(benchmark::State& state) { RunModel(state, false); }
void BM_ForwardBackward(benchmark::State& state) { RunModel(state, true); }
BENCHMARK(BM_Forward)->Arg(2)->Arg(8)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_ForwardBackward)->Arg(2)->Arg(8)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace strata

BENCHMARK_MAIN();
