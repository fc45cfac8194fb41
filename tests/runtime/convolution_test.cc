// convolution as XLA's text writes it, run by the CPU runtime, against a
// reference loop written here from XLA's operation semantics: every output
// element summed over its window and its group's input features, index by
// index (no im2col, no GEMM).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

#include "strata/compiler/compile.h"
#include "strata/core/error.h"
#include "strata/hlo/convolution.h"
#include "strata/hlo/text.h"
#include "strata/runtime/device.h"

namespace strata {
namespace {

using hlo::Instruction;

std::vector<int64_t> Strides(const std::vector<int64_t>& dims) {
  std::vector<int64_t> s(dims.size(), 1);
  for (int64_t i = static_cast<int64_t>(dims.size()) - 2; i >= 0; --i)
    s[i] = s[i + 1] * dims[i + 1];
  return s;
}

// out[index] for every output index, straight from the semantics.
std::vector<double> Reference(const Instruction& conv, const std::vector<double>& x,
                              const std::vector<double>& k) {
  const hlo::ConvolutionDims& d = conv.convolution;
  const auto& xd = conv.operand(0)->shape().dims();
  const auto& kd = conv.operand(1)->shape().dims();
  const auto& od = conv.shape().dims();
  const auto xs = Strides(xd), ks = Strides(kd), os = Strides(od);
  const int64_t spatial = static_cast<int64_t>(d.input_spatial.size());
  const int64_t fgc = conv.feature_group_count, bgc = conv.batch_group_count;
  const int64_t out_features = od[d.output_feature];
  const int64_t per_feature_group = out_features / fgc, per_batch_group = out_features / bgc;
  const int64_t group_inputs = kd[d.kernel_input_feature];
  const int64_t out_batch = od[d.output_batch];
  std::vector<double> out(conv.shape().num_elements());
  std::vector<int64_t> oi(od.size(), 0);
  for (int64_t flat = 0; flat < static_cast<int64_t>(out.size()); ++flat) {
    int64_t rest = flat;
    for (int64_t i = static_cast<int64_t>(od.size()) - 1; i >= 0; --i) {
      oi[i] = rest % od[i];
      rest /= od[i];
    }
    const int64_t o = oi[d.output_feature];
    const int64_t feature_base = (o / per_feature_group) * group_inputs;
    const int64_t batch = oi[d.output_batch] + (bgc > 1 ? (o / per_batch_group) * out_batch : 0);
    double acc = 0;
    int64_t taps = 1;
    for (int64_t s = 0; s < spatial; ++s) taps *= conv.window[s].size;
    for (int64_t t = 0; t < taps; ++t) {
      std::vector<int64_t> kw(spatial);
      int64_t r = t;
      for (int64_t s = spatial - 1; s >= 0; --s) {
        kw[s] = r % conv.window[s].size;
        r /= conv.window[s].size;
      }
      int64_t x_at = batch * xs[d.input_batch], k_at = o * ks[d.kernel_output_feature];
      bool inside = true;
      for (int64_t s = 0; s < spatial && inside; ++s) {
        const hlo::WindowDim& w = conv.window[s];
        const int64_t pos =
            oi[d.output_spatial[s]] * w.stride - w.pad_low + kw[s] * w.window_dilation;
        inside = pos >= 0 && pos % w.base_dilation == 0 &&
                 pos / w.base_dilation < xd[d.input_spatial[s]];
        x_at += pos / w.base_dilation * xs[d.input_spatial[s]];
        k_at += (w.window_reversal ? w.size - 1 - kw[s] : kw[s]) * ks[d.kernel_spatial[s]];
      }
      if (!inside) continue;
      for (int64_t i = 0; i < group_inputs; ++i) {
        acc += x[x_at + (feature_base * (bgc > 1 ? 0 : 1) + i) * xs[d.input_feature]] *
               k[k_at + i * ks[d.kernel_input_feature]];
      }
    }
    out[flat] = acc;
  }
  return out;
}

std::vector<double> Random(int64_t n, int seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(-4, 4);  // small integers: exact in f32 sums
  std::vector<double> v(n);
  for (auto& e : v) e = dist(rng);
  return v;
}

template <typename T>
void ExpectRunGives(const runtime::Executable& exe, const std::vector<double>& x, const Shape& xs,
                    const std::vector<double>& k, const Shape& ks,
                    const std::vector<double>& expected) {
  const auto* device = runtime::Client::Default().device(0);
  auto out = exe.Run(
      {runtime::Buffer::FromVector<T>(std::vector<T>(x.begin(), x.end()), xs.dims(), device),
       runtime::Buffer::FromVector<T>(std::vector<T>(k.begin(), k.end()), ks.dims(), device)});
  const std::vector<T> got = out[0].template ToVector<T>();
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], expected[i]) << "element " << i;
}

// Parses `text` (a module with parameters x, k and a convolution root),
// runs it on random values in its type (f32 or f64) and compares with the
// reference.
void CheckAgainstReference(const std::string& text) {
  SCOPED_TRACE(text);
  auto m = hlo::ParseModule(text);
  const Instruction& conv = *m->entry()->root();
  ASSERT_EQ(conv.opcode(), hlo::Opcode::kConvolution);
  const Shape& xs = conv.operand(0)->shape();
  const Shape& ks = conv.operand(1)->shape();
  const std::vector<double> x = Random(xs.num_elements(), 1), k = Random(ks.num_elements(), 2);
  const std::vector<double> expected = Reference(conv, x, k);
  auto exe = compiler::Compile(*m);
  if (xs.dtype() == DType::kF64) {
    ExpectRunGives<double>(*exe, x, xs, k, ks, expected);
  } else {
    ExpectRunGives<float>(*exe, x, xs, k, ks, expected);
  }
  // The printer writes the attributes back in a form the parser reads to the same module.
  EXPECT_EQ(hlo::ToText(*hlo::ParseModule(hlo::ToText(*m))), hlo::ToText(*m));
}

std::string Module(const std::string& x, const std::string& k, const std::string& out,
                   const std::string& attributes) {
  return "HloModule conv\n\nENTRY %main (x: " + x + ", k: " + k + ") -> " + out +
         " {\n  %x = " + x + " parameter(0)\n  %k = " + k +
         " parameter(1)\n  ROOT %convolution.3 = " + out + " convolution(" + x + " %x, " + k +
         " %k), " + attributes + ", metadata={op_name=\"jit(f)/conv_general_dilated\"}\n}\n";
}

TEST(Convolution, ChannelsLastWithStrideAndPadding) {
  CheckAgainstReference(
      Module("f32[2,7,6,3]", "f32[3,3,3,4]", "f32[2,4,3,4]",
             "window={size=3x3 stride=2x2 pad=1_1x1_1}, dim_labels=b01f_01io->b01f"));
}

TEST(Convolution, ChannelsFirstAsPyTorchWritesIt) {
  CheckAgainstReference(Module("f32[2,3,8,8]", "f32[5,3,3,2]", "f32[2,5,6,7]",
                               "window={size=3x2}, dim_labels=bf01_oi01->bf01"));
}

TEST(Convolution, DilationsReversalAndUnevenPadding) {
  // rhs_dilate spreads the window, lhs_dilate puts holes in the input (a
  // transposed convolution), rhs_reversal flips the window in dim 0.
  CheckAgainstReference(Module(
      "f32[1,2,5,6]", "f32[3,2,2,3]", "f32[1,3,10,2]",
      "window={size=2x3 stride=1x2 pad=2_1x0_-1 lhs_dilate=2x1 rhs_dilate=2x1 rhs_reversal=1x0}, "
      "dim_labels=bf01_oi01->bf01"));
}

TEST(Convolution, FeatureGroupsAndDepthwise) {
  CheckAgainstReference(
      Module("f32[2,6,5,5]", "f32[4,3,2,2]", "f32[2,4,4,4]",
             "window={size=2x2}, dim_labels=bf01_oi01->bf01, feature_group_count=2"));
  CheckAgainstReference(
      Module("f32[1,5,5,4]", "f32[3,3,1,8]", "f32[1,3,3,8]",
             "window={size=3x3}, dim_labels=b01f_01io->b01f, feature_group_count=4"));
}

TEST(Convolution, BatchGroupsAsAWeightGradientWritesThem) {
  CheckAgainstReference(
      Module("f32[4,6,6,2]", "f32[3,3,2,4]", "f32[2,4,4,4]",
             "window={size=3x3}, dim_labels=b01f_01io->b01f, batch_group_count=2"));
}

TEST(Convolution, OneAndThreeSpatialDimsAndOddLabelOrders) {
  CheckAgainstReference(Module("f32[3,4,9]", "f32[2,4,3]", "f32[3,2,4]",
                               "window={size=3 stride=2}, dim_labels=bf0_oi0->bf0"));
  CheckAgainstReference(Module("f32[2,4,4,3,2]", "f32[2,2,2,2,3]", "f32[2,3,3,2,3]",
                               "window={size=2x2x2}, dim_labels=b012f_012io->b012f"));
  // Feature first, batch in the middle, spatial dims swapped in the output.
  CheckAgainstReference(Module("f32[3,6,2,5]", "f32[3,2,3,2]", "f32[6,4,2,2]",
                               "window={size=3x2 pad=0_0x1_1}, dim_labels=f0b1_0oi1->10bf"));
}

TEST(Convolution, ImplicitGemmOverPlanarInputs) {
  // NCHW in and out over at least 48 positions: the GEMM packs its panels
  // straight from the input. Stride and padding on both sides, a row of
  // output past a panel's width (positions 60 = 64 - 4 wrap mid-row).
  CheckAgainstReference(Module("f32[2,3,13,17]", "f32[7,3,3,3]", "f32[2,7,7,9]",
                               "window={size=3x3 stride=2x2 pad=1_1x1_2}, "
                               "dim_labels=bf01_oi01->bf01"));
  // One batch element: its positions split into column chunks for the pool.
  CheckAgainstReference(Module("f32[1,4,20,20]", "f32[5,4,3,3]", "f32[1,5,18,18]",
                               "window={size=3x3}, dim_labels=bf01_oi01->bf01"));
  // Window dilation, padding wider than the window (whole rows of zeros),
  // a trimmed (negative) pad, and a reversed window: the kernel is packed.
  CheckAgainstReference(Module("f32[2,2,9,10]", "f32[3,2,2,3]", "f32[2,3,15,5]",
                               "window={size=2x3 pad=4_5x0_-1 rhs_dilate=3x2 rhs_reversal=1x1}, "
                               "dim_labels=bf01_oi01->bf01"));
  // Feature groups (depthwise) and a kernel stored HWIO: packed too.
  CheckAgainstReference(
      Module("f32[2,6,9,9]", "f32[6,1,3,3]", "f32[2,6,7,7]",
             "window={size=3x3}, dim_labels=bf01_oi01->bf01, feature_group_count=6"));
  CheckAgainstReference(Module("f32[2,3,9,9]", "f32[3,3,3,8]", "f32[2,8,9,9]",
                               "window={size=3x3 pad=1_1x1_1}, dim_labels=bf01_01io->bf01"));
  // Feature groups over a large image, three spatial dims, stride with window
  // dilation and reversal.
  CheckAgainstReference(
      Module("f32[2,4,30,30]", "f32[6,2,3,3]", "f32[2,6,28,28]",
             "window={size=3x3}, dim_labels=bf01_oi01->bf01, feature_group_count=2"));
  CheckAgainstReference(Module("f32[1,2,6,40,40]", "f32[3,2,2,3,3]", "f32[1,3,5,38,38]",
                               "window={size=2x3x3}, dim_labels=bf012_oi012->bf012"));
  CheckAgainstReference(
      Module("f32[2,3,30,31]", "f32[4,3,3,3]", "f32[2,4,15,16]",
             "window={size=3x3 stride=2x2 pad=2_2x1_3 rhs_dilate=2x2 rhs_reversal=0x1}, "
             "dim_labels=bf01_oi01->bf01"));
  // 196 positions pad their last panel: the batch's columns run as one GEMM
  // (one per group), copied out.
  CheckAgainstReference(Module("f32[8,4,16,16]", "f32[6,4,3,3]", "f32[8,6,14,14]",
                               "window={size=3x3}, dim_labels=bf01_oi01->bf01"));
  CheckAgainstReference(
      Module("f32[8,4,16,16]", "f32[6,2,3,3]", "f32[8,6,14,14]",
             "window={size=3x3}, dim_labels=bf01_oi01->bf01, feature_group_count=2"));
  // One and three spatial dims.
  CheckAgainstReference(Module("f32[3,4,110]", "f32[6,4,5]", "f32[3,6,53]",
                               "window={size=5 stride=2 pad=0_0}, dim_labels=bf0_oi0->bf0"));
  CheckAgainstReference(Module("f32[2,3,5,6,7]", "f32[4,3,2,3,2]", "f32[2,4,4,4,6]",
                               "window={size=2x3x2}, dim_labels=bf012_oi012->bf012"));
}

TEST(Convolution, ImplicitGemmOverOutputPositions) {
  // NCHW with output features that fill the GEMM's panels (64 and 128: its
  // width under AVX-512, AVX2 and portable alike) over a window of 128 or
  // more (input features x taps): patches read in place, mr positions of an
  // output row at a time, from a zero-padded copy.
  // Rows of 7 (tiles of 4 + 3) and 13 (5 + 4 + 4), three batch elements.
  CheckAgainstReference(Module("f32[3,16,7,7]", "f32[64,16,3,3]", "f32[3,64,7,7]",
                               "window={size=3x3 pad=1_1x1_1}, dim_labels=bf01_oi01->bf01"));
  CheckAgainstReference(Module("f32[2,15,15,15]", "f32[128,15,3,3]", "f32[2,128,13,13]",
                               "window={size=3x3}, dim_labels=bf01_oi01->bf01"));
  // Stride, uneven and trimmed padding, window dilation and reversal.
  CheckAgainstReference(
      Module("f32[2,15,30,31]", "f32[64,15,3,3]", "f32[2,64,15,16]",
             "window={size=3x3 stride=2x2 pad=2_2x1_3 rhs_dilate=2x2 rhs_reversal=0x1}, "
             "dim_labels=bf01_oi01->bf01"));
  CheckAgainstReference(Module("f32[2,22,9,10]", "f32[64,22,2,3]", "f32[2,64,15,5]",
                               "window={size=2x3 pad=4_5x0_-1 rhs_dilate=3x2 rhs_reversal=1x1}, "
                               "dim_labels=bf01_oi01->bf01"));
  // Pointwise, nothing padded: read from the input itself; at unit stride a
  // tile runs across rows, at stride 2 over an odd width it cannot.
  CheckAgainstReference(Module("f32[2,130,7,9]", "f32[64,130,1,1]", "f32[2,64,7,9]",
                               "window={size=1x1}, dim_labels=bf01_oi01->bf01"));
  CheckAgainstReference(Module("f32[2,130,9,11]", "f32[64,130,1,1]", "f32[2,64,5,6]",
                               "window={size=1x1 stride=2x2}, dim_labels=bf01_oi01->bf01"));
  // Features not a multiple of the panel width (the last panel's columns
  // through an edge tile), two feature groups, a kernel stored HWIO.
  CheckAgainstReference(Module("f32[2,15,9,9]", "f32[60,15,3,3]", "f32[2,60,9,9]",
                               "window={size=3x3 pad=1_1x1_1}, dim_labels=bf01_oi01->bf01"));
  CheckAgainstReference(Module("f32[2,15,9,9]", "f32[120,15,3,3]", "f32[2,120,7,7]",
                               "window={size=3x3}, dim_labels=bf01_oi01->bf01"));
  CheckAgainstReference(
      Module("f32[2,30,10,10]", "f32[128,15,3,3]", "f32[2,128,8,8]",
             "window={size=3x3}, dim_labels=bf01_oi01->bf01, feature_group_count=2"));
  CheckAgainstReference(Module("f32[2,15,9,9]", "f32[3,3,15,64]", "f32[2,64,9,9]",
                               "window={size=3x3 pad=1_1x1_1}, dim_labels=bf01_01io->bf01"));
  // Padded inputs of 1 MiB and more are copied a band of rows at a time by
  // the task that reads them: 47 output rows in bands of 5 (the last of 2),
  // and one batch element whose bands shrink to give each thread two.
  CheckAgainstReference(
      Module("f32[2,15,94,94]", "f32[56,15,3,3]", "f32[2,56,47,47]",
             "window={size=3x3 stride=2x2 pad=0_1x1_0}, dim_labels=bf01_oi01->bf01"));
  CheckAgainstReference(Module(
      "f32[1,30,130,130]", "f32[64,30,3,3]", "f32[1,64,65,65]",
      "window={size=3x3 stride=2x2 pad=1_1x1_1 rhs_dilate=1x1}, dim_labels=bf01_oi01->bf01"));
  // Bands per feature group, with window dilation along the rows and a
  // trimmed (negative) pad.
  CheckAgainstReference(Module(
      "f32[1,32,132,130]", "f32[128,16,3,3]", "f32[1,128,65,65]",
      "window={size=3x3 stride=2x2 pad=-1_2x2_0 rhs_dilate=2x1}, dim_labels=bf01_oi01->bf01, "
      "feature_group_count=2"));
  // One spatial dim (a whole batch element is one run), three (padding in
  // depth: its planes are zeros), and f64.
  CheckAgainstReference(Module("f32[3,26,110]", "f32[64,26,5]", "f32[3,64,55]",
                               "window={size=5 stride=2 pad=1_2}, dim_labels=bf0_oi0->bf0"));
  CheckAgainstReference(
      Module("f32[2,11,4,6,7]", "f32[64,11,2,3,2]", "f32[2,64,5,4,6]",
             "window={size=2x3x2 pad=1_1x0_0x0_0}, dim_labels=bf012_oi012->bf012"));
  CheckAgainstReference(Module("f64[2,15,9,9]", "f64[64,15,3,3]", "f64[2,64,9,9]",
                               "window={size=3x3 pad=1_1x1_1}, dim_labels=bf01_oi01->bf01"));
  CheckAgainstReference(Module("f64[2,15,9,9]", "f64[32,15,3,3]", "f64[2,32,5,5]",
                               "window={size=3x3 stride=2x2 pad=1_1x1_1}, "
                               "dim_labels=bf01_oi01->bf01"));
}

TEST(Convolution, FewOutputsOverADilatedInputScatterTheirProducts) {
  // A strided convolution's input gradient with 3 features (the stem's):
  // each input element's products added where they land.
  CheckAgainstReference(Module("f32[2,5,9,9]", "f32[3,5,3,3]", "f32[2,3,17,17]",
                               "window={size=3x3 pad=1_1x1_1 lhs_dilate=2x2}, "
                               "dim_labels=bf01_oi01->bf01"));
  // Uneven padding, a reversed window dim, one batch element (features
  // split over the pool), window dilation and a trimmed pad.
  CheckAgainstReference(Module("f32[2,5,9,9]", "f32[3,5,4,4]", "f32[2,3,19,19]",
                               "window={size=4x4 pad=2_3x2_3 lhs_dilate=2x2 rhs_reversal=1x0}, "
                               "dim_labels=bf01_oi01->bf01"));
  CheckAgainstReference(Module("f32[1,4,6,7]", "f32[2,4,3,2]", "f32[1,2,13,13]",
                               "window={size=3x2 pad=0_1x1_0 lhs_dilate=3x2 rhs_dilate=2x1}, "
                               "dim_labels=bf01_oi01->bf01"));
  CheckAgainstReference(Module("f32[1,4,6,7]", "f32[2,4,3,2]", "f32[1,2,11,13]",
                               "window={size=3x2 pad=-1_0x1_0 lhs_dilate=3x2 rhs_dilate=2x1}, "
                               "dim_labels=bf01_oi01->bf01"));
  // One spatial dim.
  CheckAgainstReference(Module("f32[2,3,10]", "f32[2,3,5]", "f32[2,2,28]",
                               "window={size=5 pad=2_2 lhs_dilate=3}, dim_labels=bf0_oi0->bf0"));
}

TEST(Convolution, ManyOutputFeaturesOverFewPositionsSplitByColumns) {
  // 9 output positions: the kernel cuts the 130 features into column pieces
  // so both pool threads work (each element summed in the same order).
  CheckAgainstReference(Module("f32[1,5,5,4]", "f32[3,3,4,130]", "f32[1,3,3,130]",
                               "window={size=3x3}, dim_labels=b01f_01io->b01f"));
}

TEST(Convolution, EveryGemmOrientationAndBlocking) {
  // NCHW output over few positions with a shallow window and 20 features:
  // the transposed GEMM, written feature by feature.
  CheckAgainstReference(Module("f32[2,3,12,12]", "f32[20,3,3,3]", "f32[2,20,10,10]",
                               "window={size=3x3}, dim_labels=bf01_oi01->bf01"));
  // Pointwise (1 x 1, unit stride): the GEMM reads the input in place, from
  // the channels-last copy of an NCHW input or from a channels-last one.
  CheckAgainstReference(Module("f32[2,5,6,7]", "f32[9,5,1,1]", "f32[2,9,6,7]",
                               "window={size=1x1}, dim_labels=bf01_oi01->bf01"));
  CheckAgainstReference(Module("f32[3,4,5,70]", "f32[1,1,70,24]", "f32[3,4,5,24]",
                               "window={size=1x1}, dim_labels=b01f_01io->b01f"));
  // A strided convolution's input gradient: lhs dilation 2, so each output
  // phase reads its own quarter of the window (phase classes).
  CheckAgainstReference(Module("f32[2,6,7,7]", "f32[5,6,3,3]", "f32[2,5,13,13]",
                               "window={size=3x3 pad=1_1x1_1 lhs_dilate=2x2}, "
                               "dim_labels=bf01_oi01->bf01"));
  // 3 output features (an input gradient's): the transposed GEMM.
  CheckAgainstReference(Module("f32[2,8,9,9]", "f32[3,8,3,3]", "f32[2,3,9,9]",
                               "window={size=3x3 pad=1_1x1_1}, dim_labels=bf01_oi01->bf01"));
  // A weight gradient's deep window (65 x 65 taps) over 36 positions: row
  // blocks shrunk so both pool threads work; channels-last taps copied in
  // runs along the window's rows, padding on every side.
  CheckAgainstReference(Module("f32[1,66,66,4]", "f32[65,65,4,17]", "f32[1,6,6,17]",
                               "window={size=65x65 pad=2_2x2_2}, dim_labels=b01f_01io->b01f"));
}

TEST(Convolution, IntegersSumExactly) {
  auto m = hlo::ParseModule(R"(HloModule m
ENTRY main {
  x = s32[1,1,4] parameter(0)
  k = s32[1,1,2] parameter(1)
  ROOT c = s32[1,1,3] convolution(x, k), window={size=2}, dim_labels=bf0_oi0->bf0
})");
  auto exe = compiler::Compile(*m);
  const auto* device = runtime::Client::Default().device(0);
  auto out = exe->Run({runtime::Buffer::FromVector<int32_t>({1, 2, 3, 4}, {1, 1, 4}, device),
                       runtime::Buffer::FromVector<int32_t>({10, -1}, {1, 1, 2}, device)});
  EXPECT_EQ(out[0].ToVector<int32_t>(), (std::vector<int32_t>{8, 17, 26}));  // 10 x_i - x_{i+1}
}

TEST(Convolution, BadAttributesAreErrorsNamingTheLine) {
  using ::testing::HasSubstr;
  auto error = [](const std::string& attributes, const std::string& out = "f32[1,2,3,3]") {
    try {
      hlo::ParseModule(
          "HloModule m\nENTRY main {\n  x = f32[1,3,5,5] parameter(0)\n"
          "  k = f32[2,3,3,3] parameter(1)\n  ROOT c = " +
          out + " convolution(x, k), " + attributes + "\n}\n");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error("window={size=3x3}, dim_labels=bf01_oi01->bf01"), "no error");
  EXPECT_THAT(error("window={size=3x3}, dim_labels=bf01_oi01->bf0"), HasSubstr("line 5"));
  EXPECT_THAT(error("window={size=3x3}, dim_labels=bf01_oi01->bf0"), HasSubstr("must agree"));
  EXPECT_THAT(error("window={size=3x3}, dim_labels=bf00_oi01->bf01"), HasSubstr("repeats '0'"));
  EXPECT_THAT(error("window={size=3x3}, dim_labels=bf01_ox01->bf01"), HasSubstr("label 'x'"));
  EXPECT_THAT(error("window={size=3x3}, dim_labels=bf01"), HasSubstr("expected dim_labels like"));
  EXPECT_THAT(error("window={size=2x3}, dim_labels=bf01_oi01->bf01"),
              HasSubstr("window size 2 of spatial dim 0 differs from the kernel's 3"));
  EXPECT_THAT(error("window={size=3x3 stride=0x1}, dim_labels=bf01_oi01->bf01"),
              HasSubstr("'stride' must be at least 1"));
  EXPECT_THAT(error("window={size=3x3 pad=1x1}, dim_labels=bf01_oi01->bf01"),
              HasSubstr("low_high"));
  EXPECT_THAT(error("window={size=3x3 stride=2}, dim_labels=bf01_oi01->bf01"),
              HasSubstr("has 1 dims"));
  EXPECT_THAT(error("window={size=3x3 speed=1x1}, dim_labels=bf01_oi01->bf01"),
              HasSubstr("unknown window field 'speed'"));
  EXPECT_THAT(error("window={size=3x3}, dim_labels=bf01_oi01->bf01, feature_group_count=2"),
              HasSubstr("feature_group_count 2 must equal the kernel's 3 input features"));
  EXPECT_THAT(error("window={size=3x3}, dim_labels=bf01_oi01->bf01", "f32[1,2,4,4]"),
              HasSubstr("f32[1,2,3,3]"));  // the declared shape is checked
  EXPECT_THAT(error("dim_labels=bf01_oi01->bf01"), HasSubstr("the window has 0 dims"));
  // Sizes, dilations and pads near 2^63 are errors, not overflow.
  EXPECT_THAT(
      error("window={size=3x3 rhs_dilate=4611686018427387904x1}, dim_labels=bf01_oi01->bf01"),
      HasSubstr("overflow 64 bits"));
  EXPECT_THAT(error("window={size=3x3 pad=9223372036854775807_9223372036854775807x0_0}, "
                    "dim_labels=bf01_oi01->bf01"),
              HasSubstr("more than 2^63 positions"));
}

}  // namespace
}  // namespace strata
