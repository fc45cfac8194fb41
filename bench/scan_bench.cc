// scan: compile time must not grow with the trip count (goal: length 10 000
// within 1.2x of length 10), and tracing a decoder-sized body must stay
// under 1 ms. Compile = lower the lazy graph + Executable::Compile (passes,
// schedule, buffer plan); nothing runs.
#include <benchmark/benchmark.h>

#include "strata/autograd/grad.h"
#include "strata/compiler/compile.h"
#include "strata/lazy/context.h"
#include "strata/lazy/ops.h"
#include "strata/nn/functional.h"
#include "strata/transforms/scan.h"

namespace strata {
namespace {

// An RNN-style step (matmul, tanh, a few elementwise ops), forward and
// backward, compiled for `length` steps.
void BM_CompileForwardBackward(benchmark::State& state) {
  const int64_t length = state.range(0), width = 64;
  Tensor w = ones({width, width}), h0 = zeros({1, width});
  Tensor xs = zeros({length, 1, width});
  for (auto _ : state) {
    auto [carry, ys] = scan(
        [&](const Tree& c, const Tree& x) {
          Tensor h = tanh(matmul(c.leaf(), w) + x.leaf());
          return std::pair{Tree(h), Tree(sigmoid(h) * 2.0)};
        },
        Tree(h0), Tree(xs));
    Tensor loss = sum(carry.leaf()) + sum(ys.leaf());
    std::vector<Tensor> roots = gradients(loss, {w, h0, xs});
    roots.push_back(loss);
    lazy::LoweringContext lowering(roots);
    auto exe = compiler::Compile(lowering.module());
    benchmark::DoNotOptimize(exe.get());
  }
}
BENCHMARK(BM_CompileForwardBackward)->Arg(10)->Arg(10000)->Unit(benchmark::kMillisecond);

// A Llama decoder layer (H=512, 8 heads, 4 kv heads, I=1536; batch 4, seq
// 256) as a scan body over 8 stacked layers: the time to trace it
// (placeholders, capture, loop node), nothing lowered.
struct Layer {
  Tensor ln1, q, k, v, o, ln2, gate, up, down;
};

void BM_TraceDecoderBody(benchmark::State& state) {
  const int64_t h = 512, heads = 8, kv = 4, hd = h / heads, inter = 1536, b = 4, s = 256, n = 8;
  Tree::Dict stacked{
      {"ln1", zeros({n, h})},         {"q", zeros({n, h, h})},      {"k", zeros({n, h, kv * hd})},
      {"v", zeros({n, h, kv * hd})},  {"o", zeros({n, h, h})},      {"ln2", zeros({n, h})},
      {"gate", zeros({n, h, inter})}, {"up", zeros({n, h, inter})}, {"down", zeros({n, inter, h})}};
  Tensor x0 = zeros({b, s, h});
  nn::RotaryTables rope = nn::rotary_tables(s, hd);
  auto body = [&](const Tree& c, const Tree& p) {
    Tensor x = c.leaf();
    Tensor a = nn::rms_norm(x, p["ln1"].leaf());
    auto heads_of = [&](const Tensor& t, int64_t count) {
      return permute(reshape(t, {b, s, count, hd}), {0, 2, 1, 3});
    };
    Tensor q = nn::apply_rotary(heads_of(matmul(a, p["q"].leaf()), heads), rope.cos, rope.sin);
    Tensor k = nn::apply_rotary(heads_of(matmul(a, p["k"].leaf()), kv), rope.cos, rope.sin);
    Tensor v = heads_of(matmul(a, p["v"].leaf()), kv);
    Tensor att = nn::scaled_dot_product_attention(q, k, v, true);
    x = x + matmul(reshape(permute(att, {0, 2, 1, 3}), {b, s, h}), p["o"].leaf());
    Tensor m = nn::rms_norm(x, p["ln2"].leaf());
    Tensor mlp = nn::silu(matmul(m, p["gate"].leaf())) * matmul(m, p["up"].leaf());
    x = x + matmul(mlp, p["down"].leaf());
    return std::pair{Tree(x), Tree()};
  };
  int64_t nodes = 0;
  for (auto _ : state) {
    auto [carry, ys] = scan(body, Tree(x0), Tree(stacked));
    benchmark::DoNotOptimize(carry.leaf().value().node.get());
    nodes = static_cast<int64_t>(carry.leaf().value().node->loop()->roots.size());
  }
  state.counters["roots"] = static_cast<double>(nodes);
}
BENCHMARK(BM_TraceDecoderBody)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace strata

BENCHMARK_MAIN();
