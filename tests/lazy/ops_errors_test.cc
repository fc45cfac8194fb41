// Every bad call throws strata::Error starting with "[op]" and naming the
// shapes (or values) involved, so a user can act on it.
#include "lazy/op_test_util.h"

namespace strata::test {
namespace {

struct BadCall {
  std::string name;  // test label
  std::function<void()> call;
  std::string op;                  // expected "[op]" prefix
  std::vector<std::string> parts;  // must appear in the message
};

Tensor F32(Dims dims) { return zeros(std::move(dims)); }
Tensor S64(Dims dims) { return zeros(std::move(dims), DType::kS64); }

std::vector<BadCall> Table() {
  return {
      {"matmul inner dims",
       [] {
         matmul(F32({2, 3}), F32({4, 5}));
       },
       "matmul",
       {"f32[2,3]", "f32[4,5]"}},
      {"matmul vectors", [] { matmul(F32({3}), F32({4})); }, "matmul", {"f32[3]", "f32[4]"}},
      {"matmul batch",
       [] {
         matmul(F32({2, 3, 4}), F32({3, 4, 5}));
       },
       "matmul",
       {"f32[2,3,4]", "f32[3,4,5]"}},
      {"matmul scalar", [] { matmul(constant(1), F32({3})); }, "matmul", {"f32[]", "f32[3]"}},
      {"matmul bool",
       [] {
         matmul(BoolTensor({1, 0}, {2}), BoolTensor({1, 0}, {2}));
       },
       "matmul",
       {"pred[2]"}},
      {"add broadcast",
       [] {
         F32({2, 3}) + F32({4});
       },
       "add",
       {"[2,3]", "[4]"}},
      {"where broadcast",
       [] {
         where(BoolTensor({1, 0}, {2}), F32({3}), F32({3}));
       },
       "where",
       {"[2]", "[3]"}},
      {"sub bools", [] { BoolTensor({1}, {1}) - BoolTensor({1}, {1}); }, "sub", {"pred[1]"}},
      {"sum dim range",
       [] {
         sum(F32({2, 3}), {2});
       },
       "sum",
       {"2", "f32[2,3]"}},
      {"sum repeated dim",
       [] {
         sum(F32({2, 3}), {1, -1});
       },
       "sum",
       {"repeat", "f32[2,3]"}},
      {"mean of ints",
       [] {
         mean(S64({2, 3}));
       },
       "mean",
       {"s64[2,3]"}},
      {"max of empty dim",
       [] {
         max(F32({0, 3}), {0});
       },
       "max",
       {"f32[0,3]"}},
      {"min of empty",
       [] {
         min(F32({2, 0}));
       },
       "min",
       {"f32[2,0]"}},
      {"argmax dim range",
       [] {
         argmax(F32({2, 3}), -3);
       },
       "argmax",
       {"-3", "f32[2,3]"}},
      {"argmin of empty dim",
       [] {
         argmin(F32({2, 0}), 1);
       },
       "argmin",
       {"f32[2,0]"}},
      {"argmax bool",
       [] {
         argmax(BoolTensor({1, 0}, {2}), 0);
       },
       "argmax",
       {"pred[2]"}},
      {"reshape size",
       [] {
         reshape(F32({2, 3}), {4, 2});
       },
       "reshape",
       {"f32[2,3]", "[4,2]"}},
      {"reshape two -1",
       [] {
         reshape(F32({2, 3}), {-1, -1});
       },
       "reshape",
       {"[-1,-1]"}},
      {"reshape -1 not dividing",
       [] {
         reshape(F32({2, 3}), {4, -1});
       },
       "reshape",
       {"f32[2,3]", "[4,-1]"}},
      {"reshape negative",
       [] {
         reshape(F32({2, 3}), {-2, 3});
       },
       "reshape",
       {"f32[2,3]", "-2"}},
      {"transpose dim",
       [] {
         transpose(F32({2, 3}), 0, 2);
       },
       "transpose",
       {"2", "f32[2,3]"}},
      {"permute length",
       [] {
         permute(F32({2, 3, 4}), {0, 1});
       },
       "permute",
       {"f32[2,3,4]", "[0,1]"}},
      {"permute repeat",
       [] {
         permute(F32({2, 3, 4}), {0, 1, 1});
       },
       "permute",
       {"repeat", "f32[2,3,4]"}},
      {"expand non-1 dim",
       [] {
         expand(F32({2, 3}), {4, 3});
       },
       "expand",
       {"f32[2,3]", "[4,3]"}},
      {"expand fewer dims",
       [] {
         expand(F32({2, 3}), {3});
       },
       "expand",
       {"f32[2,3]", "[3]"}},
      {"expand leading -1",
       [] {
         expand(F32({3}), {-1, 3});
       },
       "expand",
       {"f32[3]", "[-1,3]"}},
      {"broadcast_to", [] { broadcast_to(F32({2}), {3}); }, "broadcast_to", {"f32[2]", "[3]"}},
      {"squeeze dim",
       [] {
         squeeze(F32({1, 3}), 2);
       },
       "squeeze",
       {"2", "f32[1,3]"}},
      {"unsqueeze dim",
       [] {
         unsqueeze(F32({2, 3}), 4);
       },
       "unsqueeze",
       {"f32[2,3]", "4"}},
      {"slice step", [] { slice(F32({5}), 0, 0, 5, 0); }, "slice", {"f32[5]", "step"}},
      {"slice negative step", [] { slice(F32({5}), 0, 4, 0, -1); }, "slice", {"f32[5]"}},
      {"slice scalar", [] { slice(constant(1), 0, 0, 1); }, "slice", {"f32[]"}},
      {"index_select float index",
       [] {
         index_select(F32({4, 3}), 0, F32({2}));
       },
       "index_select",
       {"f32[2]", "f32[4,3]"}},
      {"index_select 2-D index",
       [] {
         index_select(F32({4, 3}), 0, S64({2, 2}));
       },
       "index_select",
       {"s64[2,2]", "f32[4,3]"}},
      {"take_along_dim rank",
       [] {
         take_along_dim(F32({4, 3}), S64({4}), 1);
       },
       "take_along_dim",
       {"s64[4]", "f32[4,3]"}},
      {"take_along_dim float",
       [] {
         take_along_dim(F32({4, 3}), F32({4, 3}), 1);
       },
       "take_along_dim",
       {"f32[4,3]"}},
      {"take_along_dim broadcast",
       [] {
         take_along_dim(F32({4, 3}), S64({2, 3}), 1);
       },
       "take_along_dim",
       {"f32[4,3]", "s64[2,3]"}},
      {"concat sizes",
       [] {
         concat({F32({2, 3}), F32({3, 3})}, 1);
       },
       "concat",
       {"f32[2,3]", "f32[3,3]"}},
      {"concat rank",
       [] {
         concat({F32({2, 3}), F32({3})}, 0);
       },
       "concat",
       {"f32[2,3]", "f32[3]"}},
      {"concat empty", [] { concat({}); }, "concat", {"non-empty"}},
      {"stack sizes",
       [] {
         stack({F32({2}), F32({3})});
       },
       "stack",
       {"f32[2]", "f32[3]"}},
      {"stack dim",
       [] {
         stack({F32({2}), F32({2})}, 3);
       },
       "stack",
       {"3", "f32[2]"}},
      {"split size", [] { split(F32({4}), 0); }, "split", {"f32[4]"}},
      {"chunk count", [] { chunk(F32({4}), 0); }, "chunk", {"f32[4]"}},
      {"softmax dim",
       [] {
         softmax(F32({2, 3}), 2);
       },
       "softmax",
       {"2", "f32[2,3]"}},
      {"log_softmax dim",
       [] {
         log_softmax(F32({2, 3}), -3);
       },
       "log_softmax",
       {"-3", "f32[2,3]"}},
      {"one_hot float index", [] { one_hot(F32({3}), 4); }, "one_hot", {"f32[3]"}},
      {"one_hot classes", [] { one_hot(S64({3}), -1); }, "one_hot", {"s64[3]", "-1"}},
      {"zeros negative",
       [] {
         zeros({2, -1});
       },
       "zeros",
       {"[2,-1]"}},
      {"full negative", [] { full({-3}, 2); }, "full", {"[-3]"}},
      {"arange step", [] { arange(0, 5, 0); }, "arange", {"step"}},
      {"arange direction", [] { arange(5, 0, 1); }, "arange", {"5", "0", "1"}},
      {"arange end", [] { arange(-2); }, "arange", {"-2"}},
      {"eye", [] { eye(-1); }, "eye", {"-1"}},
      {"uniform key", [] { uniform(F32({2}), {3}); }, "uniform", {"f32[2]", "u64[2]"}},
      {"uniform dtype", [] { uniform(1, {3}, 0, 1, DType::kS32); }, "uniform", {"s32"}},
      {"uniform bounds", [] { uniform(1, {3}, 2, 1); }, "uniform", {"low=2", "high=1"}},
      {"normal stddev", [] { normal(1, {3}, 0, -1); }, "normal", {"-1"}},
      {"split_key key", [] { split_key(S64({2}), 2); }, "split_key", {"s64[2]"}},
      {"split_key count", [] { split_key(random_key(1), -1); }, "split_key", {"-1"}},
      {"item", [] { F32({2}).item<float>(); }, "item", {"f32[2]"}},
      {"to_vector dtype", [] { F32({2}).to_vector<int32_t>(); }, "to_vector", {"f32[2]", "s32"}},
  };
}

TEST(Errors, EveryBadCallNamesTheOpAndShapes) {
  std::vector<BadCall> table = Table();
  EXPECT_GE(table.size(), 20u);
  for (const BadCall& bad : table) {
    SCOPED_TRACE(bad.name);
    ExpectError(bad.call, bad.op, bad.parts);
  }
}

TEST(Errors, BadCallsLeaveNoPendingState) {
  // A failed op throws before building anything; good ops still run after it.
  Tensor x = Tensor::FromVector<float>({1, 2, 3, 4}, {2, 2});
  EXPECT_THROW(matmul(x, Tensor::FromVector<float>({1, 2, 3}, {3})), Error);
  ExpectTensor<float>(matmul(x, x), {2, 2}, {7, 10, 15, 22});
}

}  // namespace
}  // namespace strata::test
