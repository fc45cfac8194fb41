// Training data for `strata train`: a byte-level tokenizer, a text corpus
// split into training and held-out tokens, and random batches of windows.
//
// Batches are counter-based: batch t of seed s is a pure function of (s, t),
// so a run resumed at step t draws exactly the batches the uninterrupted run
// would have drawn, with no generator state to save.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "strata/lazy/tensor.h"

namespace strata::train {

// One token per byte: ids 0..255, nothing unknown, nothing to train.
class ByteTokenizer {
 public:
  static constexpr int64_t kVocabSize = 256;
  std::vector<int64_t> Encode(std::string_view text) const;
  // Error on an id outside [0, 256).
  std::string Decode(const std::vector<int64_t>& ids) const;
};

// A corpus as token ids: the first part trains, the last part is held out
// for evaluation.
struct Corpus {
  std::vector<int64_t> train;
  std::vector<int64_t> heldout;
};

// Reads a text file and holds out its last `heldout_fraction` (in (0, 1)).
// Each part must hold at least `min_tokens` tokens (one window + 1), or the
// error says how large the file is and how large it must be.
Corpus LoadCorpus(const std::string& path, double heldout_fraction, int64_t min_tokens);

// A SplitMix64 stream: the generator behind batches and sampling. Defined
// by its arithmetic, so the same seed gives the same numbers everywhere.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next();
  // Uniform in [0, n) (n > 0), without modulo bias.
  uint64_t Below(uint64_t n);
  // Uniform in [0, 1) with 53 random bits.
  double Uniform();

 private:
  uint64_t state_;
};

// The start offsets of batch `step`: `batch` windows of `seq` tokens drawn
// uniformly from a stream of `tokens` tokens.
std::vector<int64_t> WindowStarts(uint64_t seed, int64_t step, int64_t batch, int64_t seq,
                                  int64_t tokens);

// Evenly spaced windows over the stream (for evaluation: the same every time).
std::vector<int64_t> EvenWindowStarts(int64_t count, int64_t seq, int64_t tokens);

// The windows as an s64 [starts.size(), seq] tensor.
Tensor MakeBatch(const std::vector<int64_t>& tokens, const std::vector<int64_t>& starts,
                 int64_t seq);

// The same batch sharded over `mesh` by `spec` (rows split, the sequence
// whole). In a job of several processes (lazy::Context::process_group) a
// process reads only the windows of the rows its own devices hold; alone it
// builds the batch and marks it.
Tensor MakeShardedBatch(const std::vector<int64_t>& tokens, const std::vector<int64_t>& starts,
                        int64_t seq, const ir::Mesh& mesh, const ir::PartitionSpec& spec);

}  // namespace strata::train
