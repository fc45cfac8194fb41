// While loops: summing 1..N, nested loops, and loop state updated in place.
#include <gtest/gtest.h>

#include "strata/compiler/compile.h"
#include "strata/hlo/builder.h"
#include "strata/hlo/text.h"

namespace strata::runtime {
namespace {

using hlo::Builder;
using hlo::Comparison;
using hlo::Literal;

Shape S64() { return Shape::Scalar(DType::kS64); }

// (i, sum) -> i <= n
std::unique_ptr<hlo::Computation> CounterCondition(hlo::Module& m, std::string name, int64_t n) {
  Builder b(std::move(name));
  auto* state = b.Parameter(0, Shape::Tuple({S64(), S64()}), "state");
  auto* i = b.GetTupleElement(state, 0);
  return b.Build(b.Compare(i, b.ConstantScalar<int64_t>(n), Comparison::kLe));
}

TEST(While, SumsOneToN) {
  for (int64_t n : {0, 1, 7, 1000}) {
    hlo::Module m("sum");
    auto* cond = m.AddComputation(CounterCondition(m, "cond", n));
    Builder body_b("body");
    auto* state = body_b.Parameter(0, Shape::Tuple({S64(), S64()}), "state");
    auto* i = body_b.GetTupleElement(state, 0);
    auto* sum = body_b.GetTupleElement(state, 1);
    auto* body = m.AddComputation(body_b.Build(
        body_b.Tuple({body_b.Add(i, body_b.ConstantScalar<int64_t>(1)), body_b.Add(sum, i)})));
    Builder b("main");
    auto* init = b.Tuple({b.ConstantScalar<int64_t>(1), b.ConstantScalar<int64_t>(0)});
    auto* loop = b.While(cond, body, init);
    m.AddEntryComputation(b.Build(b.GetTupleElement(loop, 1)));
    auto exe = compiler::Compile(m);
    auto out = exe->Run({});
    int64_t expected = 0;
    for (int64_t k = 1; k <= n; ++k) expected += k;
    EXPECT_EQ(out[0].ToVector<int64_t>()[0], expected) << hlo::ToText(m);
    auto reparsed = hlo::ParseModule(hlo::ToText(m));
    EXPECT_EQ(hlo::ToText(*reparsed), hlo::ToText(m));
  }
}

TEST(While, NestedLoopsCountPairs) {
  // for i in [0, 5): for j in [0, i): count += i * j
  hlo::Module m("nested");
  Shape state3 = Shape::Tuple({S64(), S64(), S64()});  // (j, i, acc)
  Builder ic("inner_cond");
  {
    auto* s = ic.Parameter(0, state3, "s");
    m.AddComputation(
        ic.Build(ic.Compare(ic.GetTupleElement(s, 0), ic.GetTupleElement(s, 1), Comparison::kLt)));
  }
  hlo::Computation* inner_cond = m.computations().back().get();
  Builder ib("inner_body");
  {
    auto* s = ib.Parameter(0, state3, "s");
    auto* j = ib.GetTupleElement(s, 0);
    auto* i = ib.GetTupleElement(s, 1);
    auto* acc = ib.GetTupleElement(s, 2);
    m.AddComputation(ib.Build(
        ib.Tuple({ib.Add(j, ib.ConstantScalar<int64_t>(1)), i, ib.Add(acc, ib.Multiply(i, j))})));
  }
  hlo::Computation* inner_body = m.computations().back().get();
  Shape state2 = Shape::Tuple({S64(), S64()});  // (i, acc)
  Builder oc("outer_cond");
  {
    auto* s = oc.Parameter(0, state2, "s");
    m.AddComputation(oc.Build(
        oc.Compare(oc.GetTupleElement(s, 0), oc.ConstantScalar<int64_t>(5), Comparison::kLt)));
  }
  hlo::Computation* outer_cond = m.computations().back().get();
  Builder ob("outer_body");
  {
    auto* s = ob.Parameter(0, state2, "s");
    auto* i = ob.GetTupleElement(s, 0);
    auto* acc = ob.GetTupleElement(s, 1);
    auto* inner =
        ob.While(inner_cond, inner_body, ob.Tuple({ob.ConstantScalar<int64_t>(0), i, acc}));
    m.AddComputation(ob.Build(
        ob.Tuple({ob.Add(i, ob.ConstantScalar<int64_t>(1)), ob.GetTupleElement(inner, 2)})));
  }
  hlo::Computation* outer_body = m.computations().back().get();
  Builder b("main");
  auto* loop = b.While(outer_cond, outer_body,
                       b.Tuple({b.ConstantScalar<int64_t>(0), b.ConstantScalar<int64_t>(0)}));
  m.AddEntryComputation(b.Build(b.GetTupleElement(loop, 1)));
  int64_t expected = 0;
  for (int64_t i = 0; i < 5; ++i)
    for (int64_t j = 0; j < i; ++j) expected += i * j;
  auto exe = compiler::Compile(m);
  EXPECT_EQ(exe->Run({})[0].ToVector<int64_t>()[0], expected);
}

TEST(While, RowUpdatesHappenInPlace) {
  // state (i, buf[rows, cols]); body writes row i = i. The buffer must be
  // updated in place: the loop-state storage is reused by the update.
  const int64_t rows = 6, cols = 3;
  Shape buf(DType::kF32, {rows, cols});
  Shape state = Shape::Tuple({S64(), buf});
  hlo::Module m("rows");
  Builder cb("cond");
  {
    auto* s = cb.Parameter(0, state, "s");
    m.AddComputation(cb.Build(
        cb.Compare(cb.GetTupleElement(s, 0), cb.ConstantScalar<int64_t>(rows), Comparison::kLt)));
  }
  auto* cond = m.computations().back().get();
  Builder bb("body");
  {
    auto* s = bb.Parameter(0, state, "s");
    auto* i = bb.GetTupleElement(s, 0);
    auto* x = bb.GetTupleElement(s, 1);
    auto* value = bb.Broadcast(bb.Convert(i, DType::kF32), {1, cols}, {});
    auto* updated = bb.DynamicUpdateSlice(x, value, {i, bb.ConstantScalar<int64_t>(0)});
    m.AddComputation(bb.Build(bb.Tuple({bb.Add(i, bb.ConstantScalar<int64_t>(1)), updated})));
  }
  auto* body = m.computations().back().get();
  Builder b("main");
  auto* x0 = b.Parameter(0, buf, "x0");
  auto* loop = b.While(cond, body, b.Tuple({b.ConstantScalar<int64_t>(0), x0}));
  m.AddEntryComputation(b.Build(b.GetTupleElement(loop, 1)));
  auto exe = compiler::Compile(m);
  std::vector<float> init(rows * cols, -1.0f);
  auto out = exe->Run({Buffer::FromVector(init, {rows, cols}, Client::Default().device(0))});
  auto v = out[0].ToVector<float>();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) EXPECT_EQ(v[r * cols + c], static_cast<float>(r));
  // The dynamic-update-slice in the body writes into the loop state.
  EXPECT_GE(exe->stats().in_place_updates, 1);
  EXPECT_EQ(init[0], -1.0f);
}

TEST(While, AnUpdateStaysInPlaceWhenOtherStateIsReadAfterIt) {
  // state (i, buf[rows, cols], acc[2]); the body writes row i of buf, then
  // reads acc. Reading another element of the state after the update must
  // not keep buf's old value alive (it once did: get-tuple-element counted
  // as a read of every element, and the update copied the whole buffer).
  const int64_t rows = 256, cols = 1024;
  Shape buf(DType::kF32, {rows, cols}), acc(DType::kF32, {2});
  Shape state = Shape::Tuple({S64(), buf, acc});
  hlo::Module m("rows_then_acc");
  Builder cb("cond");
  {
    auto* s = cb.Parameter(0, state, "s");
    m.AddComputation(cb.Build(
        cb.Compare(cb.GetTupleElement(s, 0), cb.ConstantScalar<int64_t>(rows), Comparison::kLt)));
  }
  auto* cond = m.computations().back().get();
  Builder bb("body");
  {
    auto* s = bb.Parameter(0, state, "s");
    auto* i = bb.GetTupleElement(s, 0);
    auto* next = bb.Add(i, bb.ConstantScalar<int64_t>(1));
    auto* x = bb.GetTupleElement(s, 1);
    auto* value = bb.Broadcast(bb.Convert(i, DType::kF32), {1, cols}, {});
    auto* updated = bb.DynamicUpdateSlice(x, value, {i, bb.ConstantScalar<int64_t>(0)});
    auto* a = bb.GetTupleElement(s, 2);  // read after the update
    auto* a2 = bb.Add(a, bb.Broadcast(bb.ConstantScalar<float>(1), {2}, {}));
    m.AddComputation(bb.Build(bb.Tuple({next, updated, a2})));
  }
  auto* body = m.computations().back().get();
  Builder b("main");
  auto* x0 = b.Parameter(0, buf, "x0");
  auto* a0 = b.Parameter(1, acc, "a0");
  auto* loop = b.While(cond, body, b.Tuple({b.ConstantScalar<int64_t>(0), x0, a0}));
  m.AddEntryComputation(b.Build(b.Tuple({b.GetTupleElement(loop, 1), b.GetTupleElement(loop, 2)})));
  auto exe = compiler::Compile(m);
  const Device* cpu = Client::Default().device(0);
  auto out =
      exe->Run({Buffer::FromVector(std::vector<float>(rows * cols, -1.0f), {rows, cols}, cpu),
                Buffer::FromVector(std::vector<float>{0.5f, 2.0f}, {2}, cpu)});
  auto v = out[0].ToVector<float>();
  for (int64_t r = 0; r < rows; ++r) ASSERT_EQ(v[r * cols + cols - 1], static_cast<float>(r));
  EXPECT_EQ(out[1].ToVector<float>(), (std::vector<float>{0.5f + rows, 2.0f + rows}));
  // The loop state holds buf once; an update that is not in place needs a
  // second buffer of its size in the body's arena.
  EXPECT_LT(exe->stats().temp_bytes, 2 * buf.byte_size()) << exe->stats().temp_bytes;
}

}  // namespace
}  // namespace strata::runtime
