// Loop fusions: a fused computation of elementwise ops (built by the
// FuseElementwise pass) runs in blocks of kBlock elements. Each op of a block
// writes a small buffer that stays in L1; only the fusion's operands are read
// from memory and only its result is written, where the unfused ops would
// each read and write a whole tensor.
//
// Inside a block every value is the fusion's float type T (a compare gives
// 0 or 1, a select tests != 0). A value is a pointer and whether it varies
// per element: operands read elementwise are used in place, an operand read
// through a broadcast or another index map (a transposed, sliced or
// reversed operand: fusion_view.h) is gathered into a buffer through its
// strided view, and values that are the same for every
// element (constants, broadcast scalars, ops over only those) are computed
// once per run.
//
// A fusion may also hold reductions over its trailing dims (a "row": the
// softmax's max and sum, a norm's sum of squares) whose results are only
// broadcast back along the row inside the fusion. It then runs one row per
// block: a reduction gives one value for the block, read like a uniform
// value by the ops after it, so a softmax reads its input once and writes
// its result once.
//
// An f32 fusion may also hold bf16 values (a mixed-precision step's
// activations): inside a block such a value is an f32 that a bf16 holds
// exactly. A bf16 operand is widened as it is read, a convert to bf16
// rounds (kRound), a convert back is nothing, and a bf16 output keeps the
// top half of each f32. So a chain of bf16 ops, each computed in f32 and
// rounded once (passes/widen_half.cc), runs as one loop over bf16 memory.
//
// Compiled once per instruction set (isa.h).
#include <algorithm>
#include <cstring>
#include <memory>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "kernels/elementwise_ops.h"
#include "kernels/fusion_view.h"
#include "kernels/isa_kernels.h"
#include "kernels/reduce_ops.h"
#include "strata/hlo/literal.h"

STRATA_ISA_BEGIN
namespace strata::runtime::STRATA_ISA_NAMESPACE {
namespace {

using hlo::Instruction;
using hlo::Opcode;
using namespace elementwise;  // NOLINT: the scalar op semantics

constexpr int64_t kBlock = 512;

enum class Kind : uint8_t {
  kElementwise,
  kScalar,
  kGather,
  kConstant,
  kUnary,
  kBinary,
  kCompare,
  kSelect,
  kReduce,        // over the block (a row); one value per row
  kRowBroadcast,  // a per-row value along the row (or reshaped): the same value
  kRowParameter,  // an operand with one element per row
  kRound,         // a convert to bf16: rounded to the nearest bf16, kept as T
  kIdentity,      // a convert from bf16 (the value is already T)
};

// How a fusion operand's elements are stored.
enum class Storage : uint8_t { kValue, kPred, kBf16 };

using hlo::BFloat16ToFloat;

// f rounded to the nearest bf16, as an f32 (the convert kernel's rounding).
inline float RoundToBf16(float f) { return BFloat16ToFloat(hlo::FloatToBFloat16(f)); }

struct Op {
  Kind kind;
  Opcode opcode = Opcode::kAdd;
  hlo::Comparison direction = hlo::Comparison::kEq;
  int64_t in[3] = {-1, -1, -1};       // earlier ops' values
  int64_t operand = -1;               // fusion operand (kElementwise, kScalar, kGather)
  Storage storage = Storage::kValue;  // that operand's (pred: 0 / 1; bf16: widened)
  double constant = 0;                // kConstant's value, kReduce's init
  // kGather: the operand read through index maps (fusion_view.h): dims
  // refining the fusion's, the operand stride along each (0: broadcast,
  // negative: reversed) and the element read at index 0.
  std::vector<int64_t> dims = {};
  std::vector<int64_t> strides = {};
  int64_t offset = 0;
  bool uniform = false;  // the same for every element
};

// A value during one block: `ptr[i]` if it varies, else `ptr[0]`.
template <typename T>
struct Value {
  const T* ptr;
  bool varies;
};

template <typename T, typename F>
void Map2(Value<T> a, Value<T> b, T* out, int64_t m, F f) {
  if (a.varies && b.varies) {
    for (int64_t i = 0; i < m; ++i) out[i] = f(a.ptr[i], b.ptr[i]);
  } else if (a.varies) {
    const T y = b.ptr[0];
    for (int64_t i = 0; i < m; ++i) out[i] = f(a.ptr[i], y);
  } else {
    const T x = a.ptr[0];
    for (int64_t i = 0; i < m; ++i) out[i] = f(x, b.ptr[i]);
  }
}

// Each op in a loop of its own, from its row in the opcode list (the f32
// array routine where the row has one).
template <typename T>
void RunUnaryBlock(Opcode op, const T* x, T* out, int64_t m) {
  if constexpr (std::is_same_v<T, float>) {
    if (auto* vector = VectorKernelOf(op)) return vector(x, out, m);
  }
  WithUnaryKernel<T>(op, [&](auto kernel) {
    for (int64_t i = 0; i < m; ++i) out[i] = kernel(x[i]);
  });
}

// A compare as 0 / 1, the direction chosen once per block so the loop is
// one the compiler vectorizes (not a switch per element).
template <typename T>
void RunCompareBlock(hlo::Comparison c, Value<T> a, Value<T> b, T* out, int64_t m) {
  auto as_value = [](bool x) { return x ? T(1) : T(0); };
  switch (c) {
    case hlo::Comparison::kEq:
      return Map2(a, b, out, m, [&](T x, T y) { return as_value(x == y); });
    case hlo::Comparison::kNe:
      return Map2(a, b, out, m, [&](T x, T y) { return as_value(x != y); });
    case hlo::Comparison::kLt:
      return Map2(a, b, out, m, [&](T x, T y) { return as_value(x < y); });
    case hlo::Comparison::kLe:
      return Map2(a, b, out, m, [&](T x, T y) { return as_value(x <= y); });
    case hlo::Comparison::kGt:
      return Map2(a, b, out, m, [&](T x, T y) { return as_value(x > y); });
    case hlo::Comparison::kGe:
      return Map2(a, b, out, m, [&](T x, T y) { return as_value(x >= y); });
  }
}

template <typename T>
void RunBinaryBlock(Opcode op, Value<T> a, Value<T> b, T* out, int64_t m) {
  WithBinaryKernel<T>(op, [&](auto kernel) { Map2(a, b, out, m, kernel); });
}

// Where each element of [lo, lo + m) of the result reads an operand seen
// through index maps: offset plus the sum over `dims` of index * stride.
template <typename T>
void Gather(const uint8_t* src, Storage storage, const std::vector<int64_t>& dims,
            const std::vector<int64_t>& strides, int64_t offset, int64_t lo, int64_t m, T* out) {
  const bool pred = storage == Storage::kPred;
  const int64_t rank = static_cast<int64_t>(dims.size());
  int64_t index[8] = {0};
  int64_t rest = lo;
  for (int64_t d = rank - 1; d >= 0; --d) {
    index[d] = rest % dims[d];
    rest /= dims[d];
    offset += index[d] * strides[d];
  }
  const T* values = reinterpret_cast<const T*>(src);
  const bool* flags = reinterpret_cast<const bool*>(src);
  const uint16_t* halves = reinterpret_cast<const uint16_t*>(src);
  const int64_t inner = rank == 0 ? 1 : dims[rank - 1];
  const int64_t inner_stride = rank == 0 ? 0 : strides[rank - 1];
  for (int64_t i = 0; i < m;) {
    // The rest of the innermost row in one run: a fill, a copy or strided.
    const int64_t run = std::min(m - i, rank == 0 ? m : inner - index[rank - 1]);
    T* o = out + i;
    if (storage == Storage::kBf16 && inner_stride == 1) {  // a run the compiler vectorizes
      const uint16_t* h = halves + offset;
      for (int64_t j = 0; j < run; ++j) o[j] = static_cast<T>(BFloat16ToFloat(h[j]));
    } else if (storage == Storage::kBf16) {
      for (int64_t j = 0; j < run; ++j)
        o[j] = static_cast<T>(BFloat16ToFloat(halves[offset + j * inner_stride]));
    } else if (pred && inner_stride == 1) {
      const uint8_t* bytes = reinterpret_cast<const uint8_t*>(flags + offset);
      for (int64_t j = 0; j < run; ++j) o[j] = static_cast<T>(bytes[j] != 0);
    } else if (pred) {
      for (int64_t j = 0; j < run; ++j) o[j] = flags[offset + j * inner_stride] ? T(1) : T(0);
    } else if (inner_stride == 0) {
      std::fill_n(o, run, values[offset]);
    } else if (inner_stride == 1) {
      std::memcpy(o, values + offset, run * sizeof(T));
    } else {
      for (int64_t j = 0; j < run; ++j) o[j] = values[offset + j * inner_stride];
    }
    i += run;
    if (rank == 0) break;
    offset += run * inner_stride;
    index[rank - 1] += run;
    for (int64_t d = rank - 1; d > 0 && index[d] == dims[d]; --d) {  // carry
      offset -= index[d] * strides[d];
      index[d] = 0;
      ++index[d - 1];
      offset += strides[d - 1];
    }
  }
}

template <typename T>
class FusedLoop {
 public:
  // row: the elements a reduction covers (0 without reductions).
  // outputs: the op each output of the fusion is (one, or a tuple's).
  // half_outputs[j]: output j is bf16.
  // row_output: the one output is a row reduction, one value per row.
  FusedLoop(std::vector<Op> ops, std::vector<int64_t> outputs, std::vector<bool> half_outputs,
            std::vector<int64_t> dims, int64_t row, bool row_output, ThreadPool& pool)
      : ops_(std::move(ops)),
        outputs_(std::move(outputs)),
        half_outputs_(std::move(half_outputs)),
        dims_(std::move(dims)),
        row_(row),
        row_output_(row_output),
        pool_(&pool) {
    n_ = 1;
    for (int64_t d : dims_) n_ *= d;
    AssignSlots();
  }

  void operator()(const KernelArgs& args) const {
    // Values the same for every element, once per run.
    std::vector<T> uniform(ops_.size(), T(0));
    for (size_t k = 0; k < ops_.size(); ++k) {
      if (ops_[k].uniform) uniform[k] = Uniform(ops_[k], uniform, args);
    }
    // One output that is the last op writes its blocks in place. Otherwise
    // each block's outputs are copied out once the whole block is computed:
    // an output may share its buffer with an operand the block still reads.
    const bool in_place = outputs_.size() == 1 && outputs_[0] + 1 == std::ssize(ops_) &&
                          !half_outputs_[0] && !row_output_;
    bool all_uniform = true;
    for (int64_t k : outputs_) all_uniform = all_uniform && ops_[k].uniform;
    if (all_uniform) {
      for (size_t j = 0; j < outputs_.size(); ++j)
        Store(args, j, 0, n_, {&uniform[outputs_[j]], false});
      return;
    }
    // Blocks of kBlock elements, or one row each.
    const int64_t block = row_ > 0 ? row_ : kBlock;
    auto run_blocks = [&](int64_t lo, int64_t hi) {  // elements [lo, hi)
      auto buffers = std::make_unique<T[]>(slots_ * block);
      std::vector<Value<T>> values(ops_.size());
      for (int64_t at = lo; at < hi; at += block) {
        const int64_t m = std::min(block, hi - at);
        for (size_t k = 0; k < ops_.size(); ++k) {
          T* buffer = in_place && k + 1 == ops_.size() ? reinterpret_cast<T*>(args.outputs[0]) + at
                      : slot_[k] < 0                   ? nullptr
                                                       : &buffers[slot_[k] * block];
          values[k] = Block(ops_[k], k, values, uniform, args, at, m, buffer);
        }
        for (size_t j = 0; j < outputs_.size(); ++j) Store(args, j, at, m, values[outputs_[j]]);
      }
    };
    if (row_ == 0) {
      pool_->ParallelFor(n_, kElementwiseGrain / 2, run_blocks);
    } else {
      pool_->ParallelFor(n_ / row_, std::max<int64_t>(1, kElementwiseGrain / 2 / row_),
                         [&](int64_t lo, int64_t hi) { run_blocks(lo * row_, hi * row_); });
    }
  }

 private:
  // Gives each op that is not uniform a block buffer, shared with ops whose
  // values are dead by then: a value lives until the last op that reads it
  // (or, through an op that passes it on as its own value, reads that one),
  // an output until the end. A fusion of many ops then needs only as many
  // buffers as it holds values at once.
  void AssignSlots() {
    const int64_t n = std::ssize(ops_);
    std::vector<int64_t> last(n);
    for (int64_t k = 0; k < n; ++k) last[k] = k;
    for (int64_t k : outputs_) last[k] = n;
    for (int64_t k = n - 1; k >= 0; --k) {
      const bool passes_on = ops_[k].kind == Kind::kIdentity || ops_[k].kind == Kind::kRowBroadcast;
      for (int64_t j : ops_[k].in) {
        if (j >= 0) last[j] = std::max(last[j], passes_on ? last[k] : k);
      }
    }
    std::vector<std::vector<int64_t>> released(n + 1);
    std::vector<int64_t> free;
    slot_.assign(n, -1);
    for (int64_t k = 0; k < n; ++k) {
      for (int64_t j : released[k]) free.push_back(slot_[j]);
      if (ops_[k].uniform) continue;
      if (free.empty()) {
        slot_[k] = slots_++;
      } else {
        slot_[k] = free.back();
        free.pop_back();
      }
      released[std::min(last[k] + 1, n)].push_back(k);
    }
  }

  // Output j's elements [at, at + m) from v: a bf16 output keeps each
  // value's top half (it holds a bf16 exactly).
  void Store(const KernelArgs& args, size_t j, int64_t at, int64_t m, const Value<T>& v) const {
    if (row_output_) {  // the block is one row, v its reduction
      T* out = reinterpret_cast<T*>(args.outputs[j]);
      out[at / row_] = v.ptr[0];
      return;
    }
    if (half_outputs_[j]) {
      if constexpr (std::is_same_v<T, float>) {
        uint16_t* out = reinterpret_cast<uint16_t*>(args.outputs[j]) + at;
        for (int64_t i = 0; i < m; ++i) {
          uint32_t bits;
          std::memcpy(&bits, v.ptr + (v.varies ? i : 0), sizeof bits);
          out[i] = static_cast<uint16_t>(bits >> 16);
        }
      }
      return;
    }
    T* out = reinterpret_cast<T*>(args.outputs[j]) + at;
    if (!v.varies) {
      std::fill_n(out, m, v.ptr[0]);
    } else if (v.ptr != out) {
      std::copy_n(v.ptr, m, out);
    }
  }

  // Element i of operand `op.operand`, as T.
  static T Load(const Op& op, const KernelArgs& args, int64_t i) {
    const uint8_t* src = args.operands[op.operand];
    switch (op.storage) {
      case Storage::kPred:
        return src[i] ? T(1) : T(0);
      case Storage::kBf16:
        return static_cast<T>(BFloat16ToFloat(reinterpret_cast<const uint16_t*>(src)[i]));
      case Storage::kValue:
        break;
    }
    return reinterpret_cast<const T*>(src)[i];
  }

  T Uniform(const Op& op, const std::vector<T>& u, const KernelArgs& args) const {
    switch (op.kind) {
      case Kind::kConstant:
        return static_cast<T>(op.constant);
      case Kind::kScalar:
      case Kind::kElementwise:  // a rank-0 result
      case Kind::kGather:
        return Load(op, args, 0);
      case Kind::kUnary:
        return Unary<T>(op.opcode, u[op.in[0]]);
      case Kind::kBinary:
        return BinaryOp<T>{op.opcode}(u[op.in[0]], u[op.in[1]]);
      case Kind::kCompare:
        return CompareValues(op.direction, u[op.in[0]], u[op.in[1]]) ? T(1) : T(0);
      case Kind::kSelect:
        return u[op.in[0]] != T(0) ? u[op.in[1]] : u[op.in[2]];
      case Kind::kRowBroadcast:
      case Kind::kIdentity:
        return u[op.in[0]];
      case Kind::kRound:
        return static_cast<T>(RoundToBf16(static_cast<float>(u[op.in[0]])));
      case Kind::kReduce:  // never uniform: computed per row
      case Kind::kRowParameter:
        break;
    }
    return T(0);
  }

  Value<T> Block(const Op& op, size_t k, const std::vector<Value<T>>& v, const std::vector<T>& u,
                 const KernelArgs& args, int64_t at, int64_t m, T* buffer) const {
    if (op.uniform) return {&u[k], false};
    // An op over only a row's reduced values gives one value for the row.
    bool varies = false;
    for (int64_t i : op.in) varies = varies || (i >= 0 && v[i].varies);
    const bool reads_values = op.kind == Kind::kUnary || op.kind == Kind::kBinary ||
                              op.kind == Kind::kCompare || op.kind == Kind::kSelect ||
                              op.kind == Kind::kRound;
    if (reads_values && !varies) m = 1;
    switch (op.kind) {
      case Kind::kElementwise:
        if (op.storage == Storage::kValue)
          return {reinterpret_cast<const T*>(args.operands[op.operand]) + at, true};
        if (op.storage == Storage::kBf16) {
          const uint16_t* x = reinterpret_cast<const uint16_t*>(args.operands[op.operand]) + at;
          for (int64_t i = 0; i < m; ++i) buffer[i] = static_cast<T>(BFloat16ToFloat(x[i]));
        } else {
          for (int64_t i = 0; i < m; ++i)
            buffer[i] = static_cast<T>(args.operands[op.operand][at + i] != 0);
        }
        return {buffer, true};
      case Kind::kGather:
        Gather(args.operands[op.operand], op.storage, op.dims, op.strides, op.offset, at, m,
               buffer);
        return {buffer, true};
      case Kind::kRound: {
        const T* x = v[op.in[0]].ptr;
        for (int64_t i = 0; i < m; ++i)
          buffer[i] = static_cast<T>(RoundToBf16(static_cast<float>(x[i])));
        return {buffer, varies};
      }
      case Kind::kIdentity:
        return v[op.in[0]];
      case Kind::kUnary:
        RunUnaryBlock(op.opcode, v[op.in[0]].ptr, buffer, m);
        return {buffer, varies};
      case Kind::kBinary:
        RunBinaryBlock(op.opcode, v[op.in[0]], v[op.in[1]], buffer, m);
        return {buffer, varies};
      case Kind::kCompare:
        RunCompareBlock(op.direction, v[op.in[0]], v[op.in[1]], buffer, m);
        return {buffer, varies};
      case Kind::kReduce: {
        const Value<T> x = v[op.in[0]];
        const Reducer<T> f{op.opcode};
        if (x.varies) {
          buffer[0] = ReduceContiguous(x.ptr, m, static_cast<T>(op.constant), f);
        } else {  // the same value m times, in the unfused reduce's order
          T acc = static_cast<T>(op.constant);
          for (int64_t i = 0; i < m; ++i) acc = f(acc, x.ptr[0]);
          buffer[0] = acc;
        }
        return {buffer, false};
      }
      case Kind::kRowBroadcast:
        return v[op.in[0]];
      case Kind::kRowParameter:
        if (op.storage == Storage::kValue)
          return {reinterpret_cast<const T*>(args.operands[op.operand]) + at / row_, false};
        buffer[0] = Load(op, args, at / row_);
        return {buffer, false};
      case Kind::kSelect: {
        const Value<T> p = v[op.in[0]], x = v[op.in[1]], y = v[op.in[2]];
        if (p.varies && x.varies && y.varies) {
          for (int64_t i = 0; i < m; ++i) buffer[i] = p.ptr[i] != T(0) ? x.ptr[i] : y.ptr[i];
        } else if (p.varies && x.varies) {  // a masked fill: where(mask, x, -inf)
          const T yv = y.ptr[0];
          for (int64_t i = 0; i < m; ++i) buffer[i] = p.ptr[i] != T(0) ? x.ptr[i] : yv;
        } else if (p.varies && y.varies) {
          const T xv = x.ptr[0];
          for (int64_t i = 0; i < m; ++i) buffer[i] = p.ptr[i] != T(0) ? xv : y.ptr[i];
        } else if (p.varies) {  // a one-hot: where(position == index, c, 0)
          const T xv = x.ptr[0], yv = y.ptr[0];
          for (int64_t i = 0; i < m; ++i) buffer[i] = p.ptr[i] != T(0) ? xv : yv;
        } else {
          const int64_t sp = p.varies, sx = x.varies, sy = y.varies;
          for (int64_t i = 0; i < m; ++i)
            buffer[i] = p.ptr[i * sp] != T(0) ? x.ptr[i * sx] : y.ptr[i * sy];
        }
        return {buffer, varies};
      }
      case Kind::kScalar:
      case Kind::kConstant:
        break;  // uniform
    }
    return {&u[k], false};
  }

  std::vector<Op> ops_;
  std::vector<int64_t> slot_;  // each op's block buffer (-1: uniform, none)
  int64_t slots_ = 0;
  std::vector<int64_t> outputs_;
  std::vector<bool> half_outputs_;
  std::vector<int64_t> dims_;
  int64_t row_ = 0;
  bool row_output_ = false;
  int64_t n_ = 0;
  ThreadPool* pool_;
};

// Operand strides (in elements, row-major) seen from the result's dims: a
// broadcast maps operand dim i to result dim dimensions[i].
std::vector<int64_t> BroadcastStrides(const Instruction& broadcast) {
  const Shape& operand = broadcast.operand(0)->shape();
  std::vector<int64_t> strides(broadcast.shape().rank(), 0);
  int64_t stride = 1;
  for (int64_t i = operand.rank() - 1; i >= 0; --i) {
    if (operand.dim(i) != 1) strides[broadcast.dimensions[i]] = stride;
    stride *= operand.dim(i);
  }
  return strides;
}

// The fused computation as a list of ops, parameters and broadcasts folded
// into the ops that read them.
// Long by design: one case per op a fused loop runs, all sharing `value`.
std::vector<Op> Translate(const hlo::Computation& fused, int64_t elements, int64_t row,
                          std::vector<int64_t>& outputs) {
  std::vector<Op> ops;
  std::unordered_map<const Instruction*, int64_t> value;
  auto operand_op = [&](const Instruction& p, Kind kind) {
    Op op{kind};
    op.operand = p.parameter_number;
    const DType t = p.shape().dtype();
    op.storage = t == DType::kPred   ? Storage::kPred
                 : t == DType::kBF16 ? Storage::kBf16
                                     : Storage::kValue;
    return op;
  };
  // A chain of index maps over a parameter (or a scalar) that moves elements
  // is read as one strided view of it; the chain's inner ops are never
  // computed. (Broadcasts alone and reshapes of per-row values are read
  // their own ways below.)
  auto is_view = [&](const Instruction& i) {
    if (!IsIndexMap(i) || !MovesElements(i) || i.shape().num_elements() != elements) return false;
    const Instruction& base = ViewBase(i);
    return base.opcode() == Opcode::kParameter ||
           (base.opcode() == Opcode::kConstant && base.shape().rank() == 0);
  };
  // Only what the root reads: a dead instruction (XLA's text may hold one)
  // would be ordered after the root and computed for nothing.
  std::unordered_set<const Instruction*> live;
  const Instruction* root = fused.root();
  std::vector<const Instruction*> results = {root};  // the fusion's outputs
  if (root->opcode() == Opcode::kTuple)
    results = {root->operands().begin(), root->operands().end()};
  std::vector<const Instruction*> pending = results;
  while (!pending.empty()) {
    const Instruction* inst = pending.back();
    pending.pop_back();
    if (!live.insert(inst).second || is_view(*inst)) continue;
    for (const Instruction* o : inst->operands()) pending.push_back(o);
  }
  // Parameters read directly: not only through broadcasts and views (one
  // pass, so a fusion of many parameters translates in linear time).
  std::unordered_set<const Instruction*> read_directly;
  for (const auto& user : fused.instructions()) {
    if (!live.count(user.get()) || user->opcode() == Opcode::kBroadcast || is_view(*user)) continue;
    for (const Instruction* o : user->operands()) read_directly.insert(o);
  }
  for (const auto& owned : fused.instructions()) {
    const Instruction& inst = *owned;
    if (!live.count(&inst)) continue;
    Op op{Kind::kUnary};
    if (is_view(inst)) {
      const Instruction& base = ViewBase(inst);
      if (base.opcode() == Opcode::kConstant) {
        op.kind = Kind::kConstant;
        op.constant = base.literal.GetAsDouble(0);
      } else if (base.shape().rank() == 0) {
        op = operand_op(base, Kind::kScalar);
      } else {
        std::optional<OperandView> view = ViewOf(inst);
        if (!view || view->dims.size() > 8) {
          Fail("[runtime] fusion {}: {} reads {} through index maps no strided view can follow",
               fused.name(), inst.name(), base.name());
        }
        op = operand_op(base, Kind::kGather);
        op.dims = std::move(view->dims);
        op.strides = std::move(view->strides);
        op.offset = view->offset;
      }
      op.uniform = op.kind != Kind::kGather;
      value[&inst] = static_cast<int64_t>(ops.size());
      ops.push_back(std::move(op));
      continue;
    }
    switch (inst.opcode()) {
      case Opcode::kParameter: {
        const int64_t count = inst.shape().num_elements();
        if (!read_directly.count(&inst)) {
          op.kind = Kind::kConstant;  // a placeholder nothing reads
        } else if (inst.shape().rank() == 0) {
          op = operand_op(inst, Kind::kScalar);
        } else if (count == elements) {
          op = operand_op(inst, Kind::kElementwise);
        } else if (row > 0 && count * row == elements && inst.shape().dtype() != DType::kPred) {
          op = operand_op(inst, Kind::kRowParameter);
        } else {
          Fail("[runtime] fusion {}: {} has {} elements, expected {} or one per row", fused.name(),
               inst.name(), count, elements);
        }
        break;
      }
      case Opcode::kConstant:
        op.kind = Kind::kConstant;
        op.constant = inst.literal.GetAsDouble(0);
        break;
      case Opcode::kReduce: {
        op.kind = Kind::kReduce;
        std::optional<Opcode> reducer = SimpleReducer(*inst.called.at(0));
        const Instruction& init = *inst.operand(1);
        if (!reducer || init.opcode() != Opcode::kConstant)
          Fail("[runtime] fusion {}: {} must reduce with one binary op from a constant",
               fused.name(), inst.name());
        op.opcode = *reducer;
        op.constant = init.literal.GetAsDouble(0);
        op.in[0] = value.at(inst.operand(0));
        break;
      }
      case Opcode::kTranspose:
      case Opcode::kSlice:
      case Opcode::kReverse:
        Fail(
            "[runtime] fusion {}: {} moves elements of a value the fusion computes; the fused "
            "loop reads index maps only over its operands",
            fused.name(), inst.name());
      case Opcode::kReshape:  // the same elements in the same order
        op.kind = Kind::kRowBroadcast;
        op.in[0] = value.at(inst.operand(0));
        break;
      case Opcode::kBroadcast: {
        const Instruction& src = *inst.operand(0);
        if (src.opcode() != Opcode::kParameter && src.opcode() != Opcode::kConstant) {
          op.kind = Kind::kRowBroadcast;  // of a per-row value computed inside
          op.in[0] = value.at(&src);
        } else if (src.opcode() == Opcode::kConstant && src.shape().rank() == 0) {
          op.kind = Kind::kConstant;
          op.constant = src.literal.GetAsDouble(0);
        } else if (src.shape().rank() == 0) {
          op = operand_op(src, Kind::kScalar);
        } else {
          op = operand_op(src, Kind::kGather);
          op.dims = inst.shape().dims();
          op.strides = BroadcastStrides(inst);
        }
        break;
      }
      case Opcode::kCompare:
        op.kind = Kind::kCompare;
        op.direction = inst.direction;
        break;
      case Opcode::kSelect:
        op.kind = Kind::kSelect;
        break;
      case Opcode::kConvert:  // between the fusion's type and bf16 (FusedKernelRuns)
        op.kind = inst.shape().dtype() == DType::kBF16 ? Kind::kRound : Kind::kIdentity;
        op.in[0] = value.at(inst.operand(0));
        break;
      default:
        op.kind = hlo::IsElementwiseUnary(inst.opcode()) ? Kind::kUnary : Kind::kBinary;
        op.opcode = inst.opcode();
        break;
    }
    const bool reads_values = op.kind == Kind::kUnary || op.kind == Kind::kBinary ||
                              op.kind == Kind::kCompare || op.kind == Kind::kSelect ||
                              op.kind == Kind::kRound;
    op.uniform =
        op.kind == Kind::kConstant || op.kind == Kind::kScalar ||
        ((op.kind == Kind::kRowBroadcast || op.kind == Kind::kIdentity) && ops[op.in[0]].uniform);
    if (reads_values) {
      op.uniform = true;
      for (int64_t i = 0; i < inst.operand_count(); ++i) {
        op.in[i] = value.at(inst.operand(i));
        op.uniform = op.uniform && ops[op.in[i]].uniform;
      }
    }
    value[&inst] = static_cast<int64_t>(ops.size());
    ops.push_back(std::move(op));
  }
  outputs.clear();
  for (const Instruction* r : results) outputs.push_back(value.at(r));
  return ops;
}

// The elements each of the fusion's reductions covers: all reduce the same
// trailing dims of the fusion's shape. 0 when it has none.
int64_t FusedRowLength(const Instruction& fusion) {
  const std::vector<int64_t> dims = FusionLoopShape(fusion)->dims();
  int64_t row = 0;
  for (const auto& inst : fusion.called.at(0)->instructions()) {
    if (inst->opcode() != Opcode::kReduce) continue;
    const int64_t rank = static_cast<int64_t>(dims.size());
    const int64_t reduced = static_cast<int64_t>(inst->dimensions.size());
    bool trailing = inst->operand(0)->shape().dims() == dims && reduced > 0;
    int64_t length = 1;
    for (int64_t i = 0; trailing && i < reduced; ++i) {
      trailing = inst->dimensions[i] == rank - reduced + i;
      length *= dims[rank - reduced + i];
    }
    if (!trailing || (row != 0 && row != length) || length == 0) {
      Fail(
          "[runtime] fusion {}: {} must reduce the fusion's trailing dims, as its other "
          "reductions do",
          fusion.name(), inst->name());
    }
    row = length;
  }
  return row;
}

}  // namespace

bool FusedKernelRuns(const Instruction& fusion, ThreadPool& pool) {
  if (!fusion.fusion_kind.empty()) return false;
  const std::optional<Shape> leaf = FusionLoopShape(fusion);
  if (!leaf || leaf->rank() > 8) return false;
  const std::optional<DType> computes = FusionComputeType(fusion);
  if (!computes) return false;
  const DType type = *computes;
  const hlo::Computation& fused = *fusion.called.at(0);
  for (const auto& inst : fused.instructions()) {
    if (inst.get() == fused.root() && inst->opcode() == Opcode::kTuple) continue;
    const Shape& s = inst->shape();
    if (!s.is_array()) return false;
    const bool typed = s.dtype() == type, pred = s.dtype() == DType::kPred;
    // bf16 values in an f32 fusion (held as f32s a bf16 holds exactly).
    const bool half = type == DType::kF32 && s.dtype() == DType::kBF16;
    switch (inst->opcode()) {
      case Opcode::kParameter:
      case Opcode::kConstant:
      case Opcode::kBroadcast:
        if (!typed && !pred && !half) return false;
        break;
      case Opcode::kReshape:
      case Opcode::kTranspose:
      case Opcode::kSlice:
      case Opcode::kReverse:
        if (!typed && !pred && !half) return false;
        break;
      case Opcode::kConvert: {
        const DType from = inst->operand(0)->shape().dtype();
        if (!(half && from == type) && !(typed && from == DType::kBF16 && type == DType::kF32))
          return false;
        break;
      }
      case Opcode::kSelect:
        if (!typed && !half) return false;
        break;
      case Opcode::kCompare:  // the fused loop compares as IEEE floats
        if (inst->operand(0)->shape().dtype() != type ||
            inst->comparison_type != hlo::ComparisonType::kDefault) {
          return false;
        }
        break;
      case Opcode::kReduce:
        if (!typed) return false;
        break;
      default:
        if (!typed || !(hlo::IsElementwiseUnary(inst->opcode()) ||
                        hlo::IsElementwiseBinary(inst->opcode()))) {
          return false;
        }
    }
  }
  try {  // the forms Translate and the row length accept
    STRATA_ISA_NAMESPACE::MakeFusionKernel(fusion, pool);  // not kernels.h's, found by ADL
    return true;
  } catch (const Error&) {
    return false;
  }
}

std::vector<bool> FusionElementwiseOperands(const Instruction& fusion) {
  const hlo::Computation& fused = *fusion.called.at(0);
  std::vector<bool> out(static_cast<size_t>(fusion.operand_count()), false);
  const std::optional<Shape> leaf = FusionOutputShape(fusion);
  if (!leaf) return out;
  std::unordered_set<const Instruction*> mapped;  // read through an index map
  for (const auto& inst : fused.instructions()) {
    if (IsIndexMap(*inst)) mapped.insert(inst->operands().begin(), inst->operands().end());
  }
  for (const auto& inst : fused.instructions()) {
    const int64_t n = inst->parameter_number;
    if (inst->opcode() != Opcode::kParameter || n < 0 || n >= fusion.operand_count()) continue;
    out[static_cast<size_t>(n)] = !mapped.count(inst.get()) && inst->shape().dims() == leaf->dims();
  }
  return out;
}

bool FusionReadsElementwise(const Instruction& fusion, int64_t index) {
  return FusionElementwiseOperands(fusion).at(static_cast<size_t>(index));
}

KernelInfo MakeFusionKernel(const Instruction& inst, ThreadPool& pool) {
  const hlo::Computation& fused = *inst.called.at(0);
  const std::optional<Shape> leaf = FusionLoopShape(inst);
  if (!leaf) {
    Fail("[runtime] fusion {}: a loop fusion's outputs must be arrays of one shape, got {}",
         inst.name(), inst.shape().ToString());
  }
  std::vector<int64_t> dims = leaf->dims();
  if (dims.size() > 8)
    Fail("[runtime] fusion {} has rank {} (at most 8)", inst.name(), dims.size());
  const int64_t row = FusedRowLength(inst);
  // A result with one value per row: the fusion's root is its reduction.
  const bool row_output = inst.shape().is_array() && inst.shape().dims() != dims;
  if (row_output && (row == 0 || inst.shape().num_elements() * row != leaf->num_elements())) {
    Fail("[runtime] fusion {}: its result {} is neither its loop's shape {} nor one value per row",
         inst.name(), inst.shape().ToString(), leaf->ToString());
  }
  std::vector<int64_t> outputs;
  std::vector<Op> ops = Translate(fused, leaf->num_elements(), row, outputs);
  std::vector<bool> half_outputs;
  for (const Shape& s : inst.shape().Leaves()) half_outputs.push_back(s.dtype() == DType::kBF16);
  const std::optional<DType> type = FusionComputeType(inst);
  if (type == DType::kF32) {
    return {FusedLoop<float>(std::move(ops), std::move(outputs), std::move(half_outputs),
                             std::move(dims), row, row_output, pool)};
  }
  if (type == DType::kF64) {
    return {FusedLoop<double>(std::move(ops), std::move(outputs), std::move(half_outputs),
                              std::move(dims), row, row_output, pool)};
  }
  UnsupportedType(inst, leaf->dtype());
}

}  // namespace strata::runtime::STRATA_ISA_NAMESPACE
STRATA_ISA_END
