// The one list of program-IR opcodes, one row each.
//
//   V(enum, text name, kind)                 every opcode
//   V(enum, text name, Unary | Binary,       the elementwise ops, whose row
//     element types, float kernel,           is everything strata knows of
//     integer kernel, vector kernel, vjp)    them, side by side
//
// kind: Unary / Binary for the elementwise ops, Collective for the SPMD ops
// that talk across partitions, Other for everything else. The printer,
// parser, shape inference, kernels and VJP rules all read this list;
// consumers take the columns they need (V(e, name, kind, ...)).
//
// The elementwise columns:
// - element types: Float, Numeric (floats and integers), Integer, or
//   IntegerOrPred (integers and booleans). Shape inference accepts exactly
//   these; an op taking no floats has no gradient.
// - float kernel / integer kernel: the scalar semantics (XLA's, integer
//   corner cases included) as an expression of the operand x (unary) or a, b
//   (binary) of element type T, with the helpers of
//   src/runtime/kernels/elementwise_ops.h. NoKernel() where the types
//   exclude that class; the integer kernel also serves booleans.
// - vector kernel: a float-array routine (const float*, float*, n) used for
//   f32 instead of the scalar loop, or nullptr.
// - vjp: the cotangents of the operands given g, the output's (a Tensor
//   expression of x or a, b with the lazy ops; Grads(...) lists them, helpers
//   in src/autograd/vjp_elementwise.cc).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace strata::hlo {

// One row per op, its columns on the lines below it.
// clang-format off
#define STRATA_HLO_OPCODES(V) \
  V(kParameter, "parameter", Other) \
  V(kConstant, "constant", Other) \
  V(kIota, "iota", Other) \
  V(kConvert, "convert", Other) \
  V(kBitcastConvert, "bitcast-convert", Other) \
  V(kBroadcast, "broadcast", Other) \
  V(kReshape, "reshape", Other) \
  V(kTranspose, "transpose", Other) \
  V(kCopy, "copy", Other) \
  V(kSlice, "slice", Other) \
  V(kDynamicSlice, "dynamic-slice", Other) \
  V(kDynamicUpdateSlice, "dynamic-update-slice", Other) \
  V(kConcatenate, "concatenate", Other) \
  V(kPad, "pad", Other) \
  V(kReverse, "reverse", Other) \
  V(kConvolution, "convolution", Other) \
  V(kReduceWindow, "reduce-window", Other) \
  V(kSelectAndScatter, "select-and-scatter", Other) \
  V(kSort, "sort", Other) \
  V(kTopK, "topk", Other) \
  V(kSelect, "select", Other) \
  V(kCompare, "compare", Other) \
  V(kClamp, "clamp", Other) \
  V(kReal, "real", Other) \
  V(kImag, "imag", Other) \
  V(kComplex, "complex", Other) \
  /* elementwise unary: types, float kernel, integer kernel, vector kernel, vjp */ \
  V(kNegate, "negate", Unary, Numeric, \
    -x, WrapNegate(x), nullptr, \
    Grads(-g)) \
  V(kAbs, "abs", Unary, Numeric, \
    std::abs(x), IntegerAbs(x), nullptr, \
    Grads(g * sign(x))) \
  V(kSign, "sign", Unary, Numeric, \
    FloatSign(x), IntegerSign(x), nullptr, \
    Grads(ZerosLike(x))) \
  V(kExp, "exponential", Unary, Float, \
    std::exp(x), NoKernel(), ExpFloats, \
    Grads(g * exp(x))) \
  V(kExpm1, "exponential-minus-one", Unary, Float, \
    std::expm1(x), NoKernel(), nullptr, \
    Grads(g * exp(x))) \
  V(kLog, "log", Unary, Float, \
    std::log(x), NoKernel(), nullptr, \
    Grads(g / x)) \
  V(kLog1p, "log-plus-one", Unary, Float, \
    std::log1p(x), NoKernel(), nullptr, \
    Grads(g / (x + 1.0))) \
  V(kTanh, "tanh", Unary, Float, \
    std::tanh(x), NoKernel(), TanhFloats, \
    TanhVjp(g, x)) \
  V(kLogistic, "logistic", Unary, Float, \
    T(1) / (T(1) + std::exp(-x)), NoKernel(), LogisticFloats, \
    LogisticVjp(g, x)) \
  V(kSqrt, "sqrt", Unary, Float, \
    std::sqrt(x), NoKernel(), nullptr, \
    Grads(g * 0.5 / sqrt(x))) \
  V(kRsqrt, "rsqrt", Unary, Float, \
    T(1) / std::sqrt(x), NoKernel(), nullptr, \
    Grads(g * -0.5 * rsqrt(x) / x)) \
  V(kSin, "sine", Unary, Float, \
    std::sin(x), NoKernel(), nullptr, \
    Grads(g * cos(x))) \
  V(kCos, "cosine", Unary, Float, \
    std::cos(x), NoKernel(), nullptr, \
    Grads(-(g * sin(x)))) \
  V(kErf, "erf", Unary, Float, \
    std::erf(x), NoKernel(), nullptr, \
    ErfVjp(g, x)) \
  V(kFloor, "floor", Unary, Float, \
    std::floor(x), NoKernel(), nullptr, \
    Grads(ZerosLike(x))) \
  V(kCeil, "ceil", Unary, Float, \
    std::ceil(x), NoKernel(), nullptr, \
    Grads(ZerosLike(x))) \
  V(kRoundNearestEven, "round-nearest-even", Unary, Float, \
    std::nearbyint(x), NoKernel(), nullptr, \
    Grads(ZerosLike(x))) \
  V(kNot, "not", Unary, IntegerOrPred, \
    NoKernel(), BitNot(x), nullptr, \
    NoGradient()) \
  V(kIsFinite, "is-finite", Other) \
  /* elementwise binary: types, float kernel, integer kernel, vector kernel, vjp */ \
  V(kAdd, "add", Binary, Numeric, \
    a + b, WrapAdd(a, b), nullptr, \
    Grads(g, g)) \
  V(kSubtract, "subtract", Binary, Numeric, \
    a - b, WrapSubtract(a, b), nullptr, \
    Grads(g, -g)) \
  V(kMultiply, "multiply", Binary, Numeric, \
    a * b, WrapMultiply(a, b), nullptr, \
    Grads(g * b, g * a)) \
  V(kDivide, "divide", Binary, Numeric, \
    a / b, IntegerDivide(a, b), nullptr, \
    DivideVjp(g, a, b)) \
  V(kMaximum, "maximum", Binary, Numeric, \
    FloatMax(a, b), a > b ? a : b, nullptr, \
    MaxMinVjp(g, ge(a, b))) \
  V(kMinimum, "minimum", Binary, Numeric, \
    FloatMin(a, b), a < b ? a : b, nullptr, \
    MaxMinVjp(g, le(a, b))) \
  V(kPower, "power", Binary, Numeric, \
    std::pow(a, b), IntegerPower(a, b), nullptr, \
    PowerVjp(g, a, b)) \
  V(kRemainder, "remainder", Binary, Numeric, \
    std::fmod(a, b), IntegerRemainder(a, b), nullptr, \
    RemainderVjp(g, a, b)) \
  V(kAtan2, "atan2", Binary, Float, \
    std::atan2(a, b), NoKernel(), nullptr, \
    Atan2Vjp(g, a, b)) \
  V(kAnd, "and", Binary, IntegerOrPred, \
    NoKernel(), static_cast<T>(a & b), nullptr, \
    NoGradient()) \
  V(kOr, "or", Binary, IntegerOrPred, \
    NoKernel(), static_cast<T>(a | b), nullptr, \
    NoGradient()) \
  V(kXor, "xor", Binary, IntegerOrPred, \
    NoKernel(), static_cast<T>(a ^ b), nullptr, \
    NoGradient()) \
  V(kShiftLeft, "shift-left", Binary, Integer, \
    NoKernel(), ShiftLeft(a, b), nullptr, \
    NoGradient()) \
  V(kShiftRightLogical, "shift-right-logical", Binary, Integer, \
    NoKernel(), ShiftRightLogical(a, b), nullptr, \
    NoGradient()) \
  V(kShiftRightArithmetic, "shift-right-arithmetic", Binary, Integer, \
    NoKernel(), ShiftRightArithmetic(a, b), nullptr, \
    NoGradient()) \
  V(kReduce, "reduce", Other) \
  V(kDot, "dot", Other) \
  V(kGather, "gather", Other) \
  V(kScatter, "scatter", Other) \
  V(kTuple, "tuple", Other) \
  V(kGetTupleElement, "get-tuple-element", Other) \
  V(kWhile, "while", Other) \
  V(kConditional, "conditional", Other) \
  V(kCall, "call", Other) \
  V(kFusion, "fusion", Other) \
  V(kOptimizationBarrier, "opt-barrier", Other) \
  V(kCustomCall, "custom-call", Other) \
  V(kAfterAll, "after-all", Other) \
  V(kAddDependency, "add-dependency", Other) \
  V(kRngBitGenerator, "rng-bit-generator", Other) \
  V(kPartitionId, "partition-id", Collective) \
  V(kReplicaId, "replica-id", Collective) \
  V(kAllReduce, "all-reduce", Collective) \
  V(kAllGather, "all-gather", Collective) \
  V(kReduceScatter, "reduce-scatter", Collective) \
  V(kAllToAll, "all-to-all", Collective) \
  V(kCollectivePermute, "collective-permute", Collective)
// clang-format on

enum class Opcode : uint8_t {
#define STRATA_HLO_OPCODE_ENUM(e, ...) e,
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

// The element types an elementwise op takes (its row's column).
enum class ElementTypes : uint8_t { kFloat, kNumeric, kInteger, kIntegerOrPred, kNone };
// kNone for opcodes that are not elementwise unary / binary.
ElementTypes ElementTypesOf(Opcode op);
constexpr bool TakesFloats(ElementTypes t) {
  return t == ElementTypes::kFloat || t == ElementTypes::kNumeric;
}
constexpr bool TakesIntegers(ElementTypes t) {
  return t == ElementTypes::kNumeric || t == ElementTypes::kInteger ||
         t == ElementTypes::kIntegerOrPred;
}
constexpr bool TakesPred(ElementTypes t) { return t == ElementTypes::kIntegerOrPred; }
// Whether op takes c64 / c128 operands (XLA's complex arithmetic: +, -, *, /,
// power, negate, abs (to the part type), sign, exp, expm1, log, log1p, sqrt,
// rsqrt, sin, cos, tanh, logistic; compare EQ / NE; select, convert, dot,
// reduce, sort by a comparator, and every op that only moves data).
bool TakesComplex(Opcode op);

enum class Comparison : uint8_t { kEq, kNe, kLt, kLe, kGt, kGe };
// XLA's compare `type=`: kDefault orders as the element type does (IEEE for
// floats: NaN is unordered, -0 == +0); kTotalOrder orders floats as
// -NaN < -inf < ... < -0 < +0 < ... < inf < +NaN (XLA's TOTALORDER, which
// JAX's sort comparators use). Integers have one order either way.
enum class ComparisonType : uint8_t { kDefault, kTotalOrder };
std::string_view ComparisonName(Comparison c);  // "EQ", ...
std::optional<Comparison> ComparisonFromName(std::string_view name);

}  // namespace strata::hlo
