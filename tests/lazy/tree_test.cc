// Tree: flatten order, unflatten, structure comparison and printing, paths.
#include "strata/lazy/tree.h"

#include <gtest/gtest.h>

#include "strata/lazy/ops.h"

namespace strata {
namespace {

Tensor V(float v) { return Tensor::FromVector<float>({v}, {}); }

TEST(Tree, FlattensListsInOrderAndMapsBySortedKey) {
  // {'b': [1, None, 2], 'a': 3, 'c': {}} -> a, then b's items.
  Tree t(Tree::Dict{{"b", Tree{V(1), Tree(), V(2)}}, {"a", V(3)}, {"c", Tree::Dict{}}});
  std::vector<float> got;
  for (const Tensor& x : t.leaves()) got.push_back(x.item<float>());
  EXPECT_EQ(got, (std::vector<float>{3, 1, 2}));
  EXPECT_EQ(t.num_leaves(), 3);
  EXPECT_EQ(t.spec().ToString(), "{'a': *, 'b': [*, None, *], 'c': {}}");
  std::vector<std::string> paths;
  for (const auto& [path, x] : t.leaves_with_paths()) paths.push_back(path);
  EXPECT_EQ(paths, (std::vector<std::string>{"['a']", "['b'][0]", "['b'][2]"}));
  EXPECT_EQ(t["b"][2].leaf().item<float>(), 2);
  EXPECT_EQ(t["b"].size(), 3u);
}

TEST(Tree, UnflattenRebuildsTheStructure) {
  Tree t{V(1), Tree::Dict{{"x", V(2)}, {"y", Tree(Tree::List{})}}, Tree()};
  TreeSpec spec = t.spec();
  Tree back = spec.Unflatten({V(10), V(20)});
  EXPECT_EQ(back.spec(), spec);
  EXPECT_EQ(back[0].leaf().item<float>(), 10);
  EXPECT_EQ(back[1]["x"].leaf().item<float>(), 20);
  EXPECT_TRUE(back[1]["y"].is_list());
  EXPECT_TRUE(back[2].is_empty());
  EXPECT_THROW(spec.Unflatten({V(1)}), Error);
  Tree doubled = t.map([](const Tensor& x) { return x * 2.0; });
  EXPECT_EQ(doubled[1]["x"].leaf().item<float>(), 4);
  // A root leaf and an empty tree.
  EXPECT_EQ(Tree(V(5)).spec().ToString(), "*");
  EXPECT_EQ(Tree().spec().ToString(), "None");
  EXPECT_EQ(Tree().num_leaves(), 0);
}

TEST(Tree, SpecsCompareAndNameTheFirstDifference) {
  Tree a{V(1), Tree::Dict{{"h", V(2)}}};
  Tree b{V(5), Tree::Dict{{"h", V(6)}}};
  EXPECT_EQ(a.spec(), b.spec());  // values and shapes do not matter
  Tree c{V(1), Tree::Dict{{"h", Tree{V(2)}}}};
  EXPECT_NE(a.spec(), c.spec());
  EXPECT_EQ(a.spec().FirstDifference(c.spec()), "[1]['h']: a tensor vs a list");
  Tree d{V(1)};
  EXPECT_EQ(a.spec().FirstDifference(d.spec()), "root: a list of 2 vs a list of 1");
  Tree e{V(1), Tree::Dict{{"g", V(2)}}};
  EXPECT_NE(a.spec().FirstDifference(e.spec()).find("keys"), std::string::npos);
}

TEST(Tree, AccessorsRejectTheWrongKind) {
  Tree t{V(1)};
  EXPECT_THROW(t.leaf(), Error);
  EXPECT_THROW(t.dict(), Error);
  EXPECT_THROW(t[3], Error);
  EXPECT_THROW(t["k"], Error);
  EXPECT_THROW((void)Tree(Tensor()), Error);
  try {
    Tree(V(1)).list();
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected a list, found *"), std::string::npos);
  }
}

}  // namespace
}  // namespace strata
