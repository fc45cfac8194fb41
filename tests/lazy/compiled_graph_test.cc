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

// An optimizer-shaped update: x' = x - 0.1 m, m' = 0.9 m + 1 written into
// x's and m's own bytes (no new buffers), with values from a plain loop. A
// home the program cannot use (the input is read after the output is
// written) leaves a new buffer and the input as it was.
TEST(CompiledGraph, OutputsGoIntoTheInputsNamedAsTheirHomes) {
  Tensor x = Tensor::FromVector<float>(std::vector<float>(1024, 0), {1024});
  Tensor m = Tensor::FromVector<float>(std::vector<float>(1024, 0), {1024});
  CompiledGraph graph({x, m}, {m * 0.9 + 1.0, x - m * 0.1});
  std::vector<float> xs(1024), ms(1024);
  for (int i = 0; i < 1024; ++i) {
    xs[i] = 0.01f * static_cast<float>(i);
    ms[i] = 1.0f - 0.002f * static_cast<float>(i);
  }
  runtime::Buffer xb = Buf(xs, {1024}), mb = Buf(ms, {1024});
  std::vector<runtime::Buffer> out = graph.Run({xb, mb}, {{0, 1}, {1, 0}});
  ASSERT_EQ(out.size(), 2u);
  const std::vector<float> new_m = out[0].ToVector<float>(), new_x = out[1].ToVector<float>();
  for (int i = 0; i < 1024; ++i) {
    EXPECT_NEAR(new_m[i], 0.9 * ms[i] + 1.0, 1e-5) << i;
    EXPECT_NEAR(new_x[i], xs[i] - 0.1 * ms[i], 1e-5) << i;
  }
  // Each output is the input it names: the same bytes.
  EXPECT_EQ(out[0].data(), mb.data());
  EXPECT_EQ(out[1].data(), xb.data());

  // y = 2 a is wanted in a's bytes, but z = a + 1 is a result too: whichever
  // the program runs first, the values are right, and a holds either its
  // old values (no home given) or y (the home taken).
  Tensor a = Tensor::FromVector<float>({0, 0, 0, 0}, {4});
  CompiledGraph both({a}, {a * 2.0, a + 1.0});
  runtime::Buffer ab = Buf({1, 2, 3, 4}, {4});
  std::vector<runtime::Buffer> got = both.Run({ab}, {{0, 0}});
  EXPECT_EQ(got[0].ToVector<float>(), (std::vector<float>{2, 4, 6, 8}));
  EXPECT_EQ(got[1].ToVector<float>(), (std::vector<float>{2, 3, 4, 5}));
  const std::vector<float> held =
      got[0].data() == ab.data() ? got[0].ToVector<float>() : std::vector<float>{1, 2, 3, 4};
  EXPECT_EQ(ab.ToVector<float>(), held);

  // A home naming no output or no input is an Error that says so.
  try {
    graph.Run({Buf(xs, {1024}), Buf(ms, {1024})}, {{5, 0}});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot write output 5 into input 0"), std::string::npos)
        << e.what();
  }
  // Also where the graph runs no program (its output is its input).
  CompiledGraph identity({a}, {a});
  try {
    identity.Run({Buf({1, 2, 3, 4}, {4})}, {{0, 3}});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot write output 0 into input 3"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace strata
