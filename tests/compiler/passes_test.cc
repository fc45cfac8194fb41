// The optimizing passes run by Executable::Compile: each test checks the
// shape of the optimized module (exe->module()) and that the numbers match a
// plain-loop reference with passes on and off.
#include <cmath>
#include <functional>

#include "runtime/test_util.h"

namespace strata::compiler {
namespace {

using namespace runtime;
using namespace runtime::test;

using hlo::Builder;
using hlo::Instruction;
using hlo::Literal;
using hlo::Opcode;
using Dims = std::vector<int64_t>;

int64_t Count(const hlo::Module& m, Opcode op) {
  int64_t n = 0;
  for (const auto& c : m.computations()) {
    for (const auto& inst : c->instructions()) n += inst->opcode() == op;
  }
  return n;
}

Shape F32(Dims dims) { return Shape(DType::kF32, std::move(dims)); }

Instruction* ConstantVector(Builder& b, const std::vector<float>& v, Dims dims) {
  return b.Constant(Literal::Vector<float>(v, std::move(dims)));
}

// Compiles `g` with passes on and off; both must give `expected` for output
// `index`. Returns the optimized executable for structural checks.
std::unique_ptr<Executable> CompileBoth(const std::function<Instruction*(Graph&)>& build,
                                        const std::vector<Shape>& shapes,
                                        const std::vector<Buffer>& args,
                                        const std::vector<std::vector<float>>& expected,
                                        double rel = 1e-6) {
  std::unique_ptr<Executable> optimized;
  for (bool passes : {true, false}) {
    SCOPED_TRACE(passes ? "with passes" : "without passes");
    Graph g(shapes);
    g.fuse = false;  // these tests read the passes' output; fusion has its own tests
    auto exe = g.Compile(build(g), passes);
    auto out = exe->Run(args);
    EXPECT_EQ(out.size(), expected.size());
    for (size_t k = 0; k < expected.size() && k < out.size(); ++k) {
      EXPECT_TRUE(AllClose(expected[k], out[k].ToVector<float>(), rel))
          << "output " << k << "\n"
          << hlo::ToText(exe->module());
    }
    if (passes) optimized = std::move(exe);
  }
  return optimized;
}

std::vector<float> Map(const std::vector<float>& x, float (*f)(float)) {
  std::vector<float> out;
  for (float v : x) out.push_back(f(v));
  return out;
}

TEST(Passes, DeadInstructionsAreRemoved) {
  std::vector<float> x = {-1.5f, 2, -3, 0.25f};
  auto build = [](Graph& g) {
    g.b.Unary(Opcode::kNegate, g.b.Unary(Opcode::kExp, g.params[0]));  // unused
    return g.b.Unary(Opcode::kAbs, g.params[0]);
  };
  auto exe = CompileBoth(build, {F32({4})}, {Arg(x, {4})}, {Map(x, std::fabs)});
  EXPECT_EQ(Count(exe->module(), Opcode::kExp), 0) << hlo::ToText(exe->module());
  EXPECT_EQ(Count(exe->module(), Opcode::kNegate), 0);
  EXPECT_EQ(exe->module().entry()->instruction_count(), 2);  // parameter, abs
}

TEST(Passes, CommonSubexpressionsAreMerged) {
  std::vector<float> x = {0.5f, -1, 2}, y = {3, 0.25f, -2};
  auto build = [](Graph& g) {
    auto* x = g.params[0];
    auto* y = g.params[1];
    auto* twice_exp = g.b.Add(g.b.Unary(Opcode::kExp, x), g.b.Unary(Opcode::kExp, x));
    auto* products = g.b.Add(g.b.Multiply(x, y), g.b.Multiply(x, y));
    // Same opcode, different operands or constants: must stay apart.
    auto* shifted = g.b.Subtract(g.b.Add(x, ConstantVector(g.b, {1, 1, 1}, {3})),
                                 g.b.Add(x, ConstantVector(g.b, {2, 2, 2}, {3})));
    return g.b.Tuple({twice_exp, products, g.b.Unary(Opcode::kExp, y), shifted});
  };
  std::vector<float> e2, p2, ey, minus_one;
  for (size_t i = 0; i < 3; ++i) {
    e2.push_back(2 * std::exp(x[i]));
    p2.push_back(2 * x[i] * y[i]);
    ey.push_back(std::exp(y[i]));
    minus_one.push_back((x[i] + 1) - (x[i] + 2));
  }
  auto exe =
      CompileBoth(build, {F32({3}), F32({3})}, {Arg(x, {3}), Arg(y, {3})}, {e2, p2, ey, minus_one});
  EXPECT_EQ(Count(exe->module(), Opcode::kExp), 2) << hlo::ToText(exe->module());  // exp(x), exp(y)
  EXPECT_EQ(Count(exe->module(), Opcode::kMultiply), 1);
  EXPECT_EQ(Count(exe->module(), Opcode::kConstant), 2);
}

TEST(Passes, ConstantExpressionsFoldToOneConstant) {
  std::vector<float> x = {1, 2, 3, 4}, c1 = {0.5f, 1, 1.5f, 2}, c2 = {10, 20, 30, 40};
  auto build = [&](Graph& g) {
    auto* sum = g.b.Add(ConstantVector(g.b, c1, {4}), ConstantVector(g.b, c2, {4}));
    return g.b.Add(g.params[0], sum);
  };
  std::vector<float> expected;
  for (int i = 0; i < 4; ++i) expected.push_back(x[i] + (c1[i] + c2[i]));
  auto exe = CompileBoth(build, {F32({4})}, {Arg(x, {4})}, {expected});
  const hlo::Module& m = exe->module();
  ASSERT_EQ(Count(m, Opcode::kConstant), 1) << hlo::ToText(m);
  EXPECT_EQ(Count(m, Opcode::kAdd), 1);
  for (const auto& inst : m.entry()->instructions()) {
    if (inst->opcode() != Opcode::kConstant) continue;
    const float* folded = inst->literal.data_as<float>();
    for (int i = 0; i < 4; ++i) EXPECT_EQ(folded[i], c1[i] + c2[i]);
  }
}

// A chain of data movement and arithmetic on constants, deeper than one
// folding round, still ends as a single constant.
TEST(Passes, DeepConstantChainFoldsCompletely) {
  std::vector<float> c = {1, 2, 3, 4, 5, 6};
  auto build = [&](Graph& g) {
    Instruction* v = ConstantVector(g.b, c, {2, 3});
    v = g.b.Transpose(v, {1, 0});  // [3,2]
    v = g.b.Multiply(v, ConstantVector(g.b, {2, 2, 2, 2, 2, 2}, {3, 2}));
    v = g.b.Reshape(v, {6});
    v = g.b.Slice(v, {1}, {6}, {2});  // elements 1, 3, 5
    v = g.b.Unary(Opcode::kNegate, v);
    v = g.b.Add(v, ConstantVector(g.b, {100, 100, 100}, {3}));
    v = g.b.Reverse(v, {0});
    v = g.b.Pad(v, g.b.ConstantScalar(0.0f), {{1, 0, 0}});
    return g.b.Add(g.params[0], v);
  };
  // transpose -> {1,4,2,5,3,6}; *2 -> {2,8,4,10,6,12}; odd slots {8,10,12};
  // 100 - that -> {92,90,88}; reversed {88,90,92}; padded {0,88,90,92}.
  std::vector<float> x = {1, 1, 1, 1};
  auto exe = CompileBoth(build, {F32({4})}, {Arg(x, {4})}, {{1, 89, 91, 93}});
  EXPECT_EQ(Count(exe->module(), Opcode::kConstant), 1) << hlo::ToText(exe->module());
  EXPECT_EQ(exe->module().entry()->instruction_count(), 3);  // parameter, constant, add
}

// Each builds an op that is the identity on its operand; after passes only
// the parameter remains.
struct IdentityCase {
  const char* name;
  std::function<Instruction*(Builder&, Instruction*)> build;
};

Instruction* Zeros(Builder& b) { return b.Broadcast(b.ConstantScalar(0.0f), {2, 3}, {}); }
Instruction* Ones(Builder& b) { return b.Broadcast(b.ConstantScalar(1.0f), {2, 3}, {}); }
Instruction* Flags(Builder& b, bool v) {
  return b.Broadcast(b.Constant(Literal::ScalarOf(DType::kPred, v ? 1 : 0)), {2, 3}, {});
}

const IdentityCase kIdentityCases[] = {
    {"x + 0", [](Builder& b, Instruction* x) { return b.Add(x, Zeros(b)); }},
    {"0 + x", [](Builder& b, Instruction* x) { return b.Add(Zeros(b), x); }},
    {"x - 0", [](Builder& b, Instruction* x) { return b.Subtract(x, Zeros(b)); }},
    {"x * 1", [](Builder& b, Instruction* x) { return b.Multiply(x, Ones(b)); }},
    {"1 * x", [](Builder& b, Instruction* x) { return b.Multiply(Ones(b), x); }},
    {"x / 1", [](Builder& b, Instruction* x) { return b.Divide(x, Ones(b)); }},
    {"identity transpose",
     [](Builder& b, Instruction* x) {
       return b.Transpose(x, {0, 1});
     }},
    {"transposes that cancel",
     [](Builder& b, Instruction* x) {
       return b.Transpose(b.Transpose(x, {1, 0}), {1, 0});
     }},
    {"reshape to the same shape",
     [](Builder& b, Instruction* x) {
       return b.Reshape(x, {2, 3});
     }},
    {"reshapes that cancel",
     [](Builder& b, Instruction* x) {
       return b.Reshape(b.Reshape(x, {6}), {2, 3});
     }},
    {"copy", [](Builder& b, Instruction* x) { return b.Copy(x); }},
    {"full slice",
     [](Builder& b, Instruction* x) {
       return b.Slice(x, {0, 0}, {2, 3});
     }},
    {"zero padding",
     [](Builder& b, Instruction* x) {
       return b.Pad(x, b.ConstantScalar(5.0f), {{0, 0, 0}, {0, 0, 0}});
     }},
    {"reverse of nothing", [](Builder& b, Instruction* x) { return b.Reverse(x, {}); }},
    {"one-operand concatenate", [](Builder& b, Instruction* x) { return b.Concatenate({x}, 1); }},
    {"convert to the same type",
     [](Builder& b, Instruction* x) { return b.Convert(x, DType::kF32); }},
    {"select on a constant true",
     [](Builder& b, Instruction* x) { return b.Select(Flags(b, true), x, Zeros(b)); }},
    {"select on a constant false",
     [](Builder& b, Instruction* x) { return b.Select(Flags(b, false), Ones(b), x); }},
    {"select between one value",
     [](Builder& b, Instruction* x) {
       return b.Select(b.Compare(x, Zeros(b), hlo::Comparison::kLt), x, x);
     }},
    {"get-tuple-element of a tuple",
     [](Builder& b, Instruction* x) {
       return b.GetTupleElement(b.Tuple({Zeros(b), x}), 1);
     }},
};

TEST(Passes, IdentityOperationsAreRemoved) {
  std::vector<float> x = {1.5f, -2, 3, NAN, -0.5f, 6};
  for (const IdentityCase& c : kIdentityCases) {
    SCOPED_TRACE(c.name);
    auto exe = CompileBoth([&](Graph& g) { return c.build(g.b, g.params[0]); }, {F32({2, 3})},
                           {Arg(x, {2, 3})}, {x});
    EXPECT_EQ(exe->module().entry()->instruction_count(), 1) << hlo::ToText(exe->module());
  }
}

TEST(Passes, NonIdentitiesStay) {
  std::vector<float> x = {1.5f, -2, 3, NAN, -0.5f, 6};
  // x * 0 is not 0 for NaN; 0 - x, x + 1 and a real transpose do work.
  auto exe = CompileBoth(
      [](Graph& g) {
        auto* zero = g.b.Broadcast(g.b.ConstantScalar(0.0f), {2, 3}, {});
        auto* one = g.b.Broadcast(g.b.ConstantScalar(1.0f), {2, 3}, {});
        return g.b.Tuple({g.b.Multiply(g.params[0], zero), g.b.Subtract(zero, g.params[0]),
                          g.b.Add(g.params[0], one),
                          g.b.Transpose(g.b.Transpose(g.params[0], {1, 0}), {0, 1})});
      },
      {F32({2, 3})}, {Arg(x, {2, 3})},
      {{0, 0, 0, NAN, 0, 0},
       {-1.5f, 2, -3, NAN, 0.5f, -6},
       {2.5f, -1, 4, NAN, 0.5f, 7},
       {1.5f, NAN, -2, -0.5f, 3, 6}});
  EXPECT_EQ(Count(exe->module(), Opcode::kTranspose), 1) << hlo::ToText(exe->module());
}

// x^2 becomes x * x (the square, one rounding either way), x^1 becomes x;
// x^3 and x^0.5 keep pow (their edge cases are pow's own). The references are
// std::pow's.
TEST(Passes, SquaresBecomeProductsAndOtherPowersStay) {
  std::vector<float> x = {1.5f, -2, 3, NAN, -0.5f, INFINITY};
  auto pow_of = [&](float e) {
    std::vector<float> out;
    for (float v : x) out.push_back(std::pow(v, e));
    return out;
  };
  auto power = [](Graph& g, float e) -> Instruction* {
    return g.b.Binary(Opcode::kPower, g.params[0],
                      g.b.Broadcast(g.b.ConstantScalar(e), {2, 3}, {}));
  };
  auto exe = CompileBoth(
      [&](Graph& g) {
        return g.b.Tuple({power(g, 2), power(g, 1), power(g, 3), power(g, 0.5f)});
      },
      {F32({2, 3})}, {Arg(x, {2, 3})}, {pow_of(2), pow_of(1), pow_of(3), pow_of(0.5f)});
  EXPECT_EQ(Count(exe->module(), Opcode::kPower), 2) << hlo::ToText(exe->module());
  EXPECT_EQ(Count(exe->module(), Opcode::kMultiply), 1) << hlo::ToText(exe->module());
}

TEST(Passes, ComposedTransposesKeepTheirMeaning) {
  const Dims dims = {2, 3, 4};
  std::vector<float> x(24);
  for (int i = 0; i < 24; ++i) x[i] = static_cast<float>(i);
  // transpose(transpose(x, {1,0,2}), {0,2,1}) == transpose(x, {1,2,0}).
  std::vector<float> expected = Tabulate<float>({3, 4, 2}, [&](const Dims& i) {
    return x[Ravel({i[2], i[0], i[1]}, dims)];
  });
  auto exe = CompileBoth(
      [](Graph& g) {
        return g.b.Transpose(g.b.Transpose(g.params[0], {1, 0, 2}), {0, 2, 1});
      },
      {F32(dims)}, {Arg(x, dims)}, {expected});
  EXPECT_EQ(Count(exe->module(), Opcode::kTranspose), 1) << hlo::ToText(exe->module());
}

// x @ W^T as Linear writes it, its weight gradient transpose(dy^T x), and a
// batched product whose transpose reorders free dims (which must stay).
TEST(Passes, TransposesFoldIntoMatrixProducts) {
  const int64_t m = 5, k = 4, n = 3;
  std::vector<float> x = Random<float>(m * k, 1, -1, 1), w = Random<float>(n * k, 2, -1, 1);
  std::vector<float> dy = Random<float>(m * n, 3, -1, 1);
  std::vector<float> y(m * n, 0), dw(n * k, 0);  // y = x W^T, dW = dy^T x
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t p = 0; p < k; ++p) y[i * n + j] += x[i * k + p] * w[j * k + p];
  for (int64_t j = 0; j < n; ++j)
    for (int64_t p = 0; p < k; ++p)
      for (int64_t i = 0; i < m; ++i) dw[j * k + p] += dy[i * n + j] * x[i * k + p];
  auto exe = CompileBoth(
      [&](Graph& g) {
        hlo::DotDims plain{{}, {}, {1}, {0}};
        auto* forward = g.b.Dot(g.params[0], g.b.Transpose(g.params[1], {1, 0}), plain);
        // (x^T dy) is [k, n]; its transpose is dW [n, k].
        hlo::DotDims over_rows{{}, {}, {0}, {0}};
        auto* grad = g.b.Transpose(g.b.Dot(g.params[0], g.params[2], over_rows), {1, 0});
        return g.b.Tuple({forward, grad});
      },
      {F32({m, k}), F32({n, k}), F32({m, n})}, {Arg(x, {m, k}), Arg(w, {n, k}), Arg(dy, {m, n})},
      {y, dw}, 1e-5);
  EXPECT_EQ(Count(exe->module(), Opcode::kTranspose), 0) << hlo::ToText(exe->module());
  EXPECT_EQ(Count(exe->module(), Opcode::kDot), 2);

  // a [2, 3, 4] with free dims 0 and 1 (contracting 2): transposing a to
  // [3, 2, 4] swaps the free dims, so the output order would change.
  std::vector<float> a = Random<float>(24, 4, -1, 1), b = Random<float>(4, 5, -1, 1);
  std::vector<float> out(6, 0);  // out[i][j] = sum_p a[j][i][p] b[p]
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 2; ++j)
      for (int64_t p = 0; p < 4; ++p) out[i * 2 + j] += a[(j * 3 + i) * 4 + p] * b[p];
  auto kept = CompileBoth(
      [&](Graph& g) {
        hlo::DotDims last{{}, {}, {2}, {0}};
        return g.b.Dot(g.b.Transpose(g.params[0], {1, 0, 2}), g.params[1], last);
      },
      {F32({2, 3, 4}), F32({4})}, {Arg(a, {2, 3, 4}), Arg(b, {4})}, {out}, 1e-5);
  EXPECT_EQ(Count(kept->module(), Opcode::kTranspose), 1) << hlo::ToText(kept->module());
}

// square_plus(a, b) = a * a + b, called twice and through a nested call.
TEST(Passes, CallsAreInlined) {
  std::vector<float> x = {1, 2, -3}, y = {0.5f, -1, 4};
  auto build = [](Graph& g) {
    Builder inner("square_plus");
    auto* a = inner.Parameter(0, F32({3}), "a");
    auto* b = inner.Parameter(1, F32({3}), "b");
    auto* square_plus = g.Add(inner.Build(inner.Add(inner.Multiply(a, a), b)));
    Builder outer("twice");
    auto* p = outer.Parameter(0, F32({3}), "p");
    auto* twice = g.Add(outer.Build(outer.Call(square_plus, {p, p})));
    return g.b.Add(g.b.Call(square_plus, {g.params[0], g.params[1]}),
                   g.b.Call(twice, {g.params[1]}));
  };
  std::vector<float> expected;
  for (int i = 0; i < 3; ++i) expected.push_back((x[i] * x[i] + y[i]) + (y[i] * y[i] + y[i]));
  auto exe = CompileBoth(build, {F32({3}), F32({3})}, {Arg(x, {3}), Arg(y, {3})}, {expected});
  EXPECT_EQ(Count(exe->module(), Opcode::kCall), 0) << hlo::ToText(exe->module());
  EXPECT_EQ(exe->module().computations().size(), 1u);
}

// Everything at once; the optimized module is smaller and computes the same.
TEST(Passes, MixedProgramKeepsItsNumbers) {
  std::vector<float> x = {0.5f, -1, 2, 1.5f, 0, -2};  // [2,3]
  std::vector<float> c = {1, 2, 3, 4, 5, 6};          // [3,2]
  auto build = [&](Graph& g) {
    auto& b = g.b;
    Builder sq("square");
    auto* v = sq.Parameter(0, F32({3, 2}), "v");
    auto* square = g.Add(sq.Build(sq.Multiply(v, v)));
    auto* sum = g.Add(hlo::MakeScalarBinaryComputation("sum", Opcode::kAdd, DType::kF32));
    auto* t = b.Transpose(g.params[0], {1, 0});
    auto* doubled = b.Add(ConstantVector(b, c, {3, 2}), ConstantVector(b, c, {3, 2}));
    auto* u = b.Add(b.Multiply(t, b.Broadcast(b.ConstantScalar(1.0f), {3, 2}, {})), doubled);
    auto* w = b.Call(square, {b.Add(u, b.Broadcast(b.ConstantScalar(0.0f), {3, 2}, {}))});
    auto* rows = b.Reduce(w, b.ConstantScalar(0.0f), {1}, sum);
    auto* e = b.Add(b.Unary(Opcode::kExp, g.params[0]), b.Unary(Opcode::kExp, g.params[0]));
    return b.Tuple({rows, b.Reshape(e, {6})});
  };
  std::vector<float> rows(3, 0), e;
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 2; ++j) rows[i] += std::pow(x[j * 3 + i] + 2 * c[i * 2 + j], 2.0f);
  }
  for (float v : x) e.push_back(2 * std::exp(v));
  auto exe = CompileBoth(build, {F32({2, 3})}, {Arg(x, {2, 3})}, {rows, e}, 1e-5);
  EXPECT_EQ(Count(exe->module(), Opcode::kCall), 0);
  EXPECT_EQ(Count(exe->module(), Opcode::kExp), 1);
  EXPECT_EQ(Count(exe->module(), Opcode::kBroadcast), 0) << hlo::ToText(exe->module());
}

}  // namespace
}  // namespace strata::compiler
