// Shape ops against index loops on std::vector data and hand-written values.
#include "lazy/op_test_util.h"

namespace strata::test {
namespace {

// 0, 1, 2, ... as floats, so every element names its own flat index.
std::vector<float> Iota(int64_t n) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(i);
  return v;
}
Tensor IotaTensor(const Dims& dims) { return Tensor::FromVector(Iota(NumElements(dims)), dims); }

TEST(Shape, Reshape) {
  Tensor x = IotaTensor({2, 3, 4});
  ExpectTensor<float>(reshape(x, {4, -1}), {4, 6}, Iota(24));
  ExpectTensor<float>(reshape(x, {-1}), {24}, Iota(24));
  ExpectTensor<float>(reshape(x, {2, 3, 4}), {2, 3, 4}, Iota(24));
  ExpectTensor<float>(reshape(IotaTensor({1}), {}), {}, {0});
  ExpectTensor<float>(reshape(IotaTensor({}), {1, 1}), {1, 1}, {0});
  ExpectTensor<float>(reshape(zeros({0, 3}), {3, 0, 5}), {3, 0, 5}, {});
  ExpectTensor<float>(reshape(zeros({0, 3}), {-1, 3}), {0, 3}, {});
}

TEST(Shape, TransposeAndPermute) {
  Dims dims = {2, 3, 4};
  Tensor x = IotaTensor(dims);
  auto permuted = [&](const Dims& perm) {
    Dims out;
    for (int64_t p : perm) out.push_back(dims[p]);
    return Tabulate<float>(out, [&](const Dims& i) {
      Dims source(3);
      for (size_t k = 0; k < 3; ++k) source[perm[k]] = i[k];
      return Ravel(source, dims);
    });
  };
  ExpectTensor<float>(permute(x, {2, 0, 1}), {4, 2, 3}, permuted({2, 0, 1}));
  ExpectTensor<float>(permute(x, {-1, -2, 0}), {4, 3, 2}, permuted({2, 1, 0}));
  ExpectTensor<float>(permute(x, {0, 1, 2}), {2, 3, 4}, Iota(24));
  ExpectTensor<float>(transpose(x, 0, 2), {4, 3, 2}, permuted({2, 1, 0}));
  ExpectTensor<float>(transpose(x, -1, 1), {2, 4, 3}, permuted({0, 2, 1}));
  ExpectTensor<float>(transpose(x, 1, 1), {2, 3, 4}, Iota(24));
  Tensor m = Tensor::FromVector<int32_t>({1, 2, 3, 4, 5, 6}, {2, 3});
  ExpectTensor<int32_t>(transpose(m, 0, 1), {3, 2}, {1, 4, 2, 5, 3, 6});
}

TEST(Shape, FlipReversesEachNamedDim) {
  Dims dims = {2, 3, 4};
  Tensor x = IotaTensor(dims);
  auto flipped = [&](const std::vector<bool>& reversed) {
    return Tabulate<float>(dims, [&](const Dims& i) {
      Dims source = i;
      for (size_t k = 0; k < 3; ++k) {
        if (reversed[k]) source[k] = dims[k] - 1 - i[k];
      }
      return Ravel(source, dims);
    });
  };
  ExpectTensor<float>(flip(x, {1}), dims, flipped({false, true, false}));
  ExpectTensor<float>(flip(x, {-1, 0}), dims, flipped({true, false, true}));
  ExpectTensor<float>(flip(x, {}), dims, Iota(24));
  ExpectTensor<float>(flip(IotaTensor({}), {}), {}, {0});
  EXPECT_THROW(flip(x, {1, -2}), Error);  // the same dim twice
  EXPECT_THROW(flip(x, {3}), Error);
}

TEST(Shape, ExpandAndBroadcastTo) {
  Tensor x = Tensor::FromVector<float>({1, 2, 3}, {3, 1});
  std::vector<float> expected = Tabulate<float>({2, 3, 4}, [](const Dims& i) { return i[1] + 1; });
  ExpectTensor<float>(expand(x, {2, 3, 4}), {2, 3, 4}, expected);
  ExpectTensor<float>(expand(x, {2, -1, 4}), {2, 3, 4}, expected);
  ExpectTensor<float>(broadcast_to(x, {2, 3, 4}), {2, 3, 4}, expected);
  ExpectTensor<float>(expand(x, {3, 1}), {3, 1}, {1, 2, 3});
  ExpectTensor<float>(expand(x, {3, 0}), {3, 0}, {});
  ExpectTensor<float>(expand(constant(5), {2, 2}), {2, 2}, {5, 5, 5, 5});
  Tensor row = Tensor::FromVector<int64_t>({7, 8}, {1, 2});
  ExpectTensor<int64_t>(broadcast_to(row, {3, -1}), {3, 2}, {7, 8, 7, 8, 7, 8});
}

TEST(Shape, SqueezeUnsqueeze) {
  Tensor x = IotaTensor({1, 3, 1, 2});
  ExpectTensor<float>(squeeze(x), {3, 2}, Iota(6));
  ExpectTensor<float>(squeeze(x, 0), {3, 1, 2}, Iota(6));
  ExpectTensor<float>(squeeze(x, -2), {1, 3, 2}, Iota(6));
  ExpectTensor<float>(squeeze(x, 1), {1, 3, 1, 2}, Iota(6));  // size 3: no-op, as torch
  ExpectTensor<float>(squeeze(IotaTensor({1, 1})), {}, {0});
  ExpectTensor<float>(squeeze(IotaTensor({}), 0), {}, {0});
  Tensor y = IotaTensor({2, 3});
  ExpectTensor<float>(unsqueeze(y, 0), {1, 2, 3}, Iota(6));
  ExpectTensor<float>(unsqueeze(y, 2), {2, 3, 1}, Iota(6));
  ExpectTensor<float>(unsqueeze(y, -1), {2, 3, 1}, Iota(6));
  ExpectTensor<float>(unsqueeze(y, -3), {1, 2, 3}, Iota(6));
  ExpectTensor<float>(unsqueeze(y, 1), {2, 1, 3}, Iota(6));
  ExpectTensor<float>(unsqueeze(IotaTensor({}), 0), {1}, {0});
}

TEST(Shape, SliceClampsLikePython) {
  Tensor x = IotaTensor({10});
  struct Case {
    std::optional<int64_t> start, end;
    int64_t step;
    std::vector<float> expected;  // what Python's range(10)[start:end:step] gives
  };
  std::vector<Case> cases = {
      {2, 8, 3, {2, 5}},
      {-3, std::nullopt, 1, {7, 8, 9}},
      {std::nullopt, -20, 1, {}},
      {-20, 3, 1, {0, 1, 2}},
      {8, 2, 1, {}},
      {std::nullopt, std::nullopt, 4, {0, 4, 8}},
      {5, 100, 2, {5, 7, 9}},
      {-1, std::nullopt, 5, {9}},
      {3, -3, 1, {3, 4, 5, 6}},
      {std::nullopt, std::nullopt, 1, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}},
      {12, 20, 1, {}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << (c.start ? std::to_string(*c.start) : "") << ":"
                                      << (c.end ? std::to_string(*c.end) : "") << ":" << c.step);
    ExpectTensor<float>(slice(x, 0, c.start, c.end, c.step),
                        {static_cast<int64_t>(c.expected.size())}, c.expected);
  }
}

TEST(Shape, SliceAlongInnerDim) {
  Dims dims = {3, 5};
  Tensor x = IotaTensor(dims);
  auto expected = Tabulate<float>({3, 2}, [&](const Dims& i) {
    return Ravel({i[0], 1 + 2 * i[1]}, dims);
  });
  ExpectTensor<float>(slice(x, 1, 1, 4, 2), {3, 2}, expected);
  ExpectTensor<float>(slice(x, -1, 1, -1, 2), {3, 2}, expected);
  ExpectTensor<float>(slice(x, 0, 1, std::nullopt), {2, 5},
                      Tabulate<float>({2, 5}, [](const Dims& i) { return 5 + i[0] * 5 + i[1]; }));
}

TEST(Shape, IndexSelect) {
  Dims dims = {4, 3};
  Tensor x = IotaTensor(dims);
  std::vector<int64_t> rows = {3, 0, 3, 1};
  auto by_rows = Tabulate<float>({4, 3}, [&](const Dims& i) {
    return Ravel({rows[i[0]], i[1]}, dims);
  });
  ExpectTensor<float>(index_select(x, 0, Tensor::FromVector(rows, {4})), {4, 3}, by_rows);
  std::vector<int32_t> cols = {2, 2, 0};
  auto by_cols = Tabulate<float>({4, 3}, [&](const Dims& i) {
    return Ravel({i[0], cols[i[1]]}, dims);
  });
  ExpectTensor<float>(index_select(x, -1, Tensor::FromVector(cols, {3})), {4, 3}, by_cols);
  ExpectTensor<float>(index_select(x, 1, Tensor::FromVector<int64_t>({1}, {})), {4, 1},
                      {1, 4, 7, 10});
  ExpectTensor<float>(index_select(x, 0, Tensor::FromVector<int64_t>({}, {0})), {0, 3}, {});
  Tensor y = IotaTensor({2, 3, 4});
  std::vector<uint8_t> mid = {1, 1};
  ExpectTensor<float>(index_select(y, 1, Tensor::FromVector(mid, {2})), {2, 2, 4},
                      Tabulate<float>({2, 2, 4}, [](const Dims& i) {
                        return Ravel({i[0], 1, i[2]}, {2, 3, 4});
                      }));
}

TEST(Shape, TakeAlongDim) {
  Dims dims = {3, 4};
  Tensor x = IotaTensor(dims);
  std::vector<int64_t> along1 = {3, 0, 1, 1, 2, 2};  // [3, 2]
  ExpectTensor<float>(take_along_dim(x, Tensor::FromVector(along1, {3, 2}), 1), {3, 2},
                      Tabulate<float>({3, 2}, [&](const Dims& i) {
                        return Ravel({i[0], along1[i[0] * 2 + i[1]]}, dims);
                      }));
  std::vector<int32_t> along0 = {2, 1, 0, 0, 0, 2, 2, 1};  // [2, 4]
  auto expected0 = Tabulate<float>({2, 4}, [&](const Dims& i) {
    return Ravel({along0[i[0] * 4 + i[1]], i[1]}, dims);
  });
  ExpectTensor<float>(take_along_dim(x, Tensor::FromVector(along0, {2, 4}), 0), {2, 4}, expected0);
  ExpectTensor<float>(take_along_dim(x, Tensor::FromVector(along0, {2, 4}), -2), {2, 4}, expected0);
  // The argmax along a dim picks the max: take_along_dim(x, argmax(keepdim)) == max(keepdim).
  Tensor r = Tensor::FromVector<float>({3, 9, 1, 7, 2, 8}, {2, 3});
  ExpectTensor<float>(take_along_dim(r, argmax(r, 1, true), 1), {2, 1}, {9, 8});
  // Size-1 dims outside `dim` broadcast, as torch.
  std::vector<int64_t> one_row = {1, 0};  // [1, 2] against x [3, 4]
  ExpectTensor<float>(take_along_dim(x, Tensor::FromVector(one_row, {1, 2}), 1), {3, 2},
                      Tabulate<float>({3, 2}, [&](const Dims& i) {
                        return Ravel({i[0], one_row[i[1]]}, dims);
                      }));
  Tensor y = IotaTensor({2, 3, 2});
  std::vector<int64_t> along2 = {1, 0, 0, 1, 1, 1, 0, 0, 1, 0, 0, 1};  // [2, 3, 2]
  ExpectTensor<float>(take_along_dim(y, Tensor::FromVector(along2, {2, 3, 2}), 2), {2, 3, 2},
                      Tabulate<float>({2, 3, 2}, [&](const Dims& i) {
                        return Ravel({i[0], i[1], along2[Ravel(i, {2, 3, 2})]}, {2, 3, 2});
                      }));
}

TEST(Shape, Concat) {
  Tensor a = IotaTensor({2, 3});
  Tensor b = Tensor::FromVector<float>({10, 11}, {2, 1});
  ExpectTensor<float>(concat({a, b}, 1), {2, 4}, {0, 1, 2, 10, 3, 4, 5, 11});
  ExpectTensor<float>(concat({a, b}, -1), {2, 4}, {0, 1, 2, 10, 3, 4, 5, 11});
  Tensor c = Tensor::FromVector<int32_t>({7, 8, 9}, {1, 3});
  Tensor ac = concat({a, c}, 0);  // s32 joins f32 -> f32
  ExpectTensor<float>(ac, {3, 3}, {0, 1, 2, 3, 4, 5, 7, 8, 9});
  ExpectTensor<float>(concat({a, zeros({0, 3}), a}, 0), {4, 3},
                      {0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5});
  ExpectTensor<float>(concat({a}, 1), {2, 3}, Iota(6));
  Tensor i64 = Tensor::FromVector<int64_t>({1}, {1});
  ExpectTensor<int64_t>(concat({reshape(c, {3}), i64}), {4}, {7, 8, 9, 1});
}

TEST(Shape, Stack) {
  Tensor a = Tensor::FromVector<float>({1, 2, 3}, {3});
  Tensor b = Tensor::FromVector<float>({4, 5, 6}, {3});
  ExpectTensor<float>(stack({a, b}), {2, 3}, {1, 2, 3, 4, 5, 6});
  ExpectTensor<float>(stack({a, b}, 1), {3, 2}, {1, 4, 2, 5, 3, 6});
  ExpectTensor<float>(stack({a, b}, -1), {3, 2}, {1, 4, 2, 5, 3, 6});
  ExpectTensor<float>(stack({a, b, a}, -2), {3, 3}, {1, 2, 3, 4, 5, 6, 1, 2, 3});
  ExpectTensor<float>(stack({constant(1), constant(2)}), {2}, {1, 2});
}

// Sizes along `dim` of each piece.
std::vector<int64_t> PieceSizes(const std::vector<Tensor>& pieces, int64_t dim) {
  std::vector<int64_t> sizes;
  for (const Tensor& t : pieces) sizes.push_back(t.dim(dim));
  return sizes;
}

TEST(Shape, Split) {
  Tensor x = IotaTensor({7, 2});
  auto pieces = split(x, 3);
  ASSERT_EQ(PieceSizes(pieces, 0), (std::vector<int64_t>{3, 3, 1}));
  ExpectTensor<float>(pieces[1], {3, 2}, {6, 7, 8, 9, 10, 11});
  ExpectTensor<float>(pieces[2], {1, 2}, {12, 13});
  EXPECT_EQ(PieceSizes(split(x, 7), 0), (std::vector<int64_t>{7}));
  EXPECT_EQ(PieceSizes(split(x, 10), 0), (std::vector<int64_t>{7}));
  auto columns = split(x, 1, -1);
  ASSERT_EQ(columns.size(), 2u);
  ExpectTensor<float>(columns[1], {7, 1}, {1, 3, 5, 7, 9, 11, 13});
  EXPECT_EQ(PieceSizes(split(zeros({0, 2}), 3), 0), (std::vector<int64_t>{0}));
}

TEST(Shape, ChunkSizesFollowTorch) {
  struct Case {
    int64_t size, chunks;
    std::vector<int64_t> expected;  // torch.arange(size).chunk(chunks) sizes
  };
  for (const Case& c :
       {Case{6, 4, {2, 2, 2}}, Case{5, 2, {3, 2}}, Case{7, 3, {3, 3, 1}}, Case{0, 3, {0, 0, 0}},
        Case{4, 4, {1, 1, 1, 1}}, Case{3, 5, {1, 1, 1}}, Case{10, 1, {10}}}) {
    SCOPED_TRACE(::testing::Message() << c.size << " in " << c.chunks);
    EXPECT_EQ(PieceSizes(chunk(IotaTensor({2, c.size}), c.chunks, 1), 1), c.expected);
  }
  auto pieces = chunk(IotaTensor({5}), 2);
  ExpectTensor<float>(pieces[0], {3}, {0, 1, 2});
  ExpectTensor<float>(pieces[1], {2}, {3, 4});
}

TEST(Shape, MTransposesTheLastTwoDims) {
  // [2, 3, 4] -> [2, 4, 3]: out[b][j][i] = x[b][i][j] = 12b + 4i + j.
  std::vector<float> expected;
  for (int b = 0; b < 2; ++b)
    for (int j = 0; j < 4; ++j)
      for (int i = 0; i < 3; ++i) expected.push_back(12.0f * b + 4.0f * i + j);
  ExpectTensor<float>(mT(IotaTensor({2, 3, 4})), {2, 4, 3}, expected);
  ExpectTensor<float>(mT(IotaTensor({2, 3})), {3, 2}, {0, 3, 1, 4, 2, 5});
  EXPECT_THROW(mT(IotaTensor({5})), Error);
}

}  // namespace
}  // namespace strata::test
