// lazy::CompiledGraph: traced once, run on new buffers. References are the
// values worked out in plain loops over the new inputs.
#include "strata/lazy/compiled_graph.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "strata/core/error.h"
#include "strata/lazy/ops.h"

namespace strata {
namespace {

using lazy::CompiledGraph;
using lazy::Context;

runtime::Buffer Buf(const std::vector<float>& v, std::vector<int64_t> dims) {
  return runtime::Buffer::FromVector(v, std::move(dims), runtime::Client::Default().device(0));
}

TEST(CompiledGraph, RunsTheTracedProgramOnNewInputsWithoutRecompiling) {
  Context::Get().ClearCache();
  Context::Get().ResetMetrics();
  Tensor x = Tensor::FromVector<float>({0, 0, 0}, {3});
  Tensor w = Tensor::FromVector<float>({0, 0, 0}, {3});
  Tensor constant = Tensor::FromVector<float>({1, 2, 3}, {3});  // a fixed argument
  Tensor y = exp(x) * w + constant * 0.5;
  CompiledGraph graph({x, w}, {y, x, constant});
  EXPECT_TRUE(graph.compiled());
  const int64_t compiles = Context::Get().metrics().compiles.load();
  for (float scale : {1.0f, -2.0f, 0.25f}) {
    const std::vector<float> xs = {scale, 2 * scale, -scale}, ws = {3, -1, 0.5f};
    std::vector<runtime::Buffer> out = graph.Run({Buf(xs, {3}), Buf(ws, {3})});
    ASSERT_EQ(out.size(), 3u);
    const std::vector<float> got = out[0].ToVector<float>();
    for (int i = 0; i < 3; ++i) {
      const double want = std::exp(static_cast<double>(xs[i])) * ws[i] + (i + 1) * 0.5;
      EXPECT_NEAR(got[i], want, 1e-5 * (1 + std::abs(want))) << i;
    }
    EXPECT_EQ(out[1].ToVector<float>(), xs);  // an input returned as it is
    EXPECT_EQ(out[2].ToVector<float>(), (std::vector<float>{1, 2, 3}));
  }
  EXPECT_EQ(Context::Get().metrics().compiles.load(), compiles);
  // The same graph traced again is a cache hit, not a compile.
  Tensor x2 = Tensor::FromVector<float>({0, 0, 0}, {3});
  Tensor w2 = Tensor::FromVector<float>({0, 0, 0}, {3});
  CompiledGraph again({x2, w2}, {exp(x2) * w2 + constant * 0.5});
  EXPECT_FALSE(again.compiled());
}

TEST(CompiledGraph, BadInputsAreErrorsThatSayWhat) {
  Tensor x = Tensor::FromVector<float>({1, 2}, {2});
  Tensor y = x * 2.0;
  CompiledGraph graph({x}, {y});
  auto message = [&](auto fn) {
    try {
      fn();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([&] {
              graph.Run({Buf({1, 2, 3}, {3})});
            }).find("input 0 must be f32[2] as when the graph was compiled, got f32[3]"),
            std::string::npos);
  EXPECT_NE(message([&] { graph.Run({}); }).find("takes 1 inputs, got 0"), std::string::npos);
  EXPECT_NE(message([&] { CompiledGraph({y}, {y * 2.0}); }).find("must be a materialized"),
            std::string::npos);
  EXPECT_NE(message([&] {
              CompiledGraph({x, x}, {x + x});
            }).find("same tensor as input 0"),
            std::string::npos);
}

TEST(CompiledGraph, AnIndexOutOfRangeIsAnErrorFromTheRun) {
  Tensor table = Tensor::FromVector<float>({1, 2, 3, 4}, {4, 1});
  Tensor ids = Tensor::FromVector<int64_t>({0, 0}, {2});
  CompiledGraph graph({table, ids}, {index_select(table, 0, ids)});
  auto run = [&](std::vector<int64_t> v) {
    return graph.Run({Buf({1, 2, 3, 4}, {4, 1}),
                      runtime::Buffer::FromVector(v, {2}, runtime::Client::Default().device(0))});
  };
  EXPECT_EQ(run({3, 1})[0].ToVector<float>(), (std::vector<float>{4, 2}));
  try {
    run({1, 4});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("index 4 is out of range"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace strata
