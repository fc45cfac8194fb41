// dot's algorithm= (XLA's PrecisionConfig algorithms): the operands rounded
// to the algorithm's input type, products summed in f32, against values
// worked out by hand and a plain loop over the rounded inputs.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "host_values.h"
#include "strata/compiler/compile.h"
#include "strata/core/error.h"
#include "strata/hlo/text.h"
#include "test_util.h"

namespace strata::runtime {
namespace {

using test::Arg;
using ::testing::HasSubstr;

std::string DotModule(const std::string& algorithm, const char* type = "f32") {
  return fmt::format(R"(HloModule m
ENTRY main {{
  a = {0}[2,3] parameter(0)
  b = {0}[3,2] parameter(1)
  ROOT d = f32[2,2] dot(a, b), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}{1}
}})",
                     type, algorithm.empty() ? "" : ", algorithm=" + algorithm);
}

std::vector<float> RunDot(const std::string& algorithm, const std::vector<float>& a,
                          const std::vector<float>& b) {
  auto exe = compiler::Compile(*hlo::ParseModule(DotModule(algorithm)));
  return test::ToHost<float>(exe->Run({Arg(a, {2, 3}), Arg(b, {3, 2})})[0]);
}

TEST(DotAlgorithm, Bf16InputsRoundTheOperandsFirst) {
  // 1 + 2^-10 is not a bf16 (8 significand bits): it rounds to 1.
  const float e = std::ldexp(1.0f, -10);
  const std::vector<float> a = {1 + e, 1, 0, 2, 1 + e, 3}, b = {1, 0, 1, 1, 1, 2};
  // By hand. Plain f32: row 0 = (1+e) + 1 + 0, (1+e)*0 + 1 + 0; row 1 = 2 + (1+e) + 3,
  // 0 + (1+e) + 6.
  EXPECT_EQ(RunDot("", a, b), (std::vector<float>{2 + e, 1, 6 + e, 7 + e}));
  EXPECT_EQ(RunDot("dot_f32_f32_f32", a, b), (std::vector<float>{2 + e, 1, 6 + e, 7 + e}));
  EXPECT_EQ(RunDot("dot_bf16_bf16_f32", a, b), (std::vector<float>{2, 1, 6, 7}));
  EXPECT_EQ(RunDot("dot_bf16_bf16_bf16", a, b), (std::vector<float>{2, 1, 6, 7}));
  // The f32 emulations run as f32 (at least as precise as what they emulate).
  EXPECT_EQ(RunDot("dot_bf16_bf16_f32_x3", a, b), (std::vector<float>{2 + e, 1, 6 + e, 7 + e}));
  EXPECT_EQ(RunDot("dot_tf32_tf32_f32", a, b), (std::vector<float>{2 + e, 1, 6 + e, 7 + e}));
}

TEST(DotAlgorithm, HalfInputsMatchAPlainLoopOverTheRoundedOperands) {
  const std::vector<float> a = test::Random<float>(6, 1, -3, 3),
                           b = test::Random<float>(6, 2, -3, 3);
  for (auto [algorithm, dtype] :
       {std::pair{"dot_bf16_bf16_f32", DType::kBF16}, std::pair{"dot_f16_f16_f32", DType::kF16}}) {
    const auto f = host::FormatOf(dtype);
    std::vector<double> want(4), magnitude(4);
    for (int i = 0; i < 2; ++i) {
      for (int j = 0; j < 2; ++j) {
        for (int k = 0; k < 3; ++k) {
          // Each product of two halves is exact in a double.
          const double p = static_cast<double>(host::RoundTo(f, a[i * 3 + k])) *
                           static_cast<double>(host::RoundTo(f, b[k * 2 + j]));
          want[i * 2 + j] += p;
          magnitude[i * 2 + j] += std::abs(p);
        }
      }
    }
    std::vector<float> got = RunDot(algorithm, a, b);
    // f32 sums of 3 products: within a few units of f32 rounding of the
    // products' magnitude; unrounded operands would be off by ~2^-9 (bf16).
    for (int i = 0; i < 4; ++i)
      EXPECT_NEAR(got[i], want[i], 1e-6 * std::max(1.0, magnitude[i])) << algorithm << i;
  }
}

TEST(DotAlgorithm, TextRoundTrips) {
  auto m = hlo::ParseModule(DotModule("dot_bf16_bf16_f32"));
  std::string text = hlo::ToText(*m);
  EXPECT_THAT(text, HasSubstr("algorithm=dot_bf16_bf16_f32"));
  EXPECT_EQ(hlo::ToText(*hlo::ParseModule(text)), text);
}

TEST(DotAlgorithm, UnknownAndMismatchedAlgorithmsAreErrorsNamingTheDot) {
  auto error = [](const std::string& text) {
    try {
      hlo::ParseModule(text);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_THAT(
      error(DotModule("dot_f64_f64_f64")),
      AllOf(HasSubstr("d"), HasSubstr("algorithm=dot_f64_f64_f64 takes f64 operands, got f32")));
  EXPECT_THAT(error(DotModule("dot_any_f8_any_f8_f32")),
              HasSubstr("multiplies f8 values, a type strata does not have"));
  EXPECT_THAT(error(DotModule("dot_fast")),
              HasSubstr("unknown algorithm=dot_fast (strata runs dot_f16_f16_f16"));
  EXPECT_THAT(error(DotModule("dot_bf16_bf16_f32", "f64")),
              HasSubstr("takes bf16 or f32 operands, got f64"));
}

}  // namespace
}  // namespace strata::runtime
