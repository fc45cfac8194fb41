// cond and switch_case against the branch they choose written out in plain
// lazy ops (or plain C++), finite differences for the gradients, and an
// unrolled loop with `where` for a cond inside a scan.
#include "strata/transforms/cond.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "error_of.h"
#include "gradient_check.h"
#include "strata/autograd/grad.h"
#include "strata/lazy/context.h"
#include "strata/lazy/ops.h"
#include "strata/spmd/partitioner.h"
#include "strata/transforms/scan.h"

namespace strata {
namespace {

using strata::test::ErrorOf;
using ::testing::HasSubstr;

Tensor D(std::vector<double> v, std::vector<int64_t> dims) { return Tensor::FromVector(v, dims); }

void ExpectClose(const std::vector<double>& got, const std::vector<double>& want,
                 double tol = 1e-12) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], tol * std::max(1.0, std::abs(want[i]))) << i;
}

// true: x * w + 1 (reads the outer w); false: -x * x.
Tree Branchy(const Tensor& pred, const Tensor& x, const Tensor& w) {
  return cond(
      pred, [&](const Tree& o) { return Tree(o.leaf() * w + 1.0); },
      [&](const Tree& o) { return Tree(-(o.leaf() * o.leaf())); }, Tree(x));
}

TEST(Cond, RunsTheBranchThePredicateChoosesWithOneCompileForBoth) {
  const std::vector<double> x = {1, -2, 3}, w = {0.5, -1, 2};
  lazy::Context::Get().ResetMetrics();
  for (double s : {1.0, -1.0, 2.0, 0.0}) {
    Tensor pred = gt(D({s}, {}), zeros({}, DType::kF64));  // a value only the run knows
    std::vector<double> got = Branchy(pred, D(x, {3}), D(w, {3})).leaf().to_vector<double>();
    std::vector<double> want(3);
    for (int i = 0; i < 3; ++i) want[i] = s > 0 ? x[i] * w[i] + 1 : -x[i] * x[i];
    ExpectClose(got, want);
  }
  EXPECT_EQ(lazy::Context::Get().metrics().compiles.load(), 1);
}

TEST(Cond, LowersToOneConditionalWhoseBranchesHoldTheirOps) {
  Tensor x = D({1, 2}, {2}), w = D({3, 4}, {2});
  Tensor out = Branchy(gt(sum(x), zeros({}, DType::kF64)), x, w).leaf();
  std::string text = lazy::LoweringContext({out}).hlo_text();
  // One conditional in the entry; the multiply of each branch lives in that
  // branch's computation only (so the branch not chosen does no work).
  size_t entry = text.find("ENTRY");
  ASSERT_NE(entry, std::string::npos);
  std::string main = text.substr(entry);
  EXPECT_THAT(main, HasSubstr("conditional("));
  EXPECT_EQ(main.find("multiply("), std::string::npos) << text;
  EXPECT_THAT(text, HasSubstr("cond_branch.0.0"));
  EXPECT_THAT(text, HasSubstr("cond_branch.0.1"));
}

TEST(Cond, NumericPredicatesAreTrueWhenNonZeroAndOneElementShapesAreScalars) {
  Tensor x = D({2, 3}, {2}), w = D({10, 10}, {2});
  for (auto [pred, taken] :
       std::vector<std::pair<Tensor, bool>>{{Tensor::FromVector<int32_t>({0}, {}), false},
                                            {Tensor::FromVector<int32_t>({-4}, {}), true},
                                            {D({0.5}, {1, 1}), true},
                                            {D({0.0}, {1}), false}}) {
    std::vector<double> got = Branchy(pred, x, w).leaf().to_vector<double>();
    EXPECT_EQ(got, taken ? (std::vector<double>{21, 31}) : (std::vector<double>{-4, -9}));
  }
}

TEST(Cond, GradientsMatchFiniteDifferencesOnBothBranches) {
  for (double s : {1.0, -1.0}) {
    CheckGradients(s > 0 ? "true branch" : "false branch",
                   [&](const std::vector<Tensor>& in) {
                     Tensor pred = gt(D({s}, {}), zeros({}, DType::kF64));
                     // Two outputs, an operand tree of two leaves, a captured tensor.
                     Tree out = cond(
                         pred,
                         [&](const Tree& o) {
                           Tensor a = o[0].leaf(), b = o[1].leaf();
                           return Tree{sin(a) * in[2], matmul(a, b)};
                         },
                         [&](const Tree& o) {
                           Tensor a = o[0].leaf(), b = o[1].leaf();
                           return Tree{a * a, matmul(a, exp(b))};
                         },
                         Tree{in[0], in[1]});
                     return WeightedSum(out[0].leaf()) + WeightedSum(out[1].leaf());
                   },
                   {{{2, 3}}, {{3, 2}}, {{2, 3}}});
  }
}

TEST(Cond, GradientsEqualThoseOfTheChosenBranchWrittenOut) {
  Tensor x = D({0.3, -0.7, 1.1}, {3}), w = D({2, -1, 0.5}, {3});
  for (double s : {1.0, -1.0}) {
    Tensor loss =
        sum(Branchy(gt(D({s}, {}), zeros({}, DType::kF64)), x, w).leaf() * D({1, 2, 3}, {3}));
    Tensor plain = s > 0 ? x * w + 1.0 : -(x * x);
    Tensor ref = sum(plain * D({1, 2, 3}, {3}));
    auto g = gradients(loss, {x, w});
    auto r = gradients(ref, {x, w});
    ExpectClose(g[0].to_vector<double>(), r[0].to_vector<double>());
    ExpectClose(g[1].to_vector<double>(), r[1].to_vector<double>());
  }
}

TEST(Cond, SecondDerivativesMatchTheWorkedOutOnes) {
  // true: x^3 (d2 = 6x); false: sin(x) (d2 = -sin x).
  for (double s : {1.0, -1.0}) {
    Tensor x = D({0.4, -1.3}, {2});
    auto f = [&](const Tensor& v) {
      return cond(
                 gt(D({s}, {}), zeros({}, DType::kF64)),
                 [](const Tree& o) { return Tree(o.leaf() * o.leaf() * o.leaf()); },
                 [](const Tree& o) { return Tree(sin(o.leaf())); }, Tree(v))
          .leaf();
    };
    Tensor dx = gradients(sum(f(x)), {x})[0];
    Tensor d2x = gradients(sum(dx), {x})[0];
    std::vector<double> want;
    for (double v : {0.4, -1.3}) want.push_back(s > 0 ? 6 * v : -std::sin(v));
    ExpectClose(d2x.to_vector<double>(), want, 1e-10);
  }
}

TEST(Cond, IntegerOperandsAndOutputsPassThroughWithoutGradients) {
  Tensor x = D({1.5, 2.5}, {2});
  Tensor ids = Tensor::FromVector<int64_t>({3, 4}, {2});
  for (double s : {1.0, -1.0}) {
    Tree out = cond(
        gt(D({s}, {}), zeros({}, DType::kF64)),
        [](const Tree& o) {
          return Tree{o[0].leaf() * 2.0, o[1].leaf() + o[1].leaf()};
        },
        [](const Tree& o) {
          return Tree{o[0].leaf() * o[0].leaf(), o[1].leaf()};
        },
        Tree{x, ids});
    std::vector<int64_t> want_ids = s > 0 ? std::vector<int64_t>{6, 8} : std::vector<int64_t>{3, 4};
    EXPECT_EQ(out[1].leaf().to_vector<int64_t>(), want_ids);
    Tensor dx = gradients(sum(out[0].leaf()), {x})[0];
    ExpectClose(dx.to_vector<double>(),
                s > 0 ? std::vector<double>{2, 2} : std::vector<double>{3, 5});
  }
}

TEST(Cond, BranchesWithoutOperandsReadOnlyCapturedTensors) {
  Tensor w = D({1, -2}, {2});
  for (double s : {1.0, -1.0}) {
    Tree out = cond(
        gt(D({s}, {}), zeros({}, DType::kF64)), [&](const Tree&) { return Tree(w * 3.0); },
        [&](const Tree&) { return Tree(exp(w)); });
    Tensor dw = gradients(sum(out.leaf()), {w})[0];
    ExpectClose(dw.to_vector<double>(), s > 0 ? std::vector<double>{3, 3}
                                              : std::vector<double>{std::exp(1.0), std::exp(-2.0)});
  }
}

TEST(SwitchCase, ClampsTheIndexAsJaxDoesWithOneCompileForEveryIndex) {
  const std::vector<double> x = {1, 2, 3};
  std::vector<BranchFn> branches = {
      [](const Tree& o) { return Tree(o.leaf() + 10.0); },
      [](const Tree& o) { return Tree(o.leaf() * o.leaf()); },
      [](const Tree& o) { return Tree(-o.leaf()); },
  };
  lazy::Context::Get().ResetMetrics();
  for (int64_t i : {-2, 0, 1, 2, 5}) {
    Tensor index = Tensor::FromVector<int64_t>({i}, {});
    std::vector<double> got =
        switch_case(index, branches, Tree(D(x, {3}))).leaf().to_vector<double>();
    int64_t k = std::clamp<int64_t>(i, 0, 2);
    std::vector<double> want;
    for (double v : x) want.push_back(k == 0 ? v + 10 : k == 1 ? v * v : -v);
    ExpectClose(got, want);
  }
  EXPECT_EQ(lazy::Context::Get().metrics().compiles.load(), 1);
  // The gradient through the middle branch: 2x.
  Tensor xt = D(x, {3});
  Tensor dx = gradients(
      sum(switch_case(Tensor::FromVector<int32_t>({1}, {}), branches, Tree(xt)).leaf()), {xt})[0];
  ExpectClose(dx.to_vector<double>(), {2, 4, 6});
}

TEST(Cond, InsideAScanMatchesTheUnrolledLoopWithWhere) {
  // Each step: c + x where x > 0, else c * x * w.
  Tensor w = D({0.5, 1.5}, {2});
  Tensor xs = D({0.3, -0.2, -1.1, 0.7, 0.9, -0.4}, {3, 2});
  Tensor c0 = D({1, 1}, {2});
  auto step = [&](const Tensor& c, const Tensor& x) {
    Tensor positive = gt(sum(x), zeros({}, DType::kF64));
    return cond(
               positive, [](const Tree& o) { return Tree(o[0].leaf() + o[1].leaf()); },
               [&](const Tree& o) { return Tree(o[0].leaf() * o[1].leaf() * w); }, Tree{c, x})
        .leaf();
  };
  auto [carry, ys] = scan(
      [&](const Tree& c, const Tree& x) {
        Tensor next = step(c.leaf(), x.leaf());
        return std::pair{Tree(next), Tree(next * 2.0)};
      },
      Tree(c0), Tree(xs));
  Tensor loss = sum(carry.leaf()) + sum(ys.leaf() * ys.leaf());
  Tensor c = c0, ref = zeros({}, DType::kF64);
  for (int t = 0; t < 3; ++t) {
    Tensor x = reshape(slice(xs, 0, t, t + 1), {2});
    c = where(gt(sum(x), zeros({}, DType::kF64)), c + x, c * x * w);
    ref = ref + sum((c * 2.0) * (c * 2.0));
  }
  ref = ref + sum(c);
  ExpectClose({loss.item<double>()}, {ref.item<double>()});
  auto g = gradients(loss, {w, xs, c0});
  auto r = gradients(ref, {w, xs, c0});
  for (size_t i = 0; i < g.size(); ++i)
    ExpectClose(g[i].to_vector<double>(), r[i].to_vector<double>());
}

TEST(Cond, AScanInsideABranchMatchesThePlainLoop) {
  Tensor xs = D({1, 2, 3, 4}, {4});
  for (double s : {1.0, -1.0}) {
    Tensor out = cond(
                     gt(D({s}, {}), zeros({}, DType::kF64)),
                     [](const Tree& o) {
                       auto [carry, ys] = scan(
                           [](const Tree& c, const Tree& x) {
                             Tensor next = c.leaf() * x.leaf();
                             return std::pair{Tree(next), Tree(next)};
                           },
                           Tree(D({1}, {})), o);
                       return ys;
                     },
                     [](const Tree& o) { return Tree(o.leaf() * 0.5); }, Tree(xs))
                     .leaf();
    std::vector<double> want;
    double running = 1;
    for (double v : {1, 2, 3, 4}) want.push_back(s > 0 ? (running *= v) : v * 0.5);
    ExpectClose(out.to_vector<double>(), want);
    Tensor dxs = gradients(sum(out), {xs})[0];
    // d/dx_j of sum_i prod_{k<=i} x_k = sum_{i>=j} prod_{k<=i, k!=j} x_k.
    std::vector<double> dwant(4, 0.5);
    if (s > 0) {
      std::vector<double> v = {1, 2, 3, 4};
      for (int j = 0; j < 4; ++j) {
        dwant[j] = 0;
        for (int i = j; i < 4; ++i) {
          double p = 1;
          for (int k = 0; k <= i; ++k)
            if (k != j) p *= v[k];
          dwant[j] += p;
        }
      }
    }
    ExpectClose(dxs.to_vector<double>(), dwant);
  }
}

TEST(Cond, AnIndexOutOfRangeInTheBranchThatRanIsAnErrorAndNotInTheOther) {
  Tensor table = D({1, 2, 3, 4, 5, 6, 7, 8}, {4, 2});
  Tensor bad = Tensor::FromVector<int64_t>({1, 7}, {2});
  // The false branch reads rows 1 and 7 of 4: an Error naming it when it runs.
  auto select = [&](double s) {
    return cond(
               gt(D({s}, {}), zeros({}, DType::kF64)),
               [&](const Tree& o) { return Tree(astype(sum(o.leaf()), DType::kF64)); },
               [&](const Tree& o) { return Tree(sum(index_select(table, 0, o.leaf()))); },
               Tree(bad))
        .leaf();
  };
  EXPECT_EQ(select(1.0).item<double>(), 8.0);  // 1 + 7: the index never used as one
  std::string message = ErrorOf([&] { select(-1.0).item<double>(); });
  EXPECT_THAT(message, HasSubstr("index_select in false_fn"));
  EXPECT_THAT(message, HasSubstr("index 7 is out of range [0, 4)"));
  // In range, the false branch reads rows 1 and 3.
  Tensor good = Tensor::FromVector<int64_t>({1, 3}, {2});
  Tensor out =
      cond(
          gt(D({-1}, {}), zeros({}, DType::kF64)),
          [&](const Tree& o) { return Tree(astype(sum(o.leaf()), DType::kF64)); },
          [&](const Tree& o) { return Tree(sum(index_select(table, 0, o.leaf()))); }, Tree(good))
          .leaf();
  EXPECT_EQ(out.item<double>(), 3 + 4 + 7 + 8);
}

TEST(Cond, BadInputIsAnErrorNamingWhatDiffers) {
  Tensor x = D({1, 2, 3}, {3});
  Tensor t = gt(sum(x), zeros({}, DType::kF64));
  auto same = [](const Tree& o) { return Tree(o.leaf()); };
  EXPECT_THAT(ErrorOf([&] {
                cond(
                    t, same, [](const Tree& o) { return Tree(slice(o.leaf(), 0, 0, 2)); }, Tree(x));
              }),
              AllOf(HasSubstr("true_fn returned f64[3]"), HasSubstr("false_fn returned f64[2]")));
  EXPECT_THAT(ErrorOf([&] {
                cond(
                    t, same, [](const Tree& o) { return Tree(astype(o.leaf(), DType::kF32)); },
                    Tree(x));
              }),
              HasSubstr("false_fn returned f32[3]"));
  EXPECT_THAT(ErrorOf([&] {
                cond(
                    t, same,
                    [](const Tree& o) {
                      return Tree{o.leaf(), o.leaf()};
                    },
                    Tree(x));
              }),
              HasSubstr("they differ at"));
  EXPECT_THAT(ErrorOf([&] { cond(gt(x, zeros({}, DType::kF64)), same, same, Tree(x)); }),
              HasSubstr("pred must have exactly one element, got pred[3]"));
  EXPECT_THAT(ErrorOf([&] {
                switch_case(D({1}, {}), {same, same}, Tree(x));
              }),
              HasSubstr("index must be an integer, got f64[]"));
  EXPECT_THAT(ErrorOf([&] { switch_case(Tensor::FromVector<int32_t>({0}, {}), {}, Tree(x)); }),
              HasSubstr("at least one branch"));
  EXPECT_THAT(ErrorOf([&] { cond(t, same, BranchFn(), Tree(x)); }), HasSubstr("false_fn is empty"));
  // A branch that stores a value computed from its placeholders outside.
  Tensor leaked;
  EXPECT_THAT(ErrorOf([&] {
                cond(
                    t,
                    [&](const Tree& o) {
                      leaked = o.leaf() * 2.0;
                      return Tree(o.leaf());
                    },
                    same, Tree(x));
              }),
              HasSubstr("[cond] true_fn leaks values computed from its placeholders"));
}

// Operands sharded over two devices: the conditional runs (replicated) in the
// partitioned program and gives the unsharded values and gradients.
TEST(Cond, ShardedOperandsGiveTheUnshardedValuesAndGradients) {
  auto run = [](const ir::Mesh* mesh, double s) {
    Tensor x = normal(1, {4, 6}, 0, 1, DType::kF64);
    Tensor w = normal(2, {6, 3}, 0, 1, DType::kF64);
    x.sync();
    w.sync();
    if (mesh) mark_sharding(x, *mesh, {{"data"}, {}});
    Tree out = cond(
        gt(D({s}, {}), zeros({}, DType::kF64)),
        [&](const Tree& o) { return Tree(tanh(matmul(o.leaf(), w))); },
        [&](const Tree& o) { return Tree(matmul(o.leaf() * o.leaf(), w)); }, Tree(x));
    Tensor loss = sum(out.leaf() * out.leaf());
    std::vector<Tensor> g = gradients(loss, {x, w});
    return std::vector<std::vector<double>>{loss.to_vector<double>(), g[0].to_vector<double>(),
                                            g[1].to_vector<double>()};
  };
  ir::Mesh mesh({0, 1}, {2}, {"data"});
  for (double s : {1.0, -1.0}) {
    auto whole = run(nullptr, s);
    auto split = run(&mesh, s);
    for (size_t i = 0; i < whole.size(); ++i) ExpectClose(split[i], whole[i], 1e-10);
  }
}

}  // namespace
}  // namespace strata
