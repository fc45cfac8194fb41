// reduce: reducers that are one binary op (add, multiply, maximum, minimum,
// and, or) get native loops over a canonical view of the input; anything else
// (variadic reduce, arbitrary to_apply) runs the compiled to_apply per element.
// Compiled once per instruction set (isa.h).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/isa_kernels.h"
#include "kernels/reduce_ops.h"

STRATA_ISA_BEGIN
namespace strata::runtime::STRATA_ISA_NAMESPACE {
namespace {

using hlo::Opcode;

struct Group {
  int64_t size;
  bool reduced;
};

// Input dims merged into alternating kept / reduced groups (unit dims dropped).
std::vector<Group> Canonicalize(const std::vector<int64_t>& dims,
                                const std::vector<int64_t>& reduced) {
  std::vector<Group> groups;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == 1) continue;
    bool r = std::find(reduced.begin(), reduced.end(), static_cast<int64_t>(i)) != reduced.end();
    if (!groups.empty() && groups.back().reduced == r) {
      groups.back().size *= dims[i];
    } else {
      groups.push_back({dims[i], r});
    }
  }
  return groups;
}

// Maps each input element (row-major) to its output offset, incrementally.
struct OutputOdometer {
  std::vector<int64_t> dims, out_strides, idx;
  int64_t offset = 0;
  OutputOdometer(const std::vector<int64_t>& in_dims, const std::vector<int64_t>& reduced) {
    dims = in_dims;
    std::vector<int64_t> kept;
    for (size_t i = 0; i < dims.size(); ++i) {
      if (std::find(reduced.begin(), reduced.end(), static_cast<int64_t>(i)) == reduced.end()) {
        kept.push_back(dims[i]);
      }
    }
    auto kept_strides = RowMajorStrides(kept);
    size_t k = 0;
    for (size_t i = 0; i < dims.size(); ++i) {
      bool r = std::find(reduced.begin(), reduced.end(), static_cast<int64_t>(i)) != reduced.end();
      out_strides.push_back(r ? 0 : kept_strides[k++]);
    }
    idx.assign(dims.size(), 0);
  }
  void Next() {
    for (int64_t i = static_cast<int64_t>(dims.size()) - 1; i >= 0; --i) {
      offset += out_strides[i];
      if (++idx[i] < dims[i]) return;
      offset -= out_strides[i] * dims[i];
      idx[i] = 0;
    }
  }
};

template <typename T>
Kernel NativeReduce(const hlo::Instruction& inst, Opcode op, ThreadPool* pool) {
  const std::vector<int64_t> in_dims = inst.operand(0)->shape().dims();
  const std::vector<int64_t> reduced = inst.dimensions;
  const int64_t in_n = inst.operand(0)->shape().num_elements();
  const int64_t out_n = inst.shape().num_elements();
  const std::vector<Group> groups = Canonicalize(in_dims, reduced);
  Reducer<T> f{op};
  return [=](const KernelArgs& a) {
    const T* x = reinterpret_cast<const T*>(a.operands[0]);
    T init;
    std::memcpy(&init, a.operands[1], sizeof(T));
    T* out = reinterpret_cast<T*>(a.outputs[0]);
    if (in_n == 0) {
      std::fill_n(out, out_n, init);
      return;
    }
    size_t g = groups.size();
    if (g == 0 || (g == 1 && !groups[0].reduced)) {  // nothing to reduce
      for (int64_t i = 0; i < out_n; ++i) out[i] = f(init, x[i]);
      return;
    }
    if (g == 1) {  // everything: fixed 64K chunks keep the result thread-count independent
      constexpr int64_t kChunk = 1 << 16;
      int64_t chunks = (in_n + kChunk - 1) / kChunk;
      std::vector<T> partial(chunks);
      T identity = op == Opcode::kAdd ? T(0) : op == Opcode::kMultiply ? T(1) : x[0];
      pool->ParallelFor(chunks, 1, [&](int64_t lo, int64_t hi) {
        for (int64_t c = lo; c < hi; ++c) {
          int64_t begin = c * kChunk;
          partial[c] = ReduceContiguous(x + begin, std::min(kChunk, in_n - begin), identity, f);
        }
      });
      T acc = init;
      for (T p : partial) acc = f(acc, p);
      out[0] = acc;
      return;
    }
    if (g == 2 && !groups[0].reduced) {  // [K, R]: one contiguous row per output
      int64_t rows = groups[0].size, r = groups[1].size;
      pool->ParallelFor(rows, std::max<int64_t>(1, kElementwiseGrain / r),
                        [&](int64_t lo, int64_t hi) {
                          for (int64_t i = lo; i < hi; ++i)
                            out[i] = ReduceContiguous(x + i * r, r, init, f);
                        });
      return;
    }
    if ((g == 2 && groups[0].reduced) || (g == 3 && !groups[0].reduced)) {  // [K1?, R, K2]
      int64_t outer = g == 3 ? groups[0].size : 1;
      int64_t r = groups[g - 2].size, k = groups[g - 1].size;
      pool->ParallelFor(outer * k, std::max<int64_t>(64, kElementwiseGrain / r),
                        [&](int64_t lo, int64_t hi) {
                          // Work item = one output element; walk rows so the inner loop is
                          // contiguous.
                          int64_t i = lo;
                          while (i < hi) {
                            int64_t o = i / k, k_lo = i % k, k_hi = std::min(k, k_lo + (hi - i));
                            T* dst = out + o * k;
                            const T* base = x + o * r * k;
                            for (int64_t j = k_lo; j < k_hi; ++j) dst[j] = init;
                            for (int64_t row = 0; row < r; ++row) {
                              const T* src = base + row * k;
                              for (int64_t j = k_lo; j < k_hi; ++j) dst[j] = f(dst[j], src[j]);
                            }
                            i += k_hi - k_lo;
                          }
                        });
      return;
    }
    std::fill_n(out, out_n, init);  // general: one pass over the input
    OutputOdometer odo(in_dims, reduced);
    for (int64_t i = 0; i < in_n; ++i, odo.Next()) out[odo.offset] = f(out[odo.offset], x[i]);
  };
}

}  // namespace

KernelInfo MakeReduceKernel(const hlo::Instruction& inst, ThreadPool& pool,
                            ScalarFunction to_apply) {
  int64_t n = inst.operand_count() / 2;
  DType dtype = inst.operand(0)->shape().dtype();
  if (auto op = SimpleReducer(*inst.called[0]); op && n == 1 && !IsComplex(dtype)) {
    if (dtype == DType::kF16 || dtype == DType::kBF16) UnsupportedType(inst, dtype);
    return {DispatchArithmeticType(inst, dtype, [&](auto tag) -> Kernel {
      using T = typename decltype(tag)::type;
      return NativeReduce<T>(inst, *op, &pool);
    })};
  }
  // General reducer: accumulators start at init; each input element in
  // row-major order is combined through to_apply.
  const std::vector<int64_t> in_dims = inst.operand(0)->shape().dims();
  const std::vector<int64_t> reduced = inst.dimensions;
  const int64_t in_n = inst.operand(0)->shape().num_elements();
  const int64_t out_n = Product(inst.shape().Leaves()[0].dims());
  std::vector<int64_t> sizes;
  for (int64_t i = 0; i < n; ++i) sizes.push_back(DTypeSize(inst.operand(i)->shape().dtype()));
  int64_t scratch = 16 * n + to_apply.arena_bytes;
  return {[=](const KernelArgs& a) {
            ScalarCall call = to_apply.bind(a.scratch + 16 * n);
            for (int64_t k = 0; k < n; ++k) {
              for (int64_t o = 0; o < out_n; ++o) {
                std::memcpy(a.outputs[k] + o * sizes[k], a.operands[n + k], sizes[k]);
              }
            }
            std::vector<const uint8_t*> args(2 * n);
            std::vector<uint8_t*> results(n);
            for (int64_t k = 0; k < n; ++k) results[k] = a.scratch + 16 * k;
            OutputOdometer odo(in_dims, reduced);
            for (int64_t i = 0; i < in_n; ++i, odo.Next()) {
              for (int64_t k = 0; k < n; ++k) {
                args[k] = a.outputs[k] + odo.offset * sizes[k];
                args[n + k] = a.operands[k] + i * sizes[k];
              }
              call(args.data(), results.data());
              for (int64_t k = 0; k < n; ++k) {
                std::memcpy(a.outputs[k] + odo.offset * sizes[k], results[k], sizes[k]);
              }
            }
          },
          scratch};
}

}  // namespace strata::runtime::STRATA_ISA_NAMESPACE
STRATA_ISA_END
