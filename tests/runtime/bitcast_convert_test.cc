// bitcast-convert between element types of different widths, as XLA defines
// it: to a narrower type each element becomes a new minor dimension of its
// bytes' worth of elements (in memory order: little endian on this CPU), to
// a wider one the minor dimension folds back. Values worked out by hand.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "strata/compiler/compile.h"
#include "strata/core/error.h"
#include "strata/hlo/text.h"
#include "test_util.h"

namespace strata::runtime {
namespace {

using test::Arg;
using ::testing::HasSubstr;

std::vector<Buffer> RunHlo(const std::string& entry, const std::vector<Buffer>& args) {
  return compiler::Compile(*hlo::ParseModule("HloModule m\nENTRY main {\n" + entry + "}\n"))
      ->Run(args);
}

TEST(BitcastConvert, ToANarrowerTypeAddsAMinorDimensionOfItsBytes) {
  // 1.0f = 0x3F800000 and -2.0f = 0xC0000000, least significant byte first.
  auto out = RunHlo("  x = f32[2] parameter(0)\n  ROOT r = u8[2,4] bitcast-convert(x)\n",
                    {Arg(std::vector<float>{1.0f, -2.0f}, {2})});
  ASSERT_EQ(out[0].shape(), Shape(DType::kU8, {2, 4}));
  EXPECT_EQ(test::ToHost<uint8_t>(out[0]),
            (std::vector<uint8_t>{0x00, 0x00, 0x80, 0x3F, 0x00, 0x00, 0x00, 0xC0}));
  // A constant operand (folded at compile) gives the same bytes.
  out = RunHlo("  c = f32[2] constant({1, -2})\n  ROOT r = u8[2,4] bitcast-convert(c)\n", {});
  EXPECT_EQ(test::ToHost<uint8_t>(out[0]),
            (std::vector<uint8_t>{0x00, 0x00, 0x80, 0x3F, 0x00, 0x00, 0x00, 0xC0}));
  // 0x0000000100000002: the low word first.
  out = RunHlo("  x = u64[1] parameter(0)\n  ROOT r = u32[1,2] bitcast-convert(x)\n",
               {Arg(std::vector<uint64_t>{0x0000000100000002ull}, {1})});
  EXPECT_EQ(test::ToHost<uint32_t>(out[0]), (std::vector<uint32_t>{2, 1}));
}

TEST(BitcastConvert, ToAWiderTypeFoldsTheMinorDimension) {
  auto out =
      RunHlo("  x = u8[2,4] parameter(0)\n  ROOT r = f32[2] bitcast-convert(x)\n",
             {Arg(std::vector<uint8_t>{0x00, 0x00, 0x80, 0x3F, 0x00, 0x00, 0x00, 0xC0}, {2, 4})});
  EXPECT_EQ(test::ToHost<float>(out[0]), (std::vector<float>{1.0f, -2.0f}));
  out = RunHlo("  x = s32[3,2] parameter(0)\n  ROOT r = s64[3] bitcast-convert(x)\n",
               {Arg(std::vector<int32_t>{5, 0, -1, -1, 0, 1}, {3, 2})});
  EXPECT_EQ(test::ToHost<int64_t>(out[0]), (std::vector<int64_t>{5, -1, int64_t{1} << 32}));
}

TEST(BitcastConvert, AWrongMinorDimensionOrPredIsAnErrorNamingTheInstruction) {
  auto error = [](const std::string& entry) {
    try {
      hlo::ParseModule("HloModule m\nENTRY main {\n" + entry + "}\n");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_THAT(error("  x = u8[2,3] parameter(0)\n  ROOT r = f32[2] bitcast-convert(x)\n"),
              HasSubstr("needs a minor dimension of 4 elements, got u8[2,3]"));
  EXPECT_THAT(error("  x = u8[4] parameter(0)\n  ROOT r = pred[4] bitcast-convert(x)\n"),
              HasSubstr("differ in bit width"));
  // The declared shape must be the one the widths give.
  EXPECT_THAT(error("  x = f32[2] parameter(0)\n  ROOT r = u8[2,2] bitcast-convert(x)\n"),
              HasSubstr("u8[2,4]"));
}

// XLA's bitcast reinterprets memory under the layouts: a [2, 3] laid out
// column-major ({0,1}) holds 0 3 1 4 2 5 in memory, which is what a
// row-major f32[6] bitcast of it reads; and a row-major [2, 3] bitcast to a
// [3, 2] laid out {0,1} is its transpose. f32 bitcast to s32 of the same
// dims is a bitcast-convert (1.0f is 0x3F800000). Values worked out by hand.
TEST(Bitcast, AcrossLayoutsReadsTheMemoryOrder) {
  const std::vector<float> x = {0, 1, 2, 3, 4, 5};
  auto out = RunHlo(
      "  x = f32[2,3]{1,0} parameter(0)\n  c = f32[2,3]{0,1} copy(x)\n"
      "  ROOT r = f32[6]{0} bitcast(c)\n",
      {Arg(x, {2, 3})});
  EXPECT_EQ(test::ToHost<float>(out[0]), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  out = RunHlo("  x = f32[2,3]{1,0} parameter(0)\n  ROOT r = f32[3,2]{0,1} bitcast(x)\n",
               {Arg(x, {2, 3})});
  ASSERT_EQ(out[0].shape(), Shape(DType::kF32, {3, 2}));
  EXPECT_EQ(test::ToHost<float>(out[0]), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  out = RunHlo("  x = f32[2]{0} parameter(0)\n  ROOT r = s32[2]{0} bitcast(x)\n",
               {Arg(std::vector<float>{1.0f, -2.0f}, {2})});
  EXPECT_EQ(test::ToHost<int32_t>(out[0]),
            (std::vector<int32_t>{0x3F800000, static_cast<int32_t>(0xC0000000u)}));
}

}  // namespace
}  // namespace strata::runtime
