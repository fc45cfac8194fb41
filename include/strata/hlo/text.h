// XLA's HLO text format: the printer writes a canonical form (names without
// '%', operands without shapes, no layouts); the parser also reads what XLA
// itself prints (with '%', operand shapes, layouts like {1,0}, metadata,
// entry_computation_layout, ...). parse(print(m)) prints identically.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "strata/hlo/module.h"

namespace strata::hlo {

std::string ToText(const Module& module);
std::string ToText(const Computation& computation);
std::string ToText(const Instruction& instruction);  // one line, no ROOT

// Parses and verifies a module. Malformed text throws strata::Error whose
// message starts with "line L, column C: ".
std::unique_ptr<Module> ParseModule(std::string_view text);

}  // namespace strata::hlo
