// Llama benchmarks (issue 6):
//  - compile time of one training step (forward + backward) against the
//    number of layers, apply_layers (scan) vs unrolled;
//  - forward and forward + backward at V=4096, H=512, 8 heads, 4 kv heads,
//    I=1536, batch 4, seq 256, with 2 and 8 layers (the peer is
//    bench/llama_torch.py, run side by side by bench/run_llama_bench.sh).
#include <benchmark/benchmark.h>

#include <chrono>

#include "llama_bench_config.h"
#include "strata/autograd/grad.h"
#include "strata/lazy/context.h"
#include "strata/lazy/ops.h"
#include "strata/nn/llama.h"
#include "strata/runtime/executable.h"

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

void BM_CompileTrainStep(benchmark::State& state) {
  const int64_t layers = state.range(0);
  const bool scan = state.range(1) == 1;
  io::LlamaConfig c = BenchConfig(layers);
  c.vocab_size = 256;  // compile time does not depend on sizes; keep setup cheap
  c.hidden_size = 64;
  c.intermediate_size = 128;
  nn::LlamaForCausalLM model(c, random_key(1));
  model.layer_mode = scan ? nn::LayerMode::kScan : nn::LayerMode::kUnrolled;
  std::vector<Tensor*> params = model.parameters();
  sync(params);  // weights are data, as in training (not their init graph)
  Tensor ids = Tokens(2, 16, c.vocab_size, 1), labels = Tokens(2, 16, c.vocab_size, 2);
  double trace_ms = 0, instructions = 0;
  for (auto _ : state) {
    auto t0 = std::chrono::steady_clock::now();
    std::vector<Tensor> roots = TrainStep(model, ids, labels);
    lazy::LoweringContext lowering(roots);
    trace_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    auto exe = runtime::Executable::Compile(lowering.module());
    instructions = 0;
    for (const auto& comp : exe->module().computations())
      instructions += static_cast<double>(comp->instruction_count());
    benchmark::DoNotOptimize(exe.get());
  }
  state.counters["trace_lower_ms"] = trace_ms;
  state.counters["instructions"] = instructions;
  state.SetLabel(scan ? "apply_layers" : "unrolled");
}
BENCHMARK(BM_CompileTrainStep)
    ->ArgsProduct({{1, 2, 4, 8, 16, 32, 64}, {1, 0}})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1)
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
