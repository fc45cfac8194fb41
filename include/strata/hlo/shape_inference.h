// Shape and dtype rules of every opcode. The builder uses them to give each
// instruction its shape; the verifier uses them to check parsed programs.
#pragma once

#include <span>

#include "strata/hlo/module.h"

namespace strata::hlo {

// The shape `instruction` must have given its operands and attributes. For
// opcodes whose shape is itself an attribute (parameter, constant, iota,
// broadcast, reshape, rng-bit-generator) the instruction's own shape is
// validated and returned. Throws strata::Error naming the opcode, the operand
// shapes and what was expected.
Shape InferShape(const Instruction& instruction);
// The same rules without an Instruction: for the lazy IR, whose primitive ops
// carry hlo::Attributes. `declared` is the shape for opcodes whose shape is an
// attribute (ignored otherwise).
Shape InferShape(Opcode opcode, std::span<const Shape* const> operand_shapes,
                 const Attributes& attributes, const Shape& declared);

}  // namespace strata::hlo
