// Tokens (XLA's token[]): after-all makes and joins them, add-dependency
// orders a value after one, and they pass through tuples, calls and loops.
// A token holds no data, so every op that would read one is an Error.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "strata/compiler/compile.h"
#include "strata/core/error.h"
#include "strata/hlo/text.h"
#include "test_util.h"

namespace strata::runtime {
namespace {

using ::testing::HasSubstr;

std::vector<Buffer> RunText(const std::string& text, const std::vector<Buffer>& args, bool passes) {
  compiler::CompileOptions options;
  options.run_passes = passes;
  return compiler::Compile(*hlo::ParseModule(text), options)->Run(args);
}

// add-dependency gives its first operand, an array or a tuple, unchanged.
TEST(Token, AddDependencyGivesItsOperand) {
  const std::string text = R"(HloModule m
ENTRY e {
  x = f32[3] parameter(0)
  n = s32[] parameter(1)
  start = token[] after-all()
  again = token[] after-all()
  joined = token[] after-all(start, again)
  y = f32[3] add-dependency(x, joined)
  pair = (f32[3], s32[]) tuple(x, n)
  kept = (f32[3], s32[]) add-dependency(pair, start)
  k = s32[] get-tuple-element(kept), index=1
  doubled = f32[3] add(y, y)
  ROOT r = (f32[3], s32[]) tuple(doubled, k)
}
)";
  for (bool passes : {false, true}) {
    SCOPED_TRACE(passes ? "passes on" : "passes off");
    std::vector<Buffer> out =
        RunText(text, {test::Arg<float>({1, -2, 3.5}, {3}), test::Arg<int32_t>({41}, {})}, passes);
    ASSERT_EQ(out.size(), 2u);
    EXPECT_EQ(out[0].ToVector<float>(), (std::vector<float>{2, -4, 7}));
    EXPECT_EQ(out[1].ToVector<int32_t>(), (std::vector<int32_t>{41}));
  }
}

// A token carried through a while loop beside a counter, threaded through
// each iteration's after-all, and returned: it has shape token[] and no bytes.
TEST(Token, FlowsThroughLoopsAndCalls) {
  const std::string text = R"(HloModule m
cond {
  s = (s32[], token[]) parameter(0)
  k = s32[] get-tuple-element(s), index=0
  n = s32[] constant(4)
  ROOT lt = pred[] compare(k, n), direction=LT
}
step {
  t = token[] parameter(0)
  ROOT next = token[] after-all(t)
}
body {
  s = (s32[], token[]) parameter(0)
  k = s32[] get-tuple-element(s), index=0
  t = token[] get-tuple-element(s), index=1
  one = s32[] constant(1)
  k1 = s32[] add(k, one)
  t1 = token[] call(t), to_apply=step
  k2 = s32[] add-dependency(k1, t1)
  ROOT out = (s32[], token[]) tuple(k2, t1)
}
ENTRY e {
  zero = s32[] constant(0)
  t = token[] after-all()
  init = (s32[], token[]) tuple(zero, t)
  loop = (s32[], token[]) while(init), condition=cond, body=body
  count = s32[] get-tuple-element(loop), index=0
  done = token[] get-tuple-element(loop), index=1
  ROOT r = (s32[], token[]) tuple(count, done)
}
)";
  for (bool passes : {false, true}) {
    SCOPED_TRACE(passes ? "passes on" : "passes off");
    std::vector<Buffer> out = RunText(text, {}, passes);
    ASSERT_EQ(out.size(), 2u);
    EXPECT_EQ(out[0].ToVector<int32_t>(), (std::vector<int32_t>{4}));
    EXPECT_EQ(out[1].shape(), Shape::Scalar(DType::kToken));
    EXPECT_EQ(out[1].shape().byte_size(), 0);
  }
}

TEST(Token, OpsThatReadDataRejectTokens) {
  auto entry = [](const std::string& lines) {
    return "HloModule m\nENTRY e {\n  t = token[] after-all()\n  x = f32[2] parameter(0)\n" +
           lines + "}\n";
  };
  EXPECT_THAT(test::CompileError(entry("  ROOT r = token[] add(t, t)\n")),
              HasSubstr("[add] operand 0"));
  EXPECT_THAT(test::CompileError(entry("  ROOT r = token[2] broadcast(t), dimensions={}\n")),
              HasSubstr("token"));
  EXPECT_THAT(test::CompileError(entry("  ROOT r = f32[2] add-dependency(x, x)\n")),
              HasSubstr("operand 1 must be a token, got f32[2]"));
  EXPECT_THAT(test::CompileError(entry("  ROOT r = token[] after-all(t, x)\n")),
              HasSubstr("operand 1 must be a token, got f32[2]"));
  EXPECT_THAT(test::CompileError(entry("  ROOT r = f32[2] convert(t)\n")), HasSubstr("token"));
  EXPECT_THAT(test::CompileError(entry("  ROOT r = token[] constant(0)\n")),
              HasSubstr("a token has no constant value"));
  EXPECT_THAT(test::CompileError(entry("  ROOT r = token[] copy(t)\n")),
              HasSubstr("[copy] operand 0"));
  EXPECT_THAT(test::CompileError("HloModule m\nENTRY e {\n  ROOT t = token[3] after-all()\n}\n"),
              HasSubstr("a token has no dimensions"));
}

// Bounded dynamic dimensions are refused by name, not misread.
TEST(Token, DynamicDimensionsAreRefusedByName) {
  EXPECT_THAT(test::CompileError("HloModule m\nENTRY e {\n  ROOT x = f32[<=4,2] parameter(0)\n}\n"),
              HasSubstr("dynamic dimensions ('<=N' or '?') are not supported"));
  EXPECT_THAT(test::CompileError("HloModule m\nENTRY e {\n  ROOT x = f32[2,?] parameter(0)\n}\n"),
              HasSubstr("dynamic dimensions ('<=N' or '?') are not supported"));
}

}  // namespace
}  // namespace strata::runtime
