// Kernel construction: at compile time each instruction becomes a closure
// with its shapes and attributes baked in; at run time it gets pointers to
// its operands' array leaves, its outputs and its scratch space.
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <type_traits>

#include "strata/core/error.h"
#include "strata/hlo/module.h"
#include "strata/runtime/thread_pool.h"

namespace strata::runtime {

class AsyncCollectives;
class Communicator;
class KernelProfile;

// What one run of a program knows about where it runs: its partition of an
// SPMD program and the communicator its collectives go through (none for a
// single-device run).
struct RunContext {
  int64_t partition = 0;
  int64_t num_partitions = 1;
  Communicator* communicator = nullptr;
  KernelProfile* profile = nullptr;  // the client's, when it profiles
  // The run's started collectives (async_collectives.h): set whenever
  // there is a communicator.
  AsyncCollectives* async = nullptr;
};

struct KernelArgs {
  const uint8_t* const* operands;  // array leaves of the operands, in order
  uint8_t* const* outputs;         // array leaves of the result
  uint8_t* scratch;                // KernelInfo::scratch_bytes of 64-byte aligned space
  const RunContext* context = nullptr;
};

using Kernel = std::function<void(const KernelArgs&)>;

struct KernelInfo {
  Kernel run;
  int64_t scratch_bytes = 0;
};

// A compiled scalar computation (a reduce or scatter to_apply). bind(arena)
// returns a callable that runs it once: args and results point at one
// element each. arena_bytes of scratch must be passed to bind.
using ScalarCall = std::function<void(const uint8_t* const* args, uint8_t* const* results)>;
struct ScalarFunction {
  std::function<ScalarCall(uint8_t* arena)> bind;
  int64_t arena_bytes = 0;
};

// Elements per parallel chunk for cheap elementwise loops.
inline constexpr int64_t kElementwiseGrain = 1 << 15;

// Elementwise, reduce and fusion kernels come in one variant per instruction
// set (isa.h); these build the one KernelIsa() names.
KernelInfo MakeElementwiseKernel(const hlo::Instruction& inst, ThreadPool& pool);
KernelInfo MakeConvertKernel(const hlo::Instruction& inst, ThreadPool& pool);
// complex.cc: real, imag, complex, and the elementwise ops, compares and
// selects of c64 / c128 operands (RunsOnComplexKernels says which).
bool RunsOnComplexKernels(const hlo::Instruction& inst);
KernelInfo MakeComplexKernel(const hlo::Instruction& inst, ThreadPool& pool);
KernelInfo MakeDataMovementKernel(const hlo::Instruction& inst, ThreadPool& pool);
KernelInfo MakeReduceKernel(const hlo::Instruction& inst, ThreadPool& pool,
                            ScalarFunction to_apply);
KernelInfo MakeDotKernel(const hlo::Instruction& inst, ThreadPool& pool);
KernelInfo MakeConvolutionKernel(const hlo::Instruction& inst, ThreadPool& pool);
KernelInfo MakeReduceWindowKernel(const hlo::Instruction& inst, ThreadPool& pool,
                                  ScalarFunction to_apply);
KernelInfo MakeSelectAndScatterKernel(const hlo::Instruction& inst, ThreadPool& pool,
                                      ScalarFunction select, ScalarFunction scatter);
// sort (sort.cc): a stable merge sort per row, native for a one-compare
// comparator; any other is compiled (only then) and called per comparison.
KernelInfo MakeSortKernel(const hlo::Instruction& inst, ThreadPool& pool,
                          const std::function<ScalarFunction()>& compile_comparator);
// topk (sort.cc): a partial sort of each row's positions.
KernelInfo MakeTopKKernel(const hlo::Instruction& inst, ThreadPool& pool);
KernelInfo MakeGatherKernel(const hlo::Instruction& inst, ThreadPool& pool);
KernelInfo MakeScatterKernel(const hlo::Instruction& inst, ThreadPool& pool,
                             ScalarFunction to_apply);
KernelInfo MakeRngKernel(const hlo::Instruction& inst, ThreadPool& pool);
// cholesky and triangular-solve (linalg.cc).
KernelInfo MakeLinalgKernel(const hlo::Instruction& inst, ThreadPool& pool);
// The special functions of XLA's client library (special_functions.cc).
KernelInfo MakeLibraryCallKernel(const hlo::Instruction& inst, ThreadPool& pool);
// partition-id, replica-id and the collectives (collectives.cc): data goes
// through the run's communicator.
KernelInfo MakeCollectiveKernel(const hlo::Instruction& inst, ThreadPool& pool);

// strata.attention and strata.attention_grad (hlo/attention.h, attention.cc):
// attention that never writes its [B, H, S, S] scores, built per instruction
// set.
KernelInfo MakeAttentionKernel(const hlo::Instruction& inst, ThreadPool& pool);

// Whether `inst` may write its output over operand `index`'s storage when
// that operand is dead afterwards (same size, read-before-write per element).
bool CanRunInPlace(const hlo::Instruction& inst, int64_t index);

// A broadcast of a rank-0 value. Elementwise kernels read such an operand
// as a scalar (its first element), so when every user of one accepts that
// (AcceptsScalarBroadcast: binary ops, compare, select's values) the
// planner never materializes it: its slot is the scalar's.
bool IsScalarBroadcast(const hlo::Instruction& inst);
bool AcceptsScalarBroadcast(const hlo::Instruction& user, int64_t operand);

// An integer index operand (one element of `dtype`) as int64; unsigned
// values past INT64_MAX saturate, as XLA compares them unsigned.
int64_t ReadIndex(const uint8_t* p, DType dtype);

// Runs a loop fusion (fusion.cc): the fused computation's elementwise ops in
// blocks that stay in cache, so its intermediates never reach memory.
KernelInfo MakeFusionKernel(const hlo::Instruction& inst, ThreadPool& pool);
// Whether the fused loop runs `fusion`: a kLoop fusion with an array result
// of rank <= 8, or a tuple of results of one shape up to the element type (a
// multi-output fusion: each block computes them all), computing in f32 or
// f64 (FusionComputeType): parameters, constants, broadcasts, row
// reductions, compares, selects and elementwise ops of that type, and index
// maps (transpose, slice, reverse, reshape) over its parameters, in the
// forms MakeFusionKernel accepts. An f32 fusion may also read, select and
// write bf16 values and convert between f32 and bf16. Any other fusion
// (XLA's other kinds, results of different shapes, a transpose of a value it
// computes, integer ops) the compiler runs as a call of its computation.
bool FusedKernelRuns(const hlo::Instruction& fusion, ThreadPool& pool);
// The dims every output of a fusion has, with the first output's element
// type: its array result, or the elements of its tuple result when they
// share dims. None otherwise.
inline std::optional<Shape> FusionOutputShape(const hlo::Instruction& fusion) {
  const Shape& shape = fusion.shape();
  if (shape.is_array()) return shape;
  if (!shape.is_tuple() || shape.tuple_size() == 0) return std::nullopt;
  for (const Shape& element : shape.tuple_shapes()) {
    if (!element.is_array() || element.dims() != shape.tuple_shape(0).dims()) return std::nullopt;
  }
  return shape.tuple_shape(0);
}
// The dims a fused loop runs over: FusionOutputShape's, or, for a fusion
// whose result is one row reduction (its computation's root a reduce over
// trailing dims), the reduced operand's dims with the result's element type:
// each block reduces a row and writes one value.
inline std::optional<Shape> FusionLoopShape(const hlo::Instruction& fusion) {
  const hlo::Instruction* root = fusion.called.empty() ? nullptr : fusion.called[0]->root();
  if (root && root->opcode() == hlo::Opcode::kReduce && fusion.shape().is_array() &&
      root->operand(0)->shape().is_array()) {
    return root->operand(0)->shape().WithDType(fusion.shape().dtype());
  }
  return FusionOutputShape(fusion);
}
// What a fused loop computes in: f64 when every output is f64, f32 when
// every output is f32 or bf16; none for any other mix.
inline std::optional<DType> FusionComputeType(const hlo::Instruction& fusion) {
  bool f64 = true, f32 = true;
  for (const Shape& leaf : fusion.shape().Leaves()) {
    if (!leaf.is_array()) return std::nullopt;
    f64 = f64 && leaf.dtype() == DType::kF64;
    f32 = f32 && (leaf.dtype() == DType::kF32 || leaf.dtype() == DType::kBF16);
  }
  if (f64) return DType::kF64;
  if (f32) return DType::kF32;
  return std::nullopt;
}
// A loop fusion built by the passes (no XLA kind) with outputs of one shape
// and a compute type, and no reduction inside: the elementwise fusions
// MergeSiblingFusions and FuseProducers combine.
inline bool IsPlainLoopFusion(const hlo::Instruction& inst) {
  if (inst.opcode() != hlo::Opcode::kFusion || !inst.fusion_kind.empty() ||
      inst.called.size() != 1 || !FusionOutputShape(inst) || !FusionComputeType(inst)) {
    return false;
  }
  for (const auto& i : inst.called[0]->instructions()) {
    if (i->opcode() == hlo::Opcode::kReduce) return false;
  }
  return true;
}
// Whether a fusion reads operand `index` element by element (not through a
// broadcast or another index map), so its result may overwrite that operand.
bool FusionReadsElementwise(const hlo::Instruction& fusion, int64_t index);
// The same for every operand at once, in one pass over the fused
// computation: what callers that ask about each operand use (a fusion of
// many operands would otherwise take quadratic time).
std::vector<bool> FusionElementwiseOperands(const hlo::Instruction& fusion);

// Copies an N-d strided view: dst[i] = src[i] for every index i < dims, with
// per-dimension strides in elements (may be negative or zero).
void CopyStrided(int64_t element_size, std::span<const int64_t> dims, const uint8_t* src,
                 std::span<const int64_t> src_strides, uint8_t* dst,
                 std::span<const int64_t> dst_strides, ThreadPool* pool);

[[noreturn]] inline void UnsupportedType(const hlo::Instruction& inst, DType dtype) {
  Fail("[runtime] {} ({}) on {} is not supported by the CPU runtime",
       hlo::OpcodeName(inst.opcode()), inst.name(), DTypeName(dtype));
}

// Integer add and multiply wrap (two's complement), as in XLA; signed
// overflow would be undefined behaviour in C++.
template <typename T>
T WrappingAdd(T a, T b) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    using U = std::common_type_t<std::make_unsigned_t<T>, unsigned>;  // no promotion to int
    return static_cast<T>(U(static_cast<std::make_unsigned_t<T>>(a)) +
                          U(static_cast<std::make_unsigned_t<T>>(b)));
  } else {
    return static_cast<T>(a + b);
  }
}
template <typename T>
T WrappingMultiply(T a, T b) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    using U = std::common_type_t<std::make_unsigned_t<T>, unsigned>;  // no promotion to int
    return static_cast<T>(U(static_cast<std::make_unsigned_t<T>>(a)) *
                          U(static_cast<std::make_unsigned_t<T>>(b)));
  } else {
    return static_cast<T>(a * b);
  }
}

template <typename T>
struct TypeTag {
  using type = T;
};

// f16 and bf16 elements as kernels see them: bit patterns, with no
// arithmetic (the widening pass computes in f32), so a u16 kernel can never
// be handed one by mistake.
enum class HalfBits : uint16_t {};

// A c128 element as kernels that only move data see it (c64 moves as a
// uint64_t): copy loops pick their word by element size, 1 to 16 bytes.
struct Element16 {
  uint64_t low, high;
};

// Calls f(TypeTag<T>{}) for the C++ type of a real or integer dtype (f16 /
// bf16 as HalfBits). Complex types and tokens have kernels of their own
// (complex.cc); the compiler routes them there before any kernel dispatches.
template <typename F>
decltype(auto) DispatchAnyType(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kPred:
      return f(TypeTag<bool>{});
    case DType::kS8:
      return f(TypeTag<int8_t>{});
    case DType::kS16:
      return f(TypeTag<int16_t>{});
    case DType::kS32:
      return f(TypeTag<int32_t>{});
    case DType::kS64:
      return f(TypeTag<int64_t>{});
    case DType::kU8:
      return f(TypeTag<uint8_t>{});
    case DType::kU16:
      return f(TypeTag<uint16_t>{});
    case DType::kU32:
      return f(TypeTag<uint32_t>{});
    case DType::kU64:
      return f(TypeTag<uint64_t>{});
    case DType::kF16:
    case DType::kBF16:
      return f(TypeTag<HalfBits>{});
    case DType::kF32:
      return f(TypeTag<float>{});
    case DType::kF64:
      return f(TypeTag<double>{});
    case DType::kC64:
    case DType::kC128:
    case DType::kToken:
      break;
  }
  Fail("[runtime] no real-valued kernel for {}", DTypeName(dtype));
}

// DispatchAnyType for kernels that compute: f16 / bf16 (which the widening
// pass computes in f32 before any kernel sees them) are an Error naming inst.
template <typename F>
decltype(auto) DispatchArithmeticType(const hlo::Instruction& inst, DType dtype, F&& f) {
  return DispatchAnyType(dtype, [&](auto tag) -> decltype(f(TypeTag<float>{})) {
    if constexpr (std::is_same_v<typename decltype(tag)::type, HalfBits>) {
      UnsupportedType(inst, dtype);
    } else {
      return f(tag);
    }
  });
}

}  // namespace strata::runtime
