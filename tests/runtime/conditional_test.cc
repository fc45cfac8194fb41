// conditional as XLA's text writes it (JAX's lax.cond and lax.switch
// lower to these forms), against values worked out by hand: the branch the
// selector picks runs, on its own operand, and only that branch.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "strata/compiler/compile.h"
#include "strata/core/error.h"
#include "strata/hlo/text.h"
#include "test_util.h"

namespace strata::runtime {
namespace {

using test::Arg;

std::vector<Buffer> RunHlo(const std::string& text, const std::vector<Buffer>& args, bool passes) {
  compiler::CompileOptions options;
  options.run_passes = passes;
  return compiler::Compile(*hlo::ParseModule(text), options)->Run(args);
}

// jax.lax.cond(p, lambda ops: (ops[0] * 2, ops[1]), lambda ops: (ops[0] - 1, ops[1] + 1), (x, n)):
// both branches take the same tuple.
constexpr char kCond[] =
    R"(HloModule jit_f, entry_computation_layout={(pred[], f32[3]{0}, s32[])->(f32[3]{0}, s32[])}

%true_branch (arg_tuple.1: (f32[3], s32[])) -> (f32[3], s32[]) {
  %arg_tuple.1 = (f32[3]{0}, s32[]) parameter(0)
  %x.1 = f32[3]{0} get-tuple-element((f32[3]{0}, s32[]) %arg_tuple.1), index=0
  %two = f32[] constant(2)
  %twos = f32[3]{0} broadcast(f32[] %two), dimensions={}
  %doubled = f32[3]{0} multiply(f32[3]{0} %x.1, f32[3]{0} %twos)
  %n.1 = s32[] get-tuple-element((f32[3]{0}, s32[]) %arg_tuple.1), index=1
  ROOT %tuple.1 = (f32[3]{0}, s32[]) tuple(f32[3]{0} %doubled, s32[] %n.1)
}

%false_branch (arg_tuple.2: (f32[3], s32[])) -> (f32[3], s32[]) {
  %arg_tuple.2 = (f32[3]{0}, s32[]) parameter(0)
  %x.2 = f32[3]{0} get-tuple-element((f32[3]{0}, s32[]) %arg_tuple.2), index=0
  %one = f32[] constant(1)
  %ones = f32[3]{0} broadcast(f32[] %one), dimensions={}
  %less = f32[3]{0} subtract(f32[3]{0} %x.2, f32[3]{0} %ones)
  %n.2 = s32[] get-tuple-element((f32[3]{0}, s32[]) %arg_tuple.2), index=1
  %one.s = s32[] constant(1)
  %next = s32[] add(s32[] %n.2, s32[] %one.s)
  ROOT %tuple.2 = (f32[3]{0}, s32[]) tuple(f32[3]{0} %less, s32[] %next)
}

ENTRY %main.3 (p: pred[], x: f32[3], n: s32[]) -> (f32[3], s32[]) {
  %p = pred[] parameter(0)
  %x = f32[3]{0} parameter(1)
  %n = s32[] parameter(2)
  %ops = (f32[3]{0}, s32[]) tuple(f32[3]{0} %x, s32[] %n)
  ROOT %conditional = (f32[3]{0}, s32[]) conditional(pred[] %p, (f32[3]{0}, s32[]) %ops, (f32[3]{0}, s32[]) %ops), true_computation=%true_branch, false_computation=%false_branch
})";

TEST(Conditional, PredicatedFormRunsTheBranchItPicks) {
  for (bool passes : {false, true}) {
    for (bool p : {true, false}) {
      SCOPED_TRACE(testing::Message() << "passes " << passes << ", p " << p);
      auto out = RunHlo(kCond,
                        {test::Arg(std::vector<bool>{p}, {}), Arg<float>({1, -2, 3.5f}, {3}),
                         Arg<int32_t>({41}, {})},
                        passes);
      ASSERT_EQ(out.size(), 2u);
      const std::vector<float> want =
          p ? std::vector<float>{2, -4, 7} : std::vector<float>{0, -3, 2.5f};
      EXPECT_EQ(out[0].ToVector<float>(), want);
      EXPECT_EQ(out[1].ToVector<int32_t>(), std::vector<int32_t>{p ? 41 : 42});
    }
  }
}

// jax.lax.switch(i, [f0, f1, f2], x): an s32 index; out of range runs the
// last branch (JAX clamps before, XLA does it itself). Branch 1 holds a
// while loop (x doubled three times); each branch takes an operand of its own.
constexpr char kSwitch[] = R"(HloModule switch

zero_branch {
  a = f32[2] parameter(0)
  ROOT z = f32[2] negate(a)
}

cond {
  s = (s32[], f32[2]) parameter(0)
  k = s32[] get-tuple-element(s), index=0
  three = s32[] constant(3)
  ROOT more = pred[] compare(k, three), direction=LT
}

body {
  s = (s32[], f32[2]) parameter(0)
  k = s32[] get-tuple-element(s), index=0
  v = f32[2] get-tuple-element(s), index=1
  one = s32[] constant(1)
  k1 = s32[] add(k, one)
  v2 = f32[2] add(v, v)
  ROOT next = (s32[], f32[2]) tuple(k1, v2)
}

loop_branch {
  b = f32[2] parameter(0)
  zero = s32[] constant(0)
  start = (s32[], f32[2]) tuple(zero, b)
  done = (s32[], f32[2]) while(start), condition=cond, body=body
  ROOT r = f32[2] get-tuple-element(done), index=1
}

last_branch {
  c = f32[2] parameter(0)
  ROOT e = f32[2] exponential(c)
}

ENTRY main {
  i = s32[] parameter(0)
  x = f32[2] parameter(1)
  y = f32[2] parameter(2)
  ROOT out = f32[2] conditional(i, x, x, y), branch_computations={zero_branch, loop_branch, last_branch}
})";

TEST(Conditional, IndexedFormWithALoopInABranchAndOutOfRangeIndices) {
  const std::vector<float> x = {1.5f, -2}, y = {0, 1};
  for (bool passes : {false, true}) {
    SCOPED_TRACE(passes);
    auto run = [&](int32_t i) {
      return RunHlo(kSwitch, {Arg<int32_t>({i}, {}), Arg(x, {2}), Arg(y, {2})}, passes)[0]
          .ToVector<float>();
    };
    EXPECT_EQ(run(0), (std::vector<float>{-1.5f, 2}));
    EXPECT_EQ(run(1), (std::vector<float>{12, -16}));
    const std::vector<float> last = {1, std::exp(1.0f)};
    for (int32_t i : {2, 3, 100, -1, -2147483647 - 1}) {
      const std::vector<float> got = run(i);
      EXPECT_EQ(got[0], 1) << i;
      EXPECT_NEAR(got[1], last[1], 1e-6) << i;
    }
  }
}

TEST(Conditional, MalformedConditionalsAreErrorsNamingTheProblem) {
  auto error = [](const std::string& text) -> std::string {
    try {
      hlo::ParseModule(text);
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  const std::string branches = R"(HloModule m
f {
  a = f32[2] parameter(0)
  ROOT r = f32[2] negate(a)
}
g {
  a = s32[2] parameter(0)
  ROOT r = s32[2] negate(a)
}
ENTRY main {
  x = f32[2] parameter(0)
  k = s32[2] parameter(1)
  p = pred[] parameter(2)
  i = s32[] parameter(3)
  h = f32[] parameter(4)
)";
  EXPECT_THAT(error(branches + "  ROOT c = f32[2] conditional(h, x), branch_computations={f}\n}\n"),
              testing::HasSubstr("the branch selector must be pred[] or s32[], got f32[]"));
  EXPECT_THAT(error(branches + "  ROOT c = f32[2] conditional(p, x), branch_computations={f}\n}\n"),
              testing::HasSubstr("a pred selector needs true_computation and false_computation"));
  EXPECT_THAT(
      error(branches + "  ROOT c = f32[2] conditional(i, x), branch_computations={f, f}\n}\n"),
      testing::HasSubstr("expected one operand per branch (2) after the selector, got 1"));
  EXPECT_THAT(error(branches + "  ROOT c = f32[2] conditional(i, k), branch_computations={f}\n}\n"),
              testing::HasSubstr("branch 0 f parameter 0 is f32[2], given s32[2]"));
  EXPECT_THAT(
      error(branches + "  ROOT c = f32[2] conditional(i, x, k), branch_computations={f, g}\n}\n"),
      testing::HasSubstr("branch 1 (g) returns s32[2], branch 0 (f) returns f32[2]"));
  EXPECT_THAT(
      error(branches + "  ROOT c = f32[2] conditional(i, x), branch_computations={f, nope}\n}\n"),
      testing::HasSubstr("undefined computation 'nope'"));
}

}  // namespace
}  // namespace strata::runtime
