#include "strata/train/checkpoint_shards.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "json_file.h"
#include "strata/core/error.h"
#include "strata/lazy/context.h"
#include "strata/runtime/sharded_buffer.h"

namespace strata::train {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr const char* kIndexFormat = "strata-shards-1";

int64_t Volume(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

std::string TileKey(const std::string& name, const std::vector<int64_t>& offsets) {
  return fmt::format("{}@{}", name, fmt::join(offsets, ","));
}

// "name@3,0" -> name and offsets; false when the key is not one.
bool ParseTileKey(const std::string& key, std::string& name, std::vector<int64_t>& offsets) {
  const size_t at = key.rfind('@');
  if (at == std::string::npos || at == 0) return false;
  name = key.substr(0, at);
  offsets.clear();
  const std::string rest = key.substr(at + 1);
  size_t pos = 0;
  while (pos < rest.size()) {
    size_t end = rest.find(',', pos);
    if (end == std::string::npos) end = rest.size();
    const std::string digits = rest.substr(pos, end - pos);
    if (digits.empty() || digits.size() > 18 ||
        digits.find_first_not_of("0123456789") != std::string::npos)
      return false;
    offsets.push_back(std::stoll(digits));
    pos = end + 1;
    if (end + 1 == rest.size()) return false;  // a trailing comma
  }
  return true;
}

// The tiles of one tensor this process writes: (offsets, dims, bytes).
struct OwnTile {
  std::vector<int64_t> offsets, dims;
  std::vector<uint8_t> bytes;
};

std::vector<OwnTile> OwnTiles(const std::string& name, const Tensor& tensor, int rank) {
  const ir::Node& node = *tensor.value().node;
  if (node.kind() != ir::NodeKind::kDeviceData) {
    Fail("[checkpoint] '{}' is a pending graph ({}), not data: sync it before writing", name,
         node.OpName());
  }
  const Shape& shape = node.shape(0);
  std::vector<OwnTile> tiles;
  const ir::Node::ShardedData* sharded = node.sharded_data();
  if (!sharded) {  // every process holds it whole: process 0 writes it
    if (rank == 0) {
      runtime::Buffer whole = node.WholeBuffer();
      const uint8_t* data = whole.data();
      tiles.push_back({std::vector<int64_t>(shape.rank(), 0), shape.dims(),
                       std::vector<uint8_t>(data, data + whole.size_bytes())});
    }
    return tiles;
  }
  const spmd::Mesh& mesh = sharded->mesh;
  const std::vector<int64_t> shard_dims = spmd::ShardDims(mesh, sharded->layout, shape.dims());
  std::vector<std::vector<int64_t>> starts;
  for (int64_t p = 0; p < mesh.size(); ++p)
    starts.push_back(runtime::ShardOffsets(mesh, sharded->layout, shape.dims(), p));
  const int64_t element = DTypeSize(shape.dtype());
  for (size_t k = 0; k < sharded->shards.size(); ++k) {
    const int64_t p = sharded->first + static_cast<int64_t>(k);
    // The tile is written by the lowest partition holding it.
    if (std::find(starts.begin(), starts.end(), starts[p]) - starts.begin() != p) continue;
    std::vector<int64_t> extent(shape.rank());
    for (int64_t d = 0; d < shape.rank(); ++d)
      extent[d] = std::max<int64_t>(0, std::min(shard_dims[d], shape.dim(d) - starts[p][d]));
    if (Volume(extent) == 0 && shape.num_elements() > 0) continue;  // a tile of padding only
    OwnTile tile{starts[p], extent, std::vector<uint8_t>(Volume(extent) * element)};
    runtime::CopyBox(sharded->shards[k].data(), shard_dims, std::vector<int64_t>(shape.rank(), 0),
                     tile.bytes.data(), extent, std::vector<int64_t>(shape.rank(), 0), extent,
                     element);
    tiles.push_back(std::move(tile));
  }
  return tiles;
}

}  // namespace

std::string ShardFileName(int rank, int processes) {
  return fmt::format("shards-{:05d}-of-{:05d}.safetensors", rank, processes);
}

void WriteShardFile(const fs::path& dir, const std::vector<NamedTensor>& tensors, int rank,
                    int processes) {
  std::vector<io::TensorData> data;
  for (const NamedTensor& t : tensors) {
    if (t.name.find('@') != std::string::npos)
      Fail("[checkpoint] tensor names must not hold '@', got '{}'", t.name);
    for (OwnTile& tile : OwnTiles(t.name, *t.tensor, rank)) {
      data.push_back(
          {TileKey(t.name, tile.offsets), t.tensor->dtype(), tile.dims, std::move(tile.bytes)});
    }
  }
  std::map<std::string, std::string> metadata = io::ChecksumMetadata(data);
  metadata["strata.process"] = fmt::format("{} of {}", rank, processes);
  io::WriteSafetensors((dir / ShardFileName(rank, processes)).string(), data, metadata);
}

void WriteShardIndex(const fs::path& dir, const std::vector<NamedTensor>& tensors, int processes) {
  json files = json::array();
  for (int r = 0; r < processes; ++r) {
    const fs::path file = dir / ShardFileName(r, processes);
    std::error_code error;
    const uintmax_t bytes = fs::file_size(file, error);
    if (error) {
      Fail(
          "[checkpoint] process {}'s part {} is not in '{}' as process 0 sees it: every process "
          "must write its checkpoints into one directory they all see (a shared filesystem)",
          r, file.filename().string(), dir.string());
    }
    files.push_back({{"name", file.filename().string()}, {"bytes", bytes}});
  }
  json entries = json::object();
  for (const NamedTensor& t : tensors) {
    entries[t.name] = {{"dtype", std::string(io::SafetensorsName(t.tensor->dtype()))},
                       {"shape", t.tensor->shape().dims()}};
  }
  json index = {
      {"format", kIndexFormat}, {"processes", processes}, {"files", files}, {"tensors", entries}};
  const std::string text = index.dump(1);
  io::WriteFileAtomically((dir / kShardIndexName).string(), {text});
}

CheckpointShards CheckpointShards::Open(const fs::path& dir) {
  const fs::path index_file = dir / kShardIndexName;
  CheckpointShards out;
  out.label_ = dir.string();
  if (!fs::exists(index_file)) {
    Fail("[checkpoint] '{}' has no {}: not a checkpoint of many processes, or one not complete",
         dir.string(), kShardIndexName);
  }
  const json index = ReadJsonFile(index_file);
  auto bad = [&](const std::string& what) {
    Fail("[checkpoint] '{}' is malformed: {}", index_file.string(), what);
  };
  try {
    if (!index.is_object() || index.value("format", "") != kIndexFormat)
      bad(fmt::format("expected \"format\": \"{}\"", kIndexFormat));
    out.processes_ = index.at("processes").get<int>();
    const json& files = index.at("files");
    if (out.processes_ < 1 || !files.is_array() ||
        files.size() != static_cast<size_t>(out.processes_))
      bad(fmt::format("{} processes with {} files", out.processes_, files.size()));
    for (const auto& [name, entry] : index.at("tensors").items()) {
      const std::optional<DType> dtype =
          io::DTypeFromSafetensorsName(entry.at("dtype").get<std::string>());
      if (!dtype)
        bad(fmt::format("tensor '{}' has the unknown dtype {}", name, entry["dtype"].dump()));
      std::vector<int64_t> dims = entry.at("shape").get<std::vector<int64_t>>();
      for (int64_t d : dims) {
        if (d < 0) bad(fmt::format("tensor '{}' has a negative dim", name));
      }
      out.tensors_.emplace(name, Entry{Shape(*dtype, dims), {}});
    }
    for (int r = 0; r < out.processes_; ++r) {
      const json& f = files[r];
      const std::string name = f.at("name").get<std::string>();
      if (name != ShardFileName(r, out.processes_))
        bad(fmt::format("file {} is '{}', expected '{}'", r, name,
                        ShardFileName(r, out.processes_)));
      const fs::path path = dir / name;
      std::error_code error;
      const uintmax_t bytes = fs::file_size(path, error);
      if (error) Fail("[checkpoint] '{}' is missing: the checkpoint is not whole", path.string());
      if (bytes != f.at("bytes").get<uintmax_t>()) {
        Fail("[checkpoint] '{}' holds {} bytes, the index says {}: the file was cut or replaced",
             path.string(), bytes, f.at("bytes").get<uintmax_t>());
      }
      out.files_.push_back(io::SafetensorsFile::Open(path.string()));
    }
  } catch (const json::exception& e) {
    bad(e.what());
  }

  // Every tile in its tensor, with its dtype; the tiles of a tensor disjoint
  // and as many elements as the tensor: they cover it exactly once.
  for (size_t f = 0; f < out.files_.size(); ++f) {
    const io::SafetensorsFile& file = out.files_[f];
    for (const std::string& key : file.names()) {
      std::string name;
      std::vector<int64_t> offsets;
      auto it = ParseTileKey(key, name, offsets) ? out.tensors_.find(name) : out.tensors_.end();
      if (it == out.tensors_.end()) {
        Fail("[checkpoint] '{}' holds '{}', which is no tile of an indexed tensor", file.label(),
             key);
      }
      const Shape& shape = it->second.shape;
      // The header only: the data is read (and its checksum verified) by
      // the processes whose partitions need it.
      const io::TensorView& view = file.Layout(key);
      std::vector<int64_t> dims = view.shape;
      const DType dtype = view.dtype;
      bool inside = dtype == shape.dtype() && offsets.size() == dims.size() &&
                    static_cast<int64_t>(dims.size()) == shape.rank();
      for (size_t d = 0; inside && d < dims.size(); ++d)
        inside = offsets[d] + dims[d] <= shape.dim(static_cast<int64_t>(d));
      if (!inside) {
        Fail("[checkpoint] tile '{}' in '{}' is {} at [{}]: it does not fit the tensor {}", key,
             file.label(), Shape(dtype, dims).ToString(), fmt::join(offsets, ", "),
             shape.ToString());
      }
      it->second.tiles.push_back({f, key, std::move(offsets), std::move(dims)});
    }
  }
  for (const auto& [name, entry] : out.tensors_) {
    int64_t covered = 0;
    for (size_t i = 0; i < entry.tiles.size(); ++i) {
      const Tile& a = entry.tiles[i];
      covered += Volume(a.dims);
      for (size_t j = 0; j < i; ++j) {
        const Tile& b = entry.tiles[j];
        bool overlap = Volume(a.dims) > 0 && Volume(b.dims) > 0;
        for (size_t d = 0; overlap && d < a.dims.size(); ++d) {
          overlap =
              a.offsets[d] < b.offsets[d] + b.dims[d] && b.offsets[d] < a.offsets[d] + a.dims[d];
        }
        if (overlap) {
          Fail("[checkpoint] tiles '{}' ({}) and '{}' ({}) of '{}' overlap", a.key,
               out.files_[a.file].label(), b.key, out.files_[b.file].label(), out.label_);
        }
      }
    }
    if (covered != entry.shape.num_elements()) {
      Fail("[checkpoint] the tiles of '{}' in '{}' hold {} of its {} elements ({})", name,
           out.label_, covered, entry.shape.num_elements(), entry.shape.ToString());
    }
  }
  return out;
}

std::vector<std::string> CheckpointShards::names() const {
  std::vector<std::string> names;
  for (const auto& [name, entry] : tensors_) names.push_back(name);
  return names;
}

const CheckpointShards::Entry& CheckpointShards::Find(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) Fail("[checkpoint] '{}' has no tensor '{}'", label_, name);
  return it->second;
}

const Shape& CheckpointShards::shape(const std::string& name) const { return Find(name).shape; }

void CheckpointShards::Read(const std::string& name, const Entry& entry,
                            const std::vector<int64_t>& start, uint8_t* out,
                            const std::vector<int64_t>& out_dims) const {
  const int64_t rank = entry.shape.rank();
  const int64_t element = DTypeSize(entry.shape.dtype());
  for (const Tile& tile : entry.tiles) {
    std::vector<int64_t> lo(rank), extent(rank), from(rank), to(rank);
    bool empty = false;
    for (int64_t d = 0; d < rank; ++d) {
      lo[d] = std::max(tile.offsets[d], start[d]);
      const int64_t hi =
          std::min({tile.offsets[d] + tile.dims[d], start[d] + out_dims[d], entry.shape.dim(d)});
      extent[d] = hi - lo[d];
      empty = empty || extent[d] <= 0;
      from[d] = lo[d] - tile.offsets[d];
      to[d] = lo[d] - start[d];
    }
    if (empty) continue;
    const io::TensorView& view = files_[tile.file].Get(tile.key);
    STRATA_CHECK(static_cast<int64_t>(view.data.size()) == Volume(tile.dims) * element,
                 "[checkpoint] tile '{}' of '{}' has {} bytes", tile.key, name, view.data.size());
    runtime::CopyBox(view.data.data(), tile.dims, from, out, out_dims, to, extent, element);
  }
}

std::vector<uint8_t> CheckpointShards::WholeBytes(const std::string& name) const {
  const Entry& entry = Find(name);
  std::vector<uint8_t> bytes(entry.shape.num_elements() * DTypeSize(entry.shape.dtype()), 0);
  Read(name, entry, std::vector<int64_t>(entry.shape.rank(), 0), bytes.data(), entry.shape.dims());
  return bytes;
}

Tensor CheckpointShards::Load(const std::string& name, const Tensor& like) const {
  const Entry& entry = Find(name);
  if (entry.shape != like.shape()) {
    Fail("[checkpoint] '{}' in '{}' is {}, expected {}", name, label_, entry.shape.ToString(),
         like.shape().ToString());
  }
  const std::optional<ir::Sharding>& sharding = like.sharding();
  if (!sharding) {
    std::vector<uint8_t> bytes = WholeBytes(name);
    return Tensor::FromBytes(entry.shape, bytes);
  }
  const spmd::Mesh& mesh = sharding->mesh();
  const spmd::AxisSharding& layout = sharding->axes();
  const runtime::ProcessGroup* group = lazy::Context::Get().process_group();
  const int processes = group ? group->size() : 1;
  if (mesh.size() % processes != 0) {
    Fail("[checkpoint] a mesh of {} devices does not split evenly over the job's {} processes",
         mesh.size(), processes);
  }
  const int64_t local = mesh.size() / processes;
  const int64_t first = group ? group->rank() * local : 0;
  const std::vector<int64_t> shard_dims = spmd::ShardDims(mesh, layout, entry.shape.dims());
  const Shape shard_shape(entry.shape.dtype(), shard_dims);
  runtime::Client& client = lazy::Context::Get().ClientFor(mesh.size());
  std::vector<runtime::Buffer> shards;
  for (int64_t p = first; p < first + local; ++p) {
    runtime::Buffer shard =
        runtime::Buffer::Allocate(shard_shape, client.device(static_cast<int>(p)));
    if (shard.size_bytes() > 0) std::memset(shard.data(), 0, shard.size_bytes());  // the padding
    Read(name, entry, runtime::ShardOffsets(mesh, layout, entry.shape.dims(), p), shard.data(),
         shard_dims);
    shards.push_back(std::move(shard));
  }
  Tensor out(ir::Value{ir::Node::MakeShardedDeviceData(std::move(shards), entry.shape, mesh, layout,
                                                       sharding, false, first)});
  mark_sharding(out, mesh, sharding->spec());
  return out;
}

}  // namespace strata::train
