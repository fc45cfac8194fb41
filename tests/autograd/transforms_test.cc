// grad / value_and_grad / vjp over Trees, checked against hand-derived
// derivatives.
#include <gtest/gtest.h>

#include <cmath>

#include "strata/autograd/grad.h"
#include "strata/lazy/ops.h"

namespace strata {
namespace {

Tensor V(std::vector<double> v, std::vector<int64_t> dims) { return Tensor::FromVector(v, dims); }

void ExpectValues(const Tensor& t, const std::vector<double>& expected) {
  auto got = t.to_vector<double>();
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], 1e-12) << i;
}

TEST(Transforms, GradOfATreeFunction) {
  // f({'w': w, 'b': [b, None]}) = sum(w * w * b) + sum(b): df/dw = 2wb,
  // df/db = w^2 + 1.
  auto f = [](const Tree& p) {
    const Tensor& w = p["w"].leaf();
    const Tensor& b = p["b"][0].leaf();
    return sum(w * w * b) + sum(b);
  };
  Tree params(Tree::Dict{{"w", V({1, 2, 3}, {3})}, {"b", Tree{V({4, 5, 6}, {3}), Tree()}}});
  Tree g = grad(f)(params);
  EXPECT_EQ(g.spec(), params.spec());
  ExpectValues(g["w"].leaf(), {8, 20, 36});
  ExpectValues(g["b"][0].leaf(), {2, 5, 10});
  auto [value, g2] = value_and_grad(f)(params);
  EXPECT_NEAR(value.item<double>(), 4 + 20 + 54 + 15, 1e-12);
  ExpectValues(g2["w"].leaf(), {8, 20, 36});
}

TEST(Transforms, LeavesSharingATensorAreSeparateVariables) {
  Tensor x = V({3}, {});
  // f(a, b) = a * b^2 with a and b the same tensor: df/da = b^2 = 9, df/db = 2ab = 18.
  Tree g = grad([](const Tree& p) { return p[0].leaf() * p[1].leaf() * p[1].leaf(); })(Tree{x, x});
  EXPECT_NEAR(g[0].leaf().item<double>(), 9, 1e-12);
  EXPECT_NEAR(g[1].leaf().item<double>(), 18, 1e-12);
  // Unused inputs get zeros of their shape.
  Tree z = grad([](const Tree& p) { return sum(p[0].leaf()); })(Tree{x, V({1, 2}, {2})});
  ExpectValues(z[1].leaf(), {0, 0});
}

TEST(Transforms, VjpPullsBackATreeCotangent) {
  // f(x) = {'s': sin(x), 'p': [x * y]} with y fixed outside.
  Tensor y = V({2, -1}, {2});
  auto f = [&](const Tree& in) {
    const Tensor& x = in.leaf();
    return Tree(Tree::Dict{{"s", sin(x)}, {"p", Tree{x * y}}});
  };
  Tensor x = V({0.5, 1.5}, {2});
  auto [out, pullback] = vjp(f, Tree(x));
  ExpectValues(out["s"].leaf(), {std::sin(0.5), std::sin(1.5)});
  Tree cot(Tree::Dict{{"s", V({1, 10}, {2})}, {"p", Tree{V({3, 4}, {2})}}});
  Tree g = pullback(cot);
  ExpectValues(g.leaf(), {std::cos(0.5) * 1 + 3 * 2, std::cos(1.5) * 10 + 4 * -1});
  // A cotangent of another structure or shape is an error naming where.
  Tree wrong(Tree::Dict{{"s", V({1, 1}, {2})}, {"p", V({1, 1}, {2})}});
  try {
    pullback(wrong);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("['p']: a list vs a tensor"), std::string::npos)
        << e.what();
  }
  Tree bad_shape(Tree::Dict{{"s", V({1, 1, 1}, {3})}, {"p", Tree{V({1, 1}, {2})}}});
  EXPECT_THROW(pullback(bad_shape), Error);
  EXPECT_THROW(grad([](const Tree& p) { return p.leaf(); })(Tree(V({1, 2}, {2}))), Error);
}

TEST(Transforms, ValueAndGradWithAuxReturnsTheAuxAsComputedAndDifferentiatesTheValueOnly) {
  // f(x) = sum(x^3), aux = {"double": 2x, "n": 3}: value 1 + 8 + 27, grad 3x^2.
  auto f = [](const Tree& p) {
    const Tensor& x = p.leaf();
    Tree aux = Tree::Dict{{"double", Tree(x * 2.0)}, {"n", Tree(V({3}, {}))}};
    return std::pair{sum(x * x * x), aux};
  };
  auto [value, aux, g] = value_and_grad_with_aux(f)(Tree(V({1, 2, 3}, {3})));
  ExpectValues(value, {36});
  ExpectValues(aux["double"].leaf(), {2, 4, 6});
  ExpectValues(aux["n"].leaf(), {3});
  ExpectValues(g.leaf(), {3, 12, 27});
  auto not_scalar = [](const Tree& p) { return std::pair{p.leaf() * 1.0, Tree()}; };
  EXPECT_THROW(value_and_grad_with_aux(not_scalar)(Tree(V({1, 2}, {2}))), Error);
}

}  // namespace
}  // namespace strata
