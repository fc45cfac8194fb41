// Index maps read in place by loop fusions (kernels/fusion_view.h) and
// moved towards them (passes/sink_index_maps.cc). Each chain's view is
// checked against the unfused kernels run on an input whose elements are
// their own indices; the fused programs against plain loops.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "kernels/fusion_view.h"
#include "test_util.h"

namespace strata::runtime {
namespace {

using hlo::Instruction;
using hlo::Opcode;
using test::Arg;
using test::Count;
using test::Graph;
using test::Random;

std::vector<float> Iota(int64_t n) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(i);
  return v;
}

// The base element the view says element n reads.
int64_t Address(const OperandView& view, int64_t n) {
  int64_t address = view.offset;
  for (int64_t d = static_cast<int64_t>(view.dims.size()) - 1; d >= 0; --d) {
    address += n % view.dims[d] * view.strides[d];
    n /= view.dims[d];
  }
  return address;
}

struct Chain {
  const char* name;
  std::vector<int64_t> base;
  std::function<Instruction*(hlo::Builder&, Instruction*)> build;
  bool representable = true;
};

TEST(FusionView, EachElementIsWhereTheUnfusedKernelsFindIt) {
  const std::vector<Chain> chains = {
      {"heads split and transposed",
       {2, 5, 24},
       [](hlo::Builder& b, Instruction* p) {
         return b.Transpose(b.Reshape(p, {2, 5, 3, 8}), {0, 2, 1, 3});
       }},
      {"halves swapped after the transpose",
       {2, 5, 24},
       [](hlo::Builder& b, Instruction* p) {
         Instruction* q = b.Transpose(b.Reshape(p, {2, 5, 3, 8}), {0, 2, 1, 3});
         return b.Reshape(b.Reverse(b.Reshape(q, {2, 3, 5, 2, 4}), {3}), {2, 3, 5, 8});
       }},
      {"strided rows, a column range",
       {7, 20},
       [](hlo::Builder& b, Instruction* p) {
         return b.Slice(p, {1, 2}, {7, 18}, {2, 1});
       }},
      {"both dims reversed",
       {6, 10},
       [](hlo::Builder& b, Instruction* p) {
         return b.Reverse(p, {0, 1});
       }},
      {"a broadcast transposed",
       {5, 8},
       [](hlo::Builder& b, Instruction* p) {
         return b.Transpose(b.Broadcast(p, {2, 5, 8}, {1, 2}), {1, 0, 2});
       }},
      {"a transpose flattened",
       {4, 6},
       [](hlo::Builder& b, Instruction* p) {
         return b.Reshape(b.Transpose(p, {1, 0}), {24});
       }},
      {"a flattened transpose sliced on whole rows",
       {4, 6},
       [](hlo::Builder& b, Instruction* p) {
         return b.Slice(b.Reshape(b.Transpose(p, {1, 0}), {24}), {4}, {12}, {1});
       }},
      {"a flattened transpose sliced mid-row",
       {4, 6},
       [](hlo::Builder& b, Instruction* p) {
         return b.Slice(b.Reshape(b.Transpose(p, {1, 0}), {24}), {2}, {10}, {1});
       },
       false},
      {"a transpose split across its dims",
       {2, 3},
       [](hlo::Builder& b, Instruction* p) {
         return b.Reshape(b.Transpose(p, {1, 0}), {2, 3});
       },
       false},
  };
  for (const Chain& chain : chains) {
    SCOPED_TRACE(chain.name);
    const Shape base(DType::kF32, chain.base);
    Graph g({base});
    g.fuse = false;
    Instruction* top = chain.build(g.b, g.params[0]);
    std::optional<OperandView> view = ViewOf(*top);
    EXPECT_EQ(&ViewBase(*top), g.params[0]);
    ASSERT_EQ(view.has_value(), chain.representable);
    if (!view) continue;
    auto out = g.Run(top, {Arg(Iota(base.num_elements()), chain.base)}, /*run_passes=*/false);
    const auto got = out[0].ToVector<float>();
    for (size_t n = 0; n < got.size(); ++n)
      ASSERT_EQ(Address(*view, static_cast<int64_t>(n)), static_cast<int64_t>(got[n])) << n;
  }
}

// Rotary's forward as the model lowers it: q = x's heads split and moved
// before the sequence, then q * cos + swap(q) * sin, where swap exchanges
// each head's halves (rotate_half's sign is in `sin` here).
constexpr int64_t kB = 2, kS = 5, kH = 3, kD = 8;

double RotaryAt(const std::vector<float>& x, const std::vector<float>& cos,
                const std::vector<float>& sin, int64_t b, int64_t h, int64_t s, int64_t d) {
  auto at = [&](int64_t dd) { return static_cast<double>(x[((b * kS + s) * kH + h) * kD + dd]); };
  const int64_t swapped = d < kD / 2 ? d + kD / 2 : d - kD / 2;
  return at(d) * cos[s * kD + d] + at(swapped) * sin[s * kD + d];
}

TEST(FusionView, RotaryReadsTheProjectionInPlace) {
  const auto x = Random<float>(kB * kS * kH * kD, 11, -2, 2);
  const auto cos = Random<float>(kS * kD, 12, -1, 1), sin = Random<float>(kS * kD, 13, -1, 1);
  Graph g({Shape(DType::kF32, {kB, kS, kH * kD}), Shape(DType::kF32, {kS, kD}),
           Shape(DType::kF32, {kS, kD})});
  const std::vector<int64_t> heads = {kB, kH, kS, kD};
  Instruction* q = g.b.Transpose(g.b.Reshape(g.params[0], {kB, kS, kH, kD}), {0, 2, 1, 3});
  Instruction* swapped =
      g.b.Reshape(g.b.Reverse(g.b.Reshape(q, {kB, kH, kS, 2, kD / 2}), {3}), heads);
  Instruction* out = g.b.Add(g.b.Multiply(q, g.b.Broadcast(g.params[1], heads, {2, 3})),
                             g.b.Multiply(swapped, g.b.Broadcast(g.params[2], heads, {2, 3})));
  auto exe = g.Compile(out);
  const hlo::Computation& entry = *exe->module().entry();
  EXPECT_EQ(Count(entry, Opcode::kFusion), 1);
  EXPECT_EQ(Count(entry, Opcode::kTranspose) + Count(entry, Opcode::kReverse), 0);
  const auto got = exe->Run({Arg(x, {kB, kS, kH * kD}), Arg(cos, {kS, kD}), Arg(sin, {kS, kD})})[0]
                       .ToVector<float>();
  int64_t n = 0;
  for (int64_t b = 0; b < kB; ++b)
    for (int64_t h = 0; h < kH; ++h)
      for (int64_t s = 0; s < kS; ++s)
        for (int64_t d = 0; d < kD; ++d, ++n) {
          const double want = RotaryAt(x, cos, sin, b, h, s, d);
          ASSERT_NEAR(got[n], want, 1e-5 * (1 + std::abs(want))) << n;
        }
}

TEST(FusionView, TheGradientsWayBackSinksIntoOneFusion) {
  // Rotary's backward as autodiff writes it: dx = t(g * cos + swap(g * sin))
  // with t moving the heads back behind the sequence, then flattened for the
  // projection's products. The moves sink through the products and the sum
  // to g and the tables, read in place by one fusion.
  const auto grad = Random<float>(kB * kH * kS * kD, 21, -2, 2);
  const auto cos = Random<float>(kS * kD, 22, -1, 1), sin = Random<float>(kS * kD, 23, -1, 1);
  const std::vector<int64_t> heads = {kB, kH, kS, kD};
  Graph g({Shape(DType::kF32, heads), Shape(DType::kF32, {kS, kD}), Shape(DType::kF32, {kS, kD})});
  Instruction* with_sin = g.b.Multiply(g.params[0], g.b.Broadcast(g.params[2], heads, {2, 3}));
  Instruction* swapped =
      g.b.Reshape(g.b.Reverse(g.b.Reshape(with_sin, {kB, kH, kS, 2, kD / 2}), {3}), heads);
  Instruction* sum =
      g.b.Add(g.b.Multiply(g.params[0], g.b.Broadcast(g.params[1], heads, {2, 3})), swapped);
  Instruction* out = g.b.Reshape(g.b.Transpose(sum, {0, 2, 1, 3}), {kB, kS, kH * kD});
  auto exe = g.Compile(out);
  const hlo::Computation& entry = *exe->module().entry();
  EXPECT_EQ(Count(entry, Opcode::kFusion), 1);
  EXPECT_EQ(Count(entry, Opcode::kTranspose) + Count(entry, Opcode::kReverse), 0);
  const auto got =
      exe->Run({Arg(grad, heads), Arg(cos, {kS, kD}), Arg(sin, {kS, kD})})[0].ToVector<float>();
  for (int64_t b = 0; b < kB; ++b)
    for (int64_t s = 0; s < kS; ++s)
      for (int64_t h = 0; h < kH; ++h)
        for (int64_t d = 0; d < kD; ++d) {
          auto g_at = [&](int64_t dd) {
            return static_cast<double>(grad[((b * kH + h) * kS + s) * kD + dd]);
          };
          const int64_t other = d < kD / 2 ? d + kD / 2 : d - kD / 2;
          const double want = g_at(d) * cos[s * kD + d] + g_at(other) * sin[s * kD + other];
          const float have = got[((b * kS + s) * kH + h) * kD + d];
          ASSERT_NEAR(have, want, 1e-5 * (1 + std::abs(want))) << b << " " << s << " " << h;
        }
}

TEST(FusionView, ASwapOfTheInnermostDimStaysAKernel) {
  // A transpose that moves the innermost dim would make each element of a
  // block a separate read: it stays a kernel of its own, and the product
  // over it is not moved to its operands.
  const int64_t n = 16;
  const auto a = Random<float>(n * n, 31, -1, 1), b = Random<float>(n * n, 32, -1, 1);
  Graph g({Shape(DType::kF32, {n, n}), Shape(DType::kF32, {n, n})});
  Instruction* out =
      g.b.Add(g.b.Transpose(g.b.Multiply(g.params[0], g.params[0]), {1, 0}), g.params[1]);
  auto exe = g.Compile(out);
  EXPECT_EQ(Count(*exe->module().entry(), Opcode::kTranspose), 1);
  const auto got = exe->Run({Arg(a, {n, n}), Arg(b, {n, n})})[0].ToVector<float>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      const double want = static_cast<double>(a[j * n + i]) * a[j * n + i] + b[i * n + j];
      ASSERT_NEAR(got[i * n + j], want, 1e-6 * (1 + std::abs(want)));
    }
}

TEST(FusionView, SlicesAndReversesOfOperandsAreReadInPlace) {
  // x[1:7:2, 2:18] * y + reverse(z) along both dims + reverse(z) along its
  // rows: no slice or reverse is written; a bf16 operand is widened as it is
  // read through its view (backwards, and in runs of consecutive elements).
  const auto x = Random<float>(7 * 20, 41, -3, 3), y = Random<float>(3 * 16, 42, -1, 1),
             z = Random<float>(3 * 16, 43, -1, 1);
  Graph g({Shape(DType::kF32, {7, 20}), Shape(DType::kF32, {3, 16}), Shape(DType::kBF16, {3, 16})});
  Instruction* sliced = g.b.Slice(g.params[0], {1, 2}, {7, 18}, {2, 1});
  Instruction* reversed = g.b.Convert(g.b.Reverse(g.params[2], {0, 1}), DType::kF32);
  Instruction* rows_reversed = g.b.Convert(g.b.Reverse(g.params[2], {0}), DType::kF32);
  auto exe =
      g.Compile(g.b.Add(g.b.Add(g.b.Multiply(sliced, g.params[1]), reversed), rows_reversed));
  const hlo::Computation& entry = *exe->module().entry();
  EXPECT_EQ(Count(entry, Opcode::kFusion), 1);
  EXPECT_EQ(Count(entry, Opcode::kSlice) + Count(entry, Opcode::kReverse), 0);
  Buffer half = Buffer::Allocate(Shape(DType::kBF16, {3, 16}), test::Cpu());
  std::vector<double> z_half(z.size());
  for (size_t i = 0; i < z.size(); ++i) {
    half.data_as<uint16_t>()[i] = hlo::FloatToBFloat16(z[i]);
    z_half[i] = hlo::BFloat16ToFloat(half.data_as<uint16_t>()[i]);
  }
  const auto got =
      exe->Run({Arg(x, {7, 20}), Arg(y, {3, 16}), std::move(half)})[0].ToVector<float>();
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 16; ++j) {
      const double want = static_cast<double>(x[(1 + 2 * i) * 20 + 2 + j]) * y[i * 16 + j] +
                          z_half[(2 - i) * 16 + (15 - j)] + z_half[(2 - i) * 16 + j];
      ASSERT_NEAR(got[i * 16 + j], want, 1e-5 * (1 + std::abs(want))) << i << " " << j;
    }
}

// A value the fusion computes, read both elementwise and through a view (a
// row of it broadcast back: torch.compile's `y[0] += 2` on a clone): the
// view's base must stay the fusion's operand. Joining the base after its
// view made a fusion the loop cannot read ("moves elements of a value the
// fusion computes").
TEST(FusionView, AViewOfAComputedValueKeepsThatValueOutside) {
  const auto x = Random<float>(2, 51, -1, 1), y = Random<float>(3 * 2, 52, -1, 1);
  Graph g({Shape(DType::kF32, {1, 2}), Shape(DType::kF32, {3, 2})});
  Instruction* a = g.b.Add(g.b.Broadcast(g.b.Reshape(g.params[0], {2}), {3, 2}, {1}), g.params[1]);
  Instruction* row = g.b.Reshape(g.b.Slice(a, {0, 0}, {1, 2}, {1, 1}), {2});
  auto exe = g.Compile(g.b.Multiply(g.b.Broadcast(row, {3, 2}, {1}), a));
  const auto got = exe->Run({Arg(x, {1, 2}), Arg(y, {3, 2})})[0].ToVector<float>();
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 2; ++j) {
      const double first = static_cast<double>(x[j]) + y[j];
      const double want = first * (static_cast<double>(x[j]) + y[i * 2 + j]);
      ASSERT_NEAR(got[i * 2 + j], want, 1e-5 * (1 + std::abs(want))) << i << " " << j;
    }
}

// A module that already holds a computation named like the fusions the
// pass makes (an optimized module, what STRATA_DUMP_DIR writes and `strata
// run` may be given, holds fused_main_0 ...): the new fusion takes a name no
// computation has ("computation name fused_main_0 is used twice" before).
TEST(FusionView, AFusionTakesANameNoComputationHas) {
  auto exe = compiler::Compile(*hlo::ParseModule(R"(HloModule m
fused_main_0 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY main {
  x = f32[4] parameter(0)
  e = f32[4] exponential(x)
  t = f32[4] tanh(e)
  z = f32[] constant(0)
  ROOT r = f32[] reduce(t, z), dimensions={0}, to_apply=fused_main_0
}
)"));
  const std::vector<float> x = {-1, 0, 0.5, 2};
  double want = 0;
  for (float v : x) want += std::tanh(std::exp(static_cast<double>(v)));
  EXPECT_NEAR(exe->Run({Arg(x, {4})})[0].ToVector<float>()[0], want, 1e-5);
}

// A value with no elements read through reshape -> reverse -> reshape (the
// chain of a flip of an empty sequence) compiles and runs to an empty
// result: its view reads nothing (its size-0 axes once divided by zero).
TEST(FusionView, ZeroSizeViewsCompileAndRunToNothing) {
  for (const std::vector<int64_t>& base : {std::vector<int64_t>{0, 6}, {6, 0}, {0}}) {
    SCOPED_TRACE(DimsToString(base));
    std::vector<int64_t> split = {3, 0, 2};
    Graph g({Shape(DType::kF32, base), Shape(DType::kF32, base)});
    Instruction* flipped =
        g.b.Reshape(g.b.Reverse(g.b.Reshape(g.params[0], split), {0, 1, 2}), base);
    Instruction* root = g.b.Add(g.b.Unary(Opcode::kExp, flipped), g.params[1]);
    auto exe = g.Compile(root);
    const std::vector<float> none;
    const auto got = exe->Run({Arg(none, base), Arg(none, base)});
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].shape(), Shape(DType::kF32, base));
  }
}

}  // namespace
}  // namespace strata::runtime
