// reduce-window and select-and-scatter as XLA's text writes them, against
// reference loops written here from XLA's operation semantics.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <limits>

#include "strata/compiler/compile.h"
#include "strata/core/error.h"
#include "strata/hlo/text.h"
#include "strata/runtime/device.h"

namespace strata {
namespace {

using Index = std::vector<int64_t>;

int64_t Count(const Index& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

Index Unravel(int64_t flat, const Index& dims) {
  Index i(dims.size());
  for (int64_t d = static_cast<int64_t>(dims.size()) - 1; d >= 0; --d) {
    i[d] = flat % dims[d];
    flat /= dims[d];
  }
  return i;
}

int64_t Ravel(const Index& i, const Index& dims) {
  int64_t flat = 0;
  for (size_t d = 0; d < dims.size(); ++d) flat = flat * dims[d] + i[d];
  return flat;
}

// For each window (output position), the operand positions it covers, in
// row-major window order; padding and dilation holes left out.
std::vector<std::vector<int64_t>> WindowElements(const hlo::Instruction& inst, const Index& dims,
                                                 const Index& out_dims) {
  std::vector<std::vector<int64_t>> windows(Count(out_dims));
  Index sizes;
  for (const auto& w : inst.window) sizes.push_back(w.size);
  for (int64_t o = 0; o < Count(out_dims); ++o) {
    const Index oi = Unravel(o, out_dims);
    for (int64_t t = 0; t < Count(sizes); ++t) {
      const Index ti = Unravel(t, sizes);
      Index at(dims.size());
      bool inside = true;
      for (size_t d = 0; d < dims.size() && inside; ++d) {
        const auto& w = inst.window[d];
        const int64_t p = oi[d] * w.stride - w.pad_low + ti[d] * w.window_dilation;
        inside = p >= 0 && p % w.base_dilation == 0 && p / w.base_dilation < dims[d];
        at[d] = p / w.base_dilation;
      }
      if (inside) windows[o].push_back(Ravel(at, dims));
    }
  }
  return windows;
}

std::vector<float> Run(const hlo::Module& m, const std::vector<std::vector<float>>& args) {
  auto exe = compiler::Compile(m);
  const auto* device = runtime::Client::Default().device(0);
  std::vector<runtime::Buffer> buffers;
  for (size_t i = 0; i < args.size(); ++i) {
    buffers.push_back(runtime::Buffer::FromVector<float>(
        args[i], m.entry()->parameter(static_cast<int64_t>(i))->shape().dims(), device));
  }
  return exe->Run(buffers)[0].ToVector<float>();
}

std::vector<float> Values(int64_t n, int salt) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>((i * 7 + salt * 13) % 23) - 11;
  return v;
}

const char* kComputations = R"(HloModule pool

%max_f32 (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %maximum = f32[] maximum(f32[] %a, f32[] %b)
}

%add_f32 (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %add = f32[] add(f32[] %a, f32[] %b)
}

%ge_f32 (a: f32[], b: f32[]) -> pred[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %compare = pred[] compare(f32[] %a, f32[] %b), direction=GE
}

%smaller_magnitude (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  %abs_a = f32[] abs(f32[] %a)
  %abs_b = f32[] abs(f32[] %b)
  %keep = pred[] compare(f32[] %abs_a, f32[] %abs_b), direction=LE
  ROOT %pick = f32[] select(pred[] %keep, f32[] %a, f32[] %b)
}

%lt_magnitude (a: f32[], b: f32[]) -> pred[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  %abs_a = f32[] abs(f32[] %a)
  %abs_b = f32[] abs(f32[] %b)
  ROOT %compare = pred[] compare(f32[] %abs_b, f32[] %abs_a), direction=GT
}

%times (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %multiply = f32[] multiply(f32[] %a, f32[] %b)
}

)";

// reduce-window of x [dims] by `to_apply`, checked against folding each
// window's elements into init with `fold`.
void CheckReduceWindow(const std::string& dims_text, const Index& dims, const std::string& out_text,
                       const std::string& attributes, float init,
                       const std::function<float(float, float)>& fold) {
  const std::string text = std::string(kComputations) + "ENTRY %main (x: f32" + dims_text +
                           ") -> f32" + out_text + " {\n  %x = f32" + dims_text +
                           " parameter(0)\n  %init = f32[] constant(" + std::to_string(init) +
                           ")\n  ROOT %reduce-window = f32" + out_text + " reduce-window(f32" +
                           dims_text + " %x, f32[] %init), " + attributes + "\n}\n";
  SCOPED_TRACE(text);
  auto m = hlo::ParseModule(text);
  const hlo::Instruction& inst = *m->entry()->root();
  const std::vector<float> x = Values(Count(dims), 1);
  const auto windows = WindowElements(inst, dims, inst.shape().dims());
  const std::vector<float> got = Run(*m, {x});
  ASSERT_EQ(got.size(), windows.size());
  for (size_t o = 0; o < windows.size(); ++o) {
    float acc = init;
    for (int64_t at : windows[o]) acc = fold(acc, x[at]);
    EXPECT_EQ(got[o], acc) << "window " << o;
  }
  EXPECT_EQ(hlo::ToText(*hlo::ParseModule(hlo::ToText(*m))), hlo::ToText(*m));
}

TEST(ReduceWindow, MaxPoolingAsJaxWritesIt) {
  CheckReduceWindow("[2,7,6,3]", {2, 7, 6, 3}, "[2,4,3,3]",
                    "window={size=1x3x3x1 stride=1x2x2x1 pad=0_0x1_1x1_1x0_0}, to_apply=%max_f32",
                    -std::numeric_limits<float>::infinity(),
                    [](float a, float b) { return std::max(a, b); });
}

TEST(ReduceWindow, SumsWithBothDilationsAndNegativePadding) {
  CheckReduceWindow("[3,8]", {3, 8}, "[5,2]",
                    "window={size=2x3 stride=1x2 pad=1_0x0_-1 lhs_dilate=2x1 rhs_dilate=1x2}, "
                    "to_apply=%add_f32",
                    0.5f, [](float a, float b) { return a + b; });
}

TEST(ReduceWindow, AnyReducerRunsCompiled) {
  CheckReduceWindow("[9]", {9}, "[4]", "window={size=3 stride=2}, to_apply=%smaller_magnitude", 100,
                    [](float a, float b) { return std::abs(a) <= std::abs(b) ? a : b; });
}

// select-and-scatter(x, source, init): each window's source value goes to
// the element the window selects (kept while select(kept, next) holds).
void CheckSelectAndScatter(const std::string& attributes, bool magnitude, bool multiply) {
  const Index dims = {2, 6, 7}, out = {2, 3, 2};
  const std::string text = std::string(kComputations) +
                           "ENTRY %main (x: f32[2,6,7], s: f32[2,3,2]) -> f32[2,6,7] {\n"
                           "  %x = f32[2,6,7] parameter(0)\n  %s = f32[2,3,2] parameter(1)\n"
                           "  %init = f32[] constant(1)\n"
                           "  ROOT %select-and-scatter = f32[2,6,7] select-and-scatter(f32[2,6,7] "
                           "%x, f32[2,3,2] %s, f32[] %init), " +
                           attributes + "\n}\n";
  SCOPED_TRACE(text);
  auto m = hlo::ParseModule(text);
  const hlo::Instruction& inst = *m->entry()->root();
  const std::vector<float> x = Values(Count(dims), 2), s = Values(Count(out), 3);
  std::vector<float> expected(x.size(), 1.0f);
  const auto windows = WindowElements(inst, dims, out);
  for (size_t o = 0; o < windows.size(); ++o) {
    if (windows[o].empty()) continue;
    int64_t kept = windows[o][0];
    for (int64_t at : windows[o]) {
      const bool keep = magnitude ? std::abs(x[at]) > std::abs(x[kept]) : x[kept] >= x[at];
      if (!keep) kept = at;
    }
    expected[kept] = multiply ? expected[kept] * s[o] : expected[kept] + s[o];
  }
  const std::vector<float> got = Run(*m, {x, s});
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], expected[i]) << "element " << i;
  EXPECT_EQ(hlo::ToText(*hlo::ParseModule(hlo::ToText(*m))), hlo::ToText(*m));
}

TEST(SelectAndScatter, MaxPoolingsGradientAsXlaWritesIt) {
  CheckSelectAndScatter(
      "window={size=1x3x3 stride=1x2x3 pad=0_0x0_1x1_0}, select=%ge_f32, scatter=%add_f32", false,
      false);
}

TEST(SelectAndScatter, AnySelectAndScatterRunCompiled) {
  // lt_magnitude keeps a while |b| > |a| (any rule runs as written); times gathers.
  CheckSelectAndScatter(
      "window={size=1x3x3 stride=1x2x3 pad=0_0x0_1x1_0}, select=%lt_magnitude, scatter=%times",
      true, true);
}

TEST(ReduceWindow, BadAttributesAreErrors) {
  using ::testing::HasSubstr;
  auto error = [](const std::string& root) {
    try {
      hlo::ParseModule(std::string(kComputations) +
                       "ENTRY %main {\n  %x = f32[4,6] parameter(0)\n  %s = f32[2,2] "
                       "parameter(1)\n  %init = f32[] constant(0)\n  ROOT %r = " +
                       root + "\n}\n");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error("f32[2,3] reduce-window(%x, %init), window={size=2x2 stride=2x2}, "
                  "to_apply=%add_f32"),
            "no error");
  EXPECT_THAT(error("f32[2,3] reduce-window(%x, %init), window={size=2 stride=2}, "
                    "to_apply=%add_f32"),
              HasSubstr("the window has 1 dims, the operand 2"));
  EXPECT_THAT(error("f32[2,3] reduce-window(%x, %init), window={size=2x2 stride=2x2}"),
              HasSubstr("missing attribute 'to_apply'"));
  EXPECT_THAT(error("f32[2,3] reduce-window(%x, %init), window={size=2x2 stride=2x2}, "
                    "to_apply=%ge_f32"),
              HasSubstr("to_apply ge_f32 must return f32[]"));
  EXPECT_THAT(error("f32[2,3] reduce-window(%x, %init), window={size=2x2 rhs_reversal=1x0}, "
                    "to_apply=%add_f32"),
              HasSubstr("reversed"));
  EXPECT_THAT(error("f32[4,6] select-and-scatter(%x, %s, %init), window={size=2x2 stride=2x2}, "
                    "select=%ge_f32, scatter=%add_f32"),
              HasSubstr("source has dimensions [2,2]; the window's positions over the operand "
                        "are [2,3]"));
  EXPECT_THAT(error("f32[4,6] select-and-scatter(%x, %s, %init), window={size=2x3 stride=2x3}, "
                    "select=%add_f32, scatter=%add_f32"),
              HasSubstr("select add_f32 must take two f32 scalars and return pred"));
  EXPECT_THAT(error("f32[1,1] reduce-window(%x, %init), window={size=4294967296x4294967296 "
                    "pad=2147483646_2147483646x2147483645_2147483645}, to_apply=%add_f32"),
              HasSubstr("multiply past 2^63"));
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

// A window spanning a whole dim, padded by n - 1 on one side (XLA's form of
// a cumulative sum, and of its gradient): the runtime runs it as a running
// scan. Against running loops, along a middle dim (strided rows) and the
// leading one, prefix and suffix, f32 and s32, add and maximum.
TEST(ReduceWindow, WholeDimWindowsAreRunningScans) {
  const char* prefix_sum = R"(
HloModule m
add { a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b) }
ENTRY e { x = f32[3,50,4] parameter(0)
  zero = f32[] constant(0)
  ROOT r = f32[3,50,4] reduce-window(x, zero), window={size=1x50x1 pad=0_0x49_0x0_0}, to_apply=add })";
  const std::vector<float> x = Values(600, 3);
  const std::vector<float> got = strata::Run(*hlo::ParseModule(prefix_sum), {x});
  for (int o = 0; o < 3; ++o) {
    for (int i = 0; i < 4; ++i) {
      float acc = 0;
      for (int k = 0; k < 50; ++k) {
        acc += x[(o * 50 + k) * 4 + i];
        ASSERT_EQ(got[(o * 50 + k) * 4 + i], acc) << o << " " << k << " " << i;
      }
    }
  }
  const char* suffix_max = R"(
HloModule m
max { a = s32[] parameter(0)
  b = s32[] parameter(1)
  ROOT s = s32[] maximum(a, b) }
ENTRY e { x = s32[7,3] parameter(0)
  low = s32[] constant(-1000)
  ROOT r = s32[7,3] reduce-window(x, low), window={size=7x1 pad=0_6x0_0}, to_apply=max })";
  std::vector<int32_t> xi(21);
  for (int j = 0; j < 21; ++j) xi[j] = (j * 7) % 11 - 5;
  auto m = hlo::ParseModule(suffix_max);
  const auto* device = runtime::Client::Default().device(0);
  auto out = compiler::Compile(*m)
                 ->Run({runtime::Buffer::FromVector<int32_t>(xi, {7, 3}, device)})[0]
                 .ToVector<int32_t>();
  for (int c = 0; c < 3; ++c) {
    int32_t best = -1000;
    for (int k = 6; k >= 0; --k) {
      best = std::max(best, xi[k * 3 + c]);
      EXPECT_EQ(out[k * 3 + c], best) << k << " " << c;
    }
  }
}

}  // namespace
}  // namespace strata
