// rng-bit-generator with the Philox-4x32-10 counter-based generator: bits
// depend only on (key, counter), so results are identical on every machine
// and thread count, and to XLA's for the same state. State u64[2] = {key,
// counter}: the key is state[0]; block b of the output is Philox of the
// 128-bit counter (state[0] << 64 | state[1]) + b, least significant word
// first (XLA's reading of a two-word Philox state, checked against XLA:CPU).
// The new state's counter word advances by the number of blocks drawn.
//
// algorithm=rng_three_fry is Threefry-2x32 (20 rounds) as XLA:CPU runs it:
// key = state[0] (low word first), each 64-bit counter state[1] + i gives
// two words. A u64 result takes both words of counter i (low first); a u32
// result is split in halves along its first even dimension (else its
// largest), [..., d, ...] -> [..., ceil(d/2), ...], one counter per element
// of the half, whose first word lands at index 2j and second at 2j + 1 of
// that dimension. The new state's counter advances by the counters used.
#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/kernels.h"

namespace strata::runtime {
namespace {

void Philox4x32(uint32_t key0, uint32_t key1, uint32_t c[4]) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = static_cast<uint64_t>(kM0) * c[0];
    uint64_t p1 = static_cast<uint64_t>(kM1) * c[2];
    uint32_t hi0 = p0 >> 32, lo0 = static_cast<uint32_t>(p0);
    uint32_t hi1 = p1 >> 32, lo1 = static_cast<uint32_t>(p1);
    uint32_t n0 = hi1 ^ c[1] ^ key0, n2 = hi0 ^ c[3] ^ key1;
    c[0] = n0;
    c[1] = lo1;
    c[2] = n2;
    c[3] = lo0;
    key0 += kW0;
    key1 += kW1;
  }
}

uint32_t RotateLeft(uint32_t v, int distance) { return (v << distance) | (v >> (32 - distance)); }

// Threefry-2x32 with 20 rounds (Salmon et al., SC 2011): x is the counter.
void ThreeFry2x32(uint32_t key0, uint32_t key1, uint32_t x[2]) {
  constexpr int kRotations[8] = {13, 15, 26, 6, 17, 29, 16, 24};
  const uint32_t ks[3] = {key0, key1, 0x1BD11BDAu ^ key0 ^ key1};
  x[0] += ks[0];
  x[1] += ks[1];
  for (int group = 0; group < 5; ++group) {  // four rounds, then a key injection
    for (int r = 0; r < 4; ++r) {
      x[0] += x[1];
      x[1] = RotateLeft(x[1], kRotations[(group % 2) * 4 + r]);
      x[1] ^= x[0];
    }
    x[0] += ks[(group + 1) % 3];
    x[1] += ks[(group + 2) % 3] + static_cast<uint32_t>(group + 1);
  }
}

KernelInfo MakeThreeFryKernel(const hlo::Instruction& inst, ThreadPool* pool) {
  const Shape& bits = inst.shape().tuple_shape(1);
  const bool wide = bits.dtype() == DType::kU64;
  std::vector<int64_t> dims = bits.dims();
  if (dims.empty()) dims = {1};
  // u32: the dimension split in halves (the first even one, else the largest).
  int64_t split = -1;
  for (size_t d = 0; d < dims.size() && !wide; ++d) {
    if (dims[d] % 2 == 0) {
      split = static_cast<int64_t>(d);
      break;
    }
  }
  if (split < 0 && !wide) split = std::max_element(dims.begin(), dims.end()) - dims.begin();
  std::vector<int64_t> half = dims;
  if (!wide) half[split] = (dims[split] + 1) / 2;
  int64_t counters = 1, inner = 1;  // inner: elements after the split dimension
  for (size_t d = 0; d < half.size(); ++d) {
    counters *= half[d];
    if (static_cast<int64_t>(d) > split) inner *= dims[d];
  }
  const int64_t elements = bits.num_elements();
  const int64_t size = wide ? 1 : dims[split];
  return {[=](const KernelArgs& a) {
    uint64_t state[2];
    std::memcpy(state, a.operands[0], sizeof(state));
    const uint32_t key0 = static_cast<uint32_t>(state[0]);
    const uint32_t key1 = static_cast<uint32_t>(state[0] >> 32);
    pool->ParallelFor(elements, 4096, [&](int64_t lo, int64_t hi) {
      for (int64_t e = lo; e < hi; ++e) {
        // The element's counter: its index in the half shape (row-major).
        int64_t counter = e, word = 0;
        if (!wide) {
          const int64_t outer = e / (size * inner), j = (e / inner) % size, rest = e % inner;
          counter = (outer * half[split] + j / 2) * inner + rest;
          word = j % 2;
        }
        const uint64_t c = state[1] + static_cast<uint64_t>(counter);
        uint32_t x[2] = {static_cast<uint32_t>(c), static_cast<uint32_t>(c >> 32)};
        ThreeFry2x32(key0, key1, x);
        if (wide) {
          reinterpret_cast<uint64_t*>(a.outputs[1])[e] = x[0] | static_cast<uint64_t>(x[1]) << 32;
        } else {
          reinterpret_cast<uint32_t*>(a.outputs[1])[e] = x[word];
        }
      }
    });
    uint64_t next[2] = {state[0], state[1] + static_cast<uint64_t>(counters)};
    std::memcpy(a.outputs[0], next, sizeof(next));
  }};
}

}  // namespace

KernelInfo MakeRngKernel(const hlo::Instruction& inst, ThreadPool& pool_ref) {
  ThreadPool* pool = &pool_ref;
  if (inst.rng_algorithm == "rng_three_fry") return MakeThreeFryKernel(inst, pool);
  const Shape& bits = inst.shape().tuple_shape(1);
  const int64_t words = bits.byte_size() / 4;  // u32 words to produce
  const int64_t blocks = (words + 3) / 4;
  return {[=](const KernelArgs& a) {
    uint64_t state[2];
    std::memcpy(state, a.operands[0], sizeof(state));
    uint32_t key0 = static_cast<uint32_t>(state[0]), key1 = static_cast<uint32_t>(state[0] >> 32);
    auto* out = reinterpret_cast<uint32_t*>(a.outputs[1]);
    pool->ParallelFor(blocks, 4096, [&](int64_t lo, int64_t hi) {
      for (int64_t b = lo; b < hi; ++b) {
        const uint64_t low = state[1] + static_cast<uint64_t>(b);
        const uint64_t high = state[0] + (low < state[1] ? 1 : 0);  // the carry out of the low word
        uint32_t c[4] = {static_cast<uint32_t>(low), static_cast<uint32_t>(low >> 32),
                         static_cast<uint32_t>(high), static_cast<uint32_t>(high >> 32)};
        Philox4x32(key0, key1, c);
        int64_t n = std::min<int64_t>(4, words - b * 4);
        std::memcpy(out + b * 4, c, n * 4);
      }
    });
    uint64_t next[2] = {state[0], state[1] + static_cast<uint64_t>(blocks)};
    std::memcpy(a.outputs[0], next, sizeof(next));
  }};
}

}  // namespace strata::runtime
