// An in-place dynamic-update-slice whose update a kernel computes just
// before (a layer's product saved into its stack, a layer's weight gradient
// into the stacked gradient) has the kernel write straight into the block:
// the planner points the kernel's result at it (Step::place). Each program
// runs as written (no passes) against a plain loop; where something reads
// or writes the stack between the kernel and the update, or the start is
// computed after the kernel, or the block is not contiguous, the update
// copies as before, with the same values.
#include <gtest/gtest.h>

#include <cmath>

#include "runtime/test_util.h"
#include "strata/compiler/compile.h"

namespace strata::compiler {
namespace {

using namespace runtime;
using namespace runtime::test;

constexpr int64_t kLayers = 5, kRows = 4, kWidth = 8;

// A loop of kLayers steps over (i, x [4,8], w [8,8], stack [5,4,8]): y = x w,
// y saved into row i of the stack, x' = tanh(y) (+ the stack's old row i
// when `read_between`). `body_middle` is spliced between the product and
// the update.
std::string Program(const std::string& body_middle, const std::string& update) {
  const std::string state = "(s32[], f32[4,8], f32[8,8], f32[5,4,8])";
  return fmt::format(R"(HloModule placed
body {{
  s = {0} parameter(0)
  i = s32[] get-tuple-element(s), index=0
  x = f32[4,8] get-tuple-element(s), index=1
  w = f32[8,8] get-tuple-element(s), index=2
  stack = f32[5,4,8] get-tuple-element(s), index=3
  zero = s32[] constant(0)
  y = f32[4,8] dot(x, w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
{1}
{2}
  one = s32[] constant(1)
  next = s32[] add(i, one)
  ROOT out = {0} tuple(next, t, w, written)
}}
cond {{
  s = {0} parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(5)
  ROOT lt = pred[] compare(i, n), direction=LT
}}
ENTRY main {{
  x0 = f32[4,8] parameter(0)
  w = f32[8,8] parameter(1)
  stack0 = f32[5,4,8] parameter(2)
  zero = s32[] constant(0)
  init = {0} tuple(zero, x0, w, stack0)
  loop = {0} while(init), condition=cond, body=body
  x = f32[4,8] get-tuple-element(loop), index=1
  stack = f32[5,4,8] get-tuple-element(loop), index=3
  ROOT r = (f32[4,8], f32[5,4,8]) tuple(x, stack)
}}
)",
                     state, body_middle, update);
}

const char* kSaved = R"(  saved = f32[1,4,8] reshape(y)
  written = f32[5,4,8] dynamic-update-slice(stack, saved, i, zero, zero))";
const char* kTanh = "  t = f32[4,8] tanh(y)";

struct Result {
  std::vector<float> x, stack;
  int64_t placed;
};

Result Run(const std::string& text, const std::vector<float>& x0, const std::vector<float>& w,
           const std::vector<float>& stack0) {
  compiler::CompileOptions options;
  options.run_passes = false;  // the order as written
  auto exe = compiler::Compile(*hlo::ParseModule(text), options);
  auto out = exe->Run({test::Arg(x0, {kRows, kWidth}), test::Arg(w, {kWidth, kWidth}),
                       test::Arg(stack0, {kLayers, kRows, kWidth})});
  return {out[0].ToVector<float>(), out[1].ToVector<float>(), exe->stats().placed_updates};
}

// The loop in doubles: each step's product into `rows` (row i of the
// stack), x = tanh(y) + (read_old ? the stack's row i before the write : 0).
void PlainLoop(std::vector<double>& x, const std::vector<float>& w, std::vector<double>& stack,
               bool read_old) {
  for (int64_t i = 0; i < kLayers; ++i) {
    std::vector<double> y(kRows * kWidth, 0.0);
    for (int64_t r = 0; r < kRows; ++r)
      for (int64_t c = 0; c < kWidth; ++c)
        for (int64_t e = 0; e < kWidth; ++e)
          y[r * kWidth + c] += x[r * kWidth + e] * w[e * kWidth + c];
    for (int64_t j = 0; j < kRows * kWidth; ++j) {
      const double old = stack[i * kRows * kWidth + j];
      stack[i * kRows * kWidth + j] = y[j];
      x[j] = std::tanh(y[j]) + (read_old ? old : 0.0);
    }
  }
}

void ExpectClose(const std::vector<float>& got, const std::vector<double>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t j = 0; j < got.size(); ++j) {
    ASSERT_NEAR(got[j], want[j], 1e-5 * std::max(1.0, std::abs(want[j])))
        << what << "[" << j << "]";
  }
}

struct Inputs {
  std::vector<float> x0 = test::Random<float>(kRows * kWidth, 1, -1, 1);
  std::vector<float> w = test::Random<float>(kWidth * kWidth, 2, -0.5, 0.5);
  std::vector<float> stack0 = test::Random<float>(kLayers * kRows * kWidth, 3, -1, 1);
};

void Check(const std::string& text, bool read_old, int64_t placed) {
  Inputs in;
  const Result got = Run(text, in.x0, in.w, in.stack0);
  std::vector<double> x(in.x0.begin(), in.x0.end()), stack(in.stack0.begin(), in.stack0.end());
  PlainLoop(x, in.w, stack, read_old);
  ExpectClose(got.x, x, "x");
  ExpectClose(got.stack, stack, "stack");
  EXPECT_EQ(got.placed, placed) << text;
}

TEST(PlacedUpdate, AProductSavedIntoItsStackIsWrittenThere) {
  // The product's other reader (tanh) comes after the update and reads it
  // in the stack.
  Check(Program("", std::string(kSaved) + "\n" + kTanh), false, 1);
  // ... or before it.
  Check(Program(kTanh, kSaved), false, 1);
}

TEST(PlacedUpdate, AReadOfTheStackBetweenKeepsTheCopy) {
  // The stack's row i read after the product: it must still be the old row.
  const std::string between =
      R"(  old = f32[1,4,8] dynamic-slice(stack, i, zero, zero), dynamic_slice_sizes={1,4,8}
  flat = f32[4,8] reshape(old)
  h = f32[4,8] tanh(y)
  t = f32[4,8] add(h, flat))";
  Check(Program(between, kSaved), true, 0);
}

TEST(PlacedUpdate, ASliceUsedAfterTheUpdateIsNoView) {
  // Row i of the loop's stack sliced before the update that writes it but
  // used after it: the use must see the old row (no view of the state that
  // the update has overwritten by then).
  const std::string before =
      R"(  old = f32[1,4,8] dynamic-slice(stack, i, zero, zero), dynamic_slice_sizes={1,4,8}
  flat = f32[4,8] reshape(old))";
  const std::string after = std::string(kSaved) + R"(
  h = f32[4,8] tanh(y)
  t = f32[4,8] add(h, flat))";
  Check(Program(before, after), true, 0);
}

TEST(PlacedUpdate, AStartComputedAfterTheProductKeepsTheCopy) {
  const std::string late = R"(  zero2 = s32[] constant(0)
  j = s32[] add(i, zero2)
  saved = f32[1,4,8] reshape(y)
  written = f32[5,4,8] dynamic-update-slice(stack, saved, j, zero, zero))";
  Check(Program(kTanh, late), false, 0);
}

TEST(PlacedUpdate, ABlockNotContiguousKeepsTheCopy) {
  // Rows 0..3 of each layer's [4, 8]: the stack as [4, 5, 8] (positions
  // first) written at (0, i, 0) is strided; the loop's values are the same
  // with the stack transposed.
  const std::string text = R"(HloModule strided
body {
  s = (s32[], f32[4,8], f32[8,8], f32[4,5,8]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  x = f32[4,8] get-tuple-element(s), index=1
  w = f32[8,8] get-tuple-element(s), index=2
  stack = f32[4,5,8] get-tuple-element(s), index=3
  zero = s32[] constant(0)
  y = f32[4,8] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  saved = f32[4,1,8] reshape(y)
  written = f32[4,5,8] dynamic-update-slice(stack, saved, zero, i, zero)
  t = f32[4,8] tanh(y)
  one = s32[] constant(1)
  next = s32[] add(i, one)
  ROOT out = (s32[], f32[4,8], f32[8,8], f32[4,5,8]) tuple(next, t, w, written)
}
cond {
  s = (s32[], f32[4,8], f32[8,8], f32[4,5,8]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(5)
  ROOT lt = pred[] compare(i, n), direction=LT
}
ENTRY main {
  x0 = f32[4,8] parameter(0)
  w = f32[8,8] parameter(1)
  stack0 = f32[4,5,8] parameter(2)
  zero = s32[] constant(0)
  init = (s32[], f32[4,8], f32[8,8], f32[4,5,8]) tuple(zero, x0, w, stack0)
  loop = (s32[], f32[4,8], f32[8,8], f32[4,5,8]) while(init), condition=cond, body=body
  x = f32[4,8] get-tuple-element(loop), index=1
  stack = f32[4,5,8] get-tuple-element(loop), index=3
  ROOT r = (f32[4,8], f32[4,5,8]) tuple(x, stack)
}
)";
  Inputs in;
  compiler::CompileOptions options;
  options.run_passes = false;
  auto exe = compiler::Compile(*hlo::ParseModule(text), options);
  auto out = exe->Run({test::Arg(in.x0, {kRows, kWidth}), test::Arg(in.w, {kWidth, kWidth}),
                       test::Arg(in.stack0, {kRows, kLayers, kWidth})});
  // The plain loop over the same stack laid out [layer, row, col].
  std::vector<double> x(in.x0.begin(), in.x0.end()), stack(kLayers * kRows * kWidth);
  for (int64_t r = 0; r < kRows; ++r)
    for (int64_t l = 0; l < kLayers; ++l)
      for (int64_t c = 0; c < kWidth; ++c)
        stack[(l * kRows + r) * kWidth + c] = in.stack0[(r * kLayers + l) * kWidth + c];
  PlainLoop(x, in.w, stack, false);
  ExpectClose(out[0].ToVector<float>(), x, "x");
  std::vector<float> got = out[1].ToVector<float>();
  std::vector<double> want(got.size());
  for (int64_t r = 0; r < kRows; ++r)
    for (int64_t l = 0; l < kLayers; ++l)
      for (int64_t c = 0; c < kWidth; ++c)
        want[(r * kLayers + l) * kWidth + c] = stack[(l * kRows + r) * kWidth + c];
  ExpectClose(got, want, "stack");
  EXPECT_EQ(exe->stats().placed_updates, 0);
}

// The update's value read after the update, in the block of a temporary
// stack that dies at the update: the stack's bytes must stay the value's
// until that read (the temporary after it may not take them).
TEST(PlacedUpdate, TheBlockOutlivesItsStackWhileTheValueIsRead) {
  // (Instructions run in post-order from the root: the stack, the product,
  // the update, its sum, then the temporary, then the product's last read.)
  const std::string text = R"(HloModule outlives
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY main {
  x = f32[4,8] parameter(0)
  w = f32[8,8] parameter(1)
  zero = s32[] constant(0)
  fill = f32[] constant(0)
  stack = f32[2,4,8] broadcast(fill), dimensions={}
  y = f32[4,8] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  saved = f32[1,4,8] reshape(y)
  written = f32[2,4,8] dynamic-update-slice(stack, saved, zero, zero, zero)
  total = f32[] reduce(written, fill), dimensions={0,1,2}, to_apply=add
  later = f32[2,4,8] broadcast(total), dimensions={}
  first = f32[1,4,8] slice(later), slice={[0:1], [0:4], [0:8]}
  flat = f32[4,8] reshape(first)
  ROOT t = f32[4,8] add(flat, y)
}
)";
  Inputs in;
  compiler::CompileOptions options;
  options.run_passes = false;
  auto exe = compiler::Compile(*hlo::ParseModule(text), options);
  auto out = exe->Run({test::Arg(in.x0, {kRows, kWidth}), test::Arg(in.w, {kWidth, kWidth})});
  // t = y + sum(y) (the stack holds y and zeros).
  std::vector<double> want(kRows * kWidth, 0.0);
  double total = 0;
  for (int64_t r = 0; r < kRows; ++r)
    for (int64_t c = 0; c < kWidth; ++c) {
      for (int64_t e = 0; e < kWidth; ++e)
        want[r * kWidth + c] += double{in.x0[r * kWidth + e]} * in.w[e * kWidth + c];
      total += want[r * kWidth + c];
    }
  for (double& v : want) v += total;
  ExpectClose(out[0].ToVector<float>(), want, "t");
  EXPECT_EQ(exe->stats().placed_updates, 1);
}

}  // namespace
}  // namespace strata::compiler
