// Integer reductions and scatter-adds wrap on overflow, as XLA defines them
// (two's complement), instead of invoking C++'s undefined behaviour.
#include <gtest/gtest.h>

#include <limits>

#include "strata/compiler/compile.h"
#include "strata/hlo/builder.h"

namespace strata::runtime {
namespace {

TEST(IntegerOverflow, ReduceAddWraps) {
  hlo::Module m("wrap");
  auto* add =
      m.AddComputation(hlo::MakeScalarBinaryComputation("add", hlo::Opcode::kAdd, DType::kS32));
  hlo::Builder b("main");
  auto* x = b.Parameter(0, Shape(DType::kS32, {2}), "x");
  m.AddEntryComputation(b.Build(b.Reduce(x, b.ConstantScalar<int32_t>(0), {0}, add)));
  auto exe = compiler::Compile(m);
  const int32_t max = std::numeric_limits<int32_t>::max();
  auto out = exe->Run({Buffer::FromVector<int32_t>({max, 1}, {2}, Client::Default().device(0))});
  EXPECT_EQ(out[0].ToVector<int32_t>()[0], std::numeric_limits<int32_t>::min());  // max + 1 wraps
}

TEST(IntegerOverflow, ScatterAddWraps) {
  hlo::Module m("scatter_wrap");
  auto* add =
      m.AddComputation(hlo::MakeScalarBinaryComputation("add", hlo::Opcode::kAdd, DType::kS32));
  hlo::Builder b("main");
  auto* operand = b.Parameter(0, Shape(DType::kS32, {1}), "operand");
  auto* indices = b.Parameter(1, Shape(DType::kS32, {2}), "indices");
  auto* updates = b.Parameter(2, Shape(DType::kS32, {2}), "updates");
  hlo::ScatterDims dims;
  dims.inserted_window_dims = {0};
  dims.scatter_dims_to_operand_dims = {0};
  dims.index_vector_dim = 1;
  m.AddEntryComputation(b.Build(b.Scatter(operand, indices, updates, dims, add)));
  auto exe = compiler::Compile(m);
  auto* cpu = Client::Default().device(0);
  const int32_t max = std::numeric_limits<int32_t>::max();
  auto out = exe->Run({Buffer::FromVector<int32_t>({max}, {1}, cpu),
                       Buffer::FromVector<int32_t>({0, 0}, {2}, cpu),
                       Buffer::FromVector<int32_t>({1, 1}, {2}, cpu)});
  EXPECT_EQ(out[0].ToVector<int32_t>()[0],
            std::numeric_limits<int32_t>::min() + 1);  // max + 2 wraps
}

TEST(Buffers, BoolVectorsRoundTrip) {
  auto b = Buffer::FromVector<bool>({true, false, true, true}, {4}, Client::Default().device(0));
  EXPECT_EQ(b.shape(), Shape(DType::kPred, {4}));
  EXPECT_EQ(b.ToVector<bool>(), (std::vector<bool>{true, false, true, true}));
}

}  // namespace
}  // namespace strata::runtime
