// Fuzz harnesses: each takes one input of untrusted bytes and runs it
// through a part of strata that reads files (docs/reliability.md). A
// rejection with a clear strata::Error is the expected outcome for most
// inputs and returns quietly; anything else is a finding and escapes as an
// exception:
// - an InternalError (a STRATA_CHECK fired on user input),
// - any exception that is not a strata::Error (e.g. a library's own),
// - a Finding: a property the harness checks failed (a round trip that
//   changes the value, passes that change a program's results).
// Crashes, sanitizer reports, leaks and hangs are findings too; the fuzzer
// itself sees those.
//
// The same functions run under libFuzzer (fuzz/entry.cc, scripts/fuzz.sh) and
// in the test suite, which replays every input kept under tests/fuzz/.
#pragma once

#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>

namespace strata::fuzz {

struct Finding : std::logic_error {
  explicit Finding(const std::string& what) : std::logic_error(what) {}
};

using Bytes = std::span<const uint8_t>;

// HLO text -> parse (and verify) -> print/parse round trip -> compile with and
// without the optimizing passes -> run both on small inputs derived from the
// text; the two runs must agree.
void HloText(Bytes input);
// A safetensors file (header and data) -> every tensor's layout and bytes ->
// written back and read again: the same tensors.
void Safetensors(Bytes input);
// A Llama config.json -> LlamaConfig -> ToJson -> the same LlamaConfig.
void LlamaConfigJson(Bytes input);
// A checkpoint directory (files packed as described in checkpoint.cc) given
// to Trainer::Resume, with fall-back for half of the inputs.
void CheckpointDirectory(Bytes input);

struct Harness {
  std::string_view name;  // the directory of its inputs under tests/fuzz/
  void (*run)(Bytes);
};
inline constexpr Harness kHarnesses[] = {
    {"hlo_text", HloText},
    {"safetensors", Safetensors},
    {"llama_config", LlamaConfigJson},
    {"checkpoint", CheckpointDirectory},
};

// Runs `run` on `input`, rethrowing what is a finding and returning quietly
// on a strata::Error that is not an InternalError.
void RunHarness(void (*run)(Bytes), Bytes input);

}  // namespace strata::fuzz
