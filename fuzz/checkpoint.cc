// A checkpoint directory given to `strata train --resume`: `latest`, step
// directories with config.json, trainer_state.json and the safetensors of a
// one-process checkpoint, or the shard files and index of a job's. The input
// packs the directory's files (PackDirectory); paths are relative, made of
// [A-Za-z0-9._-] components, at most three deep, so nothing is written
// outside the harness's own directory.
#include "checkpoint.h"

#include <fmt/core.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>

#include "strata/core/error.h"

namespace strata::fuzz {
namespace {

namespace fs = std::filesystem;

constexpr size_t kMaxFiles = 64;
constexpr size_t kMaxFileBytes = 1 << 22;

bool IsSafeRelativePath(std::string_view path) {
  if (path.empty() || path.size() > 96) return false;
  int components = 0;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = std::min(path.find('/', start), path.size());
    std::string_view part = path.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") return false;
    for (char c : part) {
      bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                c == '.' || c == '_' || c == '-';
      if (!ok) return false;
    }
    if (++components > 3) return false;
    start = end + 1;
  }
  return true;
}

struct PackedFile {
  std::string path;
  std::string_view bytes;
};

std::optional<std::vector<PackedFile>> Unpack(Bytes input) {
  std::string_view rest(reinterpret_cast<const char*>(input.data()), input.size());
  std::vector<PackedFile> files;
  while (!rest.empty()) {
    size_t newline = rest.find('\n');
    if (newline == std::string_view::npos || files.size() == kMaxFiles) return std::nullopt;
    std::string_view line = rest.substr(0, newline);
    rest.remove_prefix(newline + 1);
    size_t space = line.rfind(' ');
    if (space == std::string_view::npos) return std::nullopt;
    std::string_view digits = line.substr(space + 1);
    if (digits.empty() || digits.size() > 8) return std::nullopt;
    size_t size = 0;
    for (char c : digits) {
      if (c < '0' || c > '9') return std::nullopt;
      size = size * 10 + (c - '0');
    }
    std::string path(line.substr(0, space));
    if (!IsSafeRelativePath(path) || size > kMaxFileBytes || size > rest.size()) {
      return std::nullopt;
    }
    files.push_back({std::move(path), rest.substr(0, size)});
    rest.remove_prefix(size);
  }
  return files;
}

// Each process its own directory, emptied for every input.
const fs::path& WorkDirectory() {
  static const fs::path dir =
      fs::temp_directory_path() / fmt::format("strata-fuzz-checkpoint-{}", ::getpid());
  return dir;
}

bool WriteFiles(const fs::path& root, const std::vector<PackedFile>& files) {
  std::error_code error;
  fs::remove_all(root, error);
  fs::create_directories(root);
  for (const PackedFile& file : files) {
    fs::path path = root / file.path;
    fs::create_directories(path.parent_path(), error);
    if (error || fs::is_directory(path)) return false;  // a file where a directory must go
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(file.bytes.data(), static_cast<std::streamsize>(file.bytes.size()));
    if (!out) return false;
  }
  return true;
}

}  // namespace

train::TrainOptions CheckpointOptions() {
  train::TrainOptions o;
  o.hidden = 8;
  o.num_layers = 1;
  o.heads = 2;
  o.kv_heads = 1;
  o.batch = 2;
  o.seq = 8;
  o.steps = 4;
  o.warmup = 1;
  o.eval_every = 0;
  o.eval_batches = 1;
  return o;
}

train::Corpus CheckpointCorpus() {
  std::string text;
  while (text.size() < 400) text += "The quick brown fox jumps over the lazy dog. ";
  std::vector<int64_t> tokens = train::ByteTokenizer().Encode(text);
  train::Corpus corpus;
  corpus.train.assign(tokens.begin(), tokens.begin() + 300);
  corpus.heldout.assign(tokens.begin() + 300, tokens.end());
  return corpus;
}

std::vector<uint8_t> PackDirectory(const fs::path& dir) {
  std::vector<fs::path> paths;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    if (entry.is_regular_file()) paths.push_back(entry.path());
  }
  std::sort(paths.begin(), paths.end());
  std::vector<uint8_t> out;
  for (const fs::path& path : paths) {
    std::ifstream in(path, std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::string line = fmt::format("{} {}\n", fs::relative(path, dir).string(), bytes.size());
    out.insert(out.end(), line.begin(), line.end());
    out.insert(out.end(), bytes.begin(), bytes.end());
  }
  return out;
}

bool ResumeFromPacked(Bytes input) {
  std::optional<std::vector<PackedFile>> files = Unpack(input);
  if (!files) return false;
  const fs::path root = WorkDirectory() / "checkpoints";
  if (!WriteFiles(root, *files)) return false;
  // With or without fall-back as the input's hash says: one resume per
  // input (twice the inputs an hour), each way for half of them.
  const bool fall_back =
      std::hash<std::string_view>()({reinterpret_cast<const char*>(input.data()), input.size()}) &
      1;
  bool resumed = false;
  try {
    train::Trainer::Resume(root.string(), CheckpointOptions(), CheckpointCorpus(), fall_back);
    resumed = true;
  } catch (const InternalError&) {
    throw;
  } catch (const Error&) {
  }
  std::error_code error;
  fs::remove_all(WorkDirectory(), error);
  return resumed;
}

void CheckpointDirectory(Bytes input) { ResumeFromPacked(input); }

}  // namespace strata::fuzz
