// XLA's dot algorithms (a dot's algorithm= attribute) that strata runs, in
// one table: the shape rule checks operands against it and the runtime's
// WidenHalfArithmetic rounds operands by it.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "strata/core/dtype.h"

namespace strata::hlo {

// The type a dot's operands are rounded to before they are multiplied (the
// products are summed in f32, f64 for dot_f64_f64_f64): f16 or bf16 for the
// half-precision algorithms, f32 for dot_f32_f32_f32 and for the multi-pass
// emulations of f32 (bf16 x3 / x6 / x9, tf32), which run as one f32 dot.
// Operands may be of that type, or f32 where it is a half type. nullopt for
// a name strata does not run.
std::optional<DType> DotAlgorithmInput(std::string_view algorithm);

// Every name DotAlgorithmInput knows, comma-separated (for errors).
std::string DotAlgorithmNames();

}  // namespace strata::hlo
