// What a while loop keeps in its state. Stacked weights a scan passes through
// unchanged are read where they are, not copied into the loop's state; a
// convert of them (mixed precision's bf16 copy of f32 master weights) moves
// into the body, one slice at a time. Each program is checked against a
// plain loop over the same numbers, and its plan or optimized module against
// what it must no longer hold.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "runtime/test_util.h"
#include "strata/compiler/compile.h"
#include "strata/hlo/text.h"

namespace strata::compiler {
namespace {

using namespace runtime;
using namespace runtime::test;

constexpr int64_t kLayers = 4, kWidth = 32, kRows = 2;
constexpr int64_t kStackBytes = kLayers * kWidth * kWidth * 4;

std::unique_ptr<Executable> Compile(const std::string& text) {
  return compiler::Compile(*hlo::ParseModule(text));
}

// h = tanh(h · W[i]) for i = 0..3, in doubles; `round` maps each weight first.
std::vector<double> PlainLoop(const std::vector<float>& h0, const std::vector<float>& w,
                              float (*round)(float)) {
  std::vector<double> h(h0.begin(), h0.end());
  for (int64_t layer = 0; layer < kLayers; ++layer) {
    std::vector<double> next(kRows * kWidth, 0.0);
    for (int64_t r = 0; r < kRows; ++r) {
      for (int64_t c = 0; c < kWidth; ++c) {
        double acc = 0;
        for (int64_t k = 0; k < kWidth; ++k)
          acc += h[r * kWidth + k] * round(w[(layer * kWidth + k) * kWidth + c]);
        next[r * kWidth + c] = std::tanh(acc);
      }
    }
    h = next;
  }
  return h;
}

float Same(float x) { return x; }

// Round to nearest even at bf16's 8 significand bits (finite inputs).
float ToBf16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  bits += 0x7FFF + ((bits >> 16) & 1);
  bits &= 0xFFFF0000u;
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

void ExpectClose(const std::vector<float>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 2e-5) << i;
}

// The scan of the header over stacked weights w ([4,32,32] of `stack_type`,
// defined by `entry_weights` from parameter 1), `wide` turning a slice into
// the f32 layer; `results` makes the entry's root from h and `after` (w as
// the loop hands it back).
std::string Layers(const std::string& stack_type, const std::string& entry_weights,
                   const std::string& wide, const std::string& results) {
  const std::string state = "(s32[], f32[2,32], " + stack_type + "[4,32,32])";
  return R"(HloModule layers
body {
  s = )" +
         state +
         R"( parameter(0)
  i = s32[] get-tuple-element(s), index=0
  h = f32[2,32] get-tuple-element(s), index=1
  w = )" +
         stack_type +
         R"([4,32,32] get-tuple-element(s), index=2
  zero = s32[] constant(0)
  slice = )" +
         stack_type +
         R"([1,32,32] dynamic-slice(w, i, zero, zero), dynamic_slice_sizes={1,32,32}
  narrow = )" +
         stack_type +
         R"([32,32] reshape(slice)
  layer = f32[32,32] )" +
         wide + R"(
  d = f32[2,32] dot(h, layer), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  t = f32[2,32] tanh(d)
  one = s32[] constant(1)
  next = s32[] add(i, one)
  ROOT out = )" +
         state +
         R"( tuple(next, t, w)
}
cond {
  s = )" +
         state +
         R"( parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(4)
  ROOT lt = pred[] compare(i, n), direction=LT
}
ENTRY main {
  h0 = f32[2,32] parameter(0)
)" + entry_weights +
         R"(
  zero = s32[] constant(0)
  init = )" +
         state +
         R"( tuple(zero, h0, w)
  loop = )" +
         state +
         R"( while(init), condition=cond, body=body
  h = f32[2,32] get-tuple-element(loop), index=1
  after = )" +
         stack_type +
         R"([4,32,32] get-tuple-element(loop), index=2
)" + results +
         "\n}\n";
}

std::vector<Buffer> Arguments(const std::vector<float>& h, const std::vector<float>& w) {
  return {test::Arg(h, {kRows, kWidth}), test::Arg(w, {kLayers, kWidth, kWidth})};
}

TEST(LoopState, ScannedWeightsAreReadInPlaceNotCopied) {
  // The weights are an entry parameter the body only slices and hands on:
  // the loop's state points at the parameter's bytes. Donating the weights
  // to a result computed after the loop (an optimizer's update) still lets
  // the loop read them first.
  const std::string text =
      Layers("f32", "  w = f32[4,32,32] parameter(1)", "copy(narrow)",
             "  k = f32[] constant(1)\n  kb = f32[4,32,32] broadcast(k), dimensions={}\n"
             "  updated = f32[4,32,32] add(w, kb)\n"
             "  ROOT r = (f32[2,32], f32[4,32,32]) tuple(h, updated)");
  std::vector<float> h = test::Random<float>(kRows * kWidth, 1, -1, 1);
  std::vector<float> w = test::Random<float>(kLayers * kWidth * kWidth, 2, -0.3, 0.3);
  auto exe = Compile(text);
  EXPECT_LT(exe->stats().temp_bytes, kStackBytes) << "the loop copied the weights into its state\n"
                                                  << hlo::ToText(exe->module());
  for (bool donate : {false, true}) {
    SCOPED_TRACE(donate ? "weights donated" : "weights kept");
    std::vector<Buffer> args = Arguments(h, w);
    auto out =
        exe->Run(args, nullptr, donate ? std::vector<bool>{false, true} : std::vector<bool>{});
    ExpectClose(out[0].ToVector<float>(), PlainLoop(h, w, Same));
    std::vector<float> updated = out[1].ToVector<float>();
    for (size_t i = 0; i < w.size(); ++i) ASSERT_EQ(updated[i], w[i] + 1) << i;
    if (!donate) {
      EXPECT_EQ(args[1].ToVector<float>(), w) << "the loop wrote its input";
    }
  }
}

TEST(LoopState, ALoopThatWritesItsStackedStateCopiesItFirst) {
  // The body overwrites the slice it read (W[i] = 2 W[i]) and returns the
  // written stack: the loop must work on a copy, never on the parameter.
  const std::string text = R"(HloModule writes
body {
  s = (s32[], f32[2,32], f32[4,32,32]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  h = f32[2,32] get-tuple-element(s), index=1
  w = f32[4,32,32] get-tuple-element(s), index=2
  zero = s32[] constant(0)
  slice = f32[1,32,32] dynamic-slice(w, i, zero, zero), dynamic_slice_sizes={1,32,32}
  layer = f32[32,32] reshape(slice)
  d = f32[2,32] dot(h, layer), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  t = f32[2,32] tanh(d)
  doubled = f32[1,32,32] add(slice, slice)
  written = f32[4,32,32] dynamic-update-slice(w, doubled, i, zero, zero)
  one = s32[] constant(1)
  next = s32[] add(i, one)
  ROOT out = (s32[], f32[2,32], f32[4,32,32]) tuple(next, t, written)
}
cond {
  s = (s32[], f32[2,32], f32[4,32,32]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(4)
  ROOT lt = pred[] compare(i, n), direction=LT
}
ENTRY main {
  h0 = f32[2,32] parameter(0)
  w = f32[4,32,32] parameter(1)
  zero = s32[] constant(0)
  init = (s32[], f32[2,32], f32[4,32,32]) tuple(zero, h0, w)
  loop = (s32[], f32[2,32], f32[4,32,32]) while(init), condition=cond, body=body
  h = f32[2,32] get-tuple-element(loop), index=1
  after = f32[4,32,32] get-tuple-element(loop), index=2
  ROOT r = (f32[2,32], f32[4,32,32]) tuple(h, after)
}
)";
  std::vector<float> h = test::Random<float>(kRows * kWidth, 3, -1, 1);
  std::vector<float> w = test::Random<float>(kLayers * kWidth * kWidth, 4, -0.3, 0.3);
  auto exe = Compile(text);
  for (int run = 0; run < 2; ++run) {
    std::vector<Buffer> args = Arguments(h, w);
    auto out = exe->Run(args);
    ExpectClose(out[0].ToVector<float>(), PlainLoop(h, w, Same));
    std::vector<float> after = out[1].ToVector<float>();
    for (size_t i = 0; i < w.size(); ++i) ASSERT_EQ(after[i], 2 * w[i]) << i;
    EXPECT_EQ(args[1].ToVector<float>(), w) << "run " << run << ": the loop wrote its input";
  }
}

// The element types of the [4,32,32] stacks the entry's loops carry.
std::vector<DType> Inspect(const hlo::Module& m) {
  std::vector<DType> stacks;
  const std::vector<int64_t> stack = {kLayers, kWidth, kWidth};
  for (const auto& inst : m.entry()->instructions()) {
    if (inst->opcode() != hlo::Opcode::kWhile) continue;
    for (const Shape& e : inst->shape().tuple_shapes())
      if (e.dims() == stack) stacks.push_back(e.dtype());
  }
  return stacks;
}

TEST(LoopState, AConvertOfScannedWeightsMovesIntoTheBody) {
  // bf16 copies of f32 master weights, scanned: the loop carries the f32
  // parameter and converts each slice it takes, so no converted stack is
  // made. Where the stack is read after the loop, it is converted there.
  const std::string weights = "  p = f32[4,32,32] parameter(1)\n  w = bf16[4,32,32] convert(p)";
  std::vector<float> h = test::Random<float>(kRows * kWidth, 5, -1, 1);
  std::vector<float> w = test::Random<float>(kLayers * kWidth * kWidth, 6, -0.3, 0.3);
  {
    SCOPED_TRACE("the loop's result only");
    auto exe = Compile(Layers("bf16", weights, "convert(narrow)", "  ROOT r = f32[2,32] copy(h)"));
    EXPECT_EQ(Inspect(exe->module()), std::vector<DType>{DType::kF32})
        << hlo::ToText(exe->module());
    EXPECT_LT(exe->stats().temp_bytes, kStackBytes / 2) << hlo::ToText(exe->module());
    ExpectClose(exe->Run(Arguments(h, w))[0].ToVector<float>(), PlainLoop(h, w, ToBf16));
  }
  {
    SCOPED_TRACE("the stack read after the loop");
    auto exe = Compile(Layers("bf16", weights, "convert(narrow)",
                              "  wide = f32[4,32,32] convert(after)\n  ROOT r = (f32[2,32], "
                              "f32[4,32,32]) tuple(h, wide)"));
    EXPECT_EQ(Inspect(exe->module()), std::vector<DType>{DType::kF32})
        << hlo::ToText(exe->module());
    auto out = exe->Run(Arguments(h, w));
    ExpectClose(out[0].ToVector<float>(), PlainLoop(h, w, ToBf16));
    std::vector<float> after = out[1].ToVector<float>();
    for (size_t i = 0; i < w.size(); ++i) ASSERT_EQ(after[i], ToBf16(w[i])) << i;
  }
}

TEST(LoopState, ConvertsStayWhereMovingThemWouldHoldMore) {
  std::vector<float> h = test::Random<float>(kRows * kWidth, 7, -1, 1);
  std::vector<float> w = test::Random<float>(kLayers * kWidth * kWidth, 8, -0.3, 0.3);
  {
    SCOPED_TRACE("a bf16 copy of a temporary: the f32 temporary dies before the loop");
    const std::string text = Layers("bf16",
                                    "  p = f32[4,32,32] parameter(1)\n"
                                    "  half = f32[] constant(0.5)\n"
                                    "  hb = f32[4,32,32] broadcast(half), dimensions={}\n"
                                    "  scaled = f32[4,32,32] multiply(p, hb)\n"
                                    "  w = bf16[4,32,32] convert(scaled)",
                                    "convert(narrow)", "  ROOT r = f32[2,32] copy(h)");
    auto exe = Compile(text);
    EXPECT_EQ(Inspect(exe->module()), std::vector<DType>{DType::kBF16})
        << hlo::ToText(exe->module());
    std::vector<float> halved;
    for (float v : w) halved.push_back(v * 0.5f);
    ExpectClose(exe->Run(Arguments(h, w))[0].ToVector<float>(), PlainLoop(h, halved, ToBf16));
  }
  {
    SCOPED_TRACE("a body that reads the whole stack, not one slice");
    std::string text =
        Layers("bf16", "  p = f32[4,32,32] parameter(1)\n  w = bf16[4,32,32] convert(p)",
               "convert(narrow)", "  ROOT r = f32[2,32] copy(h)");
    const std::string uses = "  t = f32[2,32] tanh(d)\n";
    const std::string whole =
        "  wide = f32[4,32,32] convert(w)\n"
        "  zf = f32[] constant(0)\n"
        "  total = f32[] reduce(wide, zf), dimensions={0,1,2}, to_apply=add\n"
        "  tb = f32[2,32] broadcast(total), dimensions={}\n"
        "  td = f32[2,32] add(d, tb)\n"
        "  t = f32[2,32] tanh(td)\n";
    text.replace(text.find(uses), uses.size(), whole);
    text.replace(text.find("body {"), 0,
                 "add {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
                 "  ROOT s = f32[] add(a, b)\n}\n");
    auto exe = Compile(text);
    EXPECT_EQ(Inspect(exe->module()), std::vector<DType>{DType::kBF16})
        << hlo::ToText(exe->module());
    // Reference: every step adds the sum of all rounded weights before tanh.
    double total = 0;
    for (float v : w) total += ToBf16(v);
    std::vector<double> ref(h.begin(), h.end());
    for (int64_t layer = 0; layer < kLayers; ++layer) {
      std::vector<double> next(kRows * kWidth, 0.0);
      for (int64_t r = 0; r < kRows; ++r) {
        for (int64_t c = 0; c < kWidth; ++c) {
          double acc = total;
          for (int64_t k = 0; k < kWidth; ++k)
            acc += ref[r * kWidth + k] * ToBf16(w[(layer * kWidth + k) * kWidth + c]);
          next[r * kWidth + c] = std::tanh(acc);
        }
      }
      ref = next;
    }
    std::vector<float> got = exe->Run(Arguments(h, w))[0].ToVector<float>();
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], ref[i], 1e-4) << i;
  }
}

TEST(LoopState, AnInvariantReadOnlyThroughConvertsIsConvertedOnceBeforeTheLoop) {
  // A table the body reads whole, rounded to bf16 and widened again in every
  // iteration (a rotary table cast for each layer): the loop carries it
  // converted, and the body holds no convert.
  const std::string text = R"(HloModule table
body {
  s = (s32[], f32[2,32], f64[2,32]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  h = f32[2,32] get-tuple-element(s), index=1
  table = f64[2,32] get-tuple-element(s), index=2
  half = bf16[2,32] convert(table)
  wide = f32[2,32] convert(half)
  m = f32[2,32] multiply(h, wide)
  t = f32[2,32] tanh(m)
  one = s32[] constant(1)
  next = s32[] add(i, one)
  ROOT out = (s32[], f32[2,32], f64[2,32]) tuple(next, t, table)
}
cond {
  s = (s32[], f32[2,32], f64[2,32]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(4)
  ROOT lt = pred[] compare(i, n), direction=LT
}
ENTRY main {
  h0 = f32[2,32] parameter(0)
  table = f64[2,32] parameter(1)
  zero = s32[] constant(0)
  init = (s32[], f32[2,32], f64[2,32]) tuple(zero, h0, table)
  loop = (s32[], f32[2,32], f64[2,32]) while(init), condition=cond, body=body
  ROOT h = f32[2,32] get-tuple-element(loop), index=1
}
)";
  auto exe = Compile(text);
  for (const auto& c : exe->module().computations()) {
    for (const auto& inst : c->instructions()) {
      if (inst->opcode() == hlo::Opcode::kWhile) {
        EXPECT_EQ(inst->shape().tuple_shape(2).dtype(), DType::kF32) << hlo::ToText(exe->module());
        for (const auto& in_body : inst->called[1]->instructions())
          EXPECT_NE(in_body->opcode(), hlo::Opcode::kConvert) << in_body->name();
      }
    }
  }
  const std::vector<float> h = test::Random<float>(kRows * kWidth, 9, -1, 1);
  // (f32 values: the f64 -> bf16 rounding is then the f32 one, whatever the path.)
  const std::vector<float> narrow = test::Random<float>(kRows * kWidth, 10, -2, 2);
  const std::vector<double> table(narrow.begin(), narrow.end());
  std::vector<double> want(h.begin(), h.end());
  for (int64_t step = 0; step < 4; ++step) {
    for (size_t i = 0; i < want.size(); ++i)
      want[i] = std::tanh(static_cast<float>(want[i]) * ToBf16(static_cast<float>(table[i])));
  }
  auto got = exe->Run({test::Arg(h, {kRows, kWidth}), test::Arg(table, {kRows, kWidth})})[0]
                 .ToVector<float>();
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << i;
}

}  // namespace
}  // namespace strata::compiler
