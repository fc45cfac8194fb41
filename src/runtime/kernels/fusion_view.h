// Index maps a loop fusion reads its operands through. A broadcast,
// transpose, slice, reverse or reshape moves no arithmetic, only indices:
// element i of its result is one element of its operand, at an address
// affine in i's multi-index. A chain of them over a fusion operand is then
// one strided read (XLA's loop fusions read through them the same way), so
// the fused loop reads a transposed or reversed operand where it is and the
// moved copy is never written.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "strata/hlo/module.h"

namespace strata::runtime {

// How a value's elements sit in its chain's base: element (i_0, ..., i_k)
// of `dims` is base element offset + sum(i_j * strides[j]). `dims` refines
// the value's own dims (the same row-major order: a dim may be split in
// several), so element n of the value is element n of `dims`. A stride is
// negative along a reversed dim and 0 along a broadcast one.
struct OperandView {
  std::vector<int64_t> dims;
  std::vector<int64_t> strides;
  int64_t offset = 0;
};

// Broadcast, transpose, slice, reverse, reshape: ops that only move elements.
bool IsIndexMap(const hlo::Instruction& i);

// The value under the chain of index maps that ends at `top` (`top` itself
// when it is not one).
const hlo::Instruction& ViewBase(const hlo::Instruction& top);

// Whether the chain ending at `top` holds a transpose, slice or reverse: an
// op that moves elements, unlike a broadcast (which the fused loop reads
// its own way) or a reshape (the same elements in the same order).
bool MovesElements(const hlo::Instruction& top);

// How `top` reads ViewBase(top), with dims merged where their strides
// allow (adjacent dims a, b with stride_a == stride_b * size_b) and unit
// dims dropped; none where a reshape splits the chain's dims in a way one
// stride per dim cannot say.
std::optional<OperandView> ViewOf(const hlo::Instruction& top);

}  // namespace strata::runtime
