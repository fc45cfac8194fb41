// f16 and bf16 arithmetic as XLA's CPU backend runs it: in f32, each op's
// result rounded once, reductions accumulated in f32; dots and convolutions
// with a wider result type than their operands. Expected values are worked
// out by hand or by loops over the values written here.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>

#include "host_values.h"
#include "strata/core/error.h"
#include "strata/hlo/text.h"
#include "test_util.h"

namespace strata::runtime {
namespace {

using host::HalfBuffer;
using host::HalfValues;

std::vector<Buffer> RunHlo(const std::string& text, const std::vector<Buffer>& args, bool passes) {
  CompileOptions options;
  options.run_passes = passes;
  return Executable::Compile(*hlo::ParseModule(text), options)->Run(args);
}

// 4096 ones summed: in f16 step by step the sum would stop at 2048 (2048 + 1
// rounds back to 2048); accumulated in f32 it reaches 4096, which f16 holds.
TEST(HalfPrecision, ReductionsAccumulateInF32AndRoundOnce) {
  const char* text = R"(
HloModule m
add {
  a = f16[] parameter(0)
  b = f16[] parameter(1)
  ROOT s = f16[] add(a, b)
}
ENTRY e {
  x = f16[4096] parameter(0)
  zero = f16[] constant(0)
  ROOT r = f16[] reduce(x, zero), dimensions={0}, to_apply=add
})";
  for (bool passes : {false, true}) {
    auto out =
        RunHlo(text, {HalfBuffer(DType::kF16, std::vector<double>(4096, 1.0), {4096})}, passes);
    EXPECT_EQ(HalfValues(out[0]), std::vector<double>{4096}) << passes;
  }
}

// bf16 x bf16 -> f32 (XLA's preferred element type): the products and sums
// in f32, nothing rounded to bf16. 1 + 2^-8 is no bf16, but its parts are.
TEST(HalfPrecision, Bf16DotWithAnF32Result) {
  const char* text = R"(
HloModule m
ENTRY e {
  a = bf16[2,3] parameter(0)
  b = bf16[3,2] parameter(1)
  ROOT d = f32[2,2] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
})";
  const std::vector<double> a = {1, 0.00390625, 3, -2, 0.5, 0.25};
  const std::vector<double> b = {1, 2, 1, -1, 0, 4};
  for (bool passes : {false, true}) {
    auto out = RunHlo(
        text, {HalfBuffer(DType::kBF16, a, {2, 3}), HalfBuffer(DType::kBF16, b, {3, 2})}, passes);
    ASSERT_EQ(out[0].shape(), Shape(DType::kF32, {2, 2}));
    std::vector<float> want(4);
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 2; ++j)
        for (int k = 0; k < 3; ++k) want[i * 2 + j] += float(a[i * 3 + k] * b[k * 2 + j]);
    EXPECT_EQ(out[0].ToVector<float>(), want) << passes;
    EXPECT_EQ(want[0], 1.00390625f);  // 1 + 2^-8: kept, where a bf16 result would round it
  }
}

TEST(HalfPrecision, Int8DotWithAnInt32ResultAndF16Convolution) {
  const char* dot = R"(
HloModule m
ENTRY e {
  a = s8[1,3] parameter(0)
  b = s8[3,1] parameter(1)
  ROOT d = s32[1,1] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
})";
  auto out = RunHlo(
      dot, {test::Arg<int8_t>({100, 100, -100}, {1, 3}), test::Arg<int8_t>({100, 100, 1}, {3, 1})},
      true);
  EXPECT_EQ(out[0].ToVector<int32_t>(), std::vector<int32_t>{19900});  // would wrap in s8
  const char* conv = R"(
HloModule m
ENTRY e {
  x = f16[1,5,1] parameter(0)
  k = f16[3,1,1] parameter(1)
  ROOT c = f16[1,3,1] convolution(x, k), window={size=3}, dim_labels=b0f_0io->b0f
})";
  out = RunHlo(conv,
               {HalfBuffer(DType::kF16, {1, 2, 3, 4, 2048}, {1, 5, 1}),
                HalfBuffer(DType::kF16, {1, 0.5, 0.25}, {3, 1, 1})},
               true);
  // Each output exact in f16 (517: its spacing between 512 and 1024 is 0.5).
  EXPECT_EQ(HalfValues(out[0]), (std::vector<double>{1 + 1 + 0.75, 2 + 1.5 + 1, 3 + 2 + 512}));
}

TEST(HalfPrecision, BadResultTypesAndCallsInAReducerAreErrors) {
  auto error = [](const std::string& text) -> std::string {
    try {
      Executable::Compile(*hlo::ParseModule(text));
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_THAT(error(R"(HloModule m
ENTRY e {
  a = f32[2,2] parameter(0)
  ROOT d = f16[2,2] dot(a, a), lhs_contracting_dims={1}, rhs_contracting_dims={0}
})"),
              testing::HasSubstr("declares shape f16[2,2] but its operands give f32[2,2]"));
  EXPECT_THAT(error(R"(HloModule m
ENTRY e {
  a = s32[2,2] parameter(0)
  ROOT d = f32[2,2] dot(a, a), lhs_contracting_dims={1}, rhs_contracting_dims={0}
})"),
              testing::HasSubstr("declares shape f32[2,2] but its operands give s32[2,2]"));
}

// A reducer that calls another function: inlined, then run in f32.
TEST(HalfPrecision, AReducerThatCallsAFunction) {
  const char* text = R"(HloModule m
neg {
  a = f16[] parameter(0)
  ROOT n = f16[] negate(a)
}
add {
  a = f16[] parameter(0)
  b = f16[] parameter(1)
  c = f16[] call(b), to_apply=neg
  ROOT s = f16[] add(a, c)
}
ENTRY e {
  x = f16[4] parameter(0)
  zero = f16[] constant(0)
  ROOT r = f16[] reduce(x, zero), dimensions={0}, to_apply=add
})";
  for (bool passes : {false, true}) {
    auto out = RunHlo(text, {HalfBuffer(DType::kF16, {1, 2, 3, 4.5}, {4})}, passes);
    EXPECT_EQ(HalfValues(out[0]), std::vector<double>{-10.5}) << passes;
  }
}

}  // namespace
}  // namespace strata::runtime
