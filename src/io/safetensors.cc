#include "strata/io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <system_error>
#include <utility>

#include "strata/core/error.h"
#include "strata/core/shape.h"
#include "strata/io/files.h"
#include "strata/io/json_depth.h"

namespace strata::io {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The Rust safetensors crate refuses larger headers too; past this the input
// is almost certainly not a safetensors file.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

constexpr std::pair<DType, std::string_view> kDTypeNames[] = {
    {DType::kF32, "F32"},   {DType::kF16, "F16"}, {DType::kBF16, "BF16"}, {DType::kF64, "F64"},
    {DType::kS64, "I64"},   {DType::kS32, "I32"}, {DType::kS8, "I8"},     {DType::kU8, "U8"},
    {DType::kPred, "BOOL"}, {DType::kU32, "U32"}, {DType::kU64, "U64"},   {DType::kS16, "I16"},
    {DType::kU16, "U16"},
};

template <typename... Args>
[[noreturn]] void FailIn(std::string_view label, fmt::format_string<Args...> format,
                         Args&&... args) {
  Fail("[safetensors] {}: {}", label, fmt::format(format, std::forward<Args>(args)...));
}

std::string ErrnoMessage(int err) {
  return std::error_code(err, std::generic_category()).message();
}

// A JSON value for an error message, cut short so garbage input stays readable.
std::string Brief(const json& value) {
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  return text.size() <= 40 ? text : text.substr(0, 40) + "...";
}

// Parses JSON, rejecting duplicate keys (nlohmann would silently keep the last).
json ParseJson(std::string_view text, std::string_view label, std::string_view what) {
  std::vector<std::set<std::string>> open_objects;
  std::optional<std::string> duplicate;
  auto on_event = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth > kMaxJsonDepth) {
      FailIn(label, "{} nests deeper than {} levels", what, kMaxJsonDepth);
    }
    if (event == json::parse_event_t::object_start) {
      open_objects.emplace_back();
    } else if (event == json::parse_event_t::object_end) {
      open_objects.pop_back();
    } else if (event == json::parse_event_t::key && !duplicate) {
      const auto& key = parsed.get_ref<const std::string&>();
      if (!open_objects.back().insert(key).second) duplicate = key;
    }
    return true;
  };
  // nlohmann stops at a NUL byte as if the input ended, which would hide what follows.
  if (size_t nul = text.find('\0'); nul != std::string_view::npos) {
    FailIn(label, "{} is not valid JSON: NUL byte at offset {}", what, nul);
  }
  json value;
  try {
    value = json::parse(text.begin(), text.end(), on_event);
  } catch (const json::exception& e) {
    FailIn(label, "{} is not valid JSON: {}", what, e.what());
  }
  if (duplicate) FailIn(label, "{} has duplicate key '{}'", what, *duplicate);
  return value;
}

// A non-negative JSON integer that fits int64; nullopt for anything else.
std::optional<int64_t> AsNonNegativeInt(const json& value) {
  if (value.is_number_unsigned()) {
    uint64_t u = value.get<uint64_t>();
    if (u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return static_cast<int64_t>(u);
    }
  } else if (value.is_number_integer() && value.get<int64_t>() >= 0) {
    return value.get<int64_t>();
  }
  return std::nullopt;
}

// product(shape) * dtype size, or nullopt if it overflows int64. Dims must be >= 0.
std::optional<int64_t> ByteSize(DType dtype, std::span<const int64_t> shape) {
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;
  int64_t size = DTypeSize(dtype);
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(size, d, &size)) return std::nullopt;
  }
  return size;
}

std::string SupportedNames() {
  std::string out;
  for (const auto& [dtype, name] : kDTypeNames) {
    out += (out.empty() ? "" : ", ") + std::string(name);
  }
  return out;
}

std::string DescribeNames(const std::vector<std::string>& names) {
  if (names.empty()) return "it has no tensors";
  constexpr size_t kShown = 5;
  std::vector<std::string_view> shown(names.begin(),
                                      names.begin() + std::min(kShown, names.size()));
  return fmt::format("it has {} tensors: {}{}", names.size(), fmt::join(shown, ", "),
                     names.size() > kShown ? ", ..." : "");
}

struct Entry {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  int64_t begin, end;
};

Entry ParseEntry(std::string_view label, const std::string& name, const json& value) {
  if (!value.is_object()) {
    FailIn(label, "tensor '{}': expected an object with dtype, shape and data_offsets, got {}",
           name, value.type_name());
  }
  for (const auto& [key, unused] : value.items()) {
    if (key != "dtype" && key != "shape" && key != "data_offsets") {
      FailIn(label, "tensor '{}': unexpected key '{}' (expected only dtype, shape, data_offsets)",
             name, key);
    }
  }
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    if (!value.contains(key)) FailIn(label, "tensor '{}': missing key '{}'", name, key);
  }
  Entry entry{name, DType::kF32, {}, 0, 0};

  const json& dtype = value.at("dtype");
  if (!dtype.is_string()) {
    FailIn(label, "tensor '{}': expected dtype to be a string, got {}", name, Brief(dtype));
  }
  std::optional<DType> parsed = DTypeFromSafetensorsName(dtype.get_ref<const std::string&>());
  if (!parsed) {
    FailIn(label, "tensor '{}': unknown dtype {} (supported: {})", name, Brief(dtype),
           SupportedNames());
  }
  entry.dtype = *parsed;

  const json& shape = value.at("shape");
  if (!shape.is_array()) {
    FailIn(label, "tensor '{}': expected shape to be an array of non-negative integers, got {}",
           name, Brief(shape));
  }
  for (size_t i = 0; i < shape.size(); ++i) {
    std::optional<int64_t> dim = AsNonNegativeInt(shape[i]);
    if (!dim) {
      FailIn(label, "tensor '{}': expected shape[{}] to be a non-negative integer, got {}", name, i,
             Brief(shape[i]));
    }
    entry.shape.push_back(*dim);
  }

  const json& offsets = value.at("data_offsets");
  std::optional<int64_t> begin, end;
  if (offsets.is_array() && offsets.size() == 2) {
    begin = AsNonNegativeInt(offsets[0]);
    end = AsNonNegativeInt(offsets[1]);
  }
  if (!begin || !end) {
    FailIn(label,
           "tensor '{}': expected data_offsets to be [begin, end] of non-negative integers, got {}",
           name, Brief(offsets));
  }
  if (*begin > *end) {
    FailIn(label, "tensor '{}': data_offsets [{}, {}] has begin > end", name, *begin, *end);
  }
  entry.begin = *begin;
  entry.end = *end;
  return entry;
}

std::map<std::string, std::string> ParseMetadata(std::string_view label, const json& value) {
  if (!value.is_object()) {
    FailIn(label, "expected __metadata__ to be an object of strings, got {}", value.type_name());
  }
  std::map<std::string, std::string> metadata;
  for (const auto& [key, item] : value.items()) {
    if (!item.is_string()) {
      FailIn(label, "expected __metadata__['{}'] to be a string, got {}", key, Brief(item));
    }
    metadata[key] = item.get<std::string>();
  }
  return metadata;
}

// The JSON header, validated against the tensors and padded to a multiple of 8 bytes.
std::string BuildHeader(std::string_view label, const std::vector<TensorData>& tensors,
                        const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string_view> seen;
  int64_t offset = 0;
  for (const TensorData& t : tensors) {
    if (t.name == "__metadata__") FailIn(label, "tensor name '__metadata__' is reserved");
    if (!seen.insert(t.name).second) FailIn(label, "duplicate tensor name '{}'", t.name);
    for (int64_t d : t.shape) {
      if (d < 0)
        FailIn(label, "tensor '{}': negative dimension in shape {}", t.name, DimsToString(t.shape));
    }
    std::optional<int64_t> size = ByteSize(t.dtype, t.shape);
    if (!size || static_cast<uint64_t>(*size) != t.bytes.size()) {
      FailIn(label, "tensor '{}': {} {} needs {} bytes, got {}", t.name, SafetensorsName(t.dtype),
             DimsToString(t.shape), size ? std::to_string(*size) : "more than 2^63",
             t.bytes.size());
    }
    nlohmann::ordered_json entry = nlohmann::ordered_json::object();
    entry["dtype"] = std::string(SafetensorsName(t.dtype));
    entry["shape"] = t.shape;
    entry["data_offsets"] = nlohmann::ordered_json::array({offset, offset + *size});
    header[t.name] = std::move(entry);
    offset += *size;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const json::exception& e) {
    FailIn(label, "tensor names and metadata must be valid UTF-8: {}", e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

void AppendLittleEndian64(std::string& out, uint64_t value) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

}  // namespace

std::optional<DType> DTypeFromSafetensorsName(std::string_view name) {
  for (const auto& [dtype, n] : kDTypeNames) {
    if (n == name) return dtype;
  }
  return std::nullopt;
}

std::string_view SafetensorsName(DType dtype) {
  for (const auto& [d, name] : kDTypeNames) {
    if (d == dtype) return name;
  }
  Fail("[safetensors] {} has no safetensors dtype", DTypeName(dtype));
}

// ---------------------------------------------------------------------------
// Reading.

struct SafetensorsFile::Storage {
  std::vector<uint8_t> owned;
  void* mapped = nullptr;
  size_t mapped_size = 0;

  Storage() = default;
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ~Storage() {
    if (mapped != nullptr) ::munmap(mapped, mapped_size);
  }
  std::span<const uint8_t> bytes() const {
    if (mapped == nullptr) return owned;
    return {static_cast<const uint8_t*>(mapped), mapped_size};
  }
};

SafetensorsFile::SafetensorsFile(std::unique_ptr<Storage> storage, std::string label)
    : storage_(std::move(storage)), label_(std::move(label)) {
  ParseHeader();
}
SafetensorsFile::SafetensorsFile(SafetensorsFile&&) noexcept = default;
SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&&) noexcept = default;
SafetensorsFile::~SafetensorsFile() = default;

SafetensorsFile SafetensorsFile::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    FailIn(path, "cannot open: {}", ErrnoMessage(err));
  }
  struct stat info;
  if (::fstat(fd, &info) != 0) {
    int err = errno;
    ::close(fd);
    FailIn(path, "cannot stat: {}", ErrnoMessage(err));
  }
  if (!S_ISREG(info.st_mode)) {
    ::close(fd);
    FailIn(path, "expected a regular file");
  }
  auto storage = std::make_unique<Storage>();
  if (info.st_size > 0) {
    size_t size = static_cast<size_t>(info.st_size);
    void* mapped = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int err = errno;
    ::close(fd);
    if (mapped == MAP_FAILED) FailIn(path, "mmap of {} bytes failed: {}", size, ErrnoMessage(err));
    storage->mapped = mapped;
    storage->mapped_size = size;
  } else {
    ::close(fd);
  }
  return SafetensorsFile(std::move(storage), path);
}

SafetensorsFile SafetensorsFile::FromBytes(std::vector<uint8_t> bytes, std::string label) {
  auto storage = std::make_unique<Storage>();
  storage->owned = std::move(bytes);
  return SafetensorsFile(std::move(storage), std::move(label));
}

void SafetensorsFile::ParseHeader() {
  std::span<const uint8_t> bytes = storage_->bytes();
  if (bytes.size() < 8) {
    FailIn(label_, "file is {} bytes, shorter than the 8-byte header length", bytes.size());
  }
  uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = (header_size << 8) | bytes[i];
  if (header_size > kMaxHeaderBytes) {
    FailIn(label_, "header length {} exceeds the limit of {} bytes (not a safetensors file?)",
           header_size, kMaxHeaderBytes);
  }
  if (header_size > bytes.size() - 8) {
    FailIn(label_, "header length {} but only {} bytes follow the 8-byte length", header_size,
           bytes.size() - 8);
  }
  std::string_view text(reinterpret_cast<const char*>(bytes.data()) + 8, header_size);
  json header = ParseJson(text, label_, "header");
  if (!header.is_object()) {
    FailIn(label_, "expected the header to be a JSON object, got {}", header.type_name());
  }

  std::span<const uint8_t> data = bytes.subspan(8 + header_size);
  const auto data_size = static_cast<int64_t>(data.size());
  std::vector<Entry> entries;
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      metadata_ = ParseMetadata(label_, value);
      continue;
    }
    Entry entry = ParseEntry(label_, key, value);
    std::optional<int64_t> size = ByteSize(entry.dtype, entry.shape);
    if (!size) {
      FailIn(label_, "tensor '{}': shape {} of {} has a byte size that overflows 64 bits", key,
             DimsToString(entry.shape), SafetensorsName(entry.dtype));
    }
    if (entry.end - entry.begin != *size) {
      FailIn(label_, "tensor '{}': data_offsets [{}, {}] span {} bytes, but {} {} needs {}", key,
             entry.begin, entry.end, entry.end - entry.begin, SafetensorsName(entry.dtype),
             DimsToString(entry.shape), *size);
    }
    if (entry.end > data_size) {
      FailIn(label_, "tensor '{}': data_offsets [{}, {}] end beyond the data section of {} bytes",
             key, entry.begin, entry.end, data_size);
    }
    entries.push_back(std::move(entry));
  }

  // Sorted by offset, the tensors must tile the data section exactly.
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.begin, a.end) < std::tie(b.begin, b.end);
  });
  int64_t covered = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    if (e.begin < covered) {
      const Entry& prev = entries[i - 1];
      FailIn(label_, "tensors '{}' [{}, {}] and '{}' [{}, {}] overlap", prev.name, prev.begin,
             prev.end, e.name, e.begin, e.end);
    }
    if (e.begin > covered) {
      FailIn(label_, "data bytes [{}, {}) before tensor '{}' belong to no tensor (gap)", covered,
             e.begin, e.name);
    }
    covered = e.end;
  }
  if (covered != data_size) {
    FailIn(label_, "data section is {} bytes but the tensors cover only {} (trailing bytes)",
           data_size, covered);
  }

  for (Entry& e : entries) {
    names_.push_back(e.name);
    TensorView view{e.dtype, std::move(e.shape), data.subspan(e.begin, e.end - e.begin)};
    tensors_.emplace(std::move(e.name), std::move(view));
  }
}

namespace {

constexpr std::string_view kChecksumPrefix = "strata.xxh3_64.";

std::string Checksum(std::span<const uint8_t> bytes) {
  return fmt::format("{:016x}", XXH3_64bits(bytes.data(), bytes.size()));
}

}  // namespace

const TensorView& SafetensorsFile::Layout(std::string_view name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) FailIn(label_, "no tensor named '{}'; {}", name, DescribeNames(names_));
  return it->second;
}

const TensorView& SafetensorsFile::Get(std::string_view name) const {
  const TensorView& view = Layout(name);
  auto sum = metadata_.find(std::string(kChecksumPrefix) + std::string(name));
  if (sum != metadata_.end()) {
    std::string actual = Checksum(view.data);
    if (actual != sum->second) {
      FailIn(label_,
             "tensor '{}' does not match its checksum (expected {}, got {}): the file is corrupt",
             name, sum->second, actual);
    }
  }
  // A bool is one byte holding 0 or 1: any other byte would read as true in
  // some kernels and as a count in others (sum says 258 where == True disagrees).
  if (view.dtype == DType::kPred) {
    auto bad = std::find_if(view.data.begin(), view.data.end(), [](uint8_t b) { return b > 1; });
    if (bad != view.data.end()) {
      FailIn(label_, "BOOL tensor '{}' holds byte {} at element {}; a BOOL element must be 0 or 1",
             name, static_cast<int>(*bad), bad - view.data.begin());
    }
  }
  return view;
}

std::map<std::string, std::string> ChecksumMetadata(const std::vector<TensorData>& tensors) {
  std::map<std::string, std::string> out;
  for (const TensorData& t : tensors)
    out[std::string(kChecksumPrefix) + t.name] = Checksum(t.bytes);
  return out;
}

// ---------------------------------------------------------------------------
// Writing.

std::vector<uint8_t> SerializeSafetensors(const std::vector<TensorData>& tensors,
                                          const std::map<std::string, std::string>& metadata) {
  std::string prefix;
  std::string header = BuildHeader("<memory>", tensors, metadata);
  AppendLittleEndian64(prefix, header.size());
  std::vector<uint8_t> out(prefix.begin(), prefix.end());
  out.insert(out.end(), header.begin(), header.end());
  for (const TensorData& t : tensors) out.insert(out.end(), t.bytes.begin(), t.bytes.end());
  return out;
}

void WriteSafetensors(const std::string& path, const std::vector<TensorData>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  fs::path target(path);
  if (path.empty()) Fail("[safetensors] the output path is empty; expected a file path");
  if (!target.has_filename()) FailIn(path, "expected a file path, got a directory path");
  std::string header = BuildHeader(path, tensors, metadata);  // validates before touching disk
  std::string prefix;
  AppendLittleEndian64(prefix, header.size());

  std::vector<std::string_view> pieces = {prefix, header};
  for (const TensorData& t : tensors)
    pieces.emplace_back(reinterpret_cast<const char*>(t.bytes.data()), t.bytes.size());
  WriteFileAtomically(path, pieces);
}

void WriteFileAtomically(const std::string& path, const std::vector<std::string_view>& pieces) {
  const fs::path target(path);
  const std::string label = target.string();
  if (path.empty()) Fail("[write] the output path is empty; expected a file path");
  if (!target.has_filename()) FailIn(label, "expected a file path, got a directory path");
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");

  struct Temp {
    fs::path path;
    int fd = -1;
    bool renamed = false;
    ~Temp() {
      if (fd >= 0) ::close(fd);
      if (!renamed && !path.empty()) ::unlink(path.c_str());
    }
  } temp;
  auto fail_with_errno = [&](std::string_view action, const fs::path& path) {
    int err = errno;
    FailIn(label, "{} '{}' failed: {}", action, path.string(), ErrnoMessage(err));
  };

  static std::atomic<uint64_t> counter{0};
  for (int attempt = 0; temp.fd < 0; ++attempt) {
    temp.path =
        dir / fmt::format(".{}.tmp-{}-{}", target.filename().string(), ::getpid(), counter++);
    temp.fd = ::open(temp.path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (temp.fd >= 0) break;
    int err = errno;
    if (err == EEXIST && attempt < 100) continue;
    fs::path failed = std::exchange(temp.path, fs::path());  // not ours: must not be unlinked
    FailIn(label, "creating temporary file '{}' failed: {}", failed.string(), ErrnoMessage(err));
  }
  for (std::string_view text : pieces) {
    while (!text.empty()) {
      ssize_t written =
          ::write(temp.fd, text.data(), std::min<size_t>(text.size(), size_t{1} << 30));
      if (written < 0 && errno == EINTR) continue;
      if (written < 0) fail_with_errno("writing", temp.path);
      text.remove_prefix(static_cast<size_t>(written));
    }
  }
  if (::fsync(temp.fd) != 0) fail_with_errno("fsync of", temp.path);
  if (::close(std::exchange(temp.fd, -1)) != 0) fail_with_errno("closing", temp.path);
  if (::rename(temp.path.c_str(), target.c_str()) != 0) {
    fail_with_errno("renaming into place", temp.path);
  }
  temp.renamed = true;

  // A filesystem that cannot fsync directories (EINVAL) is not an error.
  int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) fail_with_errno("file written, but opening its directory to fsync", dir);
  int result = ::fsync(dir_fd);
  int err = errno;
  ::close(dir_fd);
  if (result != 0 && err != EINVAL) {
    FailIn(label, "file written, but fsync of its directory failed: {}", ErrnoMessage(err));
  }
}

// ---------------------------------------------------------------------------
// Sharded checkpoints.

ShardedCheckpoint ShardedCheckpoint::Open(const std::string& path) {
  fs::path index_path, single_path;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    if (fs::exists(fs::path(path) / "model.safetensors.index.json", ec)) {
      index_path = fs::path(path) / "model.safetensors.index.json";
    } else if (fs::exists(fs::path(path) / "model.safetensors", ec)) {
      single_path = fs::path(path) / "model.safetensors";
    } else {
      FailIn(path, "directory has neither model.safetensors.index.json nor model.safetensors");
    }
  } else if (fs::path(path).extension() == ".json") {
    index_path = path;
  } else {
    single_path = path;
  }

  ShardedCheckpoint checkpoint;
  if (!single_path.empty()) {
    checkpoint.label_ = single_path.string();
    checkpoint.shards_.push_back(SafetensorsFile::Open(checkpoint.label_));
    for (const std::string& name : checkpoint.shards_[0].names()) {
      checkpoint.shard_of_[name] = 0;
      checkpoint.names_.push_back(name);
    }
    return checkpoint;
  }

  checkpoint.label_ = index_path.string();
  const std::string& label = checkpoint.label_;
  const std::string text = ReadWholeFile(index_path, "[safetensors]");
  json index = ParseJson(text, label, "index");
  if (!index.is_object()) {
    FailIn(label, "expected the index to be a JSON object, got {}", index.type_name());
  }
  if (index.contains("metadata")) {
    const json& metadata = index.at("metadata");
    if (!metadata.is_object()) {
      FailIn(label, "expected \"metadata\" to be an object, got {}", metadata.type_name());
    }
    for (const auto& [key, value] : metadata.items()) {
      checkpoint.metadata_[key] = value.is_string() ? value.get<std::string>() : value.dump();
    }
  }
  if (!index.contains("weight_map") || !index.at("weight_map").is_object()) {
    FailIn(label, "expected \"weight_map\" to be an object of tensor name -> shard file");
  }
  std::map<std::string, std::set<std::string, std::less<>>> wanted;  // shard file -> tensors
  for (const auto& [name, shard] : index.at("weight_map").items()) {
    if (!shard.is_string()) {
      FailIn(label, "weight_map['{}']: expected a file name, got {}", name, Brief(shard));
    }
    fs::path relative(shard.get<std::string>());
    bool escapes = std::find(relative.begin(), relative.end(), fs::path("..")) != relative.end();
    if (relative.empty() || relative.is_absolute() || escapes) {
      FailIn(label, "weight_map['{}']: shard '{}' must be a file name inside the index's directory",
             name, relative.string());
    }
    wanted[relative.string()].insert(name);
  }

  for (const auto& [shard, names] : wanted) {
    SafetensorsFile file = SafetensorsFile::Open((index_path.parent_path() / shard).string());
    for (const std::string& name : names) {
      if (!file.contains(name)) {
        FailIn(label, "weight_map puts '{}' in '{}', but that shard has no such tensor; {}", name,
               shard, DescribeNames(file.names()));
      }
    }
    // Tensors a shard holds but the index does not list are left out: the index is authoritative.
    for (const std::string& name : file.names()) {
      if (!names.contains(name)) continue;
      checkpoint.shard_of_[name] = checkpoint.shards_.size();
      checkpoint.names_.push_back(name);
    }
    checkpoint.shards_.push_back(std::move(file));
  }
  return checkpoint;
}

const TensorView& ShardedCheckpoint::Get(std::string_view name) const {
  auto it = shard_of_.find(name);
  if (it == shard_of_.end()) {
    FailIn(label_, "no tensor named '{}'; {}", name, DescribeNames(names_));
  }
  return shards_[it->second].Get(name);
}

}  // namespace strata::io
