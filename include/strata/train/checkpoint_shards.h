// Checkpoints of a job of several processes, written in parallel: every
// process writes the tiles of the tensors it holds into a file of its own,
// each distinct tile once in the whole job (by the process of the lowest
// partition holding it; a replicated tensor by process 0), and process 0
// writes the index last, once every file is written. The index is the
// marker: a directory without it is no checkpoint. Reading re-splits: a
// tensor can be read whole, or as the shards of any sharding on any mesh,
// each process reading only the parts of the files its own partitions need.
//
// <dir>/shards-RRRRR-of-PPPPP.safetensors  process R's tiles, named
//                                          "<tensor>@<offset>,<offset>,..."
//                                          (where the tile starts), with
//                                          checksums
// <dir>/shards.json                        {"format", "processes", "files":
//                                          [{"name", "bytes"}], "tensors":
//                                          {name: {"dtype", "shape"}}}
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "strata/io/safetensors.h"
#include "strata/lazy/tensor.h"

namespace strata::train {

struct NamedTensor {
  std::string name;
  const Tensor* tensor;
};

// The index's file name, and process `rank`'s file among `processes`.
inline constexpr const char* kShardIndexName = "shards.json";
std::string ShardFileName(int rank, int processes);

// Writes process `rank`'s file into `dir`: its tiles of every tensor.
// Tensors must be data (synced), whole or sharded; names must not hold '@'.
void WriteShardFile(const std::filesystem::path& dir, const std::vector<NamedTensor>& tensors,
                    int rank, int processes);

// Process 0, once every process has written its file: checks that each is
// there (processes that do not share `dir` are an error saying so) and
// writes the index, last.
void WriteShardIndex(const std::filesystem::path& dir, const std::vector<NamedTensor>& tensors,
                     int processes);

class CheckpointShards {
 public:
  // Opens the index and the files it names (memory-mapped) and checks them:
  // file sizes as indexed, every tile inside its tensor with its dtype, and
  // each tensor's tiles covering it exactly once. Errors name the file and
  // the tensor.
  static CheckpointShards Open(const std::filesystem::path& dir);

  const std::string& label() const { return label_; }
  int processes() const { return processes_; }
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const { return tensors_.count(name) > 0; }
  const Shape& shape(const std::string& name) const;

  // The whole tensor `name`, which must have `like`'s dtype and shape; laid
  // out as `like` is: when `like` has a sharding over a mesh, as sharded data
  // holding this process's partitions of it (all of them without a process
  // group), read from only the tiles they overlap.
  Tensor Load(const std::string& name, const Tensor& like) const;
  // The bytes of the whole tensor.
  std::vector<uint8_t> WholeBytes(const std::string& name) const;

 private:
  struct Tile {
    size_t file;
    std::string key;
    std::vector<int64_t> offsets, dims;
  };
  struct Entry {
    Shape shape;
    std::vector<Tile> tiles;
  };
  const Entry& Find(const std::string& name) const;
  // The box of `dims` elements at `start` of tensor `name` into `out` (a
  // row-major array of `out_dims`, already zeroed where no tile reaches).
  void Read(const std::string& name, const Entry& entry, const std::vector<int64_t>& start,
            uint8_t* out, const std::vector<int64_t>& out_dims) const;

  std::string label_;
  int processes_ = 0;
  std::vector<io::SafetensorsFile> files_;
  std::map<std::string, Entry> tensors_;
};

}  // namespace strata::train
