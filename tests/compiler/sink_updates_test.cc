// SinkUpdatesIntoLoops: an elementwise update that alone reads a stack a
// loop writes slice by slice (AdamW-like: new weights and a moment from the
// stacked gradient) runs inside the loop on each slice. Each program runs
// compiled with the passes against a plain loop in doubles; the tests also
// look at the optimized module (no stacked gradient left in the loop's
// state, no update after it), count the updates written in place and, with
// the weights and the moment donated, check the results take their buffers.
#include <gtest/gtest.h>

#include <cmath>

#include "runtime/test_util.h"
#include "strata/compiler/compile.h"
#include "strata/compiler/passes.h"

namespace strata::compiler {
namespace {

using namespace runtime;
using namespace runtime::test;

constexpr int64_t kLayers = 5, kRows = 4, kWidth = 8;
constexpr float kLr = 0.125f;

// A backward-like loop over stacked weights w [5,8,8]: layer j (j = i, or
// 4 - i when `descending`) computes y = tanh(x w_j), its "gradient"
// g_j = x^T y into row j of a stack, and x = y. After the loop, `after`
// reads the stacked gradient g with w, the moment m and the rate lr.
std::string Program(bool descending, const std::string& after, const std::string& result) {
  const std::string state = "(s32[], f32[4,8], f32[5,8,8], f32[5,8,8])";
  const std::string layer = descending ? R"(  last = s32[] constant(4)
  j = s32[] subtract(last, i))"
                                       : "  j = s32[] add(i, zero)";
  return fmt::format(R"(HloModule sink
body {{
  s = {0} parameter(0)
  i = s32[] get-tuple-element(s), index=0
  x = f32[4,8] get-tuple-element(s), index=1
  w = f32[5,8,8] get-tuple-element(s), index=2
  g = f32[5,8,8] get-tuple-element(s), index=3
  zero = s32[] constant(0)
{1}
  wj3 = f32[1,8,8] dynamic-slice(w, j, zero, zero), dynamic_slice_sizes={{1,8,8}}
  wj = f32[8,8] reshape(wj3)
  xw = f32[4,8] dot(x, wj), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  y = f32[4,8] tanh(xw)
  gj = f32[8,8] dot(x, y), lhs_contracting_dims={{0}}, rhs_contracting_dims={{0}}
  gj3 = f32[1,8,8] reshape(gj)
  written = f32[5,8,8] dynamic-update-slice(g, gj3, j, zero, zero)
  one = s32[] constant(1)
  next = s32[] add(i, one)
  ROOT out = {0} tuple(next, y, w, written)
}}
cond {{
  s = {0} parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(5)
  ROOT lt = pred[] compare(i, n), direction=LT
}}
ENTRY main {{
  x0 = f32[4,8] parameter(0)
  w = f32[5,8,8] parameter(1)
  m = f32[5,8,8] parameter(2)
  lr = f32[] parameter(3)
  zero = s32[] constant(0)
  zeros = f32[] constant(0)
  g0 = f32[5,8,8] broadcast(zeros), dimensions={{}}
  init = {0} tuple(zero, x0, w, g0)
  loop = {0} while(init), condition=cond, body=body
  x = f32[4,8] get-tuple-element(loop), index=1
  g = f32[5,8,8] get-tuple-element(loop), index=3
{2}
  ROOT r = {3}
}}
)",
                     state, layer, after, result);
}

// new w = w - lr * (g + 0.5 w), new m = 0.75 m + 0.25 g
const char* kUpdate = R"(  half = f32[] constant(0.5)
  halves = f32[5,8,8] broadcast(half), dimensions={}
  decay = f32[5,8,8] multiply(w, halves)
  step = f32[5,8,8] add(g, decay)
  rates = f32[5,8,8] broadcast(lr), dimensions={}
  scaled = f32[5,8,8] multiply(step, rates)
  w1 = f32[5,8,8] subtract(w, scaled)
  keep = f32[] constant(0.75)
  keeps = f32[5,8,8] broadcast(keep), dimensions={}
  mk = f32[5,8,8] multiply(m, keeps)
  take = f32[] constant(0.25)
  takes = f32[5,8,8] broadcast(take), dimensions={}
  gt = f32[5,8,8] multiply(g, takes)
  m1 = f32[5,8,8] add(mk, gt))";
const char* kResult = "(f32[4,8], f32[5,8,8], f32[5,8,8]) tuple(x, w1, m1)";

struct Inputs {
  std::vector<float> x0 = test::Random<float>(kRows * kWidth, 1, -1, 1);
  std::vector<float> w = test::Random<float>(kLayers * kWidth * kWidth, 2, -0.5, 0.5);
  std::vector<float> m = test::Random<float>(kLayers * kWidth * kWidth, 3, -1, 1);
};

struct Expected {
  std::vector<double> x, g, w, m;
};

// The loop in doubles; `square_of_layer0` adds (x w_0)^2 (the original
// w_0) inside each layer's tanh.
Expected PlainLoop(const Inputs& in, bool descending, bool square_of_layer0 = false) {
  Expected e;
  e.x.assign(in.x0.begin(), in.x0.end());
  e.g.assign(kLayers * kWidth * kWidth, 0.0);
  for (int64_t i = 0; i < kLayers; ++i) {
    const int64_t j = descending ? kLayers - 1 - i : i;
    const float* w = in.w.data() + j * kWidth * kWidth;
    std::vector<double> y(kRows * kWidth, 0.0);
    for (int64_t r = 0; r < kRows; ++r)
      for (int64_t c = 0; c < kWidth; ++c) {
        double sum = 0, first = 0;
        for (int64_t k = 0; k < kWidth; ++k) {
          sum += e.x[r * kWidth + k] * w[k * kWidth + c];
          first += e.x[r * kWidth + k] * in.w[k * kWidth + c];
        }
        y[r * kWidth + c] = std::tanh(sum + (square_of_layer0 ? first * first : 0.0));
      }
    for (int64_t a = 0; a < kWidth; ++a)
      for (int64_t b = 0; b < kWidth; ++b) {
        double sum = 0;
        for (int64_t r = 0; r < kRows; ++r) sum += e.x[r * kWidth + a] * y[r * kWidth + b];
        e.g[(j * kWidth + a) * kWidth + b] = sum;
      }
    e.x = y;
  }
  for (size_t k = 0; k < e.g.size(); ++k) {
    e.w.push_back(in.w[k] - kLr * (e.g[k] + 0.5 * in.w[k]));
    e.m.push_back(0.75 * in.m[k] + 0.25 * e.g[k]);
  }
  return e;
}

void ExpectClose(const std::vector<float>& got, const std::vector<double>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t j = 0; j < got.size(); ++j) {
    ASSERT_NEAR(got[j], want[j], 1e-5 * std::max(1.0, std::abs(want[j])))
        << what << "[" << j << "]";
  }
}

// The module after the passes Compile runs before SinkUpdatesIntoLoops.
std::unique_ptr<hlo::Module> Fused(const std::string& text) {
  std::unique_ptr<hlo::Module> module = hlo::ParseModule(text);
  RunPasses(*module);
  FuseElementwise(*module);
  MergeSiblingFusions(*module);
  FuseProducers(*module);
  return module;
}

const hlo::Instruction* TheLoop(const hlo::Module& module) {
  for (const auto& inst : module.entry()->instructions()) {
    if (inst->opcode() == hlo::Opcode::kWhile) return inst.get();
  }
  return nullptr;
}

TEST(SinkUpdates, TheUpdateRunsInTheLoopAndNoGradientStackIsLeft) {
  for (bool descending : {false, true}) {
    SCOPED_TRACE(descending ? "layers last to first" : "layers first to last");
    const std::string text = Program(descending, kUpdate, kResult);
    std::unique_ptr<hlo::Module> module = Fused(text);
    ASSERT_TRUE(SinkUpdatesIntoLoops(*module));
    // The state: counter, x, w (updated in place), m and lr; no stack of
    // gradients, and nothing but reads of the loop after it.
    const hlo::Instruction* loop = TheLoop(*module);
    ASSERT_NE(loop, nullptr);
    EXPECT_EQ(loop->shape().tuple_size(), 5) << loop->shape().ToString();
    for (const auto& inst : module->entry()->instructions())
      EXPECT_NE(inst->opcode(), hlo::Opcode::kFusion) << inst->name();

    const Inputs in;
    const Expected want = PlainLoop(in, descending);
    auto exe = compiler::Compile(*hlo::ParseModule(text));
    // The update writes w and m straight into their stacks' slices, though
    // it reads those very slices (element by element).
    EXPECT_EQ(exe->stats().placed_updates, 2);
    for (bool donate : {false, true}) {
      SCOPED_TRACE(donate ? "donated" : "not donated");
      std::vector<Buffer> args{
          test::Arg(in.x0, {kRows, kWidth}), test::Arg(in.w, {kLayers, kWidth, kWidth}),
          test::Arg(in.m, {kLayers, kWidth, kWidth}), test::Arg(std::vector<float>{kLr}, {})};
      const uint8_t* w_bytes = args[1].data();
      const uint8_t* m_bytes = args[2].data();
      auto out =
          exe->Run(args, nullptr,
                   donate ? std::vector<bool>{false, true, true, false} : std::vector<bool>{});
      ExpectClose(out[0].ToVector<float>(), want.x, "x");
      ExpectClose(out[1].ToVector<float>(), want.w, "w");
      ExpectClose(out[2].ToVector<float>(), want.m, "m");
      // Donated, the loop updates the weights and the moment in their own bytes.
      EXPECT_EQ(out[1].data() == w_bytes, donate);
      EXPECT_EQ(out[2].data() == m_bytes, donate);
    }
  }
}

TEST(SinkUpdates, AStackAlsoReadWholeStays) {
  // The gradient is also a result: the loop must make it whole.
  const std::string text =
      Program(true, kUpdate, "(f32[4,8], f32[5,8,8], f32[5,8,8], f32[5,8,8]) tuple(x, w1, m1, g)");
  std::unique_ptr<hlo::Module> module = Fused(text);
  EXPECT_FALSE(SinkUpdatesIntoLoops(*module));
  const Inputs in;
  const Expected want = PlainLoop(in, true);
  auto out =
      compiler::Compile(*hlo::ParseModule(text))
          ->Run({test::Arg(in.x0, {kRows, kWidth}), test::Arg(in.w, {kLayers, kWidth, kWidth}),
                 test::Arg(in.m, {kLayers, kWidth, kWidth}),
                 test::Arg(std::vector<float>{kLr}, {})});
  ExpectClose(out[1].ToVector<float>(), want.w, "w");
  ExpectClose(out[3].ToVector<float>(), want.g, "g");
}

TEST(SinkUpdates, AWeightReadAtAnotherLayerIsCopiedNotOverwritten) {
  // The body also reads w at layer 0 in every iteration: updating w in its
  // own element would change what later iterations read, so the update
  // goes to a copy; the values stay the plain loop's plus the extra read.
  std::string text = Program(true, kUpdate, kResult);
  const std::string read = "  wj3 = f32[1,8,8] dynamic-slice(w, j, zero, zero)";
  const std::string extra =
      R"(  w03 = f32[1,8,8] dynamic-slice(w, zero, zero, zero), dynamic_slice_sizes={1,8,8}
  w0 = f32[8,8] reshape(w03)
  w0x = f32[4,8] dot(x, w0), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  xw0 = f32[4,8] multiply(w0x, w0x)
)";
  text.replace(text.find(read), 0, extra);
  const std::string ty = "  y = f32[4,8] tanh(xw)";
  text.replace(text.find(ty), ty.size(), "  xs = f32[4,8] add(xw, xw0)\n  y = f32[4,8] tanh(xs)");
  std::unique_ptr<hlo::Module> module = Fused(text);
  ASSERT_TRUE(SinkUpdatesIntoLoops(*module));

  const Inputs in;
  const Expected want = PlainLoop(in, true, /*square_of_layer0=*/true);
  auto out =
      compiler::Compile(*hlo::ParseModule(text))
          ->Run(
              {test::Arg(in.x0, {kRows, kWidth}), test::Arg(in.w, {kLayers, kWidth, kWidth}),
               test::Arg(in.m, {kLayers, kWidth, kWidth}), test::Arg(std::vector<float>{kLr}, {})},
              nullptr, {false, true, true, false});
  ExpectClose(out[0].ToVector<float>(), want.x, "x");
  ExpectClose(out[1].ToVector<float>(), want.w, "w");
}

TEST(SinkUpdates, ALoopThatSkipsSlicesStays) {
  // Four trips over a stack of five: slice 4 keeps its zeros, which the
  // update after the loop still reads.
  std::string text = Program(false, kUpdate, kResult);
  const std::string n = "  n = s32[] constant(5)";
  text.replace(text.find(n), n.size(), "  n = s32[] constant(4)");
  std::unique_ptr<hlo::Module> module = Fused(text);
  EXPECT_FALSE(SinkUpdatesIntoLoops(*module));
}

}  // namespace
}  // namespace strata::compiler
