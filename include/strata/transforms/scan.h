// scan: a loop over the leading dimension of xs compiled as one While,
// whatever its length (jax.lax.scan; PyTorch/XLA's scan).
//
//   auto [carry, ys] = strata::scan(
//       [&](const Tree& c, const Tree& x) { Tensor h = tanh(matmul(x.leaf(), w) + c.leaf());
//                                           return std::pair{Tree(h), Tree(h)}; },
//       Tree(h0), Tree(inputs));
//
// fn runs once, on placeholders (no data, no device work). Outer tensors it
// reads become loop invariants: passed once, never copied per step, and they
// receive gradients. Carries keep their dtypes (integers included) and must
// come back with init's structure, shapes and dtypes. Gradients (with
// respect to init, xs and everything captured) run as one reverse While that
// recomputes each step's forward from the saved carries.
#pragma once

#include <functional>
#include <optional>
#include <utility>

#include "strata/lazy/tree.h"

namespace strata {

// What the backward pass keeps of the forward loop.
enum class Remat : uint8_t {
  kSaveCarries,  // only each step's carry; the backward loop recomputes the step
  kSaveAll,      // every intermediate the backward step reads, stacked over steps
  // The results of matrix products (dot) the backward step reads, stacked
  // over steps; the backward loop recomputes only the cheap rest (JAX's
  // checkpoint_dots policy). No GEMM runs twice.
  kSaveDots,
  // Only the matrix products without batch dimensions (JAX's
  // dots_with_no_batch_dims_saveable): a transformer layer's projections are
  // kept, its attention products (batched over batch and heads, and the
  // [B, H, S, S] scores the largest of all) recomputed: most of kSaveDots'
  // speed for a fraction of its memory.
  kSaveDotsWithNoBatchDims,
};

struct ScanOptions {
  bool reverse = false;                          // run from the last slice to the first
  std::optional<int64_t> length = std::nullopt;  // trip count (required when xs is empty)
  int64_t unroll = 1;                            // body copies per While iteration
  Remat remat = Remat::kSaveCarries;
};

using ScanFn = std::function<std::pair<Tree, Tree>(const Tree& carry, const Tree& x)>;

// Returns (final carry, ys): ys stacks each step's y along a new leading
// dimension, at the position of the x it came from (also when reversed).
std::pair<Tree, Tree> scan(const ScanFn& fn, const Tree& init, const Tree& xs,
                           const ScanOptions& options = {});

}  // namespace strata
