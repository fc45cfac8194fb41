#include "strata/train/data.h"

#include <fstream>
#include <iterator>

#include "strata/core/error.h"
#include "strata/io/files.h"
#include "strata/lazy/context.h"
#include "strata/runtime/device.h"

namespace strata::train {

std::vector<int64_t> ByteTokenizer::Encode(std::string_view text) const {
  std::vector<int64_t> ids;
  ids.reserve(text.size());
  for (char c : text) ids.push_back(static_cast<unsigned char>(c));
  return ids;
}

std::string ByteTokenizer::Decode(const std::vector<int64_t>& ids) const {
  std::string text;
  text.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= kVocabSize)
      Fail("[ByteTokenizer] id {} at position {} is not a byte (expected 0..255)", ids[i], i);
    text.push_back(static_cast<char>(ids[i]));
  }
  return text;
}

Corpus LoadCorpus(const std::string& path, double heldout_fraction, int64_t min_tokens) {
  if (!(heldout_fraction > 0 && heldout_fraction < 1))
    Fail("[corpus] the held-out fraction must be in (0, 1), got {}", heldout_fraction);
  const std::string text = io::ReadWholeFile(path, "[corpus]");
  std::vector<int64_t> ids = ByteTokenizer().Encode(text);
  const int64_t n = static_cast<int64_t>(ids.size());
  const int64_t heldout = static_cast<int64_t>(static_cast<double>(n) * heldout_fraction);
  if (heldout < min_tokens || n - heldout < min_tokens) {
    Fail(
        "[corpus] '{}' has {} bytes; holding out {:.0f}% needs at least {} bytes in each part "
        "(one window of the sequence length + 1), so at least {} bytes",
        path, n, heldout_fraction * 100, min_tokens,
        static_cast<int64_t>(static_cast<double>(min_tokens) /
                             std::min(heldout_fraction, 1 - heldout_fraction)) +
            1);
  }
  Corpus corpus;
  corpus.train.assign(ids.begin(), ids.end() - heldout);
  corpus.heldout.assign(ids.end() - heldout, ids.end());
  return corpus;
}

uint64_t SplitMix64::Next() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t SplitMix64::Below(uint64_t n) {
  if (n == 0) Fail("[SplitMix64] Below(0) has no value");
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;  // reject the biased tail
  uint64_t r;
  do r = Next();
  while (r >= limit);
  return r % n;
}

double SplitMix64::Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

std::vector<int64_t> WindowStarts(uint64_t seed, int64_t step, int64_t batch, int64_t seq,
                                  int64_t tokens) {
  if (batch <= 0 || seq <= 0 || tokens < seq)
    Fail("[batches] need batch > 0 and a stream of at least seq = {} tokens, got batch {} and {}",
         seq, batch, tokens);
  // One stream per (seed, step): mix the step into the seed through one
  // SplitMix64 round so neighbouring steps are unrelated.
  SplitMix64 stream(
      SplitMix64(seed ^ (static_cast<uint64_t>(step) * 0xd1b54a32d192ed03ull)).Next());
  std::vector<int64_t> starts(batch);
  for (int64_t& s : starts) s = static_cast<int64_t>(stream.Below(tokens - seq + 1));
  return starts;
}

std::vector<int64_t> EvenWindowStarts(int64_t count, int64_t seq, int64_t tokens) {
  if (count <= 0 || seq <= 0 || tokens < seq)
    Fail("[batches] need count > 0 and a stream of at least seq = {} tokens, got {} and {}", seq,
         count, tokens);
  std::vector<int64_t> starts(count);
  const int64_t span = tokens - seq;  // last valid start
  for (int64_t i = 0; i < count; ++i) starts[i] = count == 1 ? 0 : span * i / (count - 1);
  return starts;
}

Tensor MakeBatch(const std::vector<int64_t>& tokens, const std::vector<int64_t>& starts,
                 int64_t seq) {
  std::vector<int64_t> ids;
  ids.reserve(starts.size() * seq);
  for (int64_t s : starts) {
    if (s < 0 || s + seq > static_cast<int64_t>(tokens.size()))
      Fail("[batches] window [{}, {}) is outside the {} tokens", s, s + seq, tokens.size());
    ids.insert(ids.end(), tokens.begin() + s, tokens.begin() + s + seq);
  }
  return Tensor::FromVector(ids, {static_cast<int64_t>(starts.size()), seq});
}

Tensor MakeShardedBatch(const std::vector<int64_t>& tokens, const std::vector<int64_t>& starts,
                        int64_t seq, const ir::Mesh& mesh, const ir::PartitionSpec& spec) {
  const runtime::ProcessGroup* group = lazy::Context::Get().process_group();
  const int64_t rows = static_cast<int64_t>(starts.size());
  const ir::Sharding sharding(mesh, spec, 2);
  const spmd::AxisSharding& layout = sharding.axes();
  if (!group || group->size() == 1 || !layout.dims[1].empty() || mesh.size() % group->size()) {
    Tensor ids = MakeBatch(tokens, starts, seq);
    mark_sharding(ids, mesh, spec);
    return ids;
  }
  const int64_t local = mesh.size() / group->size(), first = group->rank() * local;
  const std::vector<int64_t> shard = spmd::ShardDims(mesh, layout, {rows, seq});
  runtime::Client& client = lazy::Context::Get().ClientFor(mesh.size());
  std::vector<runtime::Buffer> shards;
  for (int64_t p = first; p < first + local; ++p) {
    const int64_t begin = mesh.IndexAlong(layout.dims[0], p) * shard[0];
    std::vector<int64_t> ids(shard[0] * seq, 0);  // rows past the batch: padding
    for (int64_t r = begin; r < std::min(rows, begin + shard[0]); ++r) {
      const int64_t s = starts[r];
      if (s < 0 || s + seq > static_cast<int64_t>(tokens.size()))
        Fail("[batches] window [{}, {}) is outside the {} tokens", s, s + seq, tokens.size());
      std::copy(tokens.begin() + s, tokens.begin() + s + seq, ids.begin() + (r - begin) * seq);
    }
    shards.push_back(
        runtime::Buffer::FromVector<int64_t>(ids, shard, client.device(static_cast<int>(p))));
  }
  return Tensor(ir::Value{ir::Node::MakeShardedDeviceData(
      std::move(shards), Shape(DType::kS64, {rows, seq}), mesh, layout, sharding, false, first)});
}

}  // namespace strata::train
