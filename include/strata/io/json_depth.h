// The deepest nesting strata accepts in the JSON files it reads (safetensors
// headers, config.json, a checkpoint's trainer state: a few levels each).
// Deeper input is rejected while it is parsed, before anything recursive
// (copies, dump() in error messages, destruction) runs on it: a 131 KB file
// nested 65,000 levels deep used to overflow the stack.
#pragma once

namespace strata::io {

inline constexpr int kMaxJsonDepth = 64;

}  // namespace strata::io
