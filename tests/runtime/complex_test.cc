// c64 and c128 in HLO programs: constants, arithmetic, parts, compares,
// conversions, dots, reductions, loops and data movement, each against
// values worked out by hand or plain loops over long double complex numbers;
// and the ops XLA leaves undefined on complex numbers rejected by name.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <complex>
#include <cstring>
#include <numbers>
#include <string>
#include <vector>

#include "strata/compiler/compile.h"
#include "strata/core/error.h"
#include "strata/hlo/text.h"
#include "test_util.h"

namespace strata::runtime {
namespace {

using ::testing::HasSubstr;
using Wide = std::complex<long double>;

template <typename P>
constexpr DType kComplexType = std::is_same_v<P, float> ? DType::kC64 : DType::kC128;

template <typename P>
Buffer ComplexArg(const std::vector<Wide>& values, std::vector<int64_t> dims) {
  std::vector<uint8_t> bytes;
  for (const Wide& v : values) {
    const P parts[2] = {static_cast<P>(v.real()), static_cast<P>(v.imag())};
    const auto* p = reinterpret_cast<const uint8_t*>(parts);
    bytes.insert(bytes.end(), p, p + sizeof parts);
  }
  return Buffer::FromHost(Shape(kComplexType<P>, std::move(dims)), bytes, test::Cpu());
}

std::vector<Wide> ComplexValues(const Buffer& b) {
  const DType t = b.shape().dtype();
  EXPECT_TRUE(IsComplex(t)) << b.shape().ToString();
  std::vector<Wide> out;
  for (int64_t i = 0; i < b.shape().num_elements(); ++i) {
    if (t == DType::kC64) {
      float parts[2];
      std::memcpy(parts, b.data() + 8 * i, 8);
      out.emplace_back(parts[0], parts[1]);
    } else {
      double parts[2];
      std::memcpy(parts, b.data() + 16 * i, 16);
      out.emplace_back(parts[0], parts[1]);
    }
  }
  return out;
}

// Runs `text` with passes off and on; both must agree with `check`.
template <typename Check>
void RunBoth(const std::string& text, const std::vector<Buffer>& args, const Check& check) {
  for (bool passes : {false, true}) {
    SCOPED_TRACE(passes ? "passes on" : "passes off");
    compiler::CompileOptions options;
    options.run_passes = passes;
    std::unique_ptr<hlo::Module> m = hlo::ParseModule(text);
    std::vector<Buffer> out = compiler::Compile(*m, options)->Run(args);
    check(out);
  }
}

std::string Sub(std::string text, const std::string& from, const std::string& to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
  return text;
}

// Each part within `tolerance` of the reference's, relative to its magnitude
// (a NaN part must meet a NaN part).
void ExpectNear(const std::vector<Wide>& expected, const std::vector<Wide>& got,
                long double tolerance) {
  ASSERT_EQ(expected.size(), got.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    const long double scale = std::max<long double>(1e-30L, std::abs(expected[i]));
    for (int part = 0; part < 2; ++part) {
      const long double e = part ? expected[i].imag() : expected[i].real();
      const long double g = part ? got[i].imag() : got[i].real();
      if (std::isnan(e)) {
        EXPECT_TRUE(std::isnan(g)) << "element " << i;
      } else {
        EXPECT_LE(std::fabs(e - g), tolerance * scale)
            << "element " << i << (part ? " imaginary" : " real") << ": expected " << e << ", got "
            << g;
      }
    }
  }
}

template <typename P>
class ComplexTest : public ::testing::Test {
 protected:
  static std::string Type() { return std::string(DTypeName(kComplexType<P>)); }
  static std::string PartType() { return std::is_same_v<P, float> ? "f32" : "f64"; }
  // A few units in the last place of P.
  static long double Tolerance() { return 8 * std::numeric_limits<P>::epsilon(); }
};
using PartTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(ComplexTest, PartTypes);

// One binary op over pairs worked out by hand.
TYPED_TEST(ComplexTest, BinaryArithmeticByHand) {
  using P = TypeParam;
  struct Case {
    const char* op;
    std::vector<Wide> a, b, expected;
  };
  const Wide i(0, 1);
  const std::vector<Case> cases = {
      {"add", {{1, 2}, {-1.5, 0}}, {{3, -4}, {0, 2}}, {{4, -2}, {-1.5, 2}}},
      {"subtract", {{1, 2}}, {{3, -4}}, {{-2, 6}}},
      {"multiply", {{1, 2}, i}, {{3, 4}, i}, {{-5, 10}, {-1, 0}}},  // i * i = -1
      {"divide", {{-5, 10}, {1, 0}}, {{3, 4}, {0, 2}}, {{1, 2}, {0, -0.5}}},
      // z^0 = 1 for every z (0 too); i^2 = -1; (-1)^(1/2) = i; 4^(1/2) = 2
      {"power",
       {{0, 0}, {7, 3}, i, {-1, 0}, {4, 0}},
       {{0, 0}, {0, 0}, {2, 0}, {0.5, 0}, {0.5, 0}},
       {{1, 0}, {1, 0}, {-1, 0}, i, {2, 0}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.op);
    const int64_t n = static_cast<int64_t>(c.a.size());
    const std::string text = Sub(Sub(Sub(R"(HloModule m
ENTRY e {
  a = $c[$n] parameter(0)
  b = $c[$n] parameter(1)
  ROOT r = $c[$n] $op(a, b)
}
)",
                                         "$c", this->Type()),
                                     "$n", std::to_string(n)),
                                 "$op", c.op);
    RunBoth(text, {ComplexArg<P>(c.a, {n}), ComplexArg<P>(c.b, {n})},
            [&](const std::vector<Buffer>& out) {
              ExpectNear(c.expected, ComplexValues(out[0]), this->Tolerance());
            });
  }
}

TYPED_TEST(ComplexTest, UnaryFunctionsByHand) {
  using P = TypeParam;
  const long double pi = std::numbers::pi_v<long double>;
  const Wide i(0, 1);
  struct Case {
    const char* op;
    std::vector<Wide> x, expected;
  };
  const std::vector<Case> cases = {
      {"negate", {{1, -2}}, {{-1, 2}}},
      {"exponential", {{0, pi}, {1, 0}, {0, pi / 2}}, {{-1, 0}, {std::exp(1.0L), 0}, i}},
      {"log", {{-1, 0}, i, {std::exp(2.0L), 0}}, {{0, pi}, {0, pi / 2}, {2, 0}}},
      {"sqrt", {{-4, 0}, {0, 2}, {9, 0}}, {{0, 2}, {1, 1}, {3, 0}}},
      {"rsqrt", {{4, 0}, {-4, 0}}, {{0.5, 0}, {0, -0.5}}},
      // sign(z) = z / |z|, and 0 at 0
      {"sign", {{3, 4}, {0, 0}, {0, -2}}, {{0.6, 0.8}, {0, 0}, {0, -1}}},
      // sin(i) = i sinh 1, cos(i) = cosh 1, tanh(i pi / 4) = i tan(pi / 4) = i
      {"sine", {i}, {{0, std::sinh(1.0L)}}},
      {"cosine", {i}, {{std::cosh(1.0L), 0}}},
      {"tanh", {{0, pi / 4}}, {i}},
      {"logistic", {{0, 0}}, {{0.5, 0}}},
      // Near 0 the m1 / p1 forms keep every digit: e^z - 1 and log(1 + z)
      // computed directly would round the tiny real part away entirely.
      {"exponential-minus-one", {{1e-20L, 0}, {0, pi}}, {{1e-20L, 0}, {-2, 0}}},
      {"log-plus-one", {{1e-20L, 0}, {-2, 0}}, {{1e-20L, 0}, {0, pi}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.op);
    const int64_t n = static_cast<int64_t>(c.x.size());
    const std::string text = Sub(Sub(Sub(R"(HloModule m
ENTRY e {
  x = $c[$n] parameter(0)
  ROOT r = $c[$n] $op(x)
}
)",
                                         "$c", this->Type()),
                                     "$n", std::to_string(n)),
                                 "$op", c.op);
    RunBoth(text, {ComplexArg<P>(c.x, {n})}, [&](const std::vector<Buffer>& out) {
      // Parts that are 0 by hand come out as rounding residue of pi.
      ExpectNear(c.expected, ComplexValues(out[0]), 4 * this->Tolerance());
    });
  }
}

// abs, real and imag give the part type; complex puts two parts together;
// EQ / NE compare both parts; select picks whole elements.
TYPED_TEST(ComplexTest, PartsComparesAndSelect) {
  using P = TypeParam;
  const std::string text = Sub(Sub(R"(HloModule m
ENTRY e {
  z = $c[3] parameter(0)
  w = $c[3] parameter(1)
  magnitude = $p[3] abs(z)
  re = $p[3] real(z)
  im = $p[3] imag(z)
  swapped = $c[3] complex(im, re)
  eq = pred[3] compare(z, w), direction=EQ
  ne = pred[3] compare(z, w), direction=NE
  picked = $c[3] select(eq, swapped, w)
  ROOT r = ($p[3], $p[3], $p[3], $c[3], pred[3], pred[3], $c[3]) tuple(magnitude, re, im, swapped, eq, ne, picked)
}
)",
                                   "$c", this->Type()),
                               "$p", this->PartType());
  const std::vector<Wide> z = {{3, 4}, {-1, 2}, {0, -5}};
  const std::vector<Wide> w = {{3, 4}, {-1, -2}, {0, -5}};  // the middle differs in imag only
  RunBoth(text, {ComplexArg<P>(z, {3}), ComplexArg<P>(w, {3})},
          [&](const std::vector<Buffer>& out) {
            ASSERT_EQ(out.size(), 7u);
            EXPECT_EQ(out[0].ToVector<P>(), (std::vector<P>{5, std::sqrt(P(5)), 5}));
            EXPECT_EQ(out[1].ToVector<P>(), (std::vector<P>{3, -1, 0}));
            EXPECT_EQ(out[2].ToVector<P>(), (std::vector<P>{4, 2, -5}));
            ExpectNear({{4, 3}, {2, -1}, {-5, 0}}, ComplexValues(out[3]), 0);
            EXPECT_EQ(test::ToHost<bool>(out[4]), (std::vector<bool>{true, false, true}));
            EXPECT_EQ(test::ToHost<bool>(out[5]), (std::vector<bool>{false, true, false}));
            ExpectNear({{4, 3}, {-1, -2}, {-5, 0}}, ComplexValues(out[6]), 0);
          });
}

// From real and integer types the imaginary part is 0; between the complex
// types each part converts (c128 -> c64 rounds each to f32).
TEST(Complex, ConvertsIntoAndBetweenComplexTypes) {
  const std::string text = R"(HloModule m
ENTRY e {
  f = f32[2] parameter(0)
  s = s32[2] parameter(1)
  p = pred[2] parameter(2)
  z = c128[2] parameter(3)
  from_f = c64[2] convert(f)
  from_s = c128[2] convert(s)
  from_p = c64[2] convert(p)
  narrow = c64[2] convert(z)
  wide = c128[2] convert(narrow)
  ROOT r = (c64[2], c128[2], c64[2], c64[2], c128[2]) tuple(from_f, from_s, from_p, narrow, wide)
}
)";
  const long double third = 1.0L / 3;
  const float third_f = 1.0f / 3;
  RunBoth(text,
          {test::Arg<float>({1.5f, -2}, {2}), test::Arg<int32_t>({7, -8}, {2}),
           test::Arg(std::vector<bool>{true, false}, {2}),
           ComplexArg<double>({{third, -third}, {1e300L, 0}}, {2})},
          [&](const std::vector<Buffer>& out) {
            ExpectNear({{1.5, 0}, {-2, 0}}, ComplexValues(out[0]), 0);
            ExpectNear({{7, 0}, {-8, 0}}, ComplexValues(out[1]), 0);
            ExpectNear({{1, 0}, {0, 0}}, ComplexValues(out[2]), 0);
            const std::vector<Wide> narrowed = ComplexValues(out[3]);
            EXPECT_EQ(narrowed[0], Wide(third_f, -third_f));
            EXPECT_TRUE(std::isinf(narrowed[1].real()));  // past f32's range
            EXPECT_EQ(ComplexValues(out[4])[0], Wide(third_f, -third_f));
          });
}

// A dot of [2,3] by [3,2] and a reduction, against plain loops.
TYPED_TEST(ComplexTest, DotAndReduceMatchPlainLoops) {
  using P = TypeParam;
  const std::string text = Sub(R"(HloModule m
add {
  a = $c[] parameter(0)
  b = $c[] parameter(1)
  ROOT s = $c[] add(a, b)
}
multiply {
  a = $c[] parameter(0)
  b = $c[] parameter(1)
  ROOT s = $c[] multiply(a, b)
}
ENTRY e {
  x = $c[2,3] parameter(0)
  y = $c[3,2] parameter(1)
  d = $c[2,2] dot(x, y), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  zero = $c[] constant((0, 0))
  one = $c[] constant((1, 0))
  rows = $c[2] reduce(x, zero), dimensions={1}, to_apply=add
  products = $c[3] reduce(x, one), dimensions={0}, to_apply=multiply
  ROOT r = ($c[2,2], $c[2], $c[3]) tuple(d, rows, products)
}
)",
                               "$c", this->Type());
  const std::vector<Wide> x = {{1, 2}, {0, -1}, {3, 0.5}, {-2, 1}, {0.25, 0}, {1, 1}};
  const std::vector<Wide> y = {{2, 0}, {1, -1}, {0, 3}, {-1, 0}, {0.5, 0.5}, {2, 2}};
  std::vector<Wide> dot(4), rows(2), products(3, Wide(1));
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 2; ++j) {
      for (int p = 0; p < 3; ++p) dot[i * 2 + j] += x[i * 3 + p] * y[p * 2 + j];
    }
    for (int p = 0; p < 3; ++p) rows[i] += x[i * 3 + p];
  }
  for (int p = 0; p < 3; ++p) products[p] = x[p] * x[3 + p];
  RunBoth(text, {ComplexArg<P>(x, {2, 3}), ComplexArg<P>(y, {3, 2})},
          [&](const std::vector<Buffer>& out) {
            ExpectNear(dot, ComplexValues(out[0]), this->Tolerance());
            ExpectNear(rows, ComplexValues(out[1]), this->Tolerance());
            ExpectNear(products, ComplexValues(out[2]), this->Tolerance());
          });
}

// Data movement keeps every element whole (c128 elements are 16 bytes).
TYPED_TEST(ComplexTest, DataMovementKeepsElementsWhole) {
  using P = TypeParam;
  const std::string text = Sub(R"(HloModule m
ENTRY e {
  x = $c[2,3] parameter(0)
  t = $c[3,2] transpose(x), dimensions={1,0}
  s = $c[2,2] slice(x), slice={[0:2], [1:3]}
  v = $c[2,3] reverse(x), dimensions={1}
  c = $c[4,3] concatenate(x, v), dimensions={0}
  fill = $c[] constant((-1, 9))
  p = $c[2,5] pad(x, fill), padding=0_0x1_1
  b = $c[2,2] broadcast(fill), dimensions={}
  i = s32[] constant(1)
  d = $c[1,2] dynamic-slice(x, i, i), dynamic_slice_sizes={1,2}
  ROOT r = ($c[3,2], $c[2,2], $c[4,3], $c[2,5], $c[2,2], $c[1,2]) tuple(t, s, c, p, b, d)
}
)",
                               "$c", this->Type());
  std::vector<Wide> x;
  for (int k = 0; k < 6; ++k) x.emplace_back(k + 1, -(k + 1) * 0.5L);
  const Wide fill(-1, 9);
  auto at = [&](int r, int c) { return x[r * 3 + c]; };
  std::vector<Wide> t, s, c, p, b(4, fill), d = {at(1, 1), at(1, 2)};
  for (int j = 0; j < 3; ++j)
    for (int r = 0; r < 2; ++r) t.push_back(at(r, j));
  for (int r = 0; r < 2; ++r)
    for (int j = 1; j < 3; ++j) s.push_back(at(r, j));
  c = x;
  for (int r = 0; r < 2; ++r)
    for (int j = 2; j >= 0; --j) c.push_back(at(r, j));
  for (int r = 0; r < 2; ++r) {
    p.push_back(fill);
    for (int j = 0; j < 3; ++j) p.push_back(at(r, j));
    p.push_back(fill);
  }
  RunBoth(text, {ComplexArg<P>(x, {2, 3})}, [&](const std::vector<Buffer>& out) {
    ASSERT_EQ(out.size(), 6u);
    ExpectNear(t, ComplexValues(out[0]), 0);
    ExpectNear(s, ComplexValues(out[1]), 0);
    ExpectNear(c, ComplexValues(out[2]), 0);
    ExpectNear(p, ComplexValues(out[3]), 0);
    ExpectNear(b, ComplexValues(out[4]), 0);
    ExpectNear(d, ComplexValues(out[5]), 0);
  });
}

// A while loop carrying a c64: multiplying by i four times is the identity
// and by i once turns (1, 2) into (-2, 1).
TEST(Complex, WhileLoopCarriesComplexState) {
  const std::string text = R"(HloModule m
cond {
  s = (s32[], c64[2]) parameter(0)
  k = s32[] get-tuple-element(s), index=0
  n = s32[] constant(5)
  ROOT lt = pred[] compare(k, n), direction=LT
}
body {
  s = (s32[], c64[2]) parameter(0)
  k = s32[] get-tuple-element(s), index=0
  z = c64[2] get-tuple-element(s), index=1
  one = s32[] constant(1)
  next = s32[] add(k, one)
  i = c64[] constant((0, 1))
  ib = c64[2] broadcast(i), dimensions={}
  turned = c64[2] multiply(z, ib)
  ROOT t = (s32[], c64[2]) tuple(next, turned)
}
ENTRY e {
  z = c64[2] parameter(0)
  zero = s32[] constant(0)
  init = (s32[], c64[2]) tuple(zero, z)
  loop = (s32[], c64[2]) while(init), condition=cond, body=body
  ROOT r = c64[2] get-tuple-element(loop), index=1
}
)";
  RunBoth(text, {ComplexArg<float>({{1, 2}, {0.5, -3}}, {2})}, [&](const std::vector<Buffer>& out) {
    // i^5 = i: (a + bi) i = -b + ai
    ExpectNear({{-2, 1}, {3, 0.5}}, ComplexValues(out[0]), 0);
  });
}

// Sorted by a comparator of real parts (ties: stable, in input order),
// carrying an s32 payload; c128 elements move whole.
TEST(Complex, SortsByAComparatorOfItsParts) {
  const std::string text = R"(HloModule m
by_real {
  a = c128[] parameter(0)
  b = c128[] parameter(1)
  i = s32[] parameter(2)
  j = s32[] parameter(3)
  ra = f64[] real(a)
  rb = f64[] real(b)
  ROOT lt = pred[] compare(ra, rb), direction=LT
}
ENTRY e {
  z = c128[5] parameter(0)
  p = s32[5] parameter(1)
  ROOT s = (c128[5], s32[5]) sort(z, p), dimensions={0}, is_stable=true, to_apply=by_real
}
)";
  const std::vector<Wide> z = {{3, 1}, {-1, 7}, {3, -2}, {0.5, 0}, {-1, -7}};
  RunBoth(text, {ComplexArg<double>(z, {5}), test::Arg<int32_t>({0, 1, 2, 3, 4}, {5})},
          [&](const std::vector<Buffer>& out) {
            ExpectNear({z[1], z[4], z[3], z[0], z[2]}, ComplexValues(out[0]), 0);
            EXPECT_EQ(out[1].ToVector<int32_t>(), (std::vector<int32_t>{1, 4, 3, 0, 2}));
          });
}

// Constants in XLA's text: "(re, im)" per element; printed the same way.
TEST(Complex, ConstantsParseAndPrintAsXlaWritesThem) {
  const std::string text = R"(HloModule m
ENTRY e {
  ROOT c = c128[2,2] constant({ {(1, 2), (-0.5, 3)}, {(0, -1e-300), (inf, nan)} })
}
)";
  std::unique_ptr<hlo::Module> m = hlo::ParseModule(text);
  const std::string printed = hlo::ToText(*m);
  EXPECT_THAT(printed, HasSubstr("(1, 2), (-0.5, 3)"));
  EXPECT_THAT(printed, HasSubstr("(0, -1e-300), (inf, nan)"));
  EXPECT_EQ(hlo::ToText(*hlo::ParseModule(printed)), printed);  // reads back to itself
  std::vector<Buffer> out = compiler::Compile(*m)->Run({});
  const std::vector<Wide> v = ComplexValues(out[0]);
  EXPECT_EQ(v[0], Wide(1, 2));
  EXPECT_EQ(v[1], Wide(-0.5, 3));
  EXPECT_EQ(v[2].imag(), static_cast<long double>(-1e-300));  // f64's, not through f32
  EXPECT_TRUE(std::isinf(v[3].real()) && std::isnan(v[3].imag()));
}

// bitcast-convert c64 -> f32 adds a minor dimension of the two parts, real
// first; and back.
TEST(Complex, BitcastConvertSplitsIntoParts) {
  const std::string text = R"(HloModule m
ENTRY e {
  z = c64[2] parameter(0)
  parts = f32[2,2] bitcast-convert(z)
  back = c64[2] bitcast-convert(parts)
  ROOT r = (f32[2,2], c64[2]) tuple(parts, back)
}
)";
  RunBoth(text, {ComplexArg<float>({{1, 2}, {-3, 4.5}}, {2})}, [&](const std::vector<Buffer>& out) {
    EXPECT_EQ(out[0].ToVector<float>(), (std::vector<float>{1, 2, -3, 4.5}));
    ExpectNear({{1, 2}, {-3, 4.5}}, ComplexValues(out[1]), 0);
  });
}

// XLA defines no order on complex numbers and no silent complex -> real
// conversion: each such program is an Error naming the op and the type.
TEST(Complex, UndefinedOpsAreErrorsNamingTheType) {
  auto entry = [](const std::string& lines) {
    return "HloModule m\nENTRY e {\n  z = c64[2] parameter(0)\n" + lines + "}\n";
  };
  EXPECT_THAT(test::CompileError(entry("  ROOT r = c64[2] maximum(z, z)\n")),
              HasSubstr("[maximum] operand 0 (c64[2]) is complex, which maximum does not take"));
  EXPECT_THAT(test::CompileError(entry("  ROOT r = pred[2] compare(z, z), direction=LT\n")),
              HasSubstr("unordered"));
  EXPECT_THAT(test::CompileError(entry("  ROOT r = f32[2] convert(z)\n")),
              HasSubstr("real() or imag()"));
  EXPECT_THAT(test::CompileError(entry("  ROOT r = c64[2] floor(z)\n")),
              HasSubstr("which floor does not take"));
  EXPECT_THAT(test::CompileError(entry("  ROOT r = c64[2] exponential(z, z)\n")),
              ::testing::Not(HasSubstr("internal error")));
  EXPECT_THAT(
      test::CompileError("HloModule m\nENTRY e {\n  ROOT r = c64[4] iota(), iota_dimension=0\n}\n"),
      HasSubstr("cannot make c64[4]"));
  EXPECT_THAT(test::CompileError("HloModule m\nENTRY e {\n  ROOT r = c64[] constant(1)\n}\n"),
              HasSubstr("(real, imaginary)"));
  EXPECT_THAT(
      test::CompileError("HloModule m\nENTRY e {\n  ROOT r = c64[] constant((1, 1e39))\n}\n"),
      HasSubstr("out of range"));
  EXPECT_THAT(
      test::CompileError(entry("  w = s32[2] parameter(1)\n  ROOT r = c64[2] complex(w, w)\n")),
      HasSubstr("two f32 or two f64"));
}

}  // namespace
}  // namespace strata::runtime
