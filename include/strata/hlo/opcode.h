// The one list of program-IR opcodes, one row each. A row is everything
// strata knows of its op; every consumer reads its columns from here and
// no other file lists opcodes by hand.
//
//   V(enum, text name, Other | Collective, types,
//     shape rule, vjp rule, spmd rule, kernel)
//   V(enum, text name, Unary | Binary, types,
//     api, element types, float kernel, integer kernel, vector kernel, vjp)
//
// Every row:
// - kind: Unary / Binary for the elementwise ops, whose shape rule, SPMD
//   rule and kernel are the elementwise ones; Collective for the SPMD ops
//   that talk across partitions; Other for everything else.
// - types: Complex when the op takes c64 / c128 operands (XLA's complex
//   arithmetic, compare EQ / NE, select, convert, dot, reduce, sort by a
//   comparator, and every op that only moves data); AnyType when it also
//   passes tokens along (parameters, tuples, control flow, the ordering
//   ops); else Real.
//
// The Other / Collective columns (the enums below, one value each):
// - shape rule: the family of shape inference (src/hlo/shape_*.cc).
// - vjp rule: the family of reverse-mode rules (src/autograd/vjp_*.cc);
//   NoGradient declares the op non-differentiable, Attached that its lazy
//   node carries its own rule (scan, cond), HloOnly that lazy graphs never
//   hold it (differentiating through it is an Error naming it).
// - spmd rule: how a sharding propagates through it (src/spmd/propagation.cc);
//   None: nothing propagates, the partitioner decides from its operands.
// - kernel: the kernel family that runs it (src/runtime/program.cc); Storage,
//   Loop and Inlined name why an op has no kernel of its own (the executor
//   places it as a view, runs its body, or the passes inline it).
//
// The Unary / Binary columns:
// - api: Api(name) generates the lazy op `Tensor name(x)` / `name(a, b)`
//   (include/strata/lazy/ops.h) and its Python binding `strata.name`, with
//   torch's type promotion (integers to f32 for an op that takes only
//   floats); Custom(name) is such an op written by hand (its semantics go
//   past the row's); Internal() has none (reached through other ops).
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
//
// docs/architecture.md has the recipe for adding a row.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace strata::hlo {

// One row per op, its columns on the lines below it.
// clang-format off
#define STRATA_HLO_OPCODES(V) \
  V(kParameter, "parameter", Other, AnyType, Control, NoGradient, None, Storage) \
  V(kConstant, "constant", Other, Complex, Control, NoGradient, None, Storage) \
  V(kIota, "iota", Other, Real, Control, NoGradient, None, DataMovement) \
  V(kConvert, "convert", Other, Complex, Elementwise, Elementwise, Elementwise, Convert) \
  V(kBitcastConvert, "bitcast-convert", Other, Complex, Elementwise, HloOnly, ElementwiseSameWidth, Convert) \
  V(kBroadcast, "broadcast", Other, Complex, DataMovement, DataMovement, Broadcast, DataMovement) \
  V(kReshape, "reshape", Other, Complex, DataMovement, DataMovement, Reshape, Storage) \
  V(kTranspose, "transpose", Other, Complex, DataMovement, DataMovement, Transpose, DataMovement) \
  V(kCopy, "copy", Other, Complex, DataMovement, DataMovement, Elementwise, DataMovement) \
  V(kSlice, "slice", Other, Complex, DataMovement, DataMovement, KeepDims, DataMovement) \
  V(kDynamicSlice, "dynamic-slice", Other, Complex, DataMovement, Indexing, KeepDims, DataMovement) \
  V(kDynamicUpdateSlice, "dynamic-update-slice", Other, Complex, DataMovement, Indexing, KeepDims, DataMovement) \
  V(kConcatenate, "concatenate", Other, Complex, DataMovement, DataMovement, Concatenate, DataMovement) \
  V(kPad, "pad", Other, Complex, DataMovement, DataMovement, KeepDims, DataMovement) \
  V(kReverse, "reverse", Other, Complex, DataMovement, DataMovement, KeepDims, DataMovement) \
  V(kConvolution, "convolution", Other, Real, Convolution, Convolution, None, Convolution) \
  V(kReduceWindow, "reduce-window", Other, Real, Reduction, ReduceWindow, None, ReduceWindow) \
  V(kSelectAndScatter, "select-and-scatter", Other, Real, Reduction, HloOnly, None, SelectAndScatter) \
  V(kSort, "sort", Other, Complex, Sort, Sort, None, Sort) \
  V(kTopK, "topk", Other, Real, TopK, Sort, None, TopK) \
  V(kSelect, "select", Other, Complex, Elementwise, Elementwise, Elementwise, Elementwise) \
  V(kCompare, "compare", Other, Complex, Elementwise, NoGradient, Elementwise, Elementwise) \
  V(kClamp, "clamp", Other, Real, Elementwise, Elementwise, Elementwise, Elementwise) \
  V(kReal, "real", Other, Complex, Elementwise, HloOnly, None, Complex) \
  V(kImag, "imag", Other, Complex, Elementwise, HloOnly, None, Complex) \
  V(kComplex, "complex", Other, Real, Elementwise, HloOnly, None, Complex) \
  /* elementwise unary: complex, api, types, float kernel, integer kernel, vector kernel, vjp */ \
  V(kNegate, "negate", Unary, Complex, Custom(negative), Numeric, \
    -x, WrapNegate(x), nullptr, \
    Grads(-g)) \
  V(kAbs, "abs", Unary, Complex, Api(abs), Numeric, \
    std::abs(x), IntegerAbs(x), nullptr, \
    Grads(g * sign(x))) \
  V(kSign, "sign", Unary, Complex, Custom(sign), Numeric, \
    FloatSign(x), IntegerSign(x), nullptr, \
    Grads(ZerosLike(x))) \
  V(kExp, "exponential", Unary, Complex, Api(exp), Float, \
    std::exp(x), NoKernel(), ExpFloats, \
    Grads(g * exp(x))) \
  V(kExpm1, "exponential-minus-one", Unary, Complex, Api(expm1), Float, \
    std::expm1(x), NoKernel(), nullptr, \
    Grads(g * exp(x))) \
  V(kLog, "log", Unary, Complex, Api(log), Float, \
    std::log(x), NoKernel(), nullptr, \
    Grads(g / x)) \
  V(kLog1p, "log-plus-one", Unary, Complex, Api(log1p), Float, \
    std::log1p(x), NoKernel(), nullptr, \
    Grads(g / (x + 1.0))) \
  V(kTanh, "tanh", Unary, Complex, Api(tanh), Float, \
    std::tanh(x), NoKernel(), TanhFloats, \
    TanhVjp(g, x)) \
  V(kLogistic, "logistic", Unary, Complex, Api(sigmoid), Float, \
    T(1) / (T(1) + std::exp(-x)), NoKernel(), LogisticFloats, \
    LogisticVjp(g, x)) \
  V(kSqrt, "sqrt", Unary, Complex, Api(sqrt), Float, \
    std::sqrt(x), NoKernel(), nullptr, \
    Grads(g * 0.5 / sqrt(x))) \
  V(kRsqrt, "rsqrt", Unary, Complex, Api(rsqrt), Float, \
    T(1) / std::sqrt(x), NoKernel(), nullptr, \
    Grads(g * -0.5 * rsqrt(x) / x)) \
  V(kSin, "sine", Unary, Complex, Api(sin), Float, \
    std::sin(x), NoKernel(), nullptr, \
    Grads(g * cos(x))) \
  V(kCos, "cosine", Unary, Complex, Api(cos), Float, \
    std::cos(x), NoKernel(), nullptr, \
    Grads(-(g * sin(x)))) \
  V(kErf, "erf", Unary, Real, Api(erf), Float, \
    std::erf(x), NoKernel(), nullptr, \
    ErfVjp(g, x)) \
  V(kTan, "tan", Unary, Real, Api(tan), Float, \
    std::tan(x), NoKernel(), nullptr, \
    Grads(g * (1.0 + tan(x) * tan(x)))) \
  V(kCbrt, "cbrt", Unary, Real, Api(cbrt), Float, \
    std::cbrt(x), NoKernel(), nullptr, \
    Grads(g / (3.0 * cbrt(x) * cbrt(x)))) \
  V(kFloor, "floor", Unary, Real, Custom(floor), Float, \
    std::floor(x), NoKernel(), nullptr, \
    Grads(ZerosLike(x))) \
  V(kCeil, "ceil", Unary, Real, Custom(ceil), Float, \
    std::ceil(x), NoKernel(), nullptr, \
    Grads(ZerosLike(x))) \
  V(kRoundNearestEven, "round-nearest-even", Unary, Real, Internal(), Float, \
    std::nearbyint(x), NoKernel(), nullptr, \
    Grads(ZerosLike(x))) \
  V(kRoundNearestAfz, "round-nearest-afz", Unary, Real, Internal(), Float, \
    std::round(x), NoKernel(), nullptr, \
    Grads(ZerosLike(x))) \
  V(kPopulationCount, "popcnt", Unary, Real, Internal(), Integer, \
    NoKernel(), PopCount(x), nullptr, \
    NoGradient()) \
  V(kCountLeadingZeros, "count-leading-zeros", Unary, Real, Internal(), Integer, \
    NoKernel(), CountLeadingZeros(x), nullptr, \
    NoGradient()) \
  V(kNot, "not", Unary, Real, Custom(logical_not), IntegerOrPred, \
    NoKernel(), BitNot(x), nullptr, \
    NoGradient()) \
  V(kIsFinite, "is-finite", Other, Real, Elementwise, NoGradient, Elementwise, Elementwise) \
  /* elementwise binary: complex, api, types, float kernel, integer kernel, vector kernel, vjp */ \
  V(kAdd, "add", Binary, Complex, Custom(add), Numeric, \
    a + b, WrapAdd(a, b), nullptr, \
    Grads(g, g)) \
  V(kSubtract, "subtract", Binary, Complex, Custom(subtract), Numeric, \
    a - b, WrapSubtract(a, b), nullptr, \
    Grads(g, -g)) \
  V(kMultiply, "multiply", Binary, Complex, Custom(multiply), Numeric, \
    a * b, WrapMultiply(a, b), nullptr, \
    Grads(g * b, g * a)) \
  V(kDivide, "divide", Binary, Complex, Custom(divide), Numeric, \
    a / b, IntegerDivide(a, b), nullptr, \
    DivideVjp(g, a, b)) \
  V(kMaximum, "maximum", Binary, Real, Api(maximum), Numeric, \
    FloatMax(a, b), a > b ? a : b, nullptr, \
    MaxMinVjp(g, lt(a, b), gt(a, b), eq(a, b))) \
  V(kMinimum, "minimum", Binary, Real, Api(minimum), Numeric, \
    FloatMin(a, b), a < b ? a : b, nullptr, \
    MaxMinVjp(g, gt(a, b), lt(a, b), eq(a, b))) \
  V(kPower, "power", Binary, Complex, Custom(pow), Numeric, \
    std::pow(a, b), IntegerPower(a, b), nullptr, \
    PowerVjp(g, a, b)) \
  V(kRemainder, "remainder", Binary, Real, Custom(remainder), Numeric, \
    std::fmod(a, b), IntegerRemainder(a, b), nullptr, \
    RemainderVjp(g, a, b)) \
  V(kAtan2, "atan2", Binary, Real, Api(atan2), Float, \
    std::atan2(a, b), NoKernel(), nullptr, \
    Atan2Vjp(g, a, b)) \
  V(kAnd, "and", Binary, Real, Custom(bitwise_and), IntegerOrPred, \
    NoKernel(), static_cast<T>(a & b), nullptr, \
    NoGradient()) \
  V(kOr, "or", Binary, Real, Custom(bitwise_or), IntegerOrPred, \
    NoKernel(), static_cast<T>(a | b), nullptr, \
    NoGradient()) \
  V(kXor, "xor", Binary, Real, Custom(bitwise_xor), IntegerOrPred, \
    NoKernel(), static_cast<T>(a ^ b), nullptr, \
    NoGradient()) \
  V(kShiftLeft, "shift-left", Binary, Real, Internal(), Integer, \
    NoKernel(), ShiftLeft(a, b), nullptr, \
    NoGradient()) \
  V(kShiftRightLogical, "shift-right-logical", Binary, Real, Internal(), Integer, \
    NoKernel(), ShiftRightLogical(a, b), nullptr, \
    NoGradient()) \
  V(kShiftRightArithmetic, "shift-right-arithmetic", Binary, Real, Internal(), Integer, \
    NoKernel(), ShiftRightArithmetic(a, b), nullptr, \
    NoGradient()) \
  V(kReduce, "reduce", Other, Complex, Reduction, Reduction, Reduce, Reduce) \
  V(kDot, "dot", Other, Complex, Reduction, Reduction, Dot, Dot) \
  V(kGather, "gather", Other, Complex, Indexing, Indexing, Gather, Gather) \
  V(kScatter, "scatter", Other, Complex, Indexing, Indexing, KeepDims, Scatter) \
  V(kTuple, "tuple", Other, AnyType, Control, Identity, Tuple, Storage) \
  V(kGetTupleElement, "get-tuple-element", Other, AnyType, Control, HloOnly, GetTupleElement, Storage) \
  V(kWhile, "while", Other, AnyType, Control, Attached, PassThrough, Loop) \
  V(kConditional, "conditional", Other, AnyType, Control, Attached, None, Conditional) \
  V(kCall, "call", Other, AnyType, Control, HloOnly, None, Inlined) \
  V(kFusion, "fusion", Other, Complex, Control, HloOnly, None, Fusion) \
  V(kOptimizationBarrier, "opt-barrier", Other, AnyType, Control, Identity, PassThrough, Storage) \
  V(kCustomCall, "custom-call", Other, Complex, Control, HloOnly, CustomCall, CustomCall) \
  V(kAfterAll, "after-all", Other, AnyType, Control, HloOnly, None, Token) \
  V(kAddDependency, "add-dependency", Other, AnyType, Control, HloOnly, None, Storage) \
  V(kRngBitGenerator, "rng-bit-generator", Other, Real, Control, NoGradient, None, Rng) \
  V(kCholesky, "cholesky", Other, Real, Linalg, HloOnly, None, Linalg) \
  V(kTriangularSolve, "triangular-solve", Other, Real, Linalg, HloOnly, None, Linalg) \
  /* XLA's ops that strata runs as others (src/hlo/expand_*.cc): */ \
  V(kBatchNormTraining, "batch-norm-training", Other, Real, Expanded, HloOnly, None, Expanded) \
  V(kBatchNormInference, "batch-norm-inference", Other, Real, Expanded, HloOnly, None, Expanded) \
  V(kBatchNormGrad, "batch-norm-grad", Other, Real, Expanded, HloOnly, None, Expanded) \
  V(kMap, "map", Other, Complex, Expanded, HloOnly, None, Expanded) \
  V(kReducePrecision, "reduce-precision", Other, Real, Expanded, HloOnly, None, Expanded) \
  V(kCopyStart, "copy-start", Other, Complex, Expanded, HloOnly, None, Expanded) \
  V(kCopyDone, "copy-done", Other, Complex, Expanded, HloOnly, None, Expanded) \
  V(kPartitionId, "partition-id", Collective, Real, Collective, NoGradient, None, Collective) \
  V(kReplicaId, "replica-id", Collective, Real, Collective, NoGradient, None, Collective) \
  V(kAllReduce, "all-reduce", Collective, Complex, Collective, HloOnly, None, Collective) \
  V(kAllGather, "all-gather", Collective, Complex, Collective, HloOnly, None, Collective) \
  V(kReduceScatter, "reduce-scatter", Collective, Complex, Collective, HloOnly, None, Collective) \
  V(kAllToAll, "all-to-all", Collective, Complex, Collective, HloOnly, None, Collective) \
  V(kCollectivePermute, "collective-permute", Collective, Complex, Collective, HloOnly, None, Collective) \
  V(kAllReduceStart, "all-reduce-start", Collective, Complex, Collective, HloOnly, None, Collective) \
  V(kAllReduceDone, "all-reduce-done", Collective, Complex, Collective, HloOnly, None, Collective) \
  V(kAllGatherStart, "all-gather-start", Collective, Complex, Collective, HloOnly, None, Collective) \
  V(kAllGatherDone, "all-gather-done", Collective, Complex, Collective, HloOnly, None, Collective) \
  V(kCollectivePermuteStart, "collective-permute-start", Collective, Complex, Collective, HloOnly, None, Expanded) \
  V(kCollectivePermuteDone, "collective-permute-done", Collective, Complex, Collective, HloOnly, None, Expanded)
// clang-format on

enum class Opcode : uint8_t {
#define STRATA_HLO_OPCODE_ENUM(e, ...) e,
  STRATA_HLO_OPCODES(STRATA_HLO_OPCODE_ENUM)
#undef STRATA_HLO_OPCODE_ENUM
};
#define STRATA_HLO_OPCODE_ONE(...) +1
inline constexpr int kOpcodeCount = 0 STRATA_HLO_OPCODES(STRATA_HLO_OPCODE_ONE);
#undef STRATA_HLO_OPCODE_ONE

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
// The types column: whether op takes c64 / c128 operands, and tokens.
bool TakesComplex(Opcode op);
bool TakesTokens(Opcode op);

// The shape-rule column: which family of shape inference checks the op.
enum class ShapeRule : uint8_t {
  kElementwise,
  kDataMovement,
  kReduction,
  kConvolution,
  kSort,
  kTopK,
  kIndexing,
  kControl,
  kCollective,
  kLinalg,    // cholesky, triangular-solve (shape_linalg.cc)
  kExpanded,  // XLA's ops strata runs as others (shape_expanded.cc)
};
ShapeRule ShapeRuleOf(Opcode op);

// The vjp column: where the op's reverse-mode rule lives.
enum class VjpRule : uint8_t {
  kElementwise,
  kDataMovement,
  kReduction,
  kIndexing,
  kConvolution,
  kReduceWindow,
  kSort,
  kIdentity,    // output k is operand k (tuple, opt-barrier)
  kNoGradient,  // declared non-differentiable: no gradient flows through
  kAttached,    // its lazy node carries its own rule (a scan's while, a cond)
  kHloOnly,     // lazy graphs never hold it: differentiating it is an Error
};
VjpRule VjpRuleOf(Opcode op);

// The spmd column: how a sharding propagates through the op.
enum class SpmdRule : uint8_t {
  kElementwise,           // operands and result of one shape share it
  kElementwiseSameWidth,  // as elementwise when the element width is kept
  kBroadcast,
  kTranspose,
  kReshape,
  kTuple,
  kGetTupleElement,
  kPassThrough,  // result leaf k is operand leaf k (while, opt-barrier)
  kReduce,
  kDot,
  kKeepDims,  // dims the op keeps whole keep their split (slice, pad, ...)
  kConcatenate,
  kGather,
  kCustomCall,  // by target (attention)
  kNone,        // nothing propagates: the partitioner decides
};
SpmdRule SpmdRuleOf(Opcode op);

// The kernel column: the kernel family that runs the op, or why it has none.
enum class Kernel : uint8_t {
  kElementwise,
  kConvert,
  kComplex,
  kDataMovement,
  kReduce,
  kDot,
  kConvolution,
  kReduceWindow,
  kSelectAndScatter,
  kConditional,
  kTopK,
  kSort,
  kGather,
  kScatter,
  kRng,
  kFusion,
  kCustomCall,
  kToken,
  kCollective,
  kStorage,  // none: the executor places it (a parameter, a view, a tuple)
  kLoop,     // none: the executor runs its body
  kInlined,  // none: the passes inline it before programs are built
  kLinalg,
  kExpanded,  // none: ExpandXlaOps (hlo/expand.h) rewrites it into other ops first
};
Kernel KernelOf(Opcode op);
constexpr bool HasKernel(Kernel k) {
  return k != Kernel::kStorage && k != Kernel::kLoop && k != Kernel::kInlined &&
         k != Kernel::kExpanded;
}

// The api column of an elementwise row: the lazy op's and Python binding's
// name ("" for Internal() rows and for opcodes that are not elementwise
// unary / binary), and whether the row generates it (Api) or it is written
// by hand (Custom).
std::string_view ApiNameOf(Opcode op);
bool ApiIsGenerated(Opcode op);

enum class Comparison : uint8_t { kEq, kNe, kLt, kLe, kGt, kGe };
// XLA's compare `type=`: kDefault orders as the element type does (IEEE for
// floats: NaN is unordered, -0 == +0); kTotalOrder orders floats as
// -NaN < -inf < ... < -0 < +0 < ... < inf < +NaN (XLA's TOTALORDER, which
// JAX's sort comparators use). Integers have one order either way.
enum class ComparisonType : uint8_t { kDefault, kTotalOrder };
std::string_view ComparisonName(Comparison c);  // "EQ", ...
std::optional<Comparison> ComparisonFromName(std::string_view name);

}  // namespace strata::hlo
