// Parser tests: builder programs round-trip through text exactly, XLA's
// spellings are accepted, malformed text fails at the right line and column,
// and no input (truncated or mutated) crashes the parser.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <set>

#include "strata/compiler/compile.h"
#include "strata/core/error.h"
#include "strata/hlo/builder.h"
#include "strata/hlo/text.h"
#include "strata/runtime/device.h"

namespace strata::hlo {
namespace {

Shape F32(std::vector<int64_t> dims) { return Shape(DType::kF32, std::move(dims)); }
Shape S32(std::vector<int64_t> dims) { return Shape(DType::kS32, std::move(dims)); }

template <typename T>
Literal Values(std::vector<T> values, std::vector<int64_t> dims) {
  return Literal::Vector<T>(std::span<const T>(values), std::move(dims));
}

const Instruction* Find(const Computation& c, Opcode op, int64_t nth = 0) {
  for (const auto& inst : c.instructions()) {
    if (inst->opcode() == op && nth-- == 0) return inst.get();
  }
  return nullptr;
}

const Instruction* FindNamed(const Computation& c, std::string_view name) {
  for (const auto& inst : c.instructions()) {
    if (inst->name() == name) return inst.get();
  }
  return nullptr;
}

// ---------------------------------------------------------------------------
// Round-trip programs, built with the builder.

std::unique_ptr<Module> UnaryProgram() {
  auto m = std::make_unique<Module>("unary");
  Builder b("main");
  Instruction* x = b.Parameter(0, F32({2, 3}), "x");
  for (int i = 0; i < hlo::kOpcodeCount; ++i) {  // every unary row that takes floats
    const auto op = static_cast<Opcode>(i);
    if (hlo::IsElementwiseUnary(op) && hlo::TakesFloats(hlo::ElementTypesOf(op)))
      x = b.Unary(op, x);
  }
  Instruction* not_finite = b.Unary(Opcode::kNot, b.IsFinite(x));
  m->AddEntryComputation(b.Build(b.Tuple({x, not_finite})));
  return m;
}

std::unique_ptr<Module> BinaryProgram() {
  auto m = std::make_unique<Module>("binary");
  Builder b("main");
  Instruction* x = b.Parameter(0, F32({4}), "x");
  Instruction* y = b.Parameter(1, F32({4}), "y");
  Instruction* i = b.Parameter(2, S32({4}), "i");
  Instruction* j = b.Parameter(3, S32({4}), "j");
  Instruction* p = b.Parameter(4, Shape(DType::kPred, {4}), "p");
  Instruction* f = x;
  for (Opcode op :
       {Opcode::kAdd, Opcode::kSubtract, Opcode::kMultiply, Opcode::kDivide, Opcode::kMaximum,
        Opcode::kMinimum, Opcode::kPower, Opcode::kRemainder, Opcode::kAtan2}) {
    f = b.Binary(op, f, y);
  }
  Instruction* n = i;
  for (Opcode op : {Opcode::kAnd, Opcode::kOr, Opcode::kXor, Opcode::kShiftLeft,
                    Opcode::kShiftRightLogical, Opcode::kShiftRightArithmetic}) {
    n = b.Binary(op, n, j);
  }
  n = b.Unary(Opcode::kSign,
              b.Unary(Opcode::kAbs, b.Unary(Opcode::kNegate, b.Unary(Opcode::kNot, n))));
  n = b.Unary(Opcode::kCountLeadingZeros, b.Unary(Opcode::kPopulationCount, n));
  Instruction* q =
      b.Binary(Opcode::kXor, b.Binary(Opcode::kOr, p, p), b.Binary(Opcode::kAnd, p, p));
  m->AddEntryComputation(b.Build(b.Tuple({f, n, q})));
  return m;
}

std::unique_ptr<Module> LayoutProgram() {
  auto m = std::make_unique<Module>("layout_ops");
  Builder b("main");
  Instruction* x = b.Parameter(0, F32({2, 3}), "x");
  Instruction* wide = b.Broadcast(x, {4, 2, 3}, {1, 2});
  Instruction* flat = b.Reshape(wide, {4, 6});
  Instruction* t = b.Copy(b.Transpose(flat, {1, 0}));
  Instruction* r = b.Reverse(t, {0, 1});
  Instruction* cat = b.Concatenate({t, r}, 0);
  Instruction* iota = b.Convert(b.Iota(S32({12, 4}), 1), DType::kF32);
  Instruction* two = b.Broadcast(b.ConstantScalar(2.0f), {12, 4}, {});
  m->AddEntryComputation(b.Build(b.Add(b.Multiply(cat, two), iota)));
  return m;
}

std::unique_ptr<Module> SlicingProgram() {
  auto m = std::make_unique<Module>("slicing");
  Builder b("main");
  Instruction* x = b.Parameter(0, F32({8, 6}), "x");
  Instruction* i = b.Parameter(1, S32({}), "i");
  Instruction* strided = b.Slice(x, {1, 0}, {7, 6}, {2, 3});  // f32[3,2]
  Instruction* window = b.DynamicSlice(x, {i, i}, {2, 3});
  Instruction* updated = b.DynamicUpdateSlice(x, window, {i, i});
  Instruction* zero = b.ConstantScalar(0.0f);
  // Interior padding, and negative low padding that trims.
  Instruction* padded = b.Pad(strided, zero, {{1, 2, 1}, {-1, 0, 2}});  // f32[8,3]
  Instruction* scalar_pad = b.Pad(zero, zero, {});
  m->AddEntryComputation(b.Build(b.Tuple({padded, updated, scalar_pad})));
  return m;
}

std::unique_ptr<Module> CompareProgram() {
  auto m = std::make_unique<Module>("compare_select");
  Builder b("main");
  Instruction* x = b.Parameter(0, F32({4}), "x");
  Instruction* y = b.Parameter(1, F32({4}), "y");
  Instruction* acc = nullptr;
  for (Comparison c : {Comparison::kEq, Comparison::kNe, Comparison::kLt, Comparison::kLe,
                       Comparison::kGt, Comparison::kGe}) {
    Instruction* p = b.Compare(x, y, c);
    acc = acc ? b.Binary(Opcode::kOr, acc, p) : p;
  }
  Instruction* chosen = b.Select(acc, x, y);
  Instruction* clamped = b.Clamp(b.ConstantScalar(-1.0f), chosen, b.ConstantScalar(1.0f));
  m->AddEntryComputation(b.Build(clamped));
  return m;
}

std::unique_ptr<Module> ConvertProgram() {
  auto m = std::make_unique<Module>("converts");
  Builder b("main");
  Instruction* x = b.Parameter(0, F32({3}), "x");
  std::vector<Instruction*> outs;
  for (DType t : {DType::kPred, DType::kS8, DType::kS32, DType::kS64, DType::kU8, DType::kU32,
                  DType::kU64, DType::kF16, DType::kBF16, DType::kF64}) {
    outs.push_back(b.Convert(x, t));
  }
  outs.push_back(b.BitcastConvert(x, DType::kS32));
  outs.push_back(b.BitcastConvert(x, DType::kU32));
  outs.push_back(b.BitcastConvert(outs[7], DType::kBF16));  // f16 -> bf16 bits
  m->AddEntryComputation(b.Build(b.Tuple(outs)));
  return m;
}

Literal F32Special() {
  float inf = std::numeric_limits<float>::infinity();
  return Values<float>(
      {1.5f, -2.0f, 1e-05f, -inf, inf, std::numeric_limits<float>::quiet_NaN(), -0.0f,
       std::numeric_limits<float>::max(), std::numeric_limits<float>::denorm_min()},
      {9});
}

std::unique_ptr<Module> ConstantProgram() {
  auto m = std::make_unique<Module>("constants");
  Builder b("main");
  std::vector<Instruction*> c;
  std::array<bool, 3> preds = {true, false, true};
  c.push_back(b.Constant(Literal::Vector<bool>(preds, {3})));
  c.push_back(b.Constant(Values<int8_t>({-128, 0, 127}, {3})));
  c.push_back(b.Constant(Values<int32_t>({INT32_MIN, -1, INT32_MAX}, {3})));
  // 2^53 + 1 is not a double: it survives only if s64 is parsed exactly.
  c.push_back(b.Constant(Values<int64_t>({INT64_MIN, (int64_t{1} << 53) + 1, INT64_MAX}, {3})));
  c.push_back(b.Constant(Values<uint8_t>({0, 255}, {2})));
  c.push_back(b.Constant(Values<uint32_t>({0, UINT32_MAX}, {2})));
  c.push_back(b.Constant(Values<uint64_t>({0, UINT64_MAX, UINT64_MAX - 1}, {3})));
  Literal half(Shape(DType::kF16, {4}));
  for (int i = 0; i < 4; ++i)
    half.SetFromDouble(i, std::array<double, 4>{0.1, 65504.0, -INFINITY, 6e-8}[i]);
  c.push_back(b.Constant(half));
  Literal brain(Shape(DType::kBF16, {3}));
  for (int i = 0; i < 3; ++i)
    brain.SetFromDouble(i, std::array<double, 3>{1.0078125, -3.3895313892515355e38, NAN}[i]);
  c.push_back(b.Constant(brain));
  c.push_back(b.Constant(F32Special()));
  c.push_back(b.Constant(Values<double>({0.1, -1e300, 5e-324, std::nan("")}, {4})));
  c.push_back(b.Constant(Values<float>({1, 2, 3, 4}, {2, 2})));
  c.push_back(b.Constant(Values<int32_t>({1, 2, 3, 4, 5, 6, 7, 8}, {2, 2, 2})));
  c.push_back(b.Constant(Values<float>({}, {2, 0})));
  c.push_back(b.Constant(Values<float>({}, {0})));
  c.push_back(b.ConstantScalar(-7.25));
  c.push_back(b.ConstantScalar(false));
  m->AddEntryComputation(b.Build(b.Tuple(c)));
  return m;
}

// (acc_value, acc_index, x_value, x_index) -> (max value, its index).
std::unique_ptr<Computation> ArgMaxComputation() {
  Builder b("argmax");
  Instruction* av = b.Parameter(0, F32({}), "acc_value");
  Instruction* ai = b.Parameter(1, S32({}), "acc_index");
  Instruction* xv = b.Parameter(2, F32({}), "x_value");
  Instruction* xi = b.Parameter(3, S32({}), "x_index");
  Instruction* keep = b.Compare(av, xv, Comparison::kGe);
  return b.Build(b.Tuple({b.Select(keep, av, xv), b.Select(keep, ai, xi)}));
}

std::unique_ptr<Module> ReduceProgram() {
  auto m = std::make_unique<Module>("reduce");
  Computation* sum =
      m->AddComputation(MakeScalarBinaryComputation("sum", Opcode::kAdd, DType::kF32));
  Computation* argmax = m->AddComputation(ArgMaxComputation());
  Builder b("main");
  Instruction* x = b.Parameter(0, F32({3, 5}), "x");
  Instruction* zero = b.ConstantScalar(0.0f);
  Instruction* rows = b.Reduce(x, zero, {1}, sum);
  Instruction* total = b.Reduce(x, zero, {0, 1}, sum);
  Instruction* index = b.Iota(S32({3, 5}), 1);
  Instruction* best = b.Reduce(
      {x, index},
      {b.ConstantScalar(-std::numeric_limits<float>::infinity()), b.ConstantScalar(int32_t{-1})},
      {1}, argmax);
  m->AddEntryComputation(b.Build(b.Tuple({rows, total, best})));
  return m;
}

std::unique_ptr<Module> DotProgram() {
  auto m = std::make_unique<Module>("dot");
  Builder b("main");
  Instruction* a = b.Parameter(0, F32({4, 3}), "a");
  Instruction* w = b.Parameter(1, F32({3, 5}), "w");
  Instruction* x = b.Parameter(2, F32({2, 4, 3}), "x");
  Instruction* y = b.Parameter(3, F32({2, 3, 5}), "y");
  Instruction* matmul = b.Dot(a, w, {.lhs_contracting = {1}, .rhs_contracting = {0}});
  Instruction* batched = b.Dot(x, y, {{0}, {0}, {2}, {1}});  // f32[2,4,5]
  Instruction* outer = b.Dot(a, w, {});                      // f32[4,3,3,5]
  m->AddEntryComputation(b.Build(b.Tuple({matmul, batched, outer})));
  return m;
}

std::unique_ptr<Module> GatherScatterProgram() {
  auto m = std::make_unique<Module>("embedding");
  Computation* add =
      m->AddComputation(MakeScalarBinaryComputation("scatter_add", Opcode::kAdd, DType::kF32));
  Builder b("main");
  Instruction* table = b.Parameter(0, F32({10, 4}), "table");
  Instruction* ids = b.Parameter(1, S32({3}), "ids");
  Instruction* grad = b.Parameter(2, F32({3, 4}), "grad");
  Instruction* rows = b.Gather(table, ids, {{1}, {0}, {0}, 1, {1, 4}});
  Instruction* zeros = b.Broadcast(b.ConstantScalar(0.0f), {10, 4}, {});
  Instruction* dtable = b.Scatter(zeros, ids, grad, {{1}, {0}, {0}, 1}, add);
  m->AddEntryComputation(b.Build(b.Tuple({rows, dtable})));
  return m;
}

std::unique_ptr<Module> WhileProgram() {
  auto m = std::make_unique<Module>("while_loop");
  Shape state = Shape::Tuple({S32({}), F32({4})});
  Builder cond("cond");
  Instruction* cs = cond.Parameter(0, state, "state");
  Computation* c = m->AddComputation(cond.Build(cond.Compare(
      cond.GetTupleElement(cs, 0), cond.ConstantScalar(int32_t{10}), Comparison::kLt)));
  Builder body("body");
  Instruction* bs = body.Parameter(0, state, "state");
  Instruction* i = body.Add(body.GetTupleElement(bs, 0), body.ConstantScalar(int32_t{1}));
  Instruction* v = body.GetTupleElement(bs, 1);
  Computation* bd = m->AddComputation(body.Build(body.Tuple({i, body.Add(v, v)})));
  Builder b("main");
  Instruction* init = b.Tuple({b.ConstantScalar(int32_t{0}), b.Parameter(0, F32({4}), "x")});
  m->AddEntryComputation(b.Build(b.GetTupleElement(b.While(c, bd, init), 1)));
  return m;
}

std::unique_ptr<Module> CallRngShardingProgram() {
  auto m = std::make_unique<Module>("call_rng");
  Builder f("fma");
  Instruction* fx = f.Parameter(0, F32({4}), "x");
  Instruction* fy = f.Parameter(1, F32({4}), "y");
  Computation* callee = m->AddComputation(f.Build(f.Add(f.Multiply(fx, fy), fy)));
  Builder b("main");
  Instruction* x = b.Parameter(0, F32({4}), "x");
  x->sharding = "{devices=[2,1]0,1}";
  Instruction* key = b.Parameter(1, Shape(DType::kU64, {2}), "key");
  key->sharding = "{replicated}";
  Instruction* rng = b.RngBitGenerator(key, Shape(DType::kU32, {4}));
  Instruction* bits = b.GetTupleElement(rng, 1);
  Instruction* called = b.Call(callee, {x, b.Convert(bits, DType::kF32)});
  called->sharding = "{{maximal device=0}, {devices=[2]0,1}}";
  Instruction* fused = b.Fusion(callee, {x, x});
  m->AddEntryComputation(b.Build(b.Tuple({called, b.GetTupleElement(rng, 0), fused})));
  return m;
}

// Nested tuple parameter, and an entry whose callees sit in between.
std::unique_ptr<Module> NestedTupleProgram() {
  auto m = std::make_unique<Module>("nested");
  Shape nested = Shape::Tuple({F32({2}), Shape::Tuple({S32({}), Shape::Tuple({})})});
  Builder f("pick");
  Instruction* p = f.Parameter(0, nested, "t");
  Computation* pick = m->AddComputation(f.Build(f.GetTupleElement(f.GetTupleElement(p, 1), 0)));
  Builder b("main");
  Instruction* t = b.Parameter(0, nested, "t");
  Instruction* held = b.OptimizationBarrier(t);
  m->AddEntryComputation(b.Build(b.Tuple({b.Call(pick, {held}), b.GetTupleElement(t, 0)})));
  return m;
}

// SPMD: partition-id and every collective, over 4 partitions.
std::unique_ptr<Module> CollectivesProgram() {
  auto m = std::make_unique<Module>("spmd");
  m->set_num_partitions(4);
  Computation* add =
      m->AddComputation(MakeScalarBinaryComputation("add", Opcode::kAdd, DType::kF32));
  Builder b("main");
  Instruction* x = b.Parameter(0, F32({4, 2}), "x");
  Instruction* sum = b.AllReduce(x, add, {{0, 1}, {2, 3}}, 1);
  Instruction* gathered = b.AllGather(sum, 0, {{0, 1, 2, 3}}, 2);
  Instruction* scattered = b.ReduceScatter(gathered, 0, add, {{0, 2}, {1, 3}}, 3);
  Instruction* swapped = b.AllToAll(scattered, 0, {{0, 1}, {2, 3}});
  Instruction* shifted = b.CollectivePermute(swapped, {{0, 1}, {1, 2}, {2, 3}, {3, 0}}, 4);
  Instruction* id = b.PartitionId();
  auto replica = std::make_unique<Instruction>(Opcode::kReplicaId, Shape::Scalar(DType::kU32),
                                               std::vector<Instruction*>{});
  Instruction* r = b.Add(std::move(replica));
  m->AddEntryComputation(b.Build(b.Tuple({shifted, b.Add(id, r)})));
  return m;
}

using ProgramFactory = std::function<std::unique_ptr<Module>()>;

// Written in XLA's text form: the builder has no convolution method.
std::unique_ptr<Module> ConvolutionProgram() {
  return ParseModule(R"(HloModule convolution
ENTRY main {
  x = f32[2,5,5,3] parameter(0)
  k = f32[3,3,3,4] parameter(1)
  ROOT c = f32[2,3,3,4] convolution(x, k), window={size=3x3 stride=2x2 pad=1_1x1_1 rhs_dilate=1x1}, dim_labels=b01f_01io->b01f
})");
}

std::unique_ptr<Module> PoolingProgram() {
  return ParseModule(R"(HloModule pooling
max {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}
ge {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = pred[] compare(a, b), direction=GE
}
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY main {
  x = f32[2,6,6,3] parameter(0)
  lowest = f32[] constant(-inf)
  pooled = f32[2,3,3,3] reduce-window(x, lowest), window={size=1x3x3x1 stride=1x2x2x1 pad=0_0x1_1x1_1x0_0}, to_apply=max
  zero = f32[] constant(0)
  ROOT grad = f32[2,6,6,3] select-and-scatter(x, pooled, zero), window={size=1x3x3x1 stride=1x2x2x1 pad=0_0x1_1x1_1x0_0}, select=ge, scatter=add
})");
}

// Built with the builder: one sort of one operand, one of two in total order.
std::unique_ptr<Module> SortProgram() {
  auto m = std::make_unique<Module>("sorting");
  Builder lt("lt");
  auto* a = lt.Parameter(0, Shape::Scalar(DType::kS32), "a");
  auto* b = lt.Parameter(1, Shape::Scalar(DType::kS32), "b");
  Computation* less = m->AddComputation(lt.Build(lt.Compare(a, b, Comparison::kLt)));
  Builder gt("gt_total");
  auto* x = gt.Parameter(0, Shape::Scalar(DType::kF32), "x");
  auto* y = gt.Parameter(1, Shape::Scalar(DType::kF32), "y");
  gt.Parameter(2, Shape::Scalar(DType::kS32), "i");
  gt.Parameter(3, Shape::Scalar(DType::kS32), "j");
  Computation* greater =
      m->AddComputation(gt.Build(gt.Compare(x, y, Comparison::kGt, ComparisonType::kTotalOrder)));
  Builder e("main");
  auto* keys = e.Parameter(0, Shape(DType::kF32, {3, 4}), "keys");
  auto* values = e.Parameter(1, Shape(DType::kS32, {3, 4}), "values");
  auto* sorted = e.Sort({values}, 0, less);
  auto* both = e.Sort({keys, sorted}, 1, greater, /*is_stable=*/true);
  auto* top = e.TopK(keys, 2, /*largest=*/false);
  m->AddEntryComputation(e.Build(e.Tuple({both, top})));
  return m;
}

// A conditional of each form, built with the builder.
std::unique_ptr<Module> ConditionalProgram() {
  auto m = std::make_unique<Module>("conditionals");
  Builder neg("neg");
  Computation* negate = m->AddComputation(
      neg.Build(neg.Unary(Opcode::kNegate, neg.Parameter(0, Shape(DType::kF32, {3}), "a"))));
  Builder id("id");
  Computation* identity =
      m->AddComputation(id.Build(id.Parameter(0, Shape(DType::kF32, {3}), "a")));
  Builder e("main");
  auto* x = e.Parameter(0, Shape(DType::kF32, {3}), "x");
  auto* p = e.Parameter(1, Shape::Scalar(DType::kPred), "p");
  auto* i = e.Parameter(2, Shape::Scalar(DType::kS32), "i");
  auto* by_pred = e.Conditional(p, {negate, identity}, {x, x});
  auto* by_index = e.Conditional(i, {identity, negate, identity}, {by_pred, x, by_pred});
  m->AddEntryComputation(e.Build(by_index));
  return m;
}

// A manual region as jax.shard_map writes it: into each device's shard, a
// per-device sum, out to the whole array.
std::unique_ptr<Module> ManualProgram() {
  auto m = std::make_unique<Module>("manual");
  m->set_num_partitions(2);
  Builder add("add_f32");
  auto* a = add.Parameter(0, Shape::Scalar(DType::kF32), "a");
  auto* b = add.Parameter(1, Shape::Scalar(DType::kF32), "b");
  Computation* sum = m->AddComputation(add.Build(add.Add(a, b)));
  Builder e("main");
  auto* x = e.Parameter(0, Shape(DType::kF32, {8, 4}), "x");
  x->sharding = "{devices=[2,1]0,1}";
  auto* shard = e.CustomCall(x, "SPMDFullToShardShape", Shape(DType::kF32, {4, 4}));
  shard->sharding = "{manual}";
  auto* total = e.AllReduce(shard, sum, {{0, 1}});
  auto* full = e.CustomCall(total, "SPMDShardToFullShape", Shape(DType::kF32, {8, 4}));
  full->sharding = "{devices=[2,1]0,1}";
  m->AddEntryComputation(e.Build(full));
  return m;
}

// Complex numbers (a c64 constant, parts, complex) and tokens (after-all,
// add-dependency).
std::unique_ptr<Module> ComplexTokenProgram() {
  auto m = std::make_unique<Module>("complex_tokens");
  Builder e("main");
  auto op = [&](Opcode opcode, std::vector<Instruction*> operands) {
    return e.Add(std::make_unique<Instruction>(opcode, Shape(), std::move(operands)));
  };
  auto* x = e.Parameter(0, Shape(DType::kF32, {2}), "x");
  auto* y = e.Parameter(1, Shape(DType::kF32, {2}), "y");
  Literal rotation(Shape(DType::kC64, {2}));
  rotation.SetComplex(0, 0, 1);
  rotation.SetComplex(1, -0.5, 2.25);
  auto* z = e.Multiply(op(Opcode::kComplex, {x, y}), e.Constant(rotation));
  auto* start = op(Opcode::kAfterAll, {});
  auto* joined = op(Opcode::kAfterAll, {start, start});
  auto* re = op(Opcode::kAddDependency, {op(Opcode::kReal, {z}), joined});
  m->AddEntryComputation(e.Build(e.Tuple({re, op(Opcode::kImag, {z})})));
  return m;
}

// XLA's ops strata runs as others, and its linear algebra, in XLA's text.
std::unique_ptr<Module> XlaOnlyProgram() {
  return ParseModule(R"(HloModule xla_only, num_partitions=2
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY main {
  x = f32[4,2] parameter(0)
  v = f32[2] parameter(1)
  a = f32[2,2] parameter(2)
  bnt = (f32[4,2], f32[2], f32[2]) batch-norm-training(x, v, v), epsilon=0.001, feature_index=1
  bni = f32[4,2] batch-norm-inference(x, v, v, v, v), epsilon=1e-05, feature_index=1
  bng = (f32[4,2], f32[2], f32[2]) batch-norm-grad(x, v, v, v, bni), epsilon=0.5, feature_index=1
  m = f32[4,2] map(x, bni), dimensions={0,1}, to_apply=add
  rp = f32[4,2] reduce-precision(m), exponent_bits=5, mantissa_bits=10
  l = f32[2,2] cholesky(a), lower=true
  s = f32[2,2] triangular-solve(l, a), left_side=false, lower=true, unit_diagonal=true, transpose_a=TRANSPOSE
  ars = f32[4,2] all-reduce-start(m), channel_id=1, replica_groups={{0,1}}, to_apply=add
  ard = f32[4,2] all-reduce-done(ars)
  ags = (f32[4,2], f32[8,2]) all-gather-start(ard), channel_id=2, replica_groups={{0,1}}, dimensions={0}
  agd = f32[8,2] all-gather-done(ags)
  cps = (f32[2,2], f32[2,2], u32[], u32[]) collective-permute-start(s), channel_id=3, source_target_pairs={{0,1},{1,0}}
  cpd = f32[2,2] collective-permute-done(cps)
  cs = (f32[2,2], f32[2,2], u32[]) copy-start(cpd)
  cd = f32[2,2] copy-done(cs)
  ROOT out = ((f32[4,2], f32[2], f32[2]), (f32[4,2], f32[2], f32[2]), f32[8,2], f32[2,2]) tuple(bnt, bng, agd, cd)
}
)");
}

std::vector<std::pair<std::string, ProgramFactory>> Programs() {
  return {{"unary", UnaryProgram},
          {"conditional", ConditionalProgram},
          {"sort", SortProgram},
          {"convolution", ConvolutionProgram},
          {"pooling", PoolingProgram},
          {"binary", BinaryProgram},
          {"layout", LayoutProgram},
          {"slicing", SlicingProgram},
          {"compare", CompareProgram},
          {"convert", ConvertProgram},
          {"constants", ConstantProgram},
          {"reduce", ReduceProgram},
          {"dot", DotProgram},
          {"gather_scatter", GatherScatterProgram},
          {"while", WhileProgram},
          {"call_rng_sharding", CallRngShardingProgram},
          {"nested_tuple", NestedTupleProgram},
          {"collectives", CollectivesProgram},
          {"manual", ManualProgram},
          {"complex_tokens", ComplexTokenProgram},
          {"xla_only", XlaOnlyProgram}};
}

TEST(ParserRoundTrip, EveryProgramPrintsIdentically) {
  for (const auto& [name, make] : Programs()) {
    SCOPED_TRACE(name);
    auto m = make();
    std::string text = ToText(*m);
    std::unique_ptr<Module> parsed;
    ASSERT_NO_THROW(parsed = ParseModule(text)) << text;
    EXPECT_EQ(ToText(*parsed), text);
    EXPECT_EQ(parsed->name(), m->name());
    ASSERT_EQ(parsed->computations().size(), m->computations().size());
    EXPECT_EQ(parsed->entry()->name(), m->entry()->name());
  }
}

TEST(ParserRoundTrip, EveryOpcodeIsCovered) {
  std::set<Opcode> seen;
  for (const auto& [name, make] : Programs()) {
    auto parsed = ParseModule(ToText(*make()));
    for (const auto& c : parsed->computations()) {
      for (const auto& inst : c->instructions()) seen.insert(inst->opcode());
    }
  }
#define STRATA_EXPECT_SEEN(e, name, kind, ...) \
  EXPECT_TRUE(seen.count(Opcode::e)) << "no round-trip program uses " << name;
  STRATA_HLO_OPCODES(STRATA_EXPECT_SEEN)
#undef STRATA_EXPECT_SEEN
}

TEST(ParserRoundTrip, ConstantsKeepEveryByte) {
  auto m = ConstantProgram();
  auto parsed = ParseModule(ToText(*m));
  const Computation& original = *m->entry();
  const Computation& reread = *parsed->entry();
  for (int64_t i = 0;; ++i) {
    const Instruction* a = Find(original, Opcode::kConstant, i);
    const Instruction* b = Find(reread, Opcode::kConstant, i);
    ASSERT_EQ(a == nullptr, b == nullptr);
    if (!a) break;
    EXPECT_TRUE(a->literal == b->literal) << a->name() << " = " << a->literal.ValueToString()
                                          << " reread as " << b->literal.ValueToString();
  }
}

TEST(ParserRoundTrip, ParsedAttributesHaveTheWrittenValues) {
  auto dot = ParseModule(ToText(*DotProgram()));
  const Instruction* matmul = Find(*dot->entry(), Opcode::kDot, 0);
  EXPECT_EQ(matmul->dot.lhs_contracting, std::vector<int64_t>{1});
  EXPECT_EQ(matmul->dot.rhs_contracting, std::vector<int64_t>{0});
  EXPECT_TRUE(matmul->dot.lhs_batch.empty());
  const Instruction* batched = Find(*dot->entry(), Opcode::kDot, 1);
  EXPECT_EQ(batched->dot.lhs_batch, std::vector<int64_t>{0});
  EXPECT_EQ(batched->dot.rhs_contracting, std::vector<int64_t>{1});
  EXPECT_EQ(batched->shape(), F32({2, 4, 5}));

  auto constants = ParseModule(ToText(*ConstantProgram()));
  const Instruction* f32 = nullptr;
  for (int64_t i = 0; const Instruction* c = Find(*constants->entry(), Opcode::kConstant, i); ++i) {
    if (c->shape() == F32({9})) f32 = c;
  }
  ASSERT_NE(f32, nullptr);
  EXPECT_EQ(f32->literal.GetAsDouble(0), 1.5);
  EXPECT_EQ(f32->literal.GetAsDouble(2), static_cast<double>(1e-05f));
  EXPECT_EQ(f32->literal.GetAsDouble(3), -std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isnan(f32->literal.GetAsDouble(5)));
  EXPECT_TRUE(std::signbit(f32->literal.GetAsDouble(6)));
  const Instruction* s64 = Find(*constants->entry(), Opcode::kConstant, 3);
  ASSERT_EQ(s64->shape(), Shape(DType::kS64, {3}));
  EXPECT_EQ(s64->literal.data_as<int64_t>()[0], INT64_MIN);
  EXPECT_EQ(s64->literal.data_as<int64_t>()[1], 9007199254740993);
  const Instruction* u64 = Find(*constants->entry(), Opcode::kConstant, 6);
  EXPECT_EQ(u64->literal.data_as<uint64_t>()[1], 18446744073709551615u);

  auto slicing = ParseModule(ToText(*SlicingProgram()));
  const Instruction* slice = Find(*slicing->entry(), Opcode::kSlice);
  ASSERT_EQ(slice->slice.size(), 2u);
  EXPECT_EQ(slice->slice[0], (SliceRange{1, 7, 2}));
  EXPECT_EQ(slice->slice[1], (SliceRange{0, 6, 3}));
  const Instruction* pad = Find(*slicing->entry(), Opcode::kPad);
  EXPECT_EQ(pad->padding[0], (PadRange{1, 2, 1}));
  EXPECT_EQ(pad->padding[1], (PadRange{-1, 0, 2}));
  EXPECT_EQ(pad->shape(), F32({8, 3}));
  EXPECT_TRUE(Find(*slicing->entry(), Opcode::kPad, 1)->padding.empty());

  auto loop = ParseModule(ToText(*WhileProgram()));
  const Instruction* w = Find(*loop->entry(), Opcode::kWhile);
  ASSERT_EQ(w->called.size(), 2u);
  EXPECT_EQ(w->called[0]->name(), "cond");
  EXPECT_EQ(w->called[1]->name(), "body");
  EXPECT_EQ(Find(*loop->entry(), Opcode::kGetTupleElement)->tuple_index, 1);

  auto rng = ParseModule(ToText(*CallRngShardingProgram()));
  EXPECT_EQ(Find(*rng->entry(), Opcode::kRngBitGenerator)->rng_algorithm, "rng_philox");
  EXPECT_EQ(FindNamed(*rng->entry(), "x")->sharding, "{devices=[2,1]0,1}");
  EXPECT_EQ(Find(*rng->entry(), Opcode::kCall)->sharding, "{{maximal device=0}, {devices=[2]0,1}}");
  EXPECT_EQ(Find(*rng->entry(), Opcode::kCall)->called[0]->name(), "fma");

  auto compare = ParseModule(ToText(*CompareProgram()));
  EXPECT_EQ(Find(*compare->entry(), Opcode::kCompare, 4)->direction, Comparison::kGt);
}

// ---------------------------------------------------------------------------
// XLA's spellings.

TEST(ParserXlaForms, AcceptsPercentNamesOperandShapesLayoutsAndModuleAttributes) {
  auto m = ParseModule(
      R"(HloModule jit_f, is_scheduled=true, entry_computation_layout={(f32[2,3]{1,0}, f32[2,3]{1,0})->f32[2,3]{1,0:T(8,128)}}, allow_spmd_sharding_propagation_to_output={true}

ENTRY %main.4 (Arg_0.1: f32[2,3], Arg_1.2: f32[2,3]) -> f32[2,3] {
  %Arg_0.1 = f32[2,3]{1,0:T(8,128)S(1)} parameter(0), sharding={replicated}
  %Arg_1.2 = f32[2,3]{1,0} parameter(1), metadata={op_name="y" source_file="a \"quoted\" path"}
  ROOT %add.3 = f32[2,3]{1,0} add(f32[2,3]{1,0} %Arg_0.1, f32[2,3]{1,0} %Arg_1.2), metadata={op_type="add" op_name="jit(f)/add" source_file="f.py" source_line=12}, backend_config="{\"x\":1}", frontend_attributes={a="b"}
}
)");
  EXPECT_EQ(m->name(), "jit_f");
  EXPECT_EQ(m->entry()->name(), "main.4");
  const Instruction* root = m->entry()->root();
  EXPECT_EQ(root->name(), "add.3");
  EXPECT_EQ(root->operand(1)->name(), "Arg_1.2");
  EXPECT_EQ(root->operand(0)->sharding, "{replicated}");
  EXPECT_EQ(root->shape(), F32({2, 3}));
}

TEST(ParserXlaForms, MissingRootMeansTheLastInstruction) {
  auto m = ParseModule(
      "HloModule m\nENTRY main {\n  x = f32[2] parameter(0)\n"
      "  y = f32[2] negate(x)\n  z = f32[2] abs(x)\n}\n");
  EXPECT_EQ(m->entry()->root()->name(), "z");
}

TEST(ParserXlaForms, OperandsMayBeWrittenAfterTheirUsers) {
  auto m = ParseModule(
      "HloModule m\nENTRY main {\n  ROOT y = f32[2] negate(x)\n"
      "  x = f32[2] parameter(0)\n}\n");
  ASSERT_EQ(m->entry()->instruction_count(), 2);
  EXPECT_EQ(m->entry()->instructions()[0]->name(), "x");
  EXPECT_EQ(m->entry()->root()->name(), "y");
}

TEST(ParserXlaForms, CommentsSignaturesAndEntryPlacement) {
  // ENTRY need not be last; computations need no signature; comments anywhere.
  auto m = ParseModule(R"(HloModule m  // trailing comment
/* a block
   comment */
%twice (p: f32[]) -> f32[] {
  %p = f32[] parameter(0)
  ROOT %s = f32[] add(%p, %p)
}
ENTRY %main {
  %x = f32[] parameter(0) /* inline */
  ROOT %c = f32[] call(f32[] %x), to_apply=%twice
}
unused {
  ROOT q = s32[] parameter(0)  // a computation after the entry
}
)");
  EXPECT_EQ(m->entry()->name(), "main");
  ASSERT_EQ(m->computations().size(), 3u);
  EXPECT_EQ(m->computations()[1].get(), m->entry());
  EXPECT_EQ(m->entry()->root()->called[0], m->computations()[0].get());
}

TEST(ParserXlaForms, CalleeDefinedAfterCallerIsUndefined) {
  EXPECT_THROW(ParseModule("HloModule m\nENTRY main {\n  x = f32[] parameter(0)\n"
                           "  ROOT c = f32[] call(x), to_apply=later\n}\n"
                           "later {\n  p = f32[] parameter(0)\n  ROOT n = f32[] negate(p)\n}\n"),
               Error);
}

TEST(ParserXlaForms, ConstantSpellings) {
  auto m = ParseModule(R"(HloModule m
ENTRY main {
  a = f32[2,2]{1,0} constant({ { 1, 2 }, { 3, 4 } })
  b = f32[2,2] constant({{-1.5,2e3},{1e-05,-inf}})
  c = pred[3] constant({true, 0, false})
  d = f32[] constant(nan)
  e = s32[] constant(-2147483648)
  f = bf16[] constant(inf)
  ROOT t = (f32[2,2], f32[2,2], pred[3], f32[], s32[], bf16[]) tuple(a, b, c, d, e, f)
}
)");
  const Computation& c = *m->entry();
  EXPECT_EQ(FindNamed(c, "a")->literal.GetAsDouble(2), 3.0);
  const Literal& b = FindNamed(c, "b")->literal;
  EXPECT_EQ(b.GetAsDouble(0), -1.5);
  EXPECT_EQ(b.GetAsDouble(1), 2000.0);
  EXPECT_EQ(b.GetAsDouble(2), static_cast<double>(1e-05f));
  EXPECT_EQ(b.GetAsDouble(3), -INFINITY);
  EXPECT_EQ(FindNamed(c, "c")->literal.GetAsDouble(0), 1.0);
  EXPECT_EQ(FindNamed(c, "c")->literal.GetAsDouble(1), 0.0);
  EXPECT_TRUE(std::isnan(FindNamed(c, "d")->literal.GetAsDouble(0)));
  EXPECT_EQ(FindNamed(c, "e")->literal.GetAsDouble(0), -2147483648.0);
  EXPECT_EQ(FindNamed(c, "f")->literal.GetAsDouble(0), INFINITY);
}

TEST(ParserXlaForms, RngDefaultScalarPaddingAndExtraAttributes) {
  auto m = ParseModule(R"(HloModule m
ENTRY main {
  key = u64[2]{0} parameter(0)
  r = (u64[2]{0}, u32[4]{0}) rng-bit-generator(key), algorithm=rng_default
  z = f32[] constant(0)
  p = f32[] pad(z, z), padding={}
  q = pred[] compare(z, p), direction=LT, type=TOTALORDER
  ROOT t = ((u64[2], u32[4]), f32[], pred[]) tuple(r, p, q), control-predecessors={%z}, statistics={visualizing_index=1}
}
)");
  EXPECT_EQ(FindNamed(*m->entry(), "r")->rng_algorithm, "rng_default");
  EXPECT_TRUE(FindNamed(*m->entry(), "p")->padding.empty());
  EXPECT_EQ(FindNamed(*m->entry(), "q")->direction, Comparison::kLt);
}

TEST(ParserXlaForms, SkipsEveryHarmlessAttribute) {
  const std::pair<std::string, std::string> kAttributes[] = {
      {"metadata", R"({op_name="a{b(" source_file="x\"}.py" source_line=3})"},
      {"frontend_attributes", R"({_scheduling_group_id="1"})"},
      {"backend_config", R"("{\"a\": [1, 2]}")"},
      {"backend_config", R"({"a": {"b": [1, (2)]}})"},
      {"origin", R"({{"fwd", [0]}})"},
      {"statistics", "{visualizing_index=1,stat-index-0=0.5}"},
      {"control-predecessors", "{%x}"},
      {"comparison_type", "FLOAT"},
      {"type", "TOTALORDER"},
      {"operand_precision", "{highest,default}"},
      {"precision_config", "{DEFAULT,DEFAULT}"},
      {"indices_are_sorted", "true"},
      {"unique_indices", "true"},
      {"largest", "false"},
      {"parameter_replication", "{false}"},
      {"is_composite", "true"},
  };
  for (const auto& [key, value] : kAttributes) {
    SCOPED_TRACE(key + "=" + value);
    std::string text =
        "HloModule m\nENTRY main {\n  x = f32[2] parameter(0)\n"
        "  ROOT y = f32[2] negate(x), " +
        key + "=" + value + ", sharding={replicated}\n}\n";
    std::unique_ptr<Module> m;
    ASSERT_NO_THROW(m = ParseModule(text));
    EXPECT_EQ(m->entry()->root()->name(), "y");
    EXPECT_EQ(m->entry()->root()->sharding, "{replicated}");
  }
}

// A composite call as JAX emits it (is_composite, and the composite's name,
// version and attributes in frontend_attributes) is the call of its
// decomposition.
TEST(ParserXlaForms, CompositeCallIsACallOfItsDecomposition) {
  auto m = ParseModule(R"(HloModule composite

%my.double.impl {
  %x.1 = f32[2]{0} parameter(0)
  ROOT %add.1 = f32[2]{0} add(f32[2]{0} %x.1, f32[2]{0} %x.1)
}

ENTRY %main {
  %p = f32[2]{0} parameter(0)
  ROOT %call.1 = f32[2]{0} call(f32[2]{0} %p), to_apply=%my.double.impl, is_composite=true, frontend_attributes={composite.attributes={n = 1 : i32},composite.name="my.double",composite.version="1"}
}
)");
  const Instruction* call = m->entry()->root();
  EXPECT_EQ(call->opcode(), Opcode::kCall);
  ASSERT_EQ(call->called.size(), 1u);
  EXPECT_EQ(call->called[0]->root()->opcode(), Opcode::kAdd);
}

// ---------------------------------------------------------------------------
// Malformed text: each error names the line, column and what was expected.

struct BadInput {
  std::string name;
  std::string text;
  int line, column;
  std::string message;
};

// Lines 1-3 of most cases; line 4 is the case's own line.
const std::string kHead = "HloModule m\nENTRY main {\n  x = f32[2] parameter(0)\n";

std::vector<BadInput> BadInputs() {
  return {
      {"empty", "", 1, 1, "expected 'HloModule', found end of input"},
      {"only_comment", "// nothing\n", 2, 1, "expected 'HloModule'"},
      {"no_module_name", "HloModule {", 1, 11, "expected a module name"},
      {"unknown_opcode", kHead + "  ROOT y = f32[2] frobnicate(x)\n}\n", 4, 19,
       "unknown opcode 'frobnicate'"},
      {"missing_equals", kHead + "  ROOT y f32[2] negate(x)\n}\n", 4, 10,
       "expected '=' after instruction name 'y', found 'f32'"},
      {"missing_paren_before_attribute", kHead + "  ROOT y = f32[2] negate(x, dimensions={0})\n}\n",
       4, 39, "expected ')' after operands, found '='"},
      {"missing_paren_at_line_end", kHead + "  ROOT y = f32[2] negate(x\n}\n", 5, 1,
       "expected ')' after operands, found '}'"},
      {"truncated_shape", "HloModule m\nENTRY main {\n  x = f32[2,", 3, 13,
       "expected a dimension size, found end of input"},
      {"bad_shape_dims", kHead + "  ROOT y = f32[2, negate(x)\n}\n", 4, 19,
       "expected a dimension size, found 'negate'"},
      {"negative_dimension", "HloModule m\nENTRY main {\n  x = f32[-2] parameter(0)\n}\n", 3, 11,
       "dimension size must be non-negative"},
      {"huge_dimension",
       "HloModule m\nENTRY main {\n  x = f32[99999999999999999999] parameter(0)\n}\n", 3, 11,
       "does not fit in 64 bits"},
      {"too_many_bytes",
       "HloModule m\nENTRY main {\n  x = f64[4611686018427387904] parameter(0)\n}\n", 3, 11,
       "too large"},
      {"unknown_dtype", "HloModule m\nENTRY main {\n  x = f33[2] parameter(0)\n}\n", 3, 7,
       "unknown element type 'f33'"},
      {"undefined_operand", kHead + "  ROOT y = f32[2] negate(z)\n}\n", 4, 26,
       "undefined operand 'z'"},
      {"undefined_computation", kHead + "  ROOT y = f32[2] call(x), to_apply=nowhere\n}\n", 4, 37,
       "undefined computation 'nowhere'"},
      {"duplicate_instruction", kHead + "  x = f32[2] negate(x)\n}\n", 4, 3,
       "duplicate instruction name 'x'"},
      {"duplicate_parameter_number", kHead + "  y = f32[2] parameter(0)\n}\n", 4, 24,
       "duplicate parameter number 0"},
      {"parameter_gap", kHead + "  ROOT y = f32[2] parameter(2)\n}\n", 2, 7,
       "has 2 parameters but no parameter(1)"},
      {"unknown_attribute", kHead + "  ROOT y = f32[2] negate(x), colour=blue\n}\n", 4, 30,
       "unknown attribute 'colour'"},
      {"misplaced_attribute", kHead + "  ROOT y = f32[2] negate(x), dimensions={0}\n}\n", 4, 30,
       "attribute 'dimensions' does not apply to negate"},
      {"missing_attribute", kHead + "  ROOT y = f32[2] call(x)\n}\n", 4, 19,
       "call is missing attribute 'to_apply'"},
      {"bad_fusion_kind", kHead + "  ROOT y = f32[2] fusion(x), kind=kWide, calls=f\n}\n", 4, 35,
       "expected fusion kind kLoop, kInput, kOutput or kCustom, found 'kWide'"},
      {"bitcast_across_layouts_changing_type",
       "HloModule m\nENTRY main {\n  x = f32[2,3]{0,1} parameter(0)\n"
       "  ROOT y = s32[6]{0} bitcast(x)\n}\n",
       4, 22, "bitcast with a layout other than the default (row-major) one"},
      {"bitcast_tiled_result", kHead + "  ROOT y = f32[2]{0:T(128)} bitcast(x)\n}\n", 4, 29,
       "bitcast with a layout other than the default"},
      {"bitcast_changes_type_and_dims", kHead + "  ROOT y = s16[4]{0} bitcast(f32[2]{0} x)\n}\n", 4,
       22, "bitcast from f32[2] to s16[4] changes the element type and the dims"},
      {"bad_direction", kHead + "  ROOT y = pred[2] compare(x, x), direction=XX\n}\n", 4, 45,
       "expected a comparison direction (EQ, NE, LT, LE, GT or GE), found 'XX'"},
      {"too_few_values", kHead + "  ROOT c = f32[4] constant({1, 2, 3})\n}\n", 4, 36,
       "constant has 3 values in dimension 0 but shape f32[4] needs 4"},
      {"too_many_rows", kHead + "  ROOT c = f32[1,2] constant({ {1, 2}, {3, 4} })\n}\n", 4, 47,
       "constant has 2 values in dimension 0"},
      {"out_of_range_s8", kHead + "  ROOT c = s8[2] constant({1, 300})\n}\n", 4, 31,
       "value 300 is out of range for s8"},
      {"out_of_range_f16", kHead + "  ROOT c = f16[] constant(70000)\n}\n", 4, 27,
       "value 70000 is out of range for f16"},
      {"negative_u64", kHead + "  ROOT c = u64[] constant(-1)\n}\n", 4, 27,
       "value -1 is out of range for u64"},
      {"not_a_number", kHead + "  ROOT c = f32[] constant(abc)\n}\n", 4, 27,
       "expected a f32 value, found 'abc'"},
      {"fraction_for_integer", kHead + "  ROOT c = s32[] constant(1.5)\n}\n", 4, 27,
       "expected a s32 value, found '1.5'"},
      {"elided_constant", kHead + "  ROOT c = f32[4] constant({...})\n}\n", 4, 29, "elided"},
      {"tuple_constant", kHead + "  ROOT c = (f32[], f32[]) constant(1)\n}\n", 4, 12,
       "tuple-shaped constants are not supported"},
      {"unterminated_string", kHead + "  ROOT y = f32[2] negate(x), metadata={op_name=\"oops}\n}\n",
       4, 48, "unterminated string"},
      {"unbalanced_metadata", kHead + "  ROOT y = f32[2] negate(x), metadata={op_name=\"a\"]\n}\n",
       4, 51, "expected '}' to close '{' from line 4, column 39, found ']'"},
      {"unterminated_comment", "HloModule m\n/* never closed\nENTRY main {}", 2, 1,
       "unterminated comment"},
      {"unclosed_computation", kHead, 4, 1,
       "expected '}' to close computation 'main', found end of input"},
      {"verifier_shape_mismatch",
       "HloModule m\nENTRY main {\n  a = f32[2] parameter(0)\n  b = f32[3] parameter(1)\n"
       "  ROOT c = f32[2] add(a, b)\n}\n",
       5, 8, "operands must have equal shapes, got f32[2] and f32[3]"},
      {"declared_shape_mismatch", kHead + "  ROOT y = f32[3] negate(x)\n}\n", 4, 8,
       "y declares shape f32[3] but its operands give f32[2]"},
      {"operand_shape_mismatch", kHead + "  ROOT y = f32[2] negate(f32[3] x)\n}\n", 4, 33,
       "operand 'x' is written as f32[3] but is defined as f32[2]"},
      {"cycle", kHead + "  a = f32[2] negate(b)\n  ROOT b = f32[2] negate(a)\n}\n", 5, 8,
       "depends on itself"},
      {"second_root", kHead + "  ROOT a = f32[2] negate(x)\n  ROOT b = f32[2] negate(a)\n}\n", 5, 3,
       "already has ROOT 'a'"},
      {"duplicate_computation",
       "HloModule m\nf {\n  p = f32[] parameter(0)\n}\nf {\n  p = f32[] parameter(0)\n}\n", 5, 1,
       "duplicate computation name 'f'"},
      {"second_entry",
       "HloModule m\nENTRY f {\n  p = f32[] parameter(0)\n}\nENTRY g {\n  p = f32[] "
       "parameter(0)\n}\n",
       5, 1, "second ENTRY computation"},
      {"empty_computation", "HloModule m\nENTRY main {\n}\n", 3, 1, "has no instructions"},
      {"missing_arrow", "HloModule m\nENTRY main (x: f32[2]) f32[2] {\n", 2, 24,
       "expected '->' after the parameter list, found 'f32'"},
      {"bad_padding", kHead + "  ROOT y = f32[2] pad(x, x), padding=1_2_3_4\n}\n", 4, 38,
       "expected padding low_high[_interior]"},
      {"bad_rng_algorithm",
       kHead + "  ROOT y = (u64[2], u32[4]) rng-bit-generator(x), algorithm=rng_mersenne\n}\n", 4,
       61, "expected rng algorithm rng_philox, rng_three_fry or rng_default, found 'rng_mersenne'"},
      {"control_byte", kHead + "  \x01\n}\n", 4, 3, "expected an instruction name, found '\\x01'"},
      {"deep_tuple_shape", "HloModule m\nENTRY main {\n  x = " + std::string(300, '(') + "\n", 3,
       264, "nested deeper than 256"},
  };
}

// XLA's bitcast under default layouts is a reshape: the same row-major
// bytes read in the new shape, as written by XLA's dumps (layouts and
// operand shapes inline).
TEST(Parser, BitcastWithDefaultLayoutsIsAReshape) {
  auto m = ParseModule(
      "HloModule m\nENTRY main {\n  %x = f32[2,3]{1,0} parameter(0)\n"
      "  ROOT %y = f32[3,2]{1,0} bitcast(f32[2,3]{1,0} %x)\n}\n");
  const Instruction* root = m->entry()->root();
  EXPECT_EQ(root->opcode(), Opcode::kReshape);
  EXPECT_EQ(root->shape().ToString(), "f32[3,2]");
  EXPECT_EQ(root->operand(0)->name(), "x");
}

// XLA's optimized modules bitcast between element types of one size (f32 to
// s32, to compare floats by their bits, as its sort comparators do): a
// bitcast-convert. Checked against the bits worked out by hand.
TEST(Parser, BitcastToAnotherTypeOfTheSameSizeIsABitcastConvert) {
  auto m = ParseModule(
      "HloModule m\nENTRY main {\n  %x = f32[2]{0} parameter(0)\n"
      "  ROOT %y = s32[2]{0} bitcast(%x)\n}\n");
  const Instruction* root = m->entry()->root();
  EXPECT_EQ(root->opcode(), Opcode::kBitcastConvert);
  EXPECT_EQ(root->shape().ToString(), "s32[2]");
}

// XLA prints debug tables (FileNames, FunctionNames, FileLocations,
// StackFrames) between the module's header and its computations.
TEST(Parser, StackFrameTablesAfterTheHeaderAreSkipped) {
  auto m = ParseModule(
      "HloModule m, is_scheduled=true\n\nFileNames\n1 \"<string>\"\n\nFunctionNames\n"
      "1 \"<module>\"\n2 \"<lambda>\"\n\nFileLocations\n1 {file_name_id=1 "
      "function_name_id=1 line=6 end_line=6 column=4 end_column=17}\n\nStackFrames\n"
      "1 {file_location_id=1 parent_frame_id=1}\n\n"
      "ENTRY %main (x: f32[2]) -> f32[2] {\n  %x = f32[2]{0} parameter(0)\n"
      "  ROOT %y = f32[2]{0} negate(%x), metadata={op_name=\"neg\" stack_frame_id=1}\n}\n");
  EXPECT_EQ(m->entry()->root()->opcode(), Opcode::kNegate);
  // a computation that happens to be named like a table still parses as one
  auto named = ParseModule(
      "HloModule m\nStackFrames {\n  a = f32[] parameter(0)\n  ROOT n = f32[] negate(a)\n}\n"
      "ENTRY main {\n  x = f32[] parameter(0)\n  ROOT c = f32[] call(x), to_apply=StackFrames\n"
      "}\n");
  EXPECT_EQ(named->computations().size(), 2u);
}

TEST(ParserErrors, ReportLineColumnAndWhatWasExpected) {
  for (const BadInput& bad : BadInputs()) {
    SCOPED_TRACE(bad.name);
    std::string prefix =
        "line " + std::to_string(bad.line) + ", column " + std::to_string(bad.column) + ": ";
    try {
      ParseModule(bad.text);
      ADD_FAILURE() << "parsed without error:\n" << bad.text;
    } catch (const Error& e) {
      std::string message = e.what();
      EXPECT_EQ(message.rfind(prefix, 0), 0u) << message;
      EXPECT_NE(message.find(bad.message), std::string::npos) << message;
    }
  }
}

// ---------------------------------------------------------------------------
// Robustness: truncations and random mutations either parse or throw Error.

// Returns true if `text` parsed. Anything accepted must print and re-parse
// to the same text.
bool ParsesOrThrowsError(const std::string& text) {
  std::unique_ptr<Module> m;
  try {
    m = ParseModule(text);
  } catch (const InternalError& e) {
    ADD_FAILURE() << "internal error " << e.what() << " for:\n" << text;
    return false;
  } catch (const Error&) {
    return false;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "non-strata exception " << e.what() << " for:\n" << text;
    return false;
  }
  std::string printed = ToText(*m);
  try {
    EXPECT_EQ(ToText(*ParseModule(printed)), printed);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "printed form does not re-parse: " << e.what() << "\n" << printed;
  }
  return true;
}

std::string Mutate(std::string text, std::mt19937_64& rng) {
  static constexpr std::string_view kInteresting = "{}()[],=%:-\"/*0123456789xe.\n ";
  int edits = 1 + static_cast<int>(rng() % 3);
  for (int e = 0; e < edits; ++e) {
    size_t at = text.empty() ? 0 : rng() % text.size();
    char byte = rng() % 2 ? kInteresting[rng() % kInteresting.size()] : static_cast<char>(rng());
    switch (rng() % 3) {
      case 0:
        if (!text.empty()) text[at] = byte;
        break;
      case 1:
        text.insert(text.begin() + at, byte);
        break;
      default:
        if (!text.empty()) text.erase(at, 1);
        break;
    }
  }
  return text;
}

TEST(ParserRobustness, EveryTruncationParsesOrThrows) {
  for (const auto& [name, make] : Programs()) {
    SCOPED_TRACE(name);
    std::string text = ToText(*make());
    int parsed = 0;
    for (size_t n = 0; n <= text.size(); ++n) parsed += ParsesOrThrowsError(text.substr(0, n));
    // A prefix parses only if it ends after a computation's '}': "}", "}\n"
    // and, between computations, "}\n\n".
    int64_t computations = static_cast<int64_t>(make()->computations().size());
    EXPECT_EQ(parsed, 3 * (computations - 1) + 2);
  }
}

TEST(ParserRobustness, RandomMutationsParseOrThrow) {
  std::mt19937_64 rng(20240611);
  auto programs = Programs();
  int parsed = 0;
  for (int i = 0; i < 2000; ++i) {
    std::string text = ToText(*programs[i % programs.size()].second());
    parsed += ParsesOrThrowsError(Mutate(text, rng));
  }
  // Many mutations hit whitespace or digits and stay valid; most do not.
  EXPECT_GT(parsed, 0);
  EXPECT_LT(parsed, 2000);
}

TEST(ParserRobustness, RandomBytesAndDeepNesting) {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 500; ++i) {
    std::string text = i % 2 ? "HloModule m\nENTRY main {\n" : "";
    size_t length = rng() % 200;
    for (size_t j = 0; j < length; ++j) text += static_cast<char>(rng());
    EXPECT_FALSE(ParsesOrThrowsError(text));
  }
  std::string deep = "HloModule m, x=" + std::string(100000, '{') + "\n";
  EXPECT_FALSE(ParsesOrThrowsError(deep));
  std::string deep_constant = kHead + "  c = f32[1] constant(" + std::string(100000, '{');
  EXPECT_FALSE(ParsesOrThrowsError(deep_constant));
}

// A custom-call with target "Sharding" (jax.lax.with_sharding_constraint's
// form, written from XLA's HLO text) annotates its operand: a copy with the
// sharding. Any other target is an error naming it, at the instruction.
TEST(ParserXlaForms, ShardingCustomCallIsACopyWithItsSharding) {
  auto m = ParseModule(R"(HloModule jit_f, entry_computation_layout={(f32[8,4]{1,0})->f32[8,4]{1,0}}

ENTRY %main.5 (Arg_0.1: f32[8,4]) -> f32[8,4] {
  %Arg_0.1 = f32[8,4]{1,0} parameter(0), sharding={replicated}
  %custom-call.2 = f32[8,4]{1,0} custom-call(f32[8,4]{1,0} %Arg_0.1), custom_call_target="Sharding", sharding={devices=[2,1]0,1}, backend_config="", api_version=API_VERSION_ORIGINAL
  ROOT %multiply.3 = f32[8,4]{1,0} multiply(f32[8,4]{1,0} %custom-call.2, f32[8,4]{1,0} %custom-call.2)
}
)");
  const Instruction* annotated = m->entry()->root()->operand(0);
  EXPECT_EQ(annotated->opcode(), Opcode::kCopy);
  EXPECT_EQ(annotated->sharding, "{devices=[2,1]0,1}");
  // It runs: x * x, element by element.
  auto exe = compiler::Compile(*m);
  std::vector<float> x(32);
  for (int i = 0; i < 32; ++i) x[i] = static_cast<float>(i) - 10;
  auto out = exe->Run(
      {runtime::Buffer::FromVector<float>(x, {8, 4}, runtime::Client::Default().device(0))});
  std::vector<float> got = out[0].ToVector<float>();
  for (int i = 0; i < 32; ++i) EXPECT_EQ(got[i], x[i] * x[i]);
}

TEST(ParserXlaForms, OtherCustomCallTargetsAreErrorsNamingTheTarget) {
  using ::testing::HasSubstr;
  const std::string head = "HloModule m\nENTRY main {\n  x = f32[2] parameter(0)\n";
  auto error = [&](const std::string& line) {
    try {
      ParseModule(head + line + "\n}\n");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  std::string lapack = error(
      "  ROOT y = f32[2] custom-call(x), custom_call_target=\"lapack_sgetrf\", "
      "operand_layout_constraints={f32[2]{0}}, api_version=API_VERSION_TYPED_FFI");
  EXPECT_THAT(lapack, HasSubstr("line 4, column 19"));  // at the opcode
  EXPECT_THAT(lapack, HasSubstr("custom-call target 'lapack_sgetrf' is not supported"));
  EXPECT_THAT(lapack, HasSubstr("\"SPMDFullToShardShape\" and \"SPMDShardToFullShape\""));
  EXPECT_THAT(
      error("  ROOT y = f32[4] custom-call(x), custom_call_target=\"SPMDFullToShardShape\""),
      HasSubstr("SPMDFullToShardShape grows dimension 0 from 2 to 4"));
  EXPECT_THAT(
      error("  ROOT y = f32[1] custom-call(x), custom_call_target=\"SPMDShardToFullShape\""),
      HasSubstr("SPMDShardToFullShape shrinks dimension 0 from 2 to 1"));
  EXPECT_THAT(
      error("  ROOT y = s32[1] custom-call(x), custom_call_target=\"SPMDFullToShardShape\""),
      HasSubstr("takes and gives arrays of one element type and rank"));
  EXPECT_THAT(error("  ROOT y = f32[2] custom-call(x)"),
              HasSubstr("custom-call is missing attribute 'custom_call_target'"));
  EXPECT_THAT(error("  ROOT y = f32[2] custom-call(x, x), custom_call_target=\"Sharding\""),
              HasSubstr("takes one operand, found 2"));
  EXPECT_THAT(error("  ROOT y = f32[2] custom-call(x), custom_call_target=Sharding"),
              HasSubstr("expected a string after 'custom_call_target='"));
}

}  // namespace
}  // namespace strata::hlo
