// The one list of program-IR opcodes, with XLA's text names. The printer,
// parser, shape inference and runtime kernels all key off this list.
#pragma once

#include <optional>
#include <string_view>

namespace strata::hlo {

// V(enum, text name, kind): kind is Unary / Binary for elementwise ops whose
// kernels are generated from one table, Collective for the SPMD ops that talk
// across partitions, Other for everything else.
#define STRATA_HLO_OPCODES(V)                                \
  V(kParameter, "parameter", Other)                          \
  V(kConstant, "constant", Other)                            \
  V(kIota, "iota", Other)                                    \
  V(kConvert, "convert", Other)                              \
  V(kBitcastConvert, "bitcast-convert", Other)               \
  V(kBroadcast, "broadcast", Other)                          \
  V(kReshape, "reshape", Other)                              \
  V(kTranspose, "transpose", Other)                          \
  V(kCopy, "copy", Other)                                    \
  V(kSlice, "slice", Other)                                  \
  V(kDynamicSlice, "dynamic-slice", Other)                   \
  V(kDynamicUpdateSlice, "dynamic-update-slice", Other)      \
  V(kConcatenate, "concatenate", Other)                      \
  V(kPad, "pad", Other)                                      \
  V(kReverse, "reverse", Other)                              \
  V(kSelect, "select", Other)                                \
  V(kCompare, "compare", Other)                              \
  V(kClamp, "clamp", Other)                                  \
  V(kNegate, "negate", Unary)                                \
  V(kAbs, "abs", Unary)                                      \
  V(kSign, "sign", Unary)                                    \
  V(kExp, "exponential", Unary)                              \
  V(kExpm1, "exponential-minus-one", Unary)                  \
  V(kLog, "log", Unary)                                      \
  V(kLog1p, "log-plus-one", Unary)                           \
  V(kTanh, "tanh", Unary)                                    \
  V(kLogistic, "logistic", Unary)                            \
  V(kSqrt, "sqrt", Unary)                                    \
  V(kRsqrt, "rsqrt", Unary)                                  \
  V(kSin, "sine", Unary)                                     \
  V(kCos, "cosine", Unary)                                   \
  V(kErf, "erf", Unary)                                      \
  V(kFloor, "floor", Unary)                                  \
  V(kCeil, "ceil", Unary)                                    \
  V(kRoundNearestEven, "round-nearest-even", Unary)          \
  V(kNot, "not", Unary)                                      \
  V(kIsFinite, "is-finite", Other)                           \
  V(kAdd, "add", Binary)                                     \
  V(kSubtract, "subtract", Binary)                           \
  V(kMultiply, "multiply", Binary)                           \
  V(kDivide, "divide", Binary)                               \
  V(kMaximum, "maximum", Binary)                             \
  V(kMinimum, "minimum", Binary)                             \
  V(kPower, "power", Binary)                                 \
  V(kRemainder, "remainder", Binary)                         \
  V(kAtan2, "atan2", Binary)                                 \
  V(kAnd, "and", Binary)                                     \
  V(kOr, "or", Binary)                                       \
  V(kXor, "xor", Binary)                                     \
  V(kShiftLeft, "shift-left", Binary)                        \
  V(kShiftRightLogical, "shift-right-logical", Binary)       \
  V(kShiftRightArithmetic, "shift-right-arithmetic", Binary) \
  V(kReduce, "reduce", Other)                                \
  V(kDot, "dot", Other)                                      \
  V(kGather, "gather", Other)                                \
  V(kScatter, "scatter", Other)                              \
  V(kTuple, "tuple", Other)                                  \
  V(kGetTupleElement, "get-tuple-element", Other)            \
  V(kWhile, "while", Other)                                  \
  V(kCall, "call", Other)                                    \
  V(kFusion, "fusion", Other)                                \
  V(kOptimizationBarrier, "opt-barrier", Other)              \
  V(kRngBitGenerator, "rng-bit-generator", Other)            \
  V(kPartitionId, "partition-id", Collective)                \
  V(kReplicaId, "replica-id", Collective)                    \
  V(kAllReduce, "all-reduce", Collective)                    \
  V(kAllGather, "all-gather", Collective)                    \
  V(kReduceScatter, "reduce-scatter", Collective)            \
  V(kAllToAll, "all-to-all", Collective)                     \
  V(kCollectivePermute, "collective-permute", Collective)

enum class Opcode : uint8_t {
#define STRATA_HLO_OPCODE_ENUM(e, name, kind) e,
  STRATA_HLO_OPCODES(STRATA_HLO_OPCODE_ENUM)
#undef STRATA_HLO_OPCODE_ENUM
};

std::string_view OpcodeName(Opcode op);
std::optional<Opcode> OpcodeFromName(std::string_view name);
bool IsElementwiseUnary(Opcode op);
bool IsElementwiseBinary(Opcode op);
// Ops that exchange data between the partitions of an SPMD program (or read
// which partition runs): never folded, moved or evaluated on one device alone.
bool IsCollective(Opcode op);

enum class Comparison : uint8_t { kEq, kNe, kLt, kLe, kGt, kGe };
std::string_view ComparisonName(Comparison c);  // "EQ", ...
std::optional<Comparison> ComparisonFromName(std::string_view name);

}  // namespace strata::hlo
