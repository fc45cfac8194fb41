// Checkpoints written in parts by the processes of a job: each distinct tile
// once, read back whole or re-split into any other sharding, checked against
// the original array with plain loops; damaged files are errors naming them.
// The processes are simulated in one: a tensor holding only one process's
// partitions, and a process group that says which process this is.
#include "strata/train/checkpoint_shards.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>

#include "error_of.h"
#include "strata/core/error.h"
#include "strata/lazy/context.h"
#include "strata/lazy/ops.h"
#include "strata/runtime/sharded_buffer.h"

namespace strata::train {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// Which process of how many this one is; never makes collectives.
class FakeGroup final : public runtime::ProcessGroup {
 public:
  FakeGroup(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::unique_ptr<runtime::Communicator> MakeCommunicator(int64_t) const override {
    ADD_FAILURE() << "reading a checkpoint makes no collective";
    return nullptr;
  }

 private:
  int rank_, size_;
};

// The lazy context acts as process `rank` of `size` for a scope.
class AsProcess {
 public:
  AsProcess(int rank, int size) {
    lazy::Context::Get().set_process_group(std::make_shared<FakeGroup>(rank, size));
  }
  ~AsProcess() { lazy::Context::Get().set_process_group(nullptr); }
};

std::vector<float> Iota(int64_t n) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), 1.0f);
  return v;
}

// The tensor `whole` laid out with `spec` over `mesh` as process `rank` of
// `processes` holds it: only its block of partitions.
Tensor HeldBy(const std::vector<float>& whole, const std::vector<int64_t>& dims,
              const ir::Mesh& mesh, const ir::PartitionSpec& spec, int rank, int processes) {
  const Shape shape(DType::kF32, dims);
  const ir::Sharding sharding(mesh, spec, shape.rank());
  runtime::Client& client = lazy::Context::Get().ClientFor(mesh.size());
  std::vector<const runtime::Device*> devices;
  for (int64_t p = 0; p < mesh.size(); ++p) devices.push_back(client.device(static_cast<int>(p)));
  runtime::Buffer buffer = runtime::Buffer::FromVector<float>(whole, dims, devices[0]);
  std::vector<runtime::Buffer> all =
      runtime::SplitIntoShards(buffer, mesh, sharding.axes(), devices);
  const int64_t local = mesh.size() / processes, first = rank * local;
  std::vector<runtime::Buffer> mine(all.begin() + first, all.begin() + first + local);
  Tensor t(ir::Value{ir::Node::MakeShardedDeviceData(std::move(mine), shape, mesh, sharding.axes(),
                                                     sharding, true, first)});
  mark_sharding(t, mesh, spec);
  return t;
}

std::vector<float> Floats(const runtime::Buffer& b) {
  std::vector<float> v(b.size_bytes() / sizeof(float));
  std::memcpy(v.data(), b.data(), b.size_bytes());
  return v;
}

class CheckpointShardsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("strata_shards_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes `whole` as `processes` processes holding it with `spec` would.
  void WriteAsProcesses(const std::string& name, const std::vector<float>& whole,
                        const std::vector<int64_t>& dims, const ir::Mesh& mesh,
                        const ir::PartitionSpec& spec, int processes) {
    for (int r = 0; r < processes; ++r) {
      Tensor held = HeldBy(whole, dims, mesh, spec, r, processes);
      WriteShardFile(dir_, {{name, &held}}, r, processes);
      if (r == 0) index_like_ = held;
    }
    WriteShardIndex(dir_, {{name, &index_like_}}, processes);
  }

  std::vector<std::string> TilesIn(int rank, int processes) {
    return io::SafetensorsFile::Open((dir_ / ShardFileName(rank, processes)).string()).names();
  }

  fs::path dir_;
  Tensor index_like_;
};

TEST_F(CheckpointShardsTest, UnevenTilesOfFourPartitionsOverTwoProcessesReadBackWhole) {
  // [7, 5] over data=2 x model=2: tiles of 4 x 3 rows/cols, the last ones
  // cut short (3 rows, 2 columns); process 0 holds partitions 0 and 1.
  const ir::Mesh mesh({0, 1, 2, 3}, {2, 2}, {"data", "model"});
  const std::vector<float> whole = Iota(35);
  WriteAsProcesses("w", whole, {7, 5}, mesh, {{"data"}, {"model"}}, 2);
  EXPECT_EQ(TilesIn(0, 2), (std::vector<std::string>{"w@0,0", "w@0,3"}));
  EXPECT_EQ(TilesIn(1, 2), (std::vector<std::string>{"w@4,0", "w@4,3"}));
  CheckpointShards shards = CheckpointShards::Open(dir_);
  EXPECT_EQ(shards.processes(), 2);
  EXPECT_EQ(shards.shape("w"), Shape(DType::kF32, {7, 5}));
  std::vector<uint8_t> bytes = shards.WholeBytes("w");
  ASSERT_EQ(bytes.size(), whole.size() * sizeof(float));
  EXPECT_EQ(std::memcmp(bytes.data(), whole.data(), bytes.size()), 0);
}

TEST_F(CheckpointShardsTest, AReplicatedAxisIsWrittenOnceByTheLowestPartition) {
  // Split over 'model' only: processes 0 (partitions 0, 1) holds both tiles;
  // process 1's partitions 2, 3 are copies of them and write nothing.
  const ir::Mesh mesh({0, 1, 2, 3}, {2, 2}, {"data", "model"});
  WriteAsProcesses("w", Iota(12), {3, 4}, mesh, {{}, {"model"}}, 2);
  EXPECT_EQ(TilesIn(0, 2), (std::vector<std::string>{"w@0,0", "w@0,2"}));
  EXPECT_TRUE(TilesIn(1, 2).empty());
  // Split over 'data': partitions 0 and 2 hold the tiles, one per process.
  fs::remove_all(dir_);
  fs::create_directories(dir_);
  WriteAsProcesses("w", Iota(12), {4, 3}, mesh, {{"data"}, {}}, 2);
  EXPECT_EQ(TilesIn(0, 2), (std::vector<std::string>{"w@0,0"}));
  EXPECT_EQ(TilesIn(1, 2), (std::vector<std::string>{"w@2,0"}));
}

TEST_F(CheckpointShardsTest, ReadsAnotherShardingOnAnotherMeshByAnotherNumberOfProcesses) {
  // Written as 4 processes of a 4-device line split on rows; read as each of
  // 3 processes of a 3-device line split on columns: [6, 7] -> columns of 3
  // (the last tile one column, padded with zeros).
  const std::vector<int64_t> dims = {6, 7};
  const std::vector<float> whole = Iota(42);
  WriteAsProcesses("w", whole, dims, ir::Mesh::Line(4, "x"), {{"x"}, {}}, 4);
  CheckpointShards shards = CheckpointShards::Open(dir_);
  const ir::Mesh mesh = ir::Mesh::Line(3, "y");
  for (int rank = 0; rank < 3; ++rank) {
    SCOPED_TRACE(::testing::Message() << "process " << rank << " of 3");
    AsProcess as(rank, 3);
    Tensor like = zeros({6, 7}, DType::kF32);
    mark_sharding(like, mesh, {{}, {"y"}});
    Tensor loaded = shards.Load("w", like);
    ASSERT_TRUE(loaded.sharding().has_value());
    EXPECT_EQ(*loaded.sharding(), *like.sharding());
    const ir::Node::ShardedData* data = loaded.value().node->sharded_data();
    ASSERT_NE(data, nullptr);
    EXPECT_EQ(data->first, rank);
    ASSERT_EQ(data->shards.size(), 1u);
    const std::vector<float> got = Floats(data->shards[0]);
    ASSERT_EQ(got.size(), 6u * 3u);
    for (int64_t i = 0; i < 6; ++i) {
      for (int64_t j = 0; j < 3; ++j) {
        const int64_t column = rank * 3 + j;
        const float want = column < 7 ? whole[i * 7 + column] : 0.0f;
        EXPECT_EQ(got[i * 3 + j], want) << "row " << i << ", column " << column;
      }
    }
  }
}

TEST_F(CheckpointShardsTest, ReadsWholeWithoutAMeshAndChecksTheShape) {
  WriteAsProcesses("w", Iota(8), {8}, ir::Mesh::Line(2, "x"), {{"x"}}, 2);
  CheckpointShards shards = CheckpointShards::Open(dir_);
  Tensor loaded = shards.Load("w", zeros({8}, DType::kF32));
  EXPECT_FALSE(loaded.sharding().has_value());
  EXPECT_EQ(loaded.to_vector<float>(), Iota(8));
  EXPECT_THROW(
      {
        try {
          shards.Load("w", zeros({4, 2}, DType::kF32));
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("is f32[8], expected f32[4,2]"), std::string::npos)
              << e.what();
          throw;
        }
      },
      Error);
  EXPECT_THROW(shards.Load("v", zeros({8}, DType::kF32)), Error);
}

using strata::test::ErrorOf;

TEST_F(CheckpointShardsTest, DamagedCheckpointsAreErrorsNamingWhatIsWrong) {
  WriteAsProcesses("w", Iota(64), {8, 8}, ir::Mesh::Line(2, "x"), {{"x"}, {}}, 2);
  const fs::path file = dir_ / ShardFileName(1, 2);
  const std::string original = [&] {
    std::ifstream in(file, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), {});
  }();
  auto write = [&](const std::string& bytes) { std::ofstream(file, std::ios::binary) << bytes; };

  // A flipped byte in process 1's tile: its checksum fails when it is read.
  std::string flipped = original;
  flipped[flipped.size() - 3] ^= 0x40;
  write(flipped);
  {
    CheckpointShards shards = CheckpointShards::Open(dir_);
    const std::string e = ErrorOf([&] { shards.WholeBytes("w"); });
    EXPECT_NE(e.find("does not match its checksum"), std::string::npos) << e;
    EXPECT_NE(e.find(file.filename().string()), std::string::npos) << e;
  }
  // Cut short.
  write(original.substr(0, original.size() - 8));
  std::string e = ErrorOf([&] { CheckpointShards::Open(dir_); });
  EXPECT_NE(e.find("the index says"), std::string::npos) << e;
  // Missing.
  fs::remove(file);
  e = ErrorOf([&] { CheckpointShards::Open(dir_); });
  EXPECT_NE(e.find("is missing"), std::string::npos) << e;
  // No index: not a complete checkpoint.
  write(original);
  fs::remove(dir_ / kShardIndexName);
  e = ErrorOf([&] { CheckpointShards::Open(dir_); });
  EXPECT_NE(e.find("has no shards.json"), std::string::npos) << e;
  // An index that is not one.
  std::ofstream(dir_ / kShardIndexName) << "{\"format\": \"strata-shards-1\", \"processes\": 2}";
  e = ErrorOf([&] { CheckpointShards::Open(dir_); });
  EXPECT_NE(e.find("is malformed"), std::string::npos) << e;
}

// Writes a checkpoint by hand: the tiles given (name -> offsets, dims) of a
// [4, 4] tensor "w", in one file of one process.
void WriteTiles(const fs::path& dir,
                const std::vector<std::pair<std::string, std::vector<int64_t>>>& tiles) {
  std::vector<io::TensorData> data;
  for (const auto& [key, dims] : tiles) {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    data.push_back({key, DType::kF32, dims, std::vector<uint8_t>(n * 4, 0)});
  }
  const fs::path file = dir / ShardFileName(0, 1);
  io::WriteSafetensors(file.string(), data);
  json index = {
      {"format", "strata-shards-1"},
      {"processes", 1},
      {"files",
       json::array({{{"name", file.filename().string()}, {"bytes", fs::file_size(file)}}})},
      {"tensors", {{"w", {{"dtype", "F32"}, {"shape", {4, 4}}}}}}};
  std::ofstream(dir / kShardIndexName) << index.dump();
}

TEST_F(CheckpointShardsTest, TilesMustCoverTheirTensorExactlyOnce) {
  WriteTiles(dir_, {{"w@0,0", {2, 4}}, {"w@2,0", {2, 4}}});
  EXPECT_NO_THROW(CheckpointShards::Open(dir_));
  WriteTiles(dir_, {{"w@0,0", {2, 4}}});
  std::string e = ErrorOf([&] { CheckpointShards::Open(dir_); });
  EXPECT_NE(e.find("hold 8 of its 16 elements"), std::string::npos) << e;
  WriteTiles(dir_, {{"w@0,0", {3, 4}}, {"w@2,0", {2, 4}}});
  e = ErrorOf([&] { CheckpointShards::Open(dir_); });
  EXPECT_NE(e.find("overlap"), std::string::npos) << e;
  WriteTiles(dir_, {{"w@0,0", {2, 4}}, {"w@3,0", {2, 4}}});
  e = ErrorOf([&] { CheckpointShards::Open(dir_); });
  EXPECT_NE(e.find("does not fit the tensor f32[4,4]"), std::string::npos) << e;
  WriteTiles(dir_, {{"w@0,0", {2, 4}}, {"v@2,0", {2, 4}}});
  e = ErrorOf([&] { CheckpointShards::Open(dir_); });
  EXPECT_NE(e.find("no tile of an indexed tensor"), std::string::npos) << e;
  WriteTiles(dir_, {{"w@0,", {2, 4}}, {"w@2,0", {2, 4}}});
  e = ErrorOf([&] { CheckpointShards::Open(dir_); });
  EXPECT_NE(e.find("no tile of an indexed tensor"), std::string::npos) << e;
}

TEST_F(CheckpointShardsTest, ScalarsAndEmptyTensors) {
  Tensor scalar = Tensor::FromVector<float>({2.5f}, {});
  Tensor empty = zeros({0, 3}, DType::kF32);
  EXPECT_NE(ErrorOf([&] {
              WriteShardFile(dir_, {{"e", &empty}}, 0, 1);
            }).find("sync it"),
            std::string::npos);
  empty.sync();
  WriteShardFile(dir_, {{"s", &scalar}, {"e", &empty}}, 0, 1);
  WriteShardIndex(dir_, {{"s", &scalar}, {"e", &empty}}, 1);
  CheckpointShards shards = CheckpointShards::Open(dir_);
  EXPECT_EQ(shards.Load("s", zeros({}, DType::kF32)).item<float>(), 2.5f);
  EXPECT_EQ(shards.Load("e", zeros({0, 3}, DType::kF32)).shape().num_elements(), 0);
  Tensor named = zeros({2}, DType::kF32);
  EXPECT_NE(ErrorOf([&] {
              WriteShardFile(dir_, {{"a@b", &named}}, 0, 1);
            }).find("must not hold"),
            std::string::npos);
}

}  // namespace
}  // namespace strata::train
