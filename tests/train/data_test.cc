// The data side of `strata train`: tokenizer, corpus split, batches.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "error_of.h"
#include "strata/core/error.h"
#include "strata/train/data.h"

namespace strata::train {
namespace {

namespace fs = std::filesystem;

std::string WriteTemp(const std::string& name, const std::string& text) {
  fs::path path = fs::temp_directory_path() / ("strata_data_test_" + name);
  std::ofstream(path, std::ios::binary) << text;
  return path.string();
}

TEST(ByteTokenizer, EveryByteRoundTrips) {
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  ByteTokenizer tok;
  std::vector<int64_t> ids = tok.Encode(all);
  ASSERT_EQ(ids.size(), 256u);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(ids[b], b);  // unsigned bytes, not chars
  EXPECT_EQ(tok.Decode(ids), all);
  EXPECT_EQ(tok.Encode("Tom"), (std::vector<int64_t>{84, 111, 109}));
}

TEST(ByteTokenizer, DecodeRejectsNonBytes) {
  ByteTokenizer tok;
  try {
    tok.Decode({65, 256});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("id 256 at position 1"), std::string::npos) << e.what();
  }
  EXPECT_THROW(tok.Decode({-1}), Error);
}

TEST(Corpus, HoldsOutTheEnd) {
  std::string text;
  for (int i = 0; i < 1000; ++i) text.push_back(static_cast<char>('a' + i % 26));
  Corpus c = LoadCorpus(WriteTemp("split.txt", text), 0.1, 16);
  ASSERT_EQ(c.train.size(), 900u);
  ASSERT_EQ(c.heldout.size(), 100u);
  for (size_t i = 0; i < 900; ++i) ASSERT_EQ(c.train[i], 'a' + static_cast<int>(i % 26));
  for (size_t i = 0; i < 100; ++i) ASSERT_EQ(c.heldout[i], 'a' + static_cast<int>((900 + i) % 26));
}

TEST(Corpus, ErrorsNameTheProblem) {
  std::string small = WriteTemp("small.txt", std::string(50, 'x'));
  try {
    LoadCorpus(small, 0.1, 16);  // 5 held-out bytes < 16
    FAIL() << "no error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("has 50 bytes"), std::string::npos) << m;
    EXPECT_NE(m.find("at least 16 bytes in each part"), std::string::npos) << m;
  }
  EXPECT_THROW(LoadCorpus("/nonexistent/corpus.txt", 0.1, 16), Error);
  EXPECT_THROW(LoadCorpus(small, 0, 1), Error);
  EXPECT_THROW(LoadCorpus(small, 1, 1), Error);
}

TEST(Corpus, ADirectoryIsAnErrorNotTheStandardLibrarysException) {
  // Reading a directory through a stream buffer throws std::ios_base::failure,
  // which is no strata::Error (found by the checkpoint fuzzer, where a
  // trainer_state.json was a directory).
  const std::string dir = fs::temp_directory_path().string();
  const std::string message = test::ErrorOf([&] { LoadCorpus(dir, 0.1, 16); });
  EXPECT_NE(message.find("cannot read '" + dir + "': it is a directory"), std::string::npos)
      << message;
}

TEST(SplitMix64, MatchesTheReferenceStream) {
  // Vigna's splitmix64.c seeded with 0: its first three outputs.
  SplitMix64 rng(0);
  EXPECT_EQ(rng.Next(), 0xe220a8397b1dcdafull);
  EXPECT_EQ(rng.Next(), 0x6e789e6aa1b965f4ull);
  EXPECT_EQ(rng.Next(), 0x06c45d188009454full);
}

TEST(SplitMix64, BelowAndUniformStayInRangeAndCoverIt) {
  SplitMix64 rng(7);
  std::vector<int> counts(10);
  double sum = 0;
  for (int i = 0; i < 20000; ++i) {
    uint64_t b = rng.Below(10);
    ASSERT_LT(b, 10u);
    ++counts[b];
    double u = rng.Uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
  }
  for (int c : counts) EXPECT_NEAR(c, 2000, 200);  // ~4.7 sigma
  EXPECT_NEAR(sum / 20000, 0.5, 0.01);
  EXPECT_THROW(rng.Below(0), Error);
}

TEST(Batches, WindowStartsArePureFunctionsOfSeedAndStep) {
  const int64_t tokens = 1000, seq = 32;
  std::vector<int64_t> a = WindowStarts(5, 3, 64, seq, tokens);
  EXPECT_EQ(a, WindowStarts(5, 3, 64, seq, tokens));  // same inputs, same windows
  EXPECT_NE(a, WindowStarts(5, 4, 64, seq, tokens));  // another step
  EXPECT_NE(a, WindowStarts(6, 3, 64, seq, tokens));  // another seed
  std::set<int64_t> seen;
  for (int64_t step = 0; step < 200; ++step) {
    for (int64_t s : WindowStarts(5, step, 16, seq, tokens)) {
      ASSERT_GE(s, 0);
      ASSERT_LE(s, tokens - seq);  // the last window ends at the last token
      seen.insert(s);
    }
  }
  EXPECT_GT(seen.size(), 900u);  // 3200 draws over 969 starts reach nearly all
  EXPECT_TRUE(seen.count(0) || seen.count(1));
  EXPECT_THROW(WindowStarts(0, 0, 1, 33, 32), Error);
}

TEST(Batches, EvenWindowsSpanTheStream) {
  EXPECT_EQ(EvenWindowStarts(5, 10, 50), (std::vector<int64_t>{0, 10, 20, 30, 40}));
  EXPECT_EQ(EvenWindowStarts(1, 10, 50), (std::vector<int64_t>{0}));
  EXPECT_THROW(EvenWindowStarts(2, 10, 9), Error);
}

TEST(Batches, MakeBatchCopiesTheWindows) {
  std::vector<int64_t> tokens(100);
  for (int64_t i = 0; i < 100; ++i) tokens[i] = i * 2;
  Tensor batch = MakeBatch(tokens, {3, 90}, 10);
  EXPECT_EQ(batch.shape().dims(), (std::vector<int64_t>{2, 10}));
  EXPECT_EQ(batch.dtype(), DType::kS64);
  std::vector<int64_t> v = batch.to_vector<int64_t>();
  for (int64_t i = 0; i < 10; ++i) {
    EXPECT_EQ(v[i], (3 + i) * 2);
    EXPECT_EQ(v[10 + i], (90 + i) * 2);
  }
  EXPECT_THROW(MakeBatch(tokens, {91}, 10), Error);
  EXPECT_THROW(MakeBatch(tokens, {-1}, 10), Error);
}

}  // namespace
}  // namespace strata::train
