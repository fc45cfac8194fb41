// rng-bit-generator with the Philox-4x32-10 counter-based generator: bits
// depend only on (key, counter), so results are identical on every machine
// and thread count, and to XLA's for the same state. State u64[2] = {key,
// counter}: the key is state[0]; block b of the output is Philox of the
// 128-bit counter (state[0] << 64 | state[1]) + b, least significant word
// first (XLA's reading of a two-word Philox state, checked against XLA:CPU).
// The new state's counter word advances by the number of blocks drawn.
#include <cstring>

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

}  // namespace

KernelInfo MakeRngKernel(const hlo::Instruction& inst, ThreadPool& pool_ref) {
  ThreadPool* pool = &pool_ref;
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
