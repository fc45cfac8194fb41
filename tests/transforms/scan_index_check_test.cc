// Checked indexing inside scan bodies: an index out of range at any step is
// an Error from the sync that runs the loop, naming the op, the index, the
// range and the step; in-range indices give what a plain loop gives, with
// gradients; with checks off the ops clamp as XLA's gather does.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "error_of.h"
#include "strata/autograd/grad.h"
#include "strata/lazy/context.h"
#include "strata/lazy/ops.h"
#include "strata/transforms/scan.h"

namespace strata {
namespace {

using strata::test::ErrorOf;
using ::testing::HasSubstr;

// table [4, 2] = {1..8}; each step reads the two rows its x names and adds
// them to the carry.
std::pair<Tree, Tree> ReadRows(const Tensor& table, const Tensor& ids) {
  return scan(
      [&](const Tree& carry, const Tree& x) {
        Tensor rows = index_select(table, 0, x.leaf());  // [2, 2]
        Tensor next = carry.leaf() + sum(rows, {0});     // [2]
        return std::pair{Tree(next), Tree(rows)};
      },
      Tree(zeros({2})), Tree(ids));
}

Tensor Table() { return Tensor::FromVector<float>({1, 2, 3, 4, 5, 6, 7, 8}, {4, 2}); }

TEST(ScanIndexChecks, InRangeIndicesGiveThePlainLoopsValuesAndGradients) {
  const std::vector<int64_t> ids = {0, 3, 2, 2, 1, 0};  // 3 steps of 2
  Tensor table = Table();
  auto [carry, ys] = ReadRows(table, Tensor::FromVector<int64_t>(ids, {3, 2}));
  Tensor dtable = gradients(sum(carry.leaf()), {table})[0];  // before carry is materialized
  std::vector<float> expected = {0, 0};
  for (int64_t id : ids)
    for (int j = 0; j < 2; ++j) expected[j] += 1 + 2 * id + j;
  EXPECT_EQ(carry.leaf().to_vector<float>(), expected);
  EXPECT_EQ(ys.leaf().shape().dims(), (std::vector<int64_t>{3, 2, 2}));
  // d sum(carry) / d table: each row counted as often as it is read.
  std::vector<float> counts(8, 0);
  for (int64_t id : ids) counts[2 * id] += 1, counts[2 * id + 1] += 1;
  EXPECT_EQ(dtable.to_vector<float>(), counts);
}

TEST(ScanIndexChecks, AnIndexOutOfRangeAtAnyStepIsAnErrorNamingTheStep) {
  // Step 2 (the third) reads row 9 of 4 at position 1 of its index.
  Tensor ids = Tensor::FromVector<int64_t>({0, 3, 2, 2, 1, 9}, {3, 2});
  std::string message = ErrorOf([&] { ReadRows(Table(), ids).first.leaf().to_vector<float>(); });
  EXPECT_THAT(message, HasSubstr("index_select in a scan body"));
  EXPECT_THAT(message, HasSubstr("index 9 is out of range [0, 4)"));
  EXPECT_THAT(message, HasSubstr("at [2, 1]"));
  // Reading only the stacked ys finds it too.
  EXPECT_THAT(ErrorOf([&] { ReadRows(Table(), ids).second.leaf().to_vector<float>(); }),
              HasSubstr("index 9"));
  // A negative index at the first step.
  Tensor negative = Tensor::FromVector<int64_t>({-1, 0, 1, 1, 1, 1}, {3, 2});
  EXPECT_THAT(ErrorOf([&] { ReadRows(Table(), negative).first.leaf().to_vector<float>(); }),
              HasSubstr("index -1 is out of range [0, 4) (dimension 0 of f32[4,2]), at [0, 0] of "
                        "the index s64[3,2]"));
}

TEST(ScanIndexChecks, EveryCheckOfTheBodyAndOfNestedLoopsIsKept) {
  // Two ops that check in one body (index_select, then one_hot of the
  // same ids with 3 classes), and the loop inside another loop.
  auto run = [](const std::vector<int64_t>& values) {
    Tensor ids = Tensor::FromVector<int64_t>(values, {2, 2, 1});
    Tensor table = Table();
    auto [carry, ys] = scan(
        [&](const Tree& outer, const Tree& xo) {
          auto [inner, unused] = scan(
              [&](const Tree& c, const Tree& x) {
                Tensor row = sum(index_select(table, 0, x.leaf()));
                Tensor hot = sum(one_hot(x.leaf(), 3));
                return std::pair{Tree(c.leaf() + row + hot), Tree(row)};
              },
              outer, xo);
          return std::pair{inner, Tree()};
        },
        Tree(zeros({})), Tree(ids));
    return carry.leaf();
  };
  // Rows 0, 1, 2, 0: 3 + 7 + 11 + 3, and four ones.
  EXPECT_EQ(run({0, 1, 2, 0}).to_vector<float>(), (std::vector<float>{28}));
  // Class 3 of 3 is in the table's range but not one_hot's.
  std::string message = ErrorOf([&] { run({0, 1, 3, 0}).to_vector<float>(); });
  EXPECT_THAT(message, HasSubstr("one_hot in a scan body in a scan body"));
  EXPECT_THAT(message, HasSubstr("index 3 is out of range [0, 3)"));
  EXPECT_THAT(message, HasSubstr("at [1, 0, 0]"));
  EXPECT_THAT(ErrorOf([&] {
                run({0, 7, 1, 0}).to_vector<float>();
              }),
              HasSubstr("index_select in a scan body"));
}

TEST(ScanIndexChecks, WithChecksOffTheLoopClampsAsXlaDoes) {
  lazy::Context::Get().set_index_checks(false);
  Tensor ids = Tensor::FromVector<int64_t>({0, 3, 2, 2, 1, 9}, {3, 2});
  std::vector<float> carry = ReadRows(Table(), ids).first.leaf().to_vector<float>();
  lazy::Context::Get().set_index_checks(true);
  // Row 9 clamps to row 3 {7, 8}: rows 0, 3, 2, 2, 1, 3.
  EXPECT_EQ(carry, (std::vector<float>{1 + 7 + 5 + 5 + 3 + 7, 2 + 8 + 6 + 6 + 4 + 8}));
}

}  // namespace
}  // namespace strata
