// A dynamic-slice of a contiguous block of a value nothing writes while the
// program runs (an entry parameter, a constant, loop state the body passes
// through: a stacked layer's weights) is read in place: no kernel runs and
// its readers see the operand's bytes at the run-time offset. Checked
// against plain loops, with the kernel profile saying which kernels ran.
#include <gtest/gtest.h>

#include <optional>

#include "runtime/test_util.h"
#include "strata/compiler/compile.h"
#include "strata/hlo/text.h"
#include "strata/runtime/profile.h"

namespace strata::compiler {
namespace {

using namespace runtime;
using namespace runtime::test;

int64_t Runs(const KernelProfile& profile, const std::string& opcode) {
  int64_t n = 0;
  for (const KernelProfile::Row& r : profile.Rows()) n += r.opcode == opcode ? r.count : 0;
  return n;
}

std::unique_ptr<Executable> Compile(const Client& client, const std::string& text) {
  std::unique_ptr<hlo::Module> module = hlo::ParseModule(text);
  compiler::CompileOptions options;
  options.client = &client;
  return compiler::Compile(*module, options);
}

// A scan over 4 stacked [8, 8] weights: h = tanh(h · W[i]), i = 0..3. The
// weights pass through the loop unchanged, so each iteration's slice is a
// view; the dot reads the stacked buffer at offset i · 64.
constexpr char kLayers[] = R"(HloModule layers
body {
  s = (s32[], f32[2,8], f32[4,8,8]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  h = f32[2,8] get-tuple-element(s), index=1
  w = f32[4,8,8] get-tuple-element(s), index=2
  zero = s32[] constant(0)
  slice = f32[1,8,8] dynamic-slice(w, i, zero, zero), dynamic_slice_sizes={1,8,8}
  layer = f32[8,8] reshape(slice)
  d = f32[2,8] dot(h, layer), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  t = f32[2,8] tanh(d)
  one = s32[] constant(1)
  next = s32[] add(i, one)
  ROOT out = (s32[], f32[2,8], f32[4,8,8]) tuple(next, t, w)
}
cond {
  s = (s32[], f32[2,8], f32[4,8,8]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(4)
  ROOT lt = pred[] compare(i, n), direction=LT
}
ENTRY main {
  h0 = f32[2,8] parameter(0)
  w = f32[4,8,8] parameter(1)
  zero = s32[] constant(0)
  init = (s32[], f32[2,8], f32[4,8,8]) tuple(zero, h0, w)
  loop = (s32[], f32[2,8], f32[4,8,8]) while(init), condition=cond, body=body
  ROOT h = f32[2,8] get-tuple-element(loop), index=1
}
)";

TEST(SliceView, ALoopReadsEachStackedLayerInPlace) {
  Client client(1, 1);
  KernelProfile profile;
  client.set_profile(&profile);
  std::vector<float> h = test::Random<float>(16, 1, -1, 1), w = test::Random<float>(256, 2, -1, 1);
  auto exe = Compile(client, kLayers);
  auto out = exe->Run({Buffer::FromVector(h, {2, 8}, client.device(0)),
                       Buffer::FromVector(w, {4, 8, 8}, client.device(0))})[0]
                 .ToVector<float>();
  std::vector<double> ref(h.begin(), h.end());
  for (int layer = 0; layer < 4; ++layer) {
    std::vector<double> next(16, 0.0);
    for (int r = 0; r < 2; ++r) {
      for (int c = 0; c < 8; ++c) {
        double acc = 0;
        for (int k = 0; k < 8; ++k) acc += ref[r * 8 + k] * w[layer * 64 + k * 8 + c];
        next[r * 8 + c] = std::tanh(acc);
      }
    }
    ref = next;
  }
  for (int i = 0; i < 16; ++i) EXPECT_NEAR(out[i], ref[i], 1e-5) << i;
  EXPECT_EQ(Runs(profile, "dynamic-slice"), 0) << profile.Report();
  EXPECT_EQ(Runs(profile, "dot"), 4) << profile.Report();
}

// Entry parameters: out-of-range starts clamp as dynamic-slice's do (7 → the
// last block, -2 → the first), a cut through a middle dim (rows 1..2 of
// block 2) is still one block, and a slice that is not contiguous (two of
// three columns) runs its kernel. A result that is a view's operand's
// donated buffer is written only after the view's readers ran.
TEST(SliceView, EntryParametersClampAndOnlyContiguousBlocksAreViews) {
  constexpr char kText[] = R"(HloModule entry
ENTRY main {
  w = f32[4,3,3] parameter(0)
  i = s32[] parameter(1)
  j = s32[] parameter(2)
  zero = s32[] constant(0)
  one = s32[] constant(1)
  a = f32[1,3,3] dynamic-slice(w, i, zero, zero), dynamic_slice_sizes={1,3,3}
  b = f32[1,3,3] dynamic-slice(w, j, zero, zero), dynamic_slice_sizes={1,3,3}
  two = s32[] constant(2)
  c = f32[1,2,3] dynamic-slice(w, two, one, zero), dynamic_slice_sizes={1,2,3}
  d = f32[1,3,2] dynamic-slice(w, one, zero, one), dynamic_slice_sizes={1,3,2}
  sa = f32[1,3,3] multiply(a, b)
  e = f32[1,2,3] negate(c)
  f = f32[1,3,2] negate(d)
  k = f32[] constant(1)
  kb = f32[4,3,3] broadcast(k), dimensions={}
  w2 = f32[4,3,3] add(w, kb)
  ROOT r = (f32[1,3,3], f32[1,2,3], f32[1,3,2], f32[4,3,3]) tuple(sa, e, f, w2)
}
)";
  Client client(1, 1);
  KernelProfile profile;
  client.set_profile(&profile);
  std::vector<float> w(36);
  for (int i = 0; i < 36; ++i) w[i] = static_cast<float>(i);
  auto at = [&](int b, int r, int c) { return w[b * 9 + r * 3 + c]; };
  auto exe = Compile(client, kText);
  for (bool donate : {false, true}) {
    SCOPED_TRACE(donate ? "donated" : "kept");
    profile.Reset();
    auto out =
        exe->Run({Buffer::FromVector(w, {4, 3, 3}, client.device(0)),
                  Buffer::FromVector(std::vector<int32_t>{7}, {}, client.device(0)),
                  Buffer::FromVector(std::vector<int32_t>{-2}, {}, client.device(0))},
                 nullptr, donate ? std::vector<bool>{true, false, false} : std::vector<bool>{});
    const std::vector<float> sa = out[0].ToVector<float>(), e = out[1].ToVector<float>(),
                             f = out[2].ToVector<float>(), w2 = out[3].ToVector<float>();
    for (int r = 0; r < 3; ++r) {
      for (int c = 0; c < 3; ++c) EXPECT_EQ(sa[r * 3 + c], at(3, r, c) * at(0, r, c));
    }
    for (int r = 0; r < 2; ++r) {
      for (int c = 0; c < 3; ++c) EXPECT_EQ(e[r * 3 + c], -at(2, r + 1, c));
    }
    for (int r = 0; r < 3; ++r) {
      for (int c = 0; c < 2; ++c) EXPECT_EQ(f[r * 2 + c], -at(1, r, c + 1));
    }
    for (int i = 0; i < 36; ++i) EXPECT_EQ(w2[i], w[i] + 1);
    // Only the strided slice (d) copies.
    EXPECT_EQ(Runs(profile, "dynamic-slice"), 1) << profile.Report();
  }
}

}  // namespace
}  // namespace strata::compiler
