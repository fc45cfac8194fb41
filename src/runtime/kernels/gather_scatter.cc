// gather and scatter with XLA's general dimension numbers. Each gathered
// window (or scattered update window) is moved as a strided block, so the
// embedding-lookup form copies whole rows.
#include <algorithm>
#include <cstring>

#include "kernels/kernels.h"
#include "strata/hlo/builder.h"

namespace strata::runtime {
namespace {

using hlo::Opcode;

// Positions in the indices array of each batch element's index vector.
struct IndexWalker {
  std::vector<int64_t> batch_dims;     // sizes of the index batch dims
  std::vector<int64_t> batch_strides;  // their strides in the indices array
  int64_t vector_stride = 0;           // stride of index_vector_dim (0 if implicit)
  int64_t vector_size = 1;
  int64_t count = 1;
  IndexWalker(const Shape& indices, int64_t index_vector_dim) {
    auto strides = RowMajorStrides(indices.dims());
    for (int64_t i = 0; i < indices.rank(); ++i) {
      if (i == index_vector_dim) {
        vector_stride = strides[i];
        vector_size = indices.dim(i);
      } else {
        batch_dims.push_back(indices.dim(i));
        batch_strides.push_back(strides[i]);
      }
    }
    count = Product(batch_dims);
  }
  // Element offset in the indices array of batch element `b`'s vector.
  int64_t Offset(int64_t b) const {
    int64_t off = 0;
    for (int64_t i = static_cast<int64_t>(batch_dims.size()) - 1; i >= 0; --i) {
      off += (b % batch_dims[i]) * batch_strides[i];
      b /= batch_dims[i];
    }
    return off;
  }
};

template <typename T>
struct Combiner {
  Opcode op;  // kParameter means "overwrite with the update"
  T operator()(T a, T b) const {
    if constexpr (std::is_same_v<T, HalfBits>) {  // overwrite only (MakeScatterKernel checks)
      return b;
    } else if constexpr (std::is_same_v<T, bool>) {
      return op == Opcode::kAdd || op == Opcode::kOr || op == Opcode::kMaximum ? (a || b)
             : op == Opcode::kParameter                                        ? b
                                                                               : (a && b);
    } else {
      switch (op) {
        case Opcode::kAdd:
          return WrappingAdd(a, b);
        case Opcode::kMultiply:
          return WrappingMultiply(a, b);
        case Opcode::kMaximum:
          return a > b || a != a ? a : b;
        case Opcode::kMinimum:
          return a < b || a != a ? a : b;
        default:
          return b;
      }
    }
  }
};

std::optional<Opcode> SimpleCombiner(const hlo::Computation& c) {
  const hlo::Instruction* root = c.root();
  if (c.parameter_count() != 2 || !root) return std::nullopt;
  if (root->opcode() == Opcode::kParameter && root->parameter_number == 1)
    return Opcode::kParameter;  // replace: the update wins
  std::optional<Opcode> op = hlo::SimpleReducer(c);
  if (op == Opcode::kAnd || op == Opcode::kOr) return std::nullopt;
  return op;
}

}  // namespace

KernelInfo MakeGatherKernel(const hlo::Instruction& inst, ThreadPool& pool_ref) {
  ThreadPool* pool = &pool_ref;
  const Shape& operand = inst.operand(0)->shape();
  const Shape& indices = inst.operand(1)->shape();
  const hlo::GatherDims& g = inst.gather;
  const int64_t es = DTypeSize(operand.dtype());
  const DType index_type = indices.dtype();
  IndexWalker walker(indices, g.index_vector_dim);
  auto op_strides = RowMajorStrides(operand.dims());
  auto out_strides = RowMajorStrides(inst.shape().dims());
  // Window: non-collapsed operand dims, mapped in order to offset_dims.
  std::vector<int64_t> window_dims, window_src_strides, window_dst_strides;
  size_t w = 0;
  for (int64_t d = 0; d < operand.rank(); ++d) {
    if (std::find(g.collapsed_slice_dims.begin(), g.collapsed_slice_dims.end(), d) !=
        g.collapsed_slice_dims.end()) {
      continue;
    }
    window_dims.push_back(g.slice_sizes[d]);
    window_src_strides.push_back(op_strides[d]);
    window_dst_strides.push_back(out_strides[g.offset_dims[w++]]);
  }
  // Output batch dims: those not in offset_dims, in order.
  std::vector<int64_t> batch_out_strides;
  for (int64_t i = 0; i < inst.shape().rank(); ++i) {
    if (std::find(g.offset_dims.begin(), g.offset_dims.end(), i) == g.offset_dims.end()) {
      batch_out_strides.push_back(out_strides[i]);
    }
  }
  const std::vector<int64_t> op_dims = operand.dims();
  const std::vector<int64_t> slice_sizes = g.slice_sizes;
  const std::vector<int64_t> start_map = g.start_index_map;
  const int64_t index_es = DTypeSize(index_type);
  return {[=](const KernelArgs& a) {
    pool->ParallelFor(walker.count, 64, [&](int64_t lo, int64_t hi) {
      for (int64_t b = lo; b < hi; ++b) {
        int64_t ioff = walker.Offset(b);
        int64_t src = 0;
        for (size_t k = 0; k < start_map.size(); ++k) {
          int64_t d = start_map[k];
          int64_t s =
              ReadIndex(a.operands[1] + (ioff + k * walker.vector_stride) * index_es, index_type);
          s = std::clamp<int64_t>(s, 0, op_dims[d] - slice_sizes[d]);  // XLA clamps gather starts
          src += s * op_strides[d];
        }
        int64_t dst = 0, rem = b;
        for (int64_t i = static_cast<int64_t>(walker.batch_dims.size()) - 1; i >= 0; --i) {
          dst += (rem % walker.batch_dims[i]) * batch_out_strides[i];
          rem /= walker.batch_dims[i];
        }
        CopyStrided(es, window_dims, a.operands[0] + src * es, window_src_strides,
                    a.outputs[0] + dst * es, window_dst_strides, nullptr);
      }
    });
  }};
}

KernelInfo MakeScatterKernel(const hlo::Instruction& inst, ThreadPool& pool,
                             ScalarFunction to_apply) {
  const Shape& operand = inst.operand(0)->shape();
  const Shape& indices = inst.operand(1)->shape();
  const Shape& updates = inst.operand(2)->shape();
  const hlo::ScatterDims& s = inst.scatter;
  const DType dtype = operand.dtype();
  const int64_t es = DTypeSize(dtype);
  const DType index_type = indices.dtype();
  const int64_t index_es = DTypeSize(index_type);
  IndexWalker walker(indices, s.index_vector_dim);
  auto op_strides = RowMajorStrides(operand.dims());
  auto up_strides = RowMajorStrides(updates.dims());
  // Window dims of the update, each mapped to a non-inserted operand dim.
  std::vector<int64_t> window_dims, window_op_strides, window_up_strides, window_op_dims;
  size_t w = 0;
  for (int64_t d = 0; d < operand.rank(); ++d) {
    if (std::find(s.inserted_window_dims.begin(), s.inserted_window_dims.end(), d) !=
        s.inserted_window_dims.end()) {
      continue;
    }
    int64_t ud = s.update_window_dims[w++];
    window_dims.push_back(updates.dim(ud));
    window_up_strides.push_back(up_strides[ud]);
    window_op_strides.push_back(op_strides[d]);
    window_op_dims.push_back(d);
  }
  std::vector<int64_t> scatter_up_strides;  // update dims that are not window dims
  for (int64_t i = 0; i < updates.rank(); ++i) {
    if (std::find(s.update_window_dims.begin(), s.update_window_dims.end(), i) ==
        s.update_window_dims.end()) {
      scatter_up_strides.push_back(up_strides[i]);
    }
  }
  // Window extent along each operand dim (1 for inserted dims).
  std::vector<int64_t> extent(operand.rank(), 1);
  for (size_t i = 0; i < window_op_dims.size(); ++i) extent[window_op_dims[i]] = window_dims[i];
  const std::vector<int64_t> op_dims = operand.dims();
  const std::vector<int64_t> dims_map = s.scatter_dims_to_operand_dims;
  const int64_t window_n = Product(window_dims);
  const int64_t bytes = operand.byte_size();
  std::optional<Opcode> simple = SimpleCombiner(*inst.called[0]);
  // Overwriting moves bits, which f16 / bf16 have; combining them is arithmetic.
  if (simple && *simple != Opcode::kParameter && (dtype == DType::kF16 || dtype == DType::kBF16))
    UnsupportedType(inst, dtype);
  // Visits every (operand offset, update offset) pair of in-bounds windows.
  auto for_each = [=](const KernelArgs& a, auto&& visit) {
    if (a.outputs[0] != a.operands[0]) std::memcpy(a.outputs[0], a.operands[0], bytes);
    std::vector<int64_t> start(op_dims.size());
    std::vector<int64_t> idx(window_dims.size());
    for (int64_t b = 0; b < walker.count; ++b) {
      int64_t ioff = walker.Offset(b);
      std::fill(start.begin(), start.end(), 0);
      for (size_t k = 0; k < dims_map.size(); ++k) {
        start[dims_map[k]] =
            ReadIndex(a.operands[1] + (ioff + k * walker.vector_stride) * index_es, index_type);
      }
      bool in_bounds = true;  // XLA skips windows that do not fit entirely
      int64_t op_off = 0;
      for (size_t d = 0; d < op_dims.size(); ++d) {
        if (start[d] < 0 || start[d] > op_dims[d] - extent[d]) in_bounds = false;
        op_off += start[d] * op_strides[d];
      }
      if (!in_bounds) continue;
      int64_t up_off = 0, rem = b;
      for (int64_t i = static_cast<int64_t>(walker.batch_dims.size()) - 1; i >= 0; --i) {
        up_off += (rem % walker.batch_dims[i]) * scatter_up_strides[i];
        rem /= walker.batch_dims[i];
      }
      std::fill(idx.begin(), idx.end(), 0);
      int64_t o = op_off, u = up_off;
      for (int64_t e = 0; e < window_n; ++e) {
        visit(o, u);
        for (int64_t i = static_cast<int64_t>(idx.size()) - 1; i >= 0; --i) {
          o += window_op_strides[i];
          u += window_up_strides[i];
          if (++idx[i] < window_dims[i]) break;
          o -= window_op_strides[i] * window_dims[i];
          u -= window_up_strides[i] * window_dims[i];
          idx[i] = 0;
        }
      }
    }
  };
  if (simple && !IsComplex(dtype)) {
    // f16 / bf16 arithmetic is widened to f32 before this; their bits only move.
    if ((dtype == DType::kF16 || dtype == DType::kBF16) && *simple != Opcode::kParameter)
      UnsupportedType(inst, dtype);
    return {DispatchAnyType(dtype, [&](auto tag) -> Kernel {
      using T = typename decltype(tag)::type;
      Combiner<T> f{*simple};
      return [=](const KernelArgs& a) {
        T* out = reinterpret_cast<T*>(a.outputs[0]);
        const T* up = reinterpret_cast<const T*>(a.operands[2]);
        for_each(a, [&](int64_t o, int64_t u) { out[o] = f(out[o], up[u]); });
      };
    })};
  }
  return {[=](const KernelArgs& a) {
            uint8_t* result = a.scratch;
            ScalarCall call = to_apply.bind(a.scratch + 64);
            for_each(a, [&](int64_t o, int64_t u) {
              const uint8_t* args[2] = {a.outputs[0] + o * es, a.operands[2] + u * es};
              uint8_t* results[1] = {result};
              call(args, results);
              std::memcpy(a.outputs[0] + o * es, result, es);
            });
          },
          64 + to_apply.arena_bytes};
}

}  // namespace strata::runtime
