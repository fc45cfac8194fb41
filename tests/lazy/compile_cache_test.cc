// The persistent compile cache (Config::cache_dir): a fresh context (as a
// second process would be) reads the program another compiled instead of
// compiling it, and computes the same numbers; an entry that is damaged or
// belongs to another key is never loaded.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "strata/core/config.h"
#include "strata/lazy/context.h"
#include "strata/lazy/ops.h"

namespace strata::lazy {
namespace {

constexpr int64_t kRows = 24, kInner = 40, kCols = 16;

std::vector<float> Values(int64_t n, float scale) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>((i * 7) % 13 - 6);
  return v;
}

// relu(x w + 1) * 2, summed over columns: a dot, a fusion and a reduction.
std::vector<float> RunProgram() {
  Tensor x = Tensor::FromVector(Values(kRows * kInner, 0.05f), {kRows, kInner});
  Tensor w = Tensor::FromVector(Values(kInner * kCols, 0.03f), {kInner, kCols});
  return sum(maximum(matmul(x, w) + 1.0, zeros({}, DType::kF32)) * 2.0, {1}).to_vector<float>();
}

std::vector<double> Reference() {
  const std::vector<float> x = Values(kRows * kInner, 0.05f), w = Values(kInner * kCols, 0.03f);
  std::vector<double> out(kRows, 0.0);
  for (int64_t i = 0; i < kRows; ++i) {
    for (int64_t j = 0; j < kCols; ++j) {
      double dot = 0;
      for (int64_t k = 0; k < kInner; ++k) dot += double(x[i * kInner + k]) * w[k * kCols + j];
      out[i] += std::max(dot + 1.0, 0.0) * 2.0;
    }
  }
  return out;
}

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class CompileCache : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / fmt::format("strata-cc-{}", ::getpid());
    std::filesystem::remove_all(dir_);
    saved_ = GetConfig();
    Config c = saved_;
    c.cache_dir = dir_.string();
    SetConfig(c);
  }
  void TearDown() override {
    SetConfig(saved_);
    std::filesystem::remove_all(dir_);
  }
  // Runs the program in a context of its own (an empty in-memory cache);
  // returns its results and what the context counted.
  std::vector<float> RunFresh(int64_t* compiles, int64_t* disk_hits) {
    Context context;
    ContextScope scope(context);
    std::vector<float> out = RunProgram();
    *compiles = context.metrics().compiles.load();
    *disk_hits = context.metrics().disk_cache_hits.load();
    return out;
  }
  std::vector<std::filesystem::path> Entries() const {
    std::vector<std::filesystem::path> out;
    for (const auto& e : std::filesystem::directory_iterator(dir_)) out.push_back(e.path());
    return out;
  }
  std::filesystem::path dir_;
  Config saved_;
};

TEST_F(CompileCache, AFreshContextReadsTheProgramInsteadOfCompilingIt) {
  int64_t compiles = 0, hits = 0;
  const std::vector<float> first = RunFresh(&compiles, &hits);
  EXPECT_EQ(compiles, 1);
  EXPECT_EQ(hits, 0);
  ASSERT_EQ(Entries().size(), 1u);
  const std::vector<float> second = RunFresh(&compiles, &hits);
  EXPECT_EQ(compiles, 0);
  EXPECT_EQ(hits, 1);
  EXPECT_EQ(first, second);  // the same program, bit for bit
  const std::vector<double> want = Reference();
  for (int64_t i = 0; i < kRows; ++i)
    EXPECT_NEAR(first[i], want[i], 1e-4 * (1 + std::abs(want[i])));
}

TEST_F(CompileCache, ADamagedEntryIsIgnoredWithAWarningAndWrittenAgain) {
  int64_t compiles = 0, hits = 0;
  const std::vector<float> first = RunFresh(&compiles, &hits);
  ASSERT_EQ(Entries().size(), 1u);
  const std::filesystem::path entry = Entries()[0];
  const std::string text = ReadFile(entry);
  // One byte of the module changed: a program that still parses, and would
  // compute something else.
  const size_t at = text.find("add(");
  ASSERT_NE(at, std::string::npos) << text;
  std::string damaged = text;
  damaged.replace(at, 4, "sub(");
  std::ofstream(entry, std::ios::binary | std::ios::trunc) << damaged;
  testing::internal::CaptureStderr();
  const std::vector<float> second = RunFresh(&compiles, &hits);
  const std::string warning = testing::internal::GetCapturedStderr();
  EXPECT_EQ(compiles, 1);
  EXPECT_EQ(hits, 0);
  EXPECT_EQ(first, second);
  EXPECT_NE(warning.find("[compile cache] not using " + entry.string()), std::string::npos)
      << warning;
  EXPECT_NE(warning.find("checksum"), std::string::npos) << warning;
  // Compiled again, the entry is whole once more.
  RunFresh(&compiles, &hits);
  EXPECT_EQ(hits, 1);
}

TEST_F(CompileCache, AnEntryUnderAnotherKeysNameOrNotAnEntryIsNeverLoaded) {
  int64_t compiles = 0, hits = 0;
  RunFresh(&compiles, &hits);
  ASSERT_EQ(Entries().size(), 1u);
  const std::filesystem::path entry = Entries()[0];
  const std::string text = ReadFile(entry);
  // Another program's entry under this key's name (a foreign file).
  const size_t key_at = text.find("// key ") + 7;
  std::string foreign = text;
  foreign[key_at] = foreign[key_at] == '0' ? '1' : '0';
  std::ofstream(entry, std::ios::binary | std::ios::trunc) << foreign;
  testing::internal::CaptureStderr();
  std::vector<float> got = RunFresh(&compiles, &hits);
  std::string warning = testing::internal::GetCapturedStderr();
  EXPECT_EQ(compiles, 1);
  EXPECT_NE(warning.find("header does not match"), std::string::npos) << warning;
  // Not an entry at all.
  std::ofstream(entry, std::ios::binary | std::ios::trunc) << "HloModule m\n";
  testing::internal::CaptureStderr();
  got = RunFresh(&compiles, &hits);
  warning = testing::internal::GetCapturedStderr();
  EXPECT_EQ(compiles, 1);
  EXPECT_NE(warning.find("not a strata compile cache entry"), std::string::npos) << warning;
  const std::vector<double> want = Reference();
  for (int64_t i = 0; i < kRows; ++i) EXPECT_NEAR(got[i], want[i], 1e-4 * (1 + std::abs(want[i])));
}

TEST_F(CompileCache, AnUnwritableDirectoryIsAWarningNotAnError) {
  Config c = GetConfig();
  std::filesystem::create_directories(dir_);
  std::ofstream(dir_ / "file") << "x";
  c.cache_dir = (dir_ / "file").string();  // a file, not a directory
  SetConfig(c);
  int64_t compiles = 0, hits = 0;
  testing::internal::CaptureStderr();
  const std::vector<float> got = RunFresh(&compiles, &hits);
  const std::string warning = testing::internal::GetCapturedStderr();
  EXPECT_EQ(compiles, 1);
  EXPECT_NE(warning.find("cannot write"), std::string::npos) << warning;
  EXPECT_EQ(got.size(), static_cast<size_t>(kRows));
}

}  // namespace
}  // namespace strata::lazy
