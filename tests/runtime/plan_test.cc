// Buffer planning and execution: liveness-based arena reuse, roots that are
// parameters / constants / repeated values, concurrent runs, argument
// checking, and arena reuse across runs not leaking old values.
#include <gmock/gmock.h>

#include <atomic>
#include <cmath>
#include <thread>

#include "runtime/test_util.h"

namespace strata::runtime::test {
namespace {

using hlo::Builder;
using hlo::Instruction;
using hlo::Opcode;
using Dims = std::vector<int64_t>;

Shape F32(Dims dims) { return Shape(DType::kF32, std::move(dims)); }

// y_{k+1} = f_k(y_k) + y_k for 30 steps over 1 MiB arrays: every value dies
// two steps after it is made, so a few buffers suffice for 60 intermediates.
TEST(Plan, LongChainReusesArenaMemory) {
  const int64_t n = 1 << 18, steps = 30;
  const Opcode ops[] = {Opcode::kTanh, Opcode::kSin, Opcode::kNegate, Opcode::kAbs, Opcode::kCos};
  std::vector<float> x = Random<float>(n, 1, -2, 2);
  std::vector<float> expected = x;
  for (int64_t k = 0; k < steps; ++k) {
    for (float& v : expected) {
      float t = 0;
      switch (ops[k % 5]) {
        case Opcode::kTanh:
          t = std::tanh(v);
          break;
        case Opcode::kSin:
          t = std::sin(v);
          break;
        case Opcode::kNegate:
          t = -v;
          break;
        case Opcode::kAbs:
          t = std::fabs(v);
          break;
        default:
          t = std::cos(v);
          break;
      }
      v = t + v;
    }
  }
  for (bool passes : {true, false}) {
    SCOPED_TRACE(passes ? "with passes" : "without passes");
    Graph g({F32({n})});
    g.fuse = false;  // the planner's own reuse (fused, the chain is one loop)
    Instruction* y = g.params[0];
    for (int64_t k = 0; k < steps; ++k) y = g.b.Add(g.b.Unary(ops[k % 5], y), y);
    auto exe = g.Compile(y, passes);
    Buffer arg = Arg(x, {n});
    EXPECT_TRUE(AllClose(expected, exe->Run({arg})[0].ToVector<float>(), 1e-5, 1e-5));
    const int64_t bytes = n * 4, all_intermediates = 2 * steps * bytes;
    EXPECT_LE(exe->stats().temp_bytes, 3 * bytes)
        << "of " << all_intermediates << " bytes of intermediates";
    EXPECT_EQ(exe->stats().output_bytes, bytes);
    EXPECT_EQ(exe->stats().planned_peak_bytes, exe->stats().temp_bytes + bytes);
    EXPECT_GT(exe->stats().in_place_updates, 0);
    EXPECT_EQ(arg.ToVector<float>(), x) << "an in-place update wrote into the argument";
  }
}

// Broadcasts of a scalar feeding elementwise ops are read as scalars, never
// written out: y = select(x > t, x * s, s - x) over 1 MiB needs no 1 MiB
// array for s or t. A broadcast some other op needs is still built.
TEST(Plan, ScalarBroadcastsAreReadNotMaterialized) {
  const int64_t n = 1 << 18;
  std::vector<float> x = Random<float>(n, 3, -2, 2);
  const float s = 1.5f, t = 0.25f;
  std::vector<float> expected(n);
  for (int64_t i = 0; i < n; ++i) expected[i] = x[i] > t ? x[i] * s : s - x[i];
  for (bool passes : {true, false}) {
    SCOPED_TRACE(passes ? "with passes" : "without passes");
    Graph g({F32({n}), F32({}), F32({})});
    g.fuse = false;  // what the one-op kernels do (fused, it is one loop)
    auto* bs = g.b.Broadcast(g.params[1], {n}, {});
    auto* bt = g.b.Broadcast(g.params[2], {n}, {});
    auto* y = g.b.Select(g.b.Compare(g.params[0], bt, hlo::Comparison::kGt),
                         g.b.Multiply(g.params[0], bs), g.b.Subtract(bs, g.params[0]));
    auto exe = g.Compile(y, passes);
    auto out =
        exe->Run({Arg(x, {n}), Arg(std::vector<float>{s}, {}), Arg(std::vector<float>{t}, {})});
    EXPECT_EQ(out[0].ToVector<float>(), expected);
    // compare, multiply, subtract, select: no kernel writes a broadcast.
    EXPECT_EQ(exe->stats().kernels, 4);
  }
  // The same values when a broadcast is also a result (materialized), and
  // when the selected values are both scalars.
  Graph g({F32({n}), F32({}), F32({})});
  g.fuse = false;
  auto* bs = g.b.Broadcast(g.params[1], {n}, {});
  auto* bt = g.b.Broadcast(g.params[2], {n}, {});
  auto* pick = g.b.Select(g.b.Compare(g.params[0], bt, hlo::Comparison::kGt), bs, bt);
  auto exe = g.Compile(g.b.Tuple({g.b.Add(bs, g.params[0]), pick, bs}));
  auto out =
      exe->Run({Arg(x, {n}), Arg(std::vector<float>{s}, {}), Arg(std::vector<float>{t}, {})});
  std::vector<float> sum(n), picked(n);
  for (int64_t i = 0; i < n; ++i) {
    sum[i] = s + x[i];
    picked[i] = x[i] > t ? s : t;
  }
  EXPECT_EQ(out[0].ToVector<float>(), sum);
  EXPECT_EQ(out[1].ToVector<float>(), picked);
  EXPECT_EQ(out[2].ToVector<float>(), std::vector<float>(n, s));
  EXPECT_EQ(exe->stats().kernels, 4);  // bs is a result: built; bt is not
}

// Donated arguments: a result is written into one only when the program no
// longer reads it. out0 = exp(p) is written while p is still to be read by
// out1 = p * out0, so out0 cannot take p's bytes; out1 (an elementwise op
// that reads p last) can. Unfused: one fusion would write both at once.
TEST(Plan, DonatedArgumentsTakeOnlyResultsWrittenAfterTheirLastRead) {
  const int64_t n = 1000;
  std::vector<float> x = Random<float>(n, 5, -1, 1);
  std::vector<float> e(n), prod(n);
  for (int64_t i = 0; i < n; ++i) {
    e[i] = std::exp(x[i]);
    prod[i] = x[i] * e[i];
  }
  Graph g({F32({n})});
  g.fuse = false;
  auto* out0 = g.b.Unary(Opcode::kExp, g.params[0]);
  auto* out1 = g.b.Multiply(g.params[0], out0);
  auto exe = g.Compile(g.b.Tuple({out0, out1}));
  Buffer arg = Arg(x, {n});
  auto out = exe->Run({arg}, nullptr, {true});
  EXPECT_TRUE(AllClose(e, out[0].ToVector<float>(), 1e-6, 0));
  EXPECT_TRUE(AllClose(prod, out[1].ToVector<float>(), 1e-6, 0));
  EXPECT_NE(out[0].data(), arg.data());
  EXPECT_EQ(out[1].data(), arg.data());
  // Not donated: nothing is written into the argument.
  Buffer kept = Arg(x, {n});
  auto fresh = exe->Run({kept});
  EXPECT_NE(fresh[1].data(), kept.data());
  EXPECT_EQ(kept.ToVector<float>(), x);
  EXPECT_THROW(exe->Run({kept}, nullptr, {true, false}), Error);
}

// Runs `build` over (x f32[2,3], y f32[2,3]) with passes on and off.
void ExpectOutputs(const std::function<Instruction*(Graph&)>& build,
                   const std::vector<std::vector<float>>& expected) {
  std::vector<float> x = {1, 2, 3, 4, 5, 6}, y = {-1, -2, -3, -4, -5, -6};
  for (bool passes : {true, false}) {
    SCOPED_TRACE(passes ? "with passes" : "without passes");
    Graph g({F32({2, 3}), F32({2, 3})});
    Buffer bx = Arg(x, {2, 3}), by = Arg(y, {2, 3});
    auto exe = g.Compile(build(g), passes);
    auto out = exe->Run({bx, by});
    ASSERT_EQ(out.size(), expected.size()) << hlo::ToText(exe->module());
    for (size_t k = 0; k < out.size(); ++k) {
      // Copies are exact; exp may differ from std::exp in the last bit.
      EXPECT_TRUE(AllClose(expected[k], out[k].ToVector<float>(), 2e-7, 0))
          << "output " << k << "\n"
          << hlo::ToText(exe->module());
      EXPECT_NE(out[k].data(), bx.data());  // results never alias the arguments
      EXPECT_NE(out[k].data(), by.data());
      for (size_t j = 0; j < k; ++j) EXPECT_NE(out[k].data(), out[j].data());
    }
  }
}

TEST(Plan, RootsThatComputeNothing) {
  const std::vector<float> x = {1, 2, 3, 4, 5, 6}, y = {-1, -2, -3, -4, -5, -6};
  std::vector<float> ex;
  for (float v : x) ex.push_back(std::exp(v));
  ExpectOutputs([](Graph& g) { return g.params[1]; }, {y});
  ExpectOutputs([](Graph& g) { return g.b.Reshape(g.params[0], {3, 2}); }, {x});
  ExpectOutputs(
      [](Graph& g) {
        return g.b.Constant(hlo::Literal::Vector<float>(std::vector<float>{7, 8}, {2}));
      },
      {{7, 8}});
  ExpectOutputs([](Graph& g) { return g.b.Tuple({g.params[1], g.params[0]}); }, {y, x});
  ExpectOutputs([](Graph& g) { return g.b.Tuple({g.params[0], g.params[0]}); }, {x, x});
  ExpectOutputs(
      [](Graph& g) {
        auto* e = g.b.Unary(Opcode::kExp, g.params[0]);
        return g.b.Tuple({e, e});
      },
      {ex, ex});
  ExpectOutputs(
      [](Graph& g) {
        auto* e = g.b.Unary(Opcode::kExp, g.params[0]);
        auto* c = g.b.Constant(hlo::Literal::Vector<float>(std::vector<float>{9}, {1}));
        return g.b.Tuple({g.params[0], c, e, g.params[0], e, c});
      },
      {x, {9}, ex, x, ex, {9}});
}

// A program with GEMM, a generic reduce (scratch), a transpose and a scatter.
struct Workload {
  Graph g{{F32({8, 16}), F32({16, 4})}};
  std::unique_ptr<Executable> exe;
  Workload() {
    auto& b = g.b;
    Builder fb("sum_squares");
    auto* acc = fb.Parameter(0, Shape::Scalar(DType::kF32), "acc");
    auto* v = fb.Parameter(1, Shape::Scalar(DType::kF32), "v");
    auto* sum_squares = g.Add(fb.Build(fb.Add(acc, fb.Multiply(v, v))));
    auto* product = b.Dot(g.params[0], g.params[1], {{}, {}, {1}, {0}});  // [8,4]
    auto* norms =
        b.Reduce(b.Transpose(product, {1, 0}), b.ConstantScalar(0.0f), {1}, sum_squares);  // [4]
    exe = g.Compile(b.Tuple({product, norms}));
  }
  static std::pair<std::vector<float>, std::vector<float>> Reference(const std::vector<float>& a,
                                                                     const std::vector<float>& w) {
    std::vector<float> product(32, 0), norms(4, 0);
    for (int i = 0; i < 8; ++i)
      for (int j = 0; j < 4; ++j) {
        double s = 0;
        for (int k = 0; k < 16; ++k) s += static_cast<double>(a[i * 16 + k]) * w[k * 4 + j];
        product[i * 4 + j] = static_cast<float>(s);
      }
    for (int j = 0; j < 4; ++j)
      for (int i = 0; i < 8; ++i) norms[j] += product[i * 4 + j] * product[i * 4 + j];
    return {product, norms};
  }
};

TEST(Plan, ConcurrentRunsGiveTheirOwnAnswers) {
  Workload w;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int iteration = 0; iteration < 25; ++iteration) {
        const uint32_t seed = 100 * t + iteration;
        std::vector<float> a = Random<float>(128, seed, -1, 1),
                           m = Random<float>(64, seed + 7, -1, 1);
        auto [product, norms] = Workload::Reference(a, m);
        auto out = w.exe->Run({Arg(a, {8, 16}), Arg(m, {16, 4})});
        if (!AllClose(product, out[0].ToVector<float>(), 1e-5, 1e-5) ||
            !AllClose(norms, out[1].ToVector<float>(), 1e-4, 1e-5)) {
          ++failures;
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST(Plan, BadArgumentsAreUserErrors) {
  Workload w;
  auto message = [&](const std::vector<Buffer>& args) -> std::string {
    try {
      w.exe->Run(args);
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  Buffer a = Arg(std::vector<float>(128), {8, 16}), m = Arg(std::vector<float>(64), {16, 4});
  EXPECT_THAT(message({a}), ::testing::HasSubstr("2"));
  EXPECT_THAT(message({a, m, m}), ::testing::HasSubstr("3"));
  std::string wrong_dims = message({a, Arg(std::vector<float>(64), {4, 16})});
  EXPECT_THAT(wrong_dims, ::testing::HasSubstr("f32[16,4]"));
  EXPECT_THAT(wrong_dims, ::testing::HasSubstr("f32[4,16]"));
  EXPECT_THAT(message({a, Arg(std::vector<int32_t>(64), {16, 4})}),
              ::testing::HasSubstr("f32[16,4]"));
  EXPECT_THAT(message({a, Buffer()}), ::testing::HasSubstr("argument 1"));
}

// Every op writes all of its output: running again with other data must not
// see the previous run's temporaries, which stay in the reused arena.
TEST(Plan, SecondRunDoesNotSeeFirstRunsValues) {
  Graph g({F32({3, 4}), Shape(DType::kS32, {}), Shape(DType::kS32, {5})});
  auto& b = g.b;
  auto* x = g.params[0];
  auto* add = g.Add(hlo::MakeScalarBinaryComputation("add", Opcode::kAdd, DType::kF32));
  auto* zeros = b.Broadcast(b.ConstantScalar(0.0f), {6, 4}, {});
  auto* placed = b.DynamicUpdateSlice(zeros, x, {g.params[1], b.ConstantScalar<int32_t>(0)});
  auto* padded = b.Pad(b.Transpose(x, {1, 0}), b.ConstantScalar(-1.0f), {{1, -1, 1}, {0, 2, 0}});
  auto* rows = b.Reshape(b.Slice(x, {0, 0}, {3, 1}), {3});
  auto* scattered = b.Scatter(b.Broadcast(b.ConstantScalar(0.0f), {4}, {}), g.params[2],
                              b.Concatenate({rows, b.Reshape(b.Slice(x, {0, 1}, {2, 2}), {2})}, 0),
                              {{}, {0}, {0}, 1}, add);
  auto* sums = b.Reduce(x, b.ConstantScalar(0.0f), {0}, add);
  auto flat = [&](Instruction* v) { return b.Reshape(v, {v->shape().num_elements()}); };
  auto exe = g.Compile(b.Concatenate({flat(placed), flat(padded), scattered, sums}, 0));

  auto reference = [](const std::vector<float>& x, int32_t row, const std::vector<int32_t>& idx) {
    std::vector<float> out(24, 0.0f);
    int32_t r0 = std::clamp(row, 0, 3);
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 4; ++j) out[(r0 + i) * 4 + j] = x[i * 4 + j];
    // pad(transpose(x) [4,3], low 1 high -1 interior 1 on dim 0; high 2 on dim 1) -> [7,5]
    for (int i = 0; i < 7; ++i)
      for (int j = 0; j < 5; ++j) {
        int p = i - 1;
        out.push_back(p >= 0 && p % 2 == 0 && p / 2 < 4 && j < 3 ? x[j * 4 + p / 2] : -1.0f);
      }
    std::vector<float> updates = {x[0], x[4], x[8], x[1], x[5]}, buckets(4, 0.0f);
    for (int k = 0; k < 5; ++k) {
      if (idx[k] >= 0 && idx[k] < 4) buckets[idx[k]] += updates[k];
    }
    out.insert(out.end(), buckets.begin(), buckets.end());
    for (int j = 0; j < 4; ++j) out.push_back(x[j] + x[4 + j] + x[8 + j]);
    return out;
  };
  std::vector<float> x1 = Random<float>(12, 1, -5, 5), x2 = Random<float>(12, 2, -5, 5);
  std::vector<int32_t> idx1 = {0, 1, 1, 3, 2}, idx2 = {3, -1, 0, 9, 0};
  auto first = exe->Run({Arg(x1, {3, 4}), Arg(std::vector<int32_t>{1}, {}), Arg(idx1, {5})});
  auto second = exe->Run({Arg(x2, {3, 4}), Arg(std::vector<int32_t>{7}, {}), Arg(idx2, {5})});
  auto third = exe->Run({Arg(x1, {3, 4}), Arg(std::vector<int32_t>{-2}, {}), Arg(idx1, {5})});
  EXPECT_TRUE(AllClose(reference(x1, 1, idx1), first[0].ToVector<float>(), 1e-6));
  EXPECT_TRUE(AllClose(reference(x2, 7, idx2), second[0].ToVector<float>(), 1e-6));
  EXPECT_TRUE(AllClose(reference(x1, -2, idx1), third[0].ToVector<float>(), 1e-6));
  EXPECT_TRUE(AllClose(reference(x1, 1, idx1), first[0].ToVector<float>(), 1e-6))
      << "a later run overwrote a result";
}

// Without passes, dead instructions stay and run after the root's inputs.
// Their results must not share bytes with live values: here the roots of a
// reduce's to_apply and of a while body, which are read after the dead code.
TEST(Plan, DeadCodeWithoutPassesDoesNotClobberLiveValues) {
  std::vector<float> x = Random<float>(12, 3, -2, 2);
  {
    Graph g({F32({3, 4})});
    Builder fb("sum_squares");
    auto* acc = fb.Parameter(0, Shape::Scalar(DType::kF32), "acc");
    auto* v = fb.Parameter(1, Shape::Scalar(DType::kF32), "v");
    auto* root = fb.Add(acc, fb.Multiply(v, v));
    fb.Subtract(acc, v);  // dead
    auto* f = g.Add(fb.Build(root));
    auto out =
        g.Run(g.b.Reduce(g.params[0], g.b.ConstantScalar(0.0f), {1}, f), {Arg(x, {3, 4})}, false);
    std::vector<float> expected(3, 0);
    for (int i = 0; i < 12; ++i) expected[i / 4] += x[i] * x[i];
    EXPECT_TRUE(AllClose(expected, out[0].ToVector<float>(), 1e-6)) << "reduce to_apply";
  }
  {
    // (i, acc) -> (i + 1, acc + i) while i < 10, with a dead multiply in the body.
    Graph g;
    Shape s64 = Shape::Scalar(DType::kS64), state = Shape::Tuple({s64, s64});
    Builder cb("cond");
    auto* cs = cb.Parameter(0, state, "s");
    auto* cond = g.Add(cb.Build(cb.Compare(cb.GetTupleElement(cs, 0),
                                           cb.ConstantScalar<int64_t>(10), hlo::Comparison::kLt)));
    Builder bb("body");
    auto* bs = bb.Parameter(0, state, "s");
    auto* i = bb.GetTupleElement(bs, 0);
    auto* acc = bb.GetTupleElement(bs, 1);
    auto* next = bb.Tuple({bb.Add(i, bb.ConstantScalar<int64_t>(1)), bb.Add(acc, i)});
    bb.Multiply(acc, acc);  // dead
    auto* body = g.Add(bb.Build(next));
    auto* loop = g.b.While(
        cond, body, g.b.Tuple({g.b.ConstantScalar<int64_t>(0), g.b.ConstantScalar<int64_t>(0)}));
    auto out = g.Run(loop, {}, false);
    EXPECT_EQ(out[0].ToVector<int64_t>()[0], 10) << "while body";
    EXPECT_EQ(out[1].ToVector<int64_t>()[0], 45) << "while body";
  }
}

// A backward pass's shape: g_k = tanh(P_k * g_{k-1}) where P_k = exp(c_k x)
// is short (two ops on a parameter) and listed first, and each g_k also
// feeds a small result r_k = sum(g_k) (a bias's gradient), the chain's end
// listed first among the results (a backward's input gradient). Walked
// from the root alone, every P_k runs before the chain starts and every
// g_k waits for its r_k at the end: 2K arrays live at once. Tallest operand
// first and results as soon as they can run keep a few.
TEST(Plan, ShortOperandsRunBeforeTheirUseAndResultsRunEarly) {
  const int64_t n = 1 << 18, steps = 16;
  std::vector<float> x = Random<float>(n, 7, -1, 1), g0 = Random<float>(n, 8, -1, 1);
  std::vector<double> want_r(steps, 0.0);
  std::vector<float> want_g = g0;
  for (int64_t k = 0; k < steps; ++k) {
    for (int64_t i = 0; i < n; ++i) {
      const float p = std::exp(x[i] * (static_cast<float>(k + 1) * 0.125f));
      want_g[i] = std::tanh(p * want_g[i]);
      want_r[k] += want_g[i];
    }
  }
  Graph g({F32({n}), F32({n})});
  g.fuse = false;  // one kernel per op: the planner's buffers are what is measured
  auto* add = g.Add(hlo::MakeScalarBinaryComputation("add", Opcode::kAdd, DType::kF32));
  Instruction* chain = g.params[1];
  std::vector<Instruction*> roots = {nullptr};
  for (int64_t k = 0; k < steps; ++k) {
    Instruction* c = g.b.Broadcast(g.b.ConstantScalar<float>((k + 1) * 0.125f), {n}, {});
    Instruction* p = g.b.Unary(Opcode::kExp, g.b.Multiply(g.params[0], c));
    chain = g.b.Unary(Opcode::kTanh, g.b.Multiply(p, chain));
    roots.push_back(g.b.Reduce(chain, g.b.ConstantScalar(0.0f), {0}, add));
  }
  roots[0] = chain;
  auto exe = g.Compile(g.b.Tuple(roots));
  std::vector<Buffer> out = exe->Run({Arg(x, {n}), Arg(g0, {n})});
  ASSERT_EQ(out.size(), static_cast<size_t>(steps + 1));
  EXPECT_TRUE(AllClose(want_g, out[0].ToVector<float>(), 1e-5, 1e-5));
  for (int64_t k = 0; k < steps; ++k) {
    EXPECT_NEAR(out[k + 1].ToVector<float>()[0], want_r[k], 1e-3 * (1 + std::abs(want_r[k]))) << k;
  }
  const int64_t bytes = n * 4;
  EXPECT_LE(exe->stats().temp_bytes, 4 * bytes)
      << "of " << 2 * steps * bytes << " bytes if every P_k and g_k stayed live";
}

}  // namespace
}  // namespace strata::runtime::test
