// Kernels that move data without arithmetic: iota, broadcast, transpose,
// copy, slice, dynamic-slice, dynamic-update-slice, concatenate, pad,
// reverse. All but iota reduce to CopyStrided on raw elements.
#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/kernels.h"
#include "strata/hlo/literal.h"

namespace strata::runtime {

int64_t ReadIndex(const uint8_t* p, DType dtype) {
  return DispatchAnyType(dtype, [&](auto tag) -> int64_t {
    using T = typename decltype(tag)::type;
    T v;
    std::memcpy(&v, p, sizeof(T));
    // Unsigned indices compare as unsigned (as in XLA): a u64 past 2^63 is
    // huge, not negative.
    if constexpr (std::is_unsigned_v<T>) v = std::min<T>(v, static_cast<T>(INT64_MAX));
    return static_cast<int64_t>(v);
  });
}

namespace {

using hlo::Opcode;

template <typename T>
void FillTyped(uint8_t* dst, int64_t n, const uint8_t* value) {
  T v;
  std::memcpy(&v, value, sizeof(T));
  std::fill_n(reinterpret_cast<T*>(dst), n, v);
}

void Fill(int64_t element_size, uint8_t* dst, int64_t n, const uint8_t* value) {
  switch (element_size) {
    case 1:
      return FillTyped<uint8_t>(dst, n, value);
    case 2:
      return FillTyped<uint16_t>(dst, n, value);
    case 4:
      return FillTyped<uint32_t>(dst, n, value);
    case 8:
      return FillTyped<uint64_t>(dst, n, value);
    default:
      return FillTyped<Element16>(dst, n, value);
  }
}

template <typename T>
void InnerCopy(int64_t n, const uint8_t* src, int64_t ss, uint8_t* dst, int64_t ds) {
  auto* s = reinterpret_cast<const T*>(src);
  auto* d = reinterpret_cast<T*>(dst);
  if (ss == 0) {
    std::fill_n(d, n, s[0]);
    return;
  }
  for (int64_t i = 0; i < n; ++i) d[i * ds] = s[i * ss];
}

// Clamped start indices read from operands [first, first + rank).
std::vector<int64_t> ClampedStarts(const KernelArgs& a, int64_t first,
                                   const std::vector<DType>& types,
                                   const std::vector<int64_t>& dims,
                                   const std::vector<int64_t>& sizes) {
  std::vector<int64_t> starts(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t s = ReadIndex(a.operands[first + i], types[i]);
    starts[i] = std::clamp<int64_t>(s, 0, dims[i] - sizes[i]);  // as XLA clamps
  }
  return starts;
}

}  // namespace

void CopyStrided(int64_t es, std::span<const int64_t> dims_in, const uint8_t* src,
                 std::span<const int64_t> src_strides_in, uint8_t* dst,
                 std::span<const int64_t> dst_strides_in, ThreadPool* pool) {
  // Drop unit dims and merge neighbours that are contiguous in both views.
  std::vector<int64_t> dims, ss, ds;
  for (size_t i = 0; i < dims_in.size(); ++i) {
    if (dims_in[i] == 0) return;
    if (dims_in[i] == 1) continue;
    if (!dims.empty() && ss.back() == src_strides_in[i] * dims_in[i] &&
        ds.back() == dst_strides_in[i] * dims_in[i]) {
      dims.back() *= dims_in[i];
      ss.back() = src_strides_in[i];
      ds.back() = dst_strides_in[i];
      continue;
    }
    dims.push_back(dims_in[i]);
    ss.push_back(src_strides_in[i]);
    ds.push_back(dst_strides_in[i]);
  }
  if (dims.empty()) {
    std::memcpy(dst, src, es);
    return;
  }
  int64_t rank = static_cast<int64_t>(dims.size());
  int64_t inner = dims.back(), inner_ss = ss.back(), inner_ds = ds.back();
  int64_t outer = 1;
  for (int64_t i = 0; i + 1 < rank; ++i) outer *= dims[i];
  if (rank == 1 && inner_ss == 1 && inner_ds == 1) {
    // One contiguous block (a loop's row of a stacked value, a slice of
    // whole leading rows): copied in chunks across the pool.
    if (pool && inner >= 2 * kElementwiseGrain) {
      pool->ParallelFor(inner, kElementwiseGrain, [&](int64_t lo, int64_t hi) {
        std::memcpy(dst + lo * es, src + lo * es, (hi - lo) * es);
      });
    } else {
      std::memcpy(dst, src, inner * es);
    }
    return;
  }
  auto run_rows = [&](int64_t lo, int64_t hi) {
    // Odometer over the outer dims, starting at row `lo`.
    std::vector<int64_t> idx(rank - 1);
    int64_t rem = lo, so = 0, dof = 0;
    for (int64_t i = rank - 2; i >= 0; --i) {
      idx[i] = rem % dims[i];
      rem /= dims[i];
      so += idx[i] * ss[i];
      dof += idx[i] * ds[i];
    }
    for (int64_t row = lo; row < hi; ++row) {
      const uint8_t* s = src + so * es;
      uint8_t* d = dst + dof * es;
      if (inner_ss == 1 && inner_ds == 1) {
        std::memcpy(d, s, inner * es);
      } else {
        switch (es) {
          case 1:
            InnerCopy<uint8_t>(inner, s, inner_ss, d, inner_ds);
            break;
          case 2:
            InnerCopy<uint16_t>(inner, s, inner_ss, d, inner_ds);
            break;
          case 4:
            InnerCopy<uint32_t>(inner, s, inner_ss, d, inner_ds);
            break;
          case 8:
            InnerCopy<uint64_t>(inner, s, inner_ss, d, inner_ds);
            break;
          default:
            InnerCopy<Element16>(inner, s, inner_ss, d, inner_ds);
            break;
        }
      }
      for (int64_t i = rank - 2; i >= 0; --i) {
        so += ss[i];
        dof += ds[i];
        if (++idx[i] < dims[i]) break;
        so -= ss[i] * dims[i];
        dof -= ds[i] * dims[i];
        idx[i] = 0;
      }
    }
  };
  if (pool && outer > 1 && outer * inner >= kElementwiseGrain) {
    int64_t grain = std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(inner, 1));
    pool->ParallelFor(outer, grain, run_rows);
  } else {
    run_rows(0, outer);
  }
}

bool CanRunInPlace(const hlo::Instruction& inst, int64_t index) {
  Opcode op = inst.opcode();
  const Shape& out = inst.shape();
  if (!out.is_array()) return false;
  const Shape& in = inst.operand(index)->shape();
  if (!in.is_array() || in.byte_size() != out.byte_size()) return false;
  bool same_element_size = DTypeSize(in.dtype()) == DTypeSize(out.dtype());
  if (hlo::IsElementwiseUnary(op) || hlo::IsElementwiseBinary(op)) return true;
  switch (op) {
    case Opcode::kConvert:
    case Opcode::kBitcastConvert:
    case Opcode::kCopy:
      return same_element_size;
    case Opcode::kSelect:
      return index >= 1;
    case Opcode::kClamp:
      return index == 1;
    case Opcode::kDynamicUpdateSlice:
    case Opcode::kScatter:
      return index == 0;
    case Opcode::kAllReduceStart:  // reduces in its result, in place
      return same_element_size;
    case Opcode::kFusion:
      return same_element_size && FusionReadsElementwise(inst, index);
    default:
      return false;
  }
}

namespace {

// iota: runs of `stride` equal values, counting 0..size-1, repeated.
KernelInfo IotaKernel(const hlo::Instruction& inst) {
  const Shape& out = inst.shape();
  const std::vector<int64_t> out_dims = out.dims();
  const std::vector<int64_t> out_strides = RowMajorStrides(out_dims);
  int64_t dim = inst.dimensions[0];
  int64_t stride = out_strides[dim], size = out_dims[dim], n = out.num_elements();
  return {DispatchAnyType(out.dtype(), [&](auto tag) -> Kernel {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, bool>) {
      UnsupportedType(inst, out.dtype());
    } else {
      // Runs of `stride` equal values, counting 0..size-1, repeated: a
      // fill per run, no division per element.
      const bool f16 = out.dtype() == DType::kF16;
      return [=](const KernelArgs& a) {
        if (n == 0) return;
        T* o = reinterpret_cast<T*>(a.outputs[0]);
        std::vector<T> values(size);
        for (int64_t v = 0; v < size; ++v) {
          if constexpr (std::is_same_v<T, HalfBits>) {  // f16 / bf16, exact below 2^24
            const auto f = static_cast<float>(v);
            values[v] = HalfBits{f16 ? hlo::FloatToHalf(f) : hlo::FloatToBFloat16(f)};
          } else {
            values[v] = static_cast<T>(v);
          }
        }
        for (int64_t i = 0; i < n;) {
          for (int64_t v = 0; v < size; ++v, i += stride) std::fill_n(o + i, stride, values[v]);
        }
      };
    }
  })};
}

// broadcast: a fill split over the pool when one value goes everywhere, else
// a strided copy that reads each source element along its kept dims.
KernelInfo BroadcastKernel(const hlo::Instruction& inst, ThreadPool* pool) {
  const Shape& out = inst.shape();
  const Shape& in = inst.operand(0)->shape();
  const int64_t es = DTypeSize(out.dtype());
  const std::vector<int64_t> out_dims = out.dims();
  const std::vector<int64_t> out_strides = RowMajorStrides(out_dims);
  const std::vector<int64_t> in_strides = RowMajorStrides(in.dims());
  if (in.num_elements() == 1) {  // one value everywhere: a fill, split over the pool
    const int64_t n = out.num_elements();
    auto fill = [n, pool](auto tag) -> Kernel {
      using W = typename decltype(tag)::type;
      return [n, pool](const KernelArgs& a) {
        W v;
        std::memcpy(&v, a.operands[0], sizeof v);
        W* o = reinterpret_cast<W*>(a.outputs[0]);
        pool->ParallelFor(n, kElementwiseGrain,
                          [&](int64_t lo, int64_t hi) { std::fill(o + lo, o + hi, v); });
      };
    };
    switch (es) {
      case 1:
        return {fill(TypeTag<uint8_t>{})};
      case 2:
        return {fill(TypeTag<uint16_t>{})};
      case 4:
        return {fill(TypeTag<uint32_t>{})};
      case 8:
        return {fill(TypeTag<uint64_t>{})};
      case 16:
        return {fill(TypeTag<Element16>{})};
      default:
        break;
    }
  }
  std::vector<int64_t> src_strides(out_dims.size(), 0);
  for (size_t k = 0; k < inst.dimensions.size(); ++k)
    src_strides[inst.dimensions[k]] = in_strides[k];
  return {[=](const KernelArgs& a) {
    CopyStrided(es, out_dims, a.operands[0], src_strides, a.outputs[0], out_strides, pool);
  }};
}

}  // namespace

KernelInfo MakeDataMovementKernel(const hlo::Instruction& inst, ThreadPool& pool_ref) {
  ThreadPool* pool = &pool_ref;
  const Shape& out = inst.shape();
  const int64_t es = DTypeSize(out.dtype());
  const std::vector<int64_t> out_dims = out.dims();
  const std::vector<int64_t> out_strides = RowMajorStrides(out_dims);
  const Shape& in =
      inst.operand_count() > 0 ? inst.operand(0)->shape() : out;  // iota has no operand
  const std::vector<int64_t> in_strides =
      in.is_array() ? RowMajorStrides(in.dims()) : std::vector<int64_t>{};
  switch (inst.opcode()) {
    case Opcode::kIota:
      return IotaKernel(inst);
    case Opcode::kBroadcast:
      return BroadcastKernel(inst, pool);
    case Opcode::kTranspose: {
      std::vector<int64_t> src_strides;
      for (int64_t p : inst.dimensions) src_strides.push_back(in_strides[p]);
      return {[=](const KernelArgs& a) {
        CopyStrided(es, out_dims, a.operands[0], src_strides, a.outputs[0], out_strides, pool);
      }};
    }
    case Opcode::kCopy:
    case Opcode::kCustomCall:  // a manual-sharding boundary on one device
    case Opcode::kReshape: {
      int64_t bytes = out.byte_size();
      return {[=](const KernelArgs& a) {
        if (a.outputs[0] != a.operands[0]) std::memcpy(a.outputs[0], a.operands[0], bytes);
      }};
    }
    case Opcode::kSlice: {
      int64_t offset = 0;
      std::vector<int64_t> src_strides;
      for (size_t i = 0; i < inst.slice.size(); ++i) {
        offset += inst.slice[i].start * in_strides[i];
        src_strides.push_back(in_strides[i] * inst.slice[i].stride);
      }
      return {[=](const KernelArgs& a) {
        CopyStrided(es, out_dims, a.operands[0] + offset * es, src_strides, a.outputs[0],
                    out_strides, pool);
      }};
    }
    case Opcode::kDynamicSlice: {
      std::vector<DType> types;
      for (int64_t i = 1; i < inst.operand_count(); ++i)
        types.push_back(inst.operand(i)->shape().dtype());
      std::vector<int64_t> in_dims = in.dims();
      return {[=](const KernelArgs& a) {
        auto starts = ClampedStarts(a, 1, types, in_dims, out_dims);
        int64_t offset = 0;
        for (size_t i = 0; i < starts.size(); ++i) offset += starts[i] * in_strides[i];
        CopyStrided(es, out_dims, a.operands[0] + offset * es, in_strides, a.outputs[0],
                    out_strides, pool);
      }};
    }
    case Opcode::kDynamicUpdateSlice: {
      std::vector<DType> types;
      for (int64_t i = 2; i < inst.operand_count(); ++i)
        types.push_back(inst.operand(i)->shape().dtype());
      std::vector<int64_t> update_dims = inst.operand(1)->shape().dims();
      std::vector<int64_t> update_strides = RowMajorStrides(update_dims);
      int64_t bytes = out.byte_size();
      return {[=](const KernelArgs& a) {
        // In place when the planner gave the output the operand's storage.
        if (a.outputs[0] != a.operands[0]) std::memcpy(a.outputs[0], a.operands[0], bytes);
        auto starts = ClampedStarts(a, 2, types, out_dims, update_dims);
        int64_t offset = 0;
        for (size_t i = 0; i < starts.size(); ++i) offset += starts[i] * out_strides[i];
        // The planner had the update computed in its place (Step::place).
        if (a.operands[1] == a.outputs[0] + offset * es) return;
        CopyStrided(es, update_dims, a.operands[1], update_strides, a.outputs[0] + offset * es,
                    out_strides, pool);
      }};
    }
    case Opcode::kConcatenate: {
      int64_t dim = inst.dimensions[0];
      std::vector<std::vector<int64_t>> dims_list, strides_list;
      std::vector<int64_t> offsets;
      int64_t offset = 0;
      for (const hlo::Instruction* op : inst.operands()) {
        dims_list.push_back(op->shape().dims());
        strides_list.push_back(RowMajorStrides(op->shape().dims()));
        offsets.push_back(offset * out_strides[dim]);
        offset += op->shape().dim(dim);
      }
      return {[=](const KernelArgs& a) {
        for (size_t k = 0; k < dims_list.size(); ++k) {
          CopyStrided(es, dims_list[k], a.operands[k], strides_list[k],
                      a.outputs[0] + offsets[k] * es, out_strides, pool);
        }
      }};
    }
    case Opcode::kPad: {
      // Input element k of dim i lands at low + k * (interior + 1); negative
      // padding crops.
      std::vector<int64_t> copy_dims, src_off, dst_strides;
      int64_t src_offset = 0, dst_offset = 0;
      bool empty = false;
      for (size_t i = 0; i < out_dims.size(); ++i) {
        const hlo::PadRange& p = inst.padding[i];
        int64_t step = p.interior + 1;
        int64_t k_lo = p.low >= 0 ? 0 : (-p.low + step - 1) / step;
        int64_t k_hi = in.dim(i);  // exclusive
        while (k_hi > k_lo && p.low + (k_hi - 1) * step >= out_dims[i]) --k_hi;
        if (k_hi <= k_lo) empty = true;
        copy_dims.push_back(std::max<int64_t>(k_hi - k_lo, 0));
        src_offset += k_lo * in_strides[i];
        dst_offset += (p.low + k_lo * step) * out_strides[i];
        dst_strides.push_back(out_strides[i] * step);
      }
      int64_t n = out.num_elements();
      return {[=](const KernelArgs& a) {
        Fill(es, a.outputs[0], n, a.operands[1]);
        if (!empty) {
          CopyStrided(es, copy_dims, a.operands[0] + src_offset * es, in_strides,
                      a.outputs[0] + dst_offset * es, dst_strides, pool);
        }
      }};
    }
    case Opcode::kReverse: {
      int64_t offset = 0;
      std::vector<int64_t> src_strides = in_strides;
      for (int64_t d : inst.dimensions) {
        if (out_dims[d] == 0) continue;
        offset += (out_dims[d] - 1) * in_strides[d];
        src_strides[d] = -in_strides[d];
      }
      return {[=](const KernelArgs& a) {
        CopyStrided(es, out_dims, a.operands[0] + offset * es, src_strides, a.outputs[0],
                    out_strides, pool);
      }};
    }
    default:
      break;
  }
  Fail("[runtime] no data-movement kernel for {}", hlo::OpcodeName(inst.opcode()));
}

}  // namespace strata::runtime
