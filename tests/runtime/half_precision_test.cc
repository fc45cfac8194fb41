// f16 and bf16 arithmetic as XLA's CPU backend runs it: in f32, each op's
// result rounded once, reductions accumulated in f32; dots and convolutions
// with a wider result type than their operands. Expected values are worked
// out by hand or by loops over the values written here.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>

#include "host_values.h"
#include "strata/compiler/compile.h"
#include "strata/core/error.h"
#include "strata/hlo/text.h"
#include "strata/runtime/cpu.h"
#include "test_util.h"

namespace strata::runtime {
namespace {

using host::HalfBuffer;
using host::HalfValues;

std::vector<Buffer> RunHlo(const std::string& text, const std::vector<Buffer>& args, bool passes) {
  compiler::CompileOptions options;
  options.run_passes = passes;
  return compiler::Compile(*hlo::ParseModule(text), options)->Run(args);
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

// bf16 dots run on the bf16 GEMM (vdpbf16ps where the CPU has it, f32
// panels elsewhere), under every kernel variant: batch dims, each operand
// stored transposed, a batch dim in the middle (a transposing copy), odd k;
// an f32 result within a k-term f32 sum's rounding of a loop in double, a
// bf16 result that rounded once more.
TEST(HalfPrecision, Bf16DotsOnTheBf16GemmInEveryLayoutAndVariant) {
  struct Form {
    const char* lhs;  // [batch 3, m 13, k 71] in some order
    const char* rhs;  // [batch 3, k 71, n 70] in some order
    const char* dims;
    int lhs_order[3], rhs_order[3];  // where batch, free, contracting lie
  };
  const Form forms[] = {
      {"3,13,71",
       "3,71,70",
       "lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}",
       {0, 1, 2},
       {0, 2, 1}},
      {"3,71,13",
       "3,70,71",
       "lhs_batch_dims={0}, lhs_contracting_dims={1}, rhs_batch_dims={0}, rhs_contracting_dims={2}",
       {0, 2, 1},
       {0, 1, 2}},
      {"13,3,71",
       "71,3,70",
       "lhs_batch_dims={1}, lhs_contracting_dims={2}, rhs_batch_dims={1}, rhs_contracting_dims={0}",
       {1, 0, 2},
       {1, 2, 0}},
  };
  const int64_t batch = 3, m = 13, k = 71, n = 70;
  std::vector<double> a(batch * m * k), b(batch * k * n);
  for (size_t i = 0; i < a.size(); ++i)
    a[i] = std::ldexp(static_cast<double>((i * 37) % 255) - 127, -6);
  for (size_t i = 0; i < b.size(); ++i)
    b[i] = std::ldexp(static_cast<double>((i * 91) % 251) - 125, -7);
  // Element (batch, free, contracting) of an operand whose dims lie in `order`
  // with sizes `sizes` (in that logical order).
  auto at = [](const std::vector<double>& v, const int order[3], const int64_t logical[3],
               const int64_t sizes[3]) {
    int64_t stored[3], extent[3];
    for (int d = 0; d < 3; ++d) {
      stored[order[d]] = logical[d];
      extent[order[d]] = sizes[d];
    }
    return v[(stored[0] * extent[1] + stored[1]) * extent[2] + stored[2]];
  };
  const int64_t lhs_sizes[3] = {batch, m, k}, rhs_sizes[3] = {batch, n, k};
  for (Isa isa : SupportedIsas()) {
    CapIsa(isa);
    for (const Form& f : forms) {
      for (const char* result : {"f32", "bf16"}) {
        SCOPED_TRACE(std::string(IsaName(isa)) + " " + f.lhs + " x " + f.rhs + " -> " + result);
        const std::string text = std::string("HloModule m\nENTRY e {\n  a = bf16[") + f.lhs +
                                 "] parameter(0)\n  b = bf16[" + f.rhs +
                                 "] parameter(1)\n  ROOT d = " + result + "[3,13,70] dot(a, b), " +
                                 f.dims + "\n}\n";
        auto to_dims = [](const char* text) {
          std::vector<int64_t> dims;
          for (const char* p = text; *p;) {
            dims.push_back(std::strtol(p, const_cast<char**>(&p), 10));
            if (*p == ',') ++p;
          }
          return dims;
        };
        auto out = RunHlo(text,
                          {HalfBuffer(DType::kBF16, a, to_dims(f.lhs)),
                           HalfBuffer(DType::kBF16, b, to_dims(f.rhs))},
                          true);
        const bool f32 = std::string(result) == "f32";
        const std::vector<double> got =
            f32 ? [&] {
              std::vector<double> v;
              for (float x : out[0].ToVector<float>()) v.push_back(x);
              return v;
            }()
                : HalfValues(out[0]);
        ASSERT_EQ(got.size(), static_cast<size_t>(batch * m * n));
        for (int64_t q = 0; q < batch; ++q) {
          for (int64_t i = 0; i < m; ++i) {
            for (int64_t j = 0; j < n; ++j) {
              double sum = 0, magnitude = 0;
              for (int64_t p = 0; p < k; ++p) {
                const int64_t l[3] = {q, i, p}, r[3] = {q, j, p};
                const double term =
                    at(a, f.lhs_order, l, lhs_sizes) * at(b, f.rhs_order, r, rhs_sizes);
                sum += term;
                magnitude += std::fabs(term);
              }
              // f32: the sum's rounding; bf16: also half a bf16 ulp of the result.
              const double bound = 2 * k * std::ldexp(1.0, -24) * magnitude +
                                   (f32 ? 0.0 : std::ldexp(std::fabs(sum), -8));
              const double value = got[(q * m + i) * n + j];
              ASSERT_LE(std::fabs(value - sum), bound) << "at " << q << "," << i << "," << j;
            }
          }
        }
      }
    }
  }
  CapIsa(std::nullopt);
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
      compiler::Compile(*hlo::ParseModule(text));
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
