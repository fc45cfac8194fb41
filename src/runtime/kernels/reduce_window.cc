// reduce-window and select-and-scatter: windows over every dim of an
// operand, with strides, padding and both dilations as a convolution's
// (pooling, and the gradient of max pooling). A reducer that is one binary
// op, and a select that is one compare with a scatter that adds, run native
// loops (a window spanning a whole dim, padded on one side, as a running
// scan); any other computation runs compiled, element by element.
#include <cstring>
#include <optional>
#include <vector>

#include "kernels/elementwise_ops.h"
#include "kernels/kernels.h"
#include "kernels/reduce_ops.h"
#include "strata/hlo/convolution.h"

namespace strata::runtime {
namespace {

using hlo::Opcode;
using STRATA_ISA_NAMESPACE::Reducer;  // this file is built once, baseline
using STRATA_ISA_NAMESPACE::elementwise::CompareValues;

// The windows of `window` over an operand of `dims`: output position `o`
// reads tap `t` at TapOffset(o, t) (-1 in padding or a dilation hole).
struct Windows {
  std::vector<int64_t> dims, strides, out_dims, sizes;
  std::vector<hlo::WindowDim> window;
  int64_t outputs = 1, taps = 1;

  Windows(const std::vector<int64_t>& operand_dims, std::vector<hlo::WindowDim> w)
      : dims(operand_dims), strides(operand_dims.size(), 1), window(std::move(w)) {
    for (int64_t d = static_cast<int64_t>(dims.size()) - 2; d >= 0; --d)
      strides[d] = strides[d + 1] * dims[d + 1];
    for (size_t d = 0; d < dims.size(); ++d) {
      out_dims.push_back(hlo::ConvolutionOutputSize(dims[d], window[d]));
      sizes.push_back(window[d].size);
      outputs *= out_dims.back();
      taps *= window[d].size;
    }
  }

  int64_t TapOffset(int64_t o, int64_t t) const {
    int64_t offset = 0;
    for (int64_t d = static_cast<int64_t>(dims.size()) - 1; d >= 0; --d) {
      const hlo::WindowDim& w = window[d];
      const int64_t i = o % out_dims[d], k = t % w.size;
      o /= out_dims[d];
      t /= w.size;
      const int64_t at = i * w.stride - w.pad_low + k * w.window_dilation;
      if (at < 0 || at % w.base_dilation != 0 || at / w.base_dilation >= dims[d]) return -1;
      offset += at / w.base_dilation * strides[d];
    }
    return offset;
  }
};

// A native fold's input, initial value (a scalar operand) and output.
template <typename T>
struct Folding {
  const T* x;
  T init;
  T* out;
  static Folding Of(const KernelArgs& a) {
    Folding f{reinterpret_cast<const T*>(a.operands[0]), T(), reinterpret_cast<T*>(a.outputs[0])};
    std::memcpy(&f.init, a.operands[1], sizeof(T));
    return f;
  }
};

template <typename T>
Kernel NativeReduceWindow(const Windows& windows, Opcode op, ThreadPool* pool) {
  return [windows, op, pool](const KernelArgs& a) {
    const auto [x, init, out] = Folding<T>::Of(a);
    const Reducer<T> f{op};
    pool->ParallelFor(windows.outputs, std::max<int64_t>(1, 4096 / windows.taps),
                      [&](int64_t lo, int64_t hi) {
                        for (int64_t o = lo; o < hi; ++o) {
                          T acc = init;
                          for (int64_t t = 0; t < windows.taps; ++t) {
                            const int64_t at = windows.TapOffset(o, t);
                            if (at >= 0) acc = f(acc, x[at]);
                          }
                          out[o] = acc;
                        }
                      });
  };
}

// A running scan: one dim d whose window covers all of it (size n, stride
// 1, no dilation), padded by n - 1 on one side and nothing on the other;
// every other dim a window of one. Output k folds elements 0..k (a prefix)
// or k..n-1 (a suffix): cumsum and its gradient, in one pass a row.
struct Scan {
  int64_t outer = 1, n = 1, inner = 1;
  bool suffix = false;
};

std::optional<Scan> FindScan(const std::vector<int64_t>& dims,
                             const std::vector<hlo::WindowDim>& window) {
  std::optional<Scan> scan;
  for (size_t d = 0; d < dims.size(); ++d) {
    const hlo::WindowDim& w = window[d];
    if (w.stride != 1 || w.window_dilation != 1 || w.base_dilation != 1 || w.window_reversal) {
      return std::nullopt;
    }
    if (w.size == 1 && w.pad_low == 0 && w.pad_high == 0) continue;
    const int64_t n = dims[d];
    const bool prefix = w.pad_low == n - 1 && w.pad_high == 0;
    const bool suffix = w.pad_low == 0 && w.pad_high == n - 1;
    if (scan || w.size != n || n < 2 || (!prefix && !suffix)) return std::nullopt;
    scan = Scan{1, n, 1, suffix};
    for (size_t i = 0; i < d; ++i) scan->outer *= dims[i];
    for (size_t i = d + 1; i < dims.size(); ++i) scan->inner *= dims[i];
  }
  return scan;
}

template <typename T>
Kernel NativeScan(const Scan& scan, Opcode op, ThreadPool* pool) {
  return [scan, op, pool](const KernelArgs& a) {
    const auto [x, init, out] = Folding<T>::Of(a);
    const Reducer<T> f{op};
    const int64_t n = scan.n, inner = scan.inner;
    if (scan.outer == 0 || inner == 0) return;  // nothing to fold (and no block of 0 to divide by)
    if (inner == 1) {  // contiguous rows: the running value stays in a register
      pool->ParallelFor(scan.outer, std::max<int64_t>(1, 8192 / n), [&](int64_t lo, int64_t hi) {
        for (int64_t o = lo; o < hi; ++o) {
          const T* xs = x + o * n;
          T* ys = out + o * n;
          T acc = init;
          if (scan.suffix) {
            for (int64_t k = n - 1; k >= 0; --k) ys[k] = acc = f(acc, xs[k]);
          } else {
            for (int64_t k = 0; k < n; ++k) ys[k] = acc = f(acc, xs[k]);
          }
        }
      });
      return;
    }
    // Blocks of rows: an outer index and a run of inner ones, each folded
    // along the dim in step, so the innermost loop is contiguous.
    const int64_t block = std::min<int64_t>(inner, 1024);
    const int64_t blocks_per_outer = (inner + block - 1) / block;
    pool->ParallelFor(scan.outer * blocks_per_outer, std::max<int64_t>(1, 8192 / (n * block)),
                      [&](int64_t lo, int64_t hi) {
                        for (int64_t b = lo; b < hi; ++b) {
                          const int64_t o = b / blocks_per_outer;
                          const int64_t i0 = (b % blocks_per_outer) * block;
                          const int64_t i1 = std::min(inner, i0 + block);
                          const T* xs = x + o * n * inner;
                          T* ys = out + o * n * inner;
                          for (int64_t step = 0; step < n; ++step) {
                            const int64_t k = scan.suffix ? n - 1 - step : step;
                            const int64_t previous = scan.suffix ? k + 1 : k - 1;
                            for (int64_t i = i0; i < i1; ++i) {
                              const T before = step == 0 ? init : ys[previous * inner + i];
                              ys[k * inner + i] = f(before, xs[k * inner + i]);
                            }
                          }
                        }
                      });
  };
}

// The one compare a select computation is, as "keep a over b" (a, b the
// parameters in order), or nullopt.
std::optional<hlo::Comparison> SimpleSelect(const hlo::Computation& c) {
  const hlo::Instruction* root = c.root();
  if (c.instructions().size() != 3 || root->opcode() != Opcode::kCompare) return std::nullopt;
  const hlo::Instruction* a = root->operand(0);
  const hlo::Instruction* b = root->operand(1);
  if (a->opcode() != Opcode::kParameter || b->opcode() != Opcode::kParameter) return std::nullopt;
  if (a->parameter_number == 0 && b->parameter_number == 1) return root->direction;
  if (a->parameter_number == 1 && b->parameter_number == 0) {
    switch (root->direction) {  // b op a: the mirrored comparison of a and b
      case hlo::Comparison::kGe:
        return hlo::Comparison::kLe;
      case hlo::Comparison::kGt:
        return hlo::Comparison::kLt;
      case hlo::Comparison::kLe:
        return hlo::Comparison::kGe;
      case hlo::Comparison::kLt:
        return hlo::Comparison::kGt;
      default:
        return root->direction;
    }
  }
  return std::nullopt;
}

template <typename T>
Kernel NativeSelectAndScatter(const Windows& windows, hlo::Comparison select, int64_t n) {
  return [windows, select, n](const KernelArgs& a) {
    const T* x = reinterpret_cast<const T*>(a.operands[0]);
    const T* source = reinterpret_cast<const T*>(a.operands[1]);
    T init;
    std::memcpy(&init, a.operands[2], sizeof(T));
    T* out = reinterpret_cast<T*>(a.outputs[0]);
    std::fill_n(out, n, init);
    for (int64_t o = 0; o < windows.outputs; ++o) {  // in order: windows overlap
      int64_t chosen = -1;
      for (int64_t t = 0; t < windows.taps; ++t) {
        const int64_t at = windows.TapOffset(o, t);
        if (at >= 0 && (chosen < 0 || !CompareValues(select, x[chosen], x[at]))) chosen = at;
      }
      if (chosen >= 0) out[chosen] = WrappingAdd(out[chosen], source[o]);
    }
  };
}

}  // namespace

KernelInfo MakeReduceWindowKernel(const hlo::Instruction& inst, ThreadPool& pool,
                                  ScalarFunction to_apply) {
  const int64_t n = inst.operand_count() / 2;
  const DType dtype = inst.operand(0)->shape().dtype();
  const Windows windows(inst.operand(0)->shape().dims(), inst.window);
  if (auto op = hlo::SimpleReducer(*inst.called[0]); op && n == 1) {
    if (dtype == DType::kF16 || dtype == DType::kBF16) UnsupportedType(inst, dtype);
    if (auto scan = FindScan(inst.operand(0)->shape().dims(), inst.window)) {
      return {DispatchArithmeticType(inst, dtype, [&](auto tag) -> Kernel {
        using T = typename decltype(tag)::type;
        return NativeScan<T>(*scan, *op, &pool);
      })};
    }
    return {DispatchArithmeticType(inst, dtype, [&](auto tag) -> Kernel {
      using T = typename decltype(tag)::type;
      return NativeReduceWindow<T>(windows, *op, &pool);
    })};
  }
  // Any to_apply: each window's valid elements in row-major order, folded
  // into the accumulators (which start at the inits).
  std::vector<int64_t> sizes;
  for (int64_t i = 0; i < n; ++i) sizes.push_back(DTypeSize(inst.operand(i)->shape().dtype()));
  const int64_t scratch = 32 * n + to_apply.arena_bytes;
  return {[=](const KernelArgs& a) {
            ScalarCall call = to_apply.bind(a.scratch + 32 * n);
            std::vector<const uint8_t*> args(2 * n);
            std::vector<uint8_t*> results(n);
            for (int64_t k = 0; k < n; ++k) results[k] = a.scratch + 16 * k;
            uint8_t* acc = a.scratch + 16 * n;  // n accumulators, 16 bytes each
            for (int64_t o = 0; o < windows.outputs; ++o) {
              for (int64_t k = 0; k < n; ++k)
                std::memcpy(acc + 16 * k, a.operands[n + k], sizes[k]);
              for (int64_t t = 0; t < windows.taps; ++t) {
                const int64_t at = windows.TapOffset(o, t);
                if (at < 0) continue;
                for (int64_t k = 0; k < n; ++k) {
                  args[k] = acc + 16 * k;
                  args[n + k] = a.operands[k] + at * sizes[k];
                }
                call(args.data(), results.data());
                for (int64_t k = 0; k < n; ++k) std::memcpy(acc + 16 * k, results[k], sizes[k]);
              }
              for (int64_t k = 0; k < n; ++k)
                std::memcpy(a.outputs[k] + o * sizes[k], acc + 16 * k, sizes[k]);
            }
          },
          scratch};
}

KernelInfo MakeSelectAndScatterKernel(const hlo::Instruction& inst, ThreadPool& pool,
                                      ScalarFunction select, ScalarFunction scatter) {
  const DType dtype = inst.shape().dtype();
  if (dtype == DType::kF16 || dtype == DType::kBF16) UnsupportedType(inst, dtype);
  const Windows windows(inst.operand(0)->shape().dims(), inst.window);
  const int64_t n = inst.shape().num_elements();
  const auto compare = SimpleSelect(*inst.called[0]);
  const auto combine = hlo::SimpleReducer(*inst.called[1]);
  if (compare && combine == Opcode::kAdd && dtype != DType::kPred) {
    return {DispatchArithmeticType(inst, dtype, [&](auto tag) -> Kernel {
      using T = typename decltype(tag)::type;
      return NativeSelectAndScatter<T>(windows, *compare, n);
    })};
  }
  const int64_t size = DTypeSize(dtype);
  const int64_t scratch = 32 + select.arena_bytes + scatter.arena_bytes;
  return {
      [=](const KernelArgs& a) {
        ScalarCall keep = select.bind(a.scratch + 32);
        ScalarCall gather = scatter.bind(a.scratch + 32 + select.arena_bytes);
        uint8_t* flag = a.scratch;
        uint8_t* value = a.scratch + 16;
        for (int64_t i = 0; i < n; ++i) std::memcpy(a.outputs[0] + i * size, a.operands[2], size);
        for (int64_t o = 0; o < windows.outputs; ++o) {
          int64_t chosen = -1;
          for (int64_t t = 0; t < windows.taps; ++t) {
            const int64_t at = windows.TapOffset(o, t);
            if (at < 0) continue;
            if (chosen >= 0) {
              const uint8_t* args[2] = {a.operands[0] + chosen * size, a.operands[0] + at * size};
              uint8_t* results[1] = {flag};
              keep(args, results);
              if (flag[0]) continue;
            }
            chosen = at;
          }
          if (chosen < 0) continue;
          uint8_t* slot = a.outputs[0] + chosen * size;
          const uint8_t* args[2] = {slot, a.operands[1] + o * size};
          uint8_t* results[1] = {value};
          gather(args, results);
          std::memcpy(slot, value, size);
        }
      },
      scratch};
}

}  // namespace strata::runtime
