// Lazy-tensor overheads: building and hashing IR per op, and the steady-state
// cost of re-tracing a cached 1000-op graph (trace + hash + cache lookup, no
// execution). Goal (issue 3): under 1 us per op.
#include <benchmark/benchmark.h>

#include "strata/lazy/context.h"
#include "strata/lazy/ops.h"

namespace strata {
namespace {

constexpr int kOps = 1000;

// kOps ops: alternating multiply and add over two inputs.
Tensor Chain(const Tensor& x, const Tensor& y) {
  Tensor t = x;
  for (int i = 0; i < kOps / 2; ++i) t = t * y + x;
  return t;
}

void BM_IrNodeConstructionAndHash(benchmark::State& state) {
  auto* cpu = runtime::Client::Default().device(0);
  ir::Value x{ir::Node::MakeDeviceData(
      runtime::Buffer::FromVector<float>(std::vector<float>(64, 1.0f), {8, 8}, cpu))};
  ir::Value y{ir::Node::MakeDeviceData(
      runtime::Buffer::FromVector<float>(std::vector<float>(64, 2.0f), {8, 8}, cpu))};
  for (auto _ : state) {
    ir::Value t = x;
    for (int i = 0; i < kOps / 2; ++i) {
      t = ir::Value{ir::Node::MakeOp(hlo::Opcode::kMultiply, {t, y})};
      t = ir::Value{ir::Node::MakeOp(hlo::Opcode::kAdd, {t, x})};
    }
    benchmark::DoNotOptimize(t.node->dag_hash());
  }
  state.counters["ns_per_op"] =
      benchmark::Counter(static_cast<double>(kOps), benchmark::Counter::kIsIterationInvariantRate |
                                                        benchmark::Counter::kInvert);
}
BENCHMARK(BM_IrNodeConstructionAndHash)->Unit(benchmark::kMicrosecond);

void BM_TensorOpTrace(benchmark::State& state) {
  Tensor x = Tensor::FromVector(std::vector<float>(64, 1.0f), {8, 8});
  Tensor y = Tensor::FromVector(std::vector<float>(64, 2.0f), {8, 8});
  for (auto _ : state) benchmark::DoNotOptimize(Chain(x, y).value().node->dag_hash());
  state.counters["ns_per_op"] =
      benchmark::Counter(static_cast<double>(kOps), benchmark::Counter::kIsIterationInvariantRate |
                                                        benchmark::Counter::kInvert);
}
BENCHMARK(BM_TensorOpTrace)->Unit(benchmark::kMicrosecond);

void BM_CachedGraphSteadyState(benchmark::State& state) {
  Tensor x = Tensor::FromVector(std::vector<float>(64, 1.0f), {8, 8});
  Tensor y = Tensor::FromVector(std::vector<float>(64, 2.0f), {8, 8});
  Chain(x, y).sync();  // compile once
  bool all_hit = true;
  for (auto _ : state) {
    Tensor t = Chain(x, y);                           // trace
    ir::Graph graph = ir::BuildGraph({t.value()});    // walk + graph hash
    all_hit &= lazy::Context::Get().IsCached(graph);  // lookup
  }
  if (!all_hit) state.SkipWithError("the graph was not a cache hit");
  state.counters["ns_per_op"] =
      benchmark::Counter(static_cast<double>(kOps), benchmark::Counter::kIsIterationInvariantRate |
                                                        benchmark::Counter::kInvert);
}
BENCHMARK(BM_CachedGraphSteadyState)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace strata

BENCHMARK_MAIN();
