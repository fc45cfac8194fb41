// Checked indexing for the ops that read by index (lazy::Context's
// index_checks switch): the check runs inside the program that reads the
// indices, and the sync that ran it throws an Error naming the op, the first
// index out of range and the range.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "strata/lazy/tensor.h"

namespace strata::lazy {

// `result`, an op reading `index`, carrying a check that every element of
// `index` lies in [0, bound) or equals `allowed` (cross_entropy's
// ignore_index). `range` describes what the indices select from, for the
// error ("dimension 0 of f32[256,32]"). Returns `result` unchanged when
// index checks are off. Inside a scan body the check is computed every step
// and the loop's outputs carry it over the steps (transforms/scan.cc): the
// error's op says "in a scan body" and the index position starts with the
// step.
Tensor WithIndexCheck(const Tensor& result, const Tensor& index, int64_t bound,
                      const std::string& op, const std::string& range,
                      std::optional<int64_t> allowed = std::nullopt);

// `result`, an integer division or remainder by `divisor`, carrying a check
// that no element of `divisor` is 0: torch raises ZeroDivisionError where
// XLA answers x / 0 = -1 and x % 0 = x. A floating `result` is not checked
// (it holds inf or NaN, as everywhere). Off with the index checks.
Tensor WithDivisorCheck(const Tensor& result, const Tensor& divisor, const std::string& op);

}  // namespace strata::lazy
