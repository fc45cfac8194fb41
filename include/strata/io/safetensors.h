// Reading and writing Hugging Face safetensors files: an 8-byte little-endian
// header length N, N bytes of JSON header, then the tensors' raw little-endian
// bytes packed back to back. The reader treats its input as untrusted: every
// defect is a strata::Error starting with "[safetensors] <file>: ".
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "strata/core/dtype.h"

namespace strata::io {

// "F32" <-> DType::kF32, "I64" <-> kS64, "BOOL" <-> kPred, ...
std::optional<DType> DTypeFromSafetensorsName(std::string_view name);
std::string_view SafetensorsName(DType dtype);

// A tensor inside an open file. `data` points into the file's bytes and has no
// alignment guarantee (other writers do not pad), so copy before typed access.
struct TensorView {
  DType dtype;
  std::vector<int64_t> shape;
  std::span<const uint8_t> data;
};

// A validated, read-only safetensors file. Move-only; views stay valid while
// the file object (or whatever it was moved into) lives.
class SafetensorsFile {
 public:
  // Memory-maps `path`. The file must not be truncated while it is open.
  static SafetensorsFile Open(const std::string& path);
  static SafetensorsFile FromBytes(std::vector<uint8_t> bytes, std::string label = "<memory>");

  SafetensorsFile(SafetensorsFile&&) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept;
  ~SafetensorsFile();

  const std::string& label() const { return label_; }
  // Tensor names in data-offset order.
  const std::vector<std::string>& names() const { return names_; }
  bool contains(std::string_view name) const { return tensors_.find(name) != tensors_.end(); }
  // Verifies the tensor's checksum when the file carries one (ChecksumMetadata).
  const TensorView& Get(std::string_view name) const;
  // The tensor's dtype and shape as the header gives them, without reading
  // (or verifying) its bytes: for looking at a file's layout. Read the data
  // through Get.
  const TensorView& Layout(std::string_view name) const;
  // The header's "__metadata__" object (empty when absent).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  struct Storage;  // an mmap or an owned byte vector
  SafetensorsFile(std::unique_ptr<Storage> storage, std::string label);
  void ParseHeader();

  std::unique_ptr<Storage> storage_;
  std::string label_;
  std::vector<std::string> names_;
  std::map<std::string, TensorView, std::less<>> tensors_;
  std::map<std::string, std::string> metadata_;
};

struct TensorData {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

// The file's bytes: tensors packed in the given order, header padded with
// spaces so the data section starts at a multiple of 8. Throws strata::Error on
// duplicate or reserved names, negative dims, or a byte size that does not
// match the shape and dtype.
std::vector<uint8_t> SerializeSafetensors(const std::vector<TensorData>& tensors,
                                          const std::map<std::string, std::string>& metadata = {});

// Writes atomically: a temporary file in the same directory is written,
// fsynced and renamed over `path`, then the directory is fsynced. On failure
// the temporary file is removed and an existing file at `path` is untouched.
void WriteSafetensors(const std::string& path, const std::vector<TensorData>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Checksums of `tensors` as safetensors metadata ("strata.xxh3_64.<name>":
// 16 hex digits of XXH3-64 over the tensor's bytes), for a writer to merge
// into its metadata. SafetensorsFile::Get verifies a tensor that has one,
// so a flipped byte in a checkpoint is an error naming the file and tensor,
// not different weights. Files without them (Hugging Face's) read as before.
std::map<std::string, std::string> ChecksumMetadata(const std::vector<TensorData>& tensors);

// A checkpoint split across shard files by `model.safetensors.index.json`
// ({"metadata": {...}, "weight_map": {tensor: shard file}}), or one file.
// Writes `pieces` one after another to a temporary file next to `path`,
// fsyncs it, renames it over `path` and fsyncs the directory: a crash leaves
// the old file or the new one, never part of one. Errors name `path`.
void WriteFileAtomically(const std::string& path, const std::vector<std::string_view>& pieces);

class ShardedCheckpoint {
 public:
  // Accepts an index JSON, a directory (its model.safetensors.index.json if
  // present, else its model.safetensors), or a single .safetensors file.
  static ShardedCheckpoint Open(const std::string& path);

  const std::string& label() const { return label_; }
  // Names grouped by shard (shards in file-name order), data-offset order within a shard.
  const std::vector<std::string>& names() const { return names_; }
  bool contains(std::string_view name) const { return shard_of_.find(name) != shard_of_.end(); }
  const TensorView& Get(std::string_view name) const;
  // The index's "metadata"; non-string values are kept as their JSON text
  // (e.g. "total_size" -> "1234"). Empty for a single file without an index.
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  std::string label_;
  std::vector<SafetensorsFile> shards_;
  std::map<std::string, size_t, std::less<>> shard_of_;  // tensor name -> index into shards_
  std::vector<std::string> names_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace strata::io
