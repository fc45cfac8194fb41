// Fusions as XLA writes them, of every kind, in XLA's text syntax (written
// from XLA's documentation of fusion: a fusion computes what a call of its
// computation computes; the kind only says how XLA's backends emit it).
// strata's fused loop runs the kLoop fusions it knows; every other one runs
// as a call of its computation, so each gives the values worked out by hand
// here, and one strata cannot compute is an Error naming what it lacks,
// never an internal check.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "host_values.h"
#include "strata/compiler/compile.h"
#include "strata/core/error.h"
#include "strata/hlo/module.h"
#include "strata/hlo/text.h"
#include "test_util.h"

namespace strata::runtime {
namespace {

std::vector<Buffer> RunText(const std::string& text, const std::vector<Buffer>& args,
                            bool run_passes) {
  compiler::CompileOptions options;
  options.run_passes = run_passes;
  return compiler::Compile(*hlo::ParseModule(text), options)->Run(args);
}

// Runs with the passes and without them (the fusion then runs exactly as
// written, as a call or as the loop).
template <typename T>
void ExpectResults(const std::string& text, const std::vector<Buffer>& args,
                   const std::vector<std::vector<T>>& expected) {
  for (bool passes : {false, true}) {
    SCOPED_TRACE(passes ? "with passes" : "without passes");
    std::vector<Buffer> out = RunText(text, args, passes);
    ASSERT_EQ(out.size(), expected.size());
    for (size_t i = 0; i < out.size(); ++i) EXPECT_EQ(test::ToHost<T>(out[i]), expected[i]) << i;
  }
}

// A multi-output loop fusion: the root is a tuple (XLA's "multi-output
// fusion"). It used to stop the compiler with an internal check on the
// tuple's element count.
constexpr char kMultiOutput[] = R"(HloModule multi_output

fused_computation {
  param_0 = f32[4]{0} parameter(0)
  param_1 = f32[4]{0} parameter(1)
  add.0 = f32[4]{0} add(param_0, param_1)
  multiply.0 = f32[4]{0} multiply(param_0, param_1)
  ROOT tuple.0 = (f32[4]{0}, f32[4]{0}) tuple(add.0, multiply.0)
}

ENTRY main {
  p0 = f32[4]{0} parameter(0)
  p1 = f32[4]{0} parameter(1)
  fusion = (f32[4]{0}, f32[4]{0}) fusion(p0, p1), kind=kLoop, calls=fused_computation
  gte.0 = f32[4]{0} get-tuple-element(fusion), index=0
  gte.1 = f32[4]{0} get-tuple-element(fusion), index=1
  ROOT r = (f32[4]{0}, f32[4]{0}) tuple(gte.0, gte.1)
}
)";

TEST(XlaFusions, MultiOutputLoopFusion) {
  ExpectResults<float>(kMultiOutput,
                       {test::Arg<float>({1, 2, 3, 4}, {4}), test::Arg<float>({5, 6, 7, 8}, {4})},
                       {{6, 8, 10, 12}, {5, 12, 21, 32}});
}

// kInput: a reduction over the leading dim (a column sum), with an
// elementwise op before it: what the fused loop's row reductions do not do.
constexpr char kInputFusion[] = R"(HloModule input_fusion

add_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

fused_reduce {
  param_0.1 = f32[2,3]{1,0} parameter(0)
  multiply.1 = f32[2,3]{1,0} multiply(param_0.1, param_0.1)
  constant.1 = f32[] constant(0)
  ROOT reduce.1 = f32[3]{0} reduce(multiply.1, constant.1), dimensions={0}, to_apply=add_f32
}

ENTRY main {
  p = f32[2,3]{1,0} parameter(0)
  ROOT fusion.1 = f32[3]{0} fusion(p), kind=kInput, calls=fused_reduce
}
)";

TEST(XlaFusions, InputFusionWithAColumnReduction) {
  // Column sums of squares of [[1, 2, 3], [4, 5, 6]]: 1+16, 4+25, 9+36.
  ExpectResults<float>(kInputFusion, {test::Arg<float>({1, 2, 3, 4, 5, 6}, {2, 3})},
                       {{17, 29, 45}});
}

// kOutput: a dot and the bias add that consumes it.
constexpr char kOutputFusion[] = R"(HloModule output_fusion

fused_dot_add {
  param_0.2 = f32[2,2]{1,0} parameter(0)
  param_1.2 = f32[2,2]{1,0} parameter(1)
  param_2.2 = f32[2]{0} parameter(2)
  dot.2 = f32[2,2]{1,0} dot(param_0.2, param_1.2), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  broadcast.2 = f32[2,2]{1,0} broadcast(param_2.2), dimensions={1}
  ROOT add.2 = f32[2,2]{1,0} add(dot.2, broadcast.2)
}

ENTRY main {
  x = f32[2,2]{1,0} parameter(0)
  w = f32[2,2]{1,0} parameter(1)
  b = f32[2]{0} parameter(2)
  ROOT fusion.2 = f32[2,2]{1,0} fusion(x, w, b), kind=kOutput, calls=fused_dot_add
}
)";

TEST(XlaFusions, OutputFusionOfADotAndItsBias) {
  // [[1, 2], [3, 4]] · [[1, 0], [1, 1]] = [[3, 2], [7, 4]], plus [10, 20].
  ExpectResults<float>(kOutputFusion,
                       {test::Arg<float>({1, 2, 3, 4}, {2, 2}),
                        test::Arg<float>({1, 0, 1, 1}, {2, 2}), test::Arg<float>({10, 20}, {2})},
                       {{13, 22, 17, 24}});
}

// A loop fusion holding a slice and a concatenate (a rotate by one).
constexpr char kSliceConcatenate[] = R"(HloModule rotate

fused_rotate {
  param_0.3 = f32[5]{0} parameter(0)
  slice.3 = f32[4]{0} slice(param_0.3), slice={[1:5]}
  slice.4 = f32[1]{0} slice(param_0.3), slice={[0:1]}
  ROOT concatenate.3 = f32[5]{0} concatenate(slice.3, slice.4), dimensions={0}
}

ENTRY main {
  p = f32[5]{0} parameter(0)
  ROOT fusion.3 = f32[5]{0} fusion(p), kind=kLoop, calls=fused_rotate
}
)";

TEST(XlaFusions, LoopFusionHoldingSlicesAndAConcatenate) {
  ExpectResults<float>(kSliceConcatenate, {test::Arg<float>({1, 2, 3, 4, 5}, {5})},
                       {{2, 3, 4, 5, 1}});
}

// A loop fusion of integer ops (the fused loop computes floats only).
constexpr char kIntegerFusion[] = R"(HloModule integers

fused_integers {
  param_0.4 = s32[3]{0} parameter(0)
  param_1.4 = s32[3]{0} parameter(1)
  multiply.4 = s32[3]{0} multiply(param_0.4, param_1.4)
  constant.4 = s32[] constant(7)
  broadcast.4 = s32[3]{0} broadcast(constant.4), dimensions={}
  ROOT subtract.4 = s32[3]{0} subtract(multiply.4, broadcast.4)
}

ENTRY main {
  a = s32[3]{0} parameter(0)
  b = s32[3]{0} parameter(1)
  ROOT fusion.4 = s32[3]{0} fusion(a, b), kind=kLoop, calls=fused_integers
}
)";

TEST(XlaFusions, LoopFusionOfIntegerOps) {
  ExpectResults<int32_t>(kIntegerFusion,
                         {test::Arg<int32_t>({1, -2, 3}, {3}), test::Arg<int32_t>({4, 5, -6}, {3})},
                         {{-3, -17, -25}});
}

// kCustom, as a backend names its own fusions: still a call of its body.
TEST(XlaFusions, CustomFusionRunsAsACall) {
  std::string text = kIntegerFusion;
  text.replace(text.find("kind=kLoop"), 10, "kind=kCustom");
  ExpectResults<int32_t>(text,
                         {test::Arg<int32_t>({1, -2, 3}, {3}), test::Arg<int32_t>({4, 5, -6}, {3})},
                         {{-3, -17, -25}});
}

// The kind survives printing and parsing.
TEST(XlaFusions, TheKindRoundTripsThroughText) {
  for (const char* text : {kInputFusion, kOutputFusion}) {
    const std::string printed = hlo::ToText(*hlo::ParseModule(text));
    EXPECT_EQ(hlo::ToText(*hlo::ParseModule(printed)), printed);
    EXPECT_NE(printed.find(text == kInputFusion ? "kind=kInput" : "kind=kOutput"),
              std::string::npos)
        << printed;
  }
}

// Half-precision fusions run in f32 and round each result once: the
// multi-output fusion in f16 and the kInput reduction in bf16 (its f32
// combiner made bf16 too), against values worked out by hand.
TEST(XlaFusions, HalfPrecisionFusionsComputeInF32) {
  auto retyped = [](std::string text, const std::string& type) {
    for (size_t at = text.find("f32"); at != std::string::npos; at = text.find("f32", at)) {
      text.replace(at, 3, type);
    }
    return text;
  };
  using host::HalfBuffer;
  using host::HalfValues;
  for (bool passes : {false, true}) {
    SCOPED_TRACE(passes ? "passes on" : "passes off");
    auto out = RunText(
        retyped(kMultiOutput, "f16"),
        {HalfBuffer(DType::kF16, {1, 2, 3, 4}, {4}), HalfBuffer(DType::kF16, {5, 6, 7, 8}, {4})},
        passes);
    EXPECT_EQ(HalfValues(out[0]), (std::vector<double>{6, 8, 10, 12}));
    EXPECT_EQ(HalfValues(out[1]), (std::vector<double>{5, 12, 21, 32}));
    // Column sums of squares: 1 + 256 = 257 is no bf16 (8 significant bits):
    // it rounds once, to 256 (the tie goes to even); 4 + 0.25 and 9 + 36 are exact.
    auto sums = RunText(retyped(kInputFusion, "bf16"),
                        {HalfBuffer(DType::kBF16, {1, 2, 3, 16, 0.5, 6}, {2, 3})}, passes);
    EXPECT_EQ(HalfValues(sums[0]), (std::vector<double>{256, 4.25, 45}));
  }
}

}  // namespace
}  // namespace strata::runtime
