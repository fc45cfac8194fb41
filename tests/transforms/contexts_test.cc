// Contexts of one's own (lazy::Context, ContextScope): each has its own
// cache and metrics, programs compile and dump the same in any of them
// whatever the process ran before, and tensors outliving their context move
// to the default one.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "strata/lazy/context.h"
#include "strata/lazy/ops.h"
#include "strata/transforms/scan.h"

namespace strata {
namespace {

using lazy::Context;
using lazy::ContextScope;

constexpr int64_t kSteps = 4, kWidth = 3;

std::vector<float> Inputs() {
  std::vector<float> v(kSteps * kWidth);
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.1f * static_cast<float>(i) - 0.5f;
  return v;
}
std::vector<float> Weights() {
  std::vector<float> v(kWidth * kWidth);
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.05f * static_cast<float>(i * 7 % 9) - 0.2f;
  return v;
}

// h_{t+1} = tanh(x_t W + h_t) over four steps, then sum of h^2 over the
// steps: a While, a dot and a reduction.
float RunProgram() {
  Tensor x = Tensor::FromVector(Inputs(), {kSteps, 1, kWidth});
  Tensor w = Tensor::FromVector(Weights(), {kWidth, kWidth});
  Tensor h0 = zeros({1, kWidth});
  auto [h, ys] = scan(
      [&](const Tree& c, const Tree& xt) {
        Tensor next = tanh(matmul(xt.leaf(), w) + c.leaf());
        return std::pair{Tree(next), Tree(next)};
      },
      Tree(h0), Tree(x));
  return sum(ys.leaf() * ys.leaf()).item<float>();
}

double Reference() {
  std::vector<float> x = Inputs(), w = Weights();
  std::vector<double> h(kWidth, 0.0);
  double total = 0;
  for (int64_t t = 0; t < kSteps; ++t) {
    std::vector<double> next(kWidth);
    for (int64_t j = 0; j < kWidth; ++j) {
      double acc = h[j];
      for (int64_t i = 0; i < kWidth; ++i) acc += x[t * kWidth + i] * w[i * kWidth + j];
      next[j] = std::tanh(acc);
      total += next[j] * next[j];
    }
    h = next;
  }
  return total;
}

// Other programs, so the process's history differs between two runs: new
// combiners (f64 max, argmax), another loop, other shapes.
void RunOtherPrograms() {
  Tensor a = Tensor::FromVector<double>({3, -1, 4, 1, -5, 9}, {2, 3});
  EXPECT_EQ(max(a, {1}).to_vector<double>(), (std::vector<double>{4, 9}));
  EXPECT_EQ(argmax(a, 1).to_vector<int64_t>(), (std::vector<int64_t>{2, 2}));
  auto [c, ys] = scan(
      [](const Tree& carry, const Tree& xt) {
        Tensor next = carry.leaf() + xt.leaf();
        return std::pair{Tree(next), Tree(next * 2.0)};
      },
      Tree(zeros({2})), Tree(ones({5, 2})));
  EXPECT_EQ(c.leaf().to_vector<float>(), (std::vector<float>{5, 5}));
}

std::map<std::string, std::string> ReadDirectory(const std::filesystem::path& dir) {
  std::map<std::string, std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    files[entry.path().filename().string()] = text.str();
  }
  return files;
}

std::filesystem::path FreshDirectory(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() /
             fmt::format("strata-contexts-{}-{}", ::getpid(), name);
  std::filesystem::remove_all(dir);
  return dir;
}

TEST(Contexts, TwoContextsRunTheSameProgramWithIdenticalDumps) {
  const auto dir_a = FreshDirectory("a"), dir_b = FreshDirectory("b");
  const int64_t default_compiles = Context::Default().metrics().compiles;
  float first = 0, second = 0;
  {
    Context a;
    a.set_dump_dir(dir_a.string());
    ContextScope scope(a);
    first = RunProgram();
    EXPECT_GE(a.metrics().compiles.load(), 1);
    EXPECT_EQ(&Context::Get(), &a);
  }
  EXPECT_EQ(&Context::Get(), &Context::Default());
  EXPECT_EQ(Context::Default().metrics().compiles.load(), default_compiles);  // a's own cache
  RunOtherPrograms();  // in the default context: the process's history moves on
  RunProgram();        // and the same program there, named from its own count
  int64_t compiled_in_b = 0;
  {
    Context b;
    b.set_dump_dir(dir_b.string());
    ContextScope scope(b);
    second = RunProgram();
    compiled_in_b = b.metrics().compiles.load();
  }
  EXPECT_GE(compiled_in_b, 1);  // an empty cache: b compiled what a had compiled
  EXPECT_NEAR(first, Reference(), 1e-5);
  EXPECT_EQ(first, second);
  const auto files_a = ReadDirectory(dir_a), files_b = ReadDirectory(dir_b);
  ASSERT_FALSE(files_a.empty());
  std::vector<std::string> names_a, names_b;
  for (const auto& [name, text] : files_a) names_a.push_back(name);
  for (const auto& [name, text] : files_b) names_b.push_back(name);
  EXPECT_EQ(names_a, names_b);
  for (const auto& [name, text] : files_a) {
    auto other = files_b.find(name);
    if (other == files_b.end()) continue;
    EXPECT_EQ(text, other->second) << name;
  }
  std::filesystem::remove_all(dir_a);
  std::filesystem::remove_all(dir_b);
}

TEST(Contexts, ATensorOutlivingItsContextMovesToTheDefaultOne) {
  Tensor kept;
  {
    Context c;
    ContextScope scope(c);
    kept = Tensor::FromVector<float>({1, 2, 3}, {3}) * 2.0;  // pending, made in c
  }
  const int64_t executions = Context::Default().metrics().executions;
  EXPECT_EQ(kept.to_vector<float>(), (std::vector<float>{2, 4, 6}));
  EXPECT_EQ(Context::Default().metrics().executions.load(), executions + 1);
  EXPECT_EQ(kept.impl()->context, &Context::Default());
}

TEST(Contexts, ScopesNestAndEachContextSyncsItsOwnTensors) {
  Context outer, inner;
  ContextScope s1(outer);
  Tensor a = Tensor::FromVector<float>({1, 2}, {2}) + 1.0;
  {
    ContextScope s2(inner);
    Tensor b = Tensor::FromVector<float>({3, 4}, {2}) * 3.0;
    EXPECT_EQ(&Context::Get(), &inner);
    sync();  // the current context's tensors only
    EXPECT_TRUE(b.is_materialized());
    EXPECT_FALSE(a.is_materialized());
    std::vector<Tensor*> both = {&a, &b};
    sync(both);  // each in its own context
    EXPECT_EQ(b.to_vector<float>(), (std::vector<float>{9, 12}));
  }
  EXPECT_EQ(&Context::Get(), &outer);
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{2, 3}));
  EXPECT_EQ(outer.metrics().executions.load(), 1);
  EXPECT_EQ(inner.metrics().executions.load(), 1);
}

}  // namespace
}  // namespace strata
