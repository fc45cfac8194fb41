// Every input a fuzzer ever found (a crash, a hang, an internal check or a
// broken property) is kept under tests/fuzz/<harness>/ and replayed here
// through the same harness, under whatever sanitizers this build has. The
// harnesses themselves are checked on real files: valid programs and a real
// checkpoint get through every stage, and a damaged one is rejected.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "checkpoint.h"
#include "harnesses.h"
#include "strata/core/error.h"
#include "strata/io/llama_config.h"

namespace strata::fuzz {
namespace {

namespace fs = std::filesystem;

std::vector<uint8_t> ReadBytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string Replay(void (*run)(Bytes), const std::vector<uint8_t>& input) {
  try {
    RunHarness(run, input);
    return "";
  } catch (const std::exception& e) {
    return e.what();
  }
}

TEST(FuzzReplay, EveryKeptInputPassesItsHarness) {
  int replayed = 0;
  for (const Harness& harness : kHarnesses) {
    const fs::path dir = fs::path(STRATA_SOURCE_DIR) / "tests" / "fuzz" / harness.name;
    if (!fs::is_directory(dir)) continue;
    for (const auto& entry : fs::directory_iterator(dir)) {
      SCOPED_TRACE(entry.path().string());
      EXPECT_EQ(Replay(harness.run, ReadBytes(entry.path())), "");
      ++replayed;
    }
  }
  RecordProperty("replayed", replayed);
}

TEST(FuzzHarnesses, TheHloFixturesRunWithAndWithoutThePassesAndAgree) {
  // Valid programs: no rejection may hide behind the harness's quiet return.
  int programs = 0;
  for (const auto& entry :
       fs::directory_iterator(fs::path(STRATA_SOURCE_DIR) / "tests/hlo/testdata")) {
    SCOPED_TRACE(entry.path().string());
    std::vector<uint8_t> text = ReadBytes(entry.path());
    EXPECT_NO_THROW(HloText(text));
    ++programs;
  }
  EXPECT_GE(programs, 5);
}

TEST(FuzzHarnesses, ABrokenRoundTripOrCompileIsReportedNotSwallowed) {
  // A rejection is quiet; an internal check is a finding.
  EXPECT_EQ(Replay(HloText, std::vector<uint8_t>{'x'}), "");
  auto internal = [](Bytes) { throw InternalError("a check fired"); };
  EXPECT_NE(Replay(internal, {}), "");
  auto foreign = [](Bytes) { throw std::out_of_range("a library's own exception"); };
  EXPECT_NE(Replay(foreign, {}), "");
}

TEST(FuzzHarnesses, AConfigRoundTrips) {
  io::LlamaConfig config = CheckpointOptions().ModelConfig();
  std::string json = io::ToJson(config);
  EXPECT_NO_THROW(LlamaConfigJson({reinterpret_cast<const uint8_t*>(json.data()), json.size()}));
}

class CheckpointHarness : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("strata_fuzz_replay_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    train::Trainer trainer(CheckpointOptions(), CheckpointCorpus());
    trainer.Step();
    trainer.SaveCheckpoint(dir_.string());
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(CheckpointHarness, ResumesFromARealCheckpointAndRejectsADamagedOne) {
  std::vector<uint8_t> packed = PackDirectory(dir_);
  EXPECT_TRUE(ResumeFromPacked(packed));
  // The same files with the last byte of the weights flipped: the checksum
  // fails and there is no older checkpoint to fall back to.
  const std::string text(packed.begin(), packed.end());
  const std::string name = "step-0000001/model.safetensors ";
  const size_t line = text.find(name);
  ASSERT_NE(line, std::string::npos);
  const size_t end = text.find('\n', line);
  const size_t size = std::stoul(text.substr(line + name.size(), end - line - name.size()));
  std::vector<uint8_t> damaged = packed;
  damaged[end + size] ^= 0x40;
  EXPECT_FALSE(ResumeFromPacked(damaged));
  // A pack that is not well formed resumes nothing.
  EXPECT_FALSE(ResumeFromPacked(std::vector<uint8_t>{'a', ' ', '9', '\n'}));
  std::vector<uint8_t> escaping = {'.', '.', '/', 'x', ' ', '0', '\n'};
  EXPECT_FALSE(ResumeFromPacked(escaping));
}

}  // namespace
}  // namespace strata::fuzz
