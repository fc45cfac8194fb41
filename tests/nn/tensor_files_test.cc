// load_safetensors / save_safetensors: a round trip of every dtype, a file
// written byte by byte in the test, checksums and metadata.
#include "strata/nn/tensor_files.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "error_of.h"
#include "strata/io/safetensors.h"
#include "strata/lazy/ops.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

class TensorFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("strata_tensor_files_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

TEST_F(TensorFiles, SavedTensorsLoadBackWithTheirValuesDtypesAndShapes) {
  // w is a lazy expression: saving materializes it.
  Tensor w = Tensor::FromVector<float>({1, 2, 3, 4, 5, 6}, {2, 3}) * 2.0;
  std::map<std::string, Tensor> saved = {
      {"w", w},
      {"ids", Tensor::FromVector<int64_t>({7, -1, 0, 9}, {4})},
      {"mask", Tensor::FromVector<bool>({true, false, true}, {3})},
      {"scalar", Tensor::FromVector<double>({0.25}, {})},
  };
  save_safetensors(Path("t.safetensors"), saved, {{"note", "hello"}});
  std::map<std::string, Tensor> loaded = load_safetensors(Path("t.safetensors"));
  ASSERT_EQ(loaded.size(), 4u);
  EXPECT_EQ(loaded.at("w").shape(), Shape(DType::kF32, {2, 3}));
  EXPECT_EQ(loaded.at("w").to_vector<float>(), (std::vector<float>{2, 4, 6, 8, 10, 12}));
  EXPECT_EQ(loaded.at("ids").to_vector<int64_t>(), (std::vector<int64_t>{7, -1, 0, 9}));
  EXPECT_EQ(loaded.at("mask").to_vector<bool>(), (std::vector<bool>{true, false, true}));
  EXPECT_EQ(loaded.at("scalar").shape(), Shape(DType::kF64, {}));
  EXPECT_EQ(loaded.at("scalar").to_vector<double>(), (std::vector<double>{0.25}));
  EXPECT_EQ(io::SafetensorsFile::Open(Path("t.safetensors")).metadata().at("note"), "hello");
}

TEST_F(TensorFiles, ReadsAFileWrittenByHand) {
  // 8-byte header length, the JSON header, then the little-endian bytes.
  const std::string header = R"({"b":{"dtype":"I32","shape":[2],"data_offsets":[0,8]}})";
  const uint64_t n = header.size();
  std::ofstream out(Path("hand.safetensors"), std::ios::binary);
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << header;
  const int32_t values[2] = {-5, 70000};
  out.write(reinterpret_cast<const char*>(values), 8);
  out.close();
  std::map<std::string, Tensor> loaded = load_safetensors(Path("hand.safetensors"));
  EXPECT_EQ(loaded.at("b").to_vector<int32_t>(), (std::vector<int32_t>{-5, 70000}));
}

TEST_F(TensorFiles, AFlippedByteIsAnErrorNamingTheTensor) {
  save_safetensors(Path("c.safetensors"), {{"weights", ones({64})}});
  std::fstream file(Path("c.safetensors"), std::ios::in | std::ios::out | std::ios::binary);
  file.seekp(-1, std::ios::end);
  file.put('\x7f');
  file.close();
  std::string message = test::ErrorOf([&] { load_safetensors(Path("c.safetensors")); });
  EXPECT_NE(message.find("weights"), std::string::npos) << message;
  EXPECT_NE(message.find("checksum"), std::string::npos) << message;
}

TEST_F(TensorFiles, MetadataCannotOverwriteTheChecksums) {
  std::string message = test::ErrorOf([&] {
    save_safetensors(Path("m.safetensors"), {{"x", ones({2})}}, {{"strata.xxh3_64.x", "0"}});
  });
  EXPECT_NE(message.find("strata's own"), std::string::npos) << message;
  EXPECT_FALSE(fs::exists(Path("m.safetensors")));
}

}  // namespace
}  // namespace strata
