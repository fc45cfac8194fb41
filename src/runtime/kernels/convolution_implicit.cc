#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "kernels/convolution.h"

namespace strata::runtime::conv {

// ---- implicit GEMM: planar (NCHW) forward convolutions ---------------------
//
// With each input feature's spatial plane contiguous (PyTorch's NCHW) and
// the output's too, batch element n's output of group q is one GEMM,
//   out[f, position] = kernel[f, (c, tap)] · patches[(c, tap), position],
// whose A is the kernel (OIHW is row-major [O, I·taps] already), whose C is
// the output in place, and whose B, the patches, is never built: the GEMM
// packs its panels straight from the input (GemmPackingB), each row of a
// panel a shifted run of one input row. Nothing is copied into channels-last
// and no im2col block is written and read back.

// Output positions per GEMM: fewer than a panel would be mostly padding.
constexpr int64_t kMinImplicitPositions = 48;

bool ImplicitGemmApplies(const Geometry& g) {
  if (g.spatial == 0 || g.batch_grouped || g.group_inputs * g.taps == 0) return false;
  if (g.positions < kMinImplicitPositions || g.in_feature_stride == 1) return false;
  int64_t in_stride = 1, out_stride = 1;
  for (int64_t s = g.spatial - 1; s >= 0; --s) {
    if (g.window[s].base_dilation != 1) return false;  // phase classes (GemmConvolution)
    if (g.in_spatial_stride[s] != in_stride || g.out_spatial_stride[s] != out_stride) return false;
    in_stride *= g.in_size[s];
    out_stride *= g.out_size[s];
  }
  return true;
}

// Packs patches[p0 : p0 + kc, j0 : j0 + cols] of one group: row k = (input
// feature c, tap t) holds, for each column, the input element that tap
// reads at that output position (0 in padding). Column J is batch element
// J / positions (from `in`, the first's), position J % positions.
template <typename T>
struct PatchPacker {
  const Geometry* g;
  const std::vector<std::vector<int64_t>>* tap_index;  // per tap, its window element per dim
  const T* in;                                         // batch element 0 of the group

  // A stretch of a panel's positions along one output row.
  struct Run {
    int64_t column, length, first;  // panel column, positions, first output column
    int64_t batch;                  // the batch element's offset in the input
    std::vector<int64_t> outer;     // the row's output coordinates in the other dims
  };

  void operator()(int64_t p0, int64_t kc, int64_t j0, int64_t cols, T* out, int64_t nr) const {
    const Geometry& h = *g;
    const int64_t last = h.spatial - 1;
    const hlo::WindowDim& lw = h.window[last];
    const int64_t row_out = h.out_size[last], row_in = h.in_size[last], st = lw.stride;
    std::vector<Run> runs;
    for (int64_t jp = 0; jp < cols; jp += nr, out += kc * nr) {
      const int64_t width = std::min(nr, cols - jp);
      runs.clear();  // the same for every row of the panel
      for (int64_t j = 0; j < width;) {
        const int64_t position = (j0 + jp + j) % h.positions, first = position % row_out;
        Run r{j, std::min(width - j, row_out - first), first,
              (j0 + jp + j) / h.positions * h.in_batch_stride, std::vector<int64_t>(last)};
        for (int64_t s = last - 1, rest = position / row_out; s >= 0; --s) {
          r.outer[s] = rest % h.out_size[s];
          rest /= h.out_size[s];
        }
        j += r.length;
        runs.push_back(std::move(r));
      }
      std::vector<int64_t> row_at(runs.size());  // each run's row offset, or -1 in padding
      int64_t outer_tap = -1, outer_feature = -1;
      for (int64_t p = 0; p < kc; ++p) {
        const int64_t k = p0 + p, c = k / h.taps, t = k % h.taps;
        const std::vector<int64_t>& win = (*tap_index)[t];
        // Taps along the last dim share their rows' offsets: worked out
        // again only when the window's outer position changes.
        if (t / lw.size != outer_tap || c != outer_feature) {
          outer_tap = t / lw.size;
          outer_feature = c;
          for (size_t ri = 0; ri < runs.size(); ++ri) {
            int64_t at = 0;
            for (int64_t s = 0; s < last && at >= 0; ++s) {
              const hlo::WindowDim& w = h.window[s];
              const int64_t i =
                  runs[ri].outer[s] * w.stride - w.pad_low + win[s] * w.window_dilation;
              at = i < 0 || i >= h.in_size[s] ? -1 : at + i * h.in_spatial_stride[s];
            }
            row_at[ri] = at < 0 ? -1 : at + runs[ri].batch + c * h.in_feature_stride;
          }
        }
        T* dst = out + p * nr;
        // Output column o reads input column o * st + shift, inside the row
        // for o in [o_lo, o_hi).
        const int64_t shift = win[last] * lw.window_dilation - lw.pad_low;
        const int64_t o_lo = shift < 0 ? (-shift + st - 1) / st : 0;
        const int64_t o_hi = row_in - shift <= 0 ? 0 : (row_in - shift + st - 1) / st;
        for (size_t ri = 0; ri < runs.size(); ++ri) {
          const Run& r = runs[ri];
          T* d = dst + r.column;  // d[o - r.first] is output column o's
          const int64_t end = r.first + r.length, at = row_at[ri];
          const int64_t lo = at < 0 ? end : std::clamp(o_lo, r.first, end);
          const int64_t hi = at < 0 ? end : std::clamp(o_hi, lo, end);
          int64_t j = 0;  // o - r.first
          for (; j < lo - r.first; ++j) d[j] = T(0);
          if (hi > lo) {
            const T* src = in + at + lo * st + shift;  // output column lo's input
            if (st == 1) {
              for (int64_t i = 0; i < hi - lo; ++i) d[j + i] = src[i];
            } else {
              for (int64_t i = 0; i < hi - lo; ++i) d[j + i] = src[i * st];
            }
            j = hi - r.first;
          }
          for (; j < r.length; ++j) d[j] = T(0);
        }
        std::fill(dst + width, dst + nr, T(0));
      }
    }
  }
};

template <typename T>
MatrixView<const T> KernelRows(const Geometry& g, const T* kernel,
                               const std::vector<int64_t>& kernel_at, std::vector<T>& copy,
                               ThreadPool& pool) {
  const int64_t depth = g.group_inputs * g.taps;
  const int64_t tap_stride = g.taps > 1 ? kernel_at[1] - kernel_at[0] : 1;
  bool linear = g.kernel_in_stride == g.taps * tap_stride;
  for (int64_t t = 0; t < g.taps; ++t) linear = linear && kernel_at[t] == t * tap_stride;
  if (linear) return {kernel, g.kernel_out_stride, tap_stride};
  copy.resize(g.groups * g.group_outputs * depth);
  pool.ParallelFor(g.groups * g.group_outputs, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t f = lo; f < hi; ++f) {
      for (int64_t c = 0; c < g.group_inputs; ++c) {
        for (int64_t t = 0; t < g.taps; ++t) {
          copy[f * depth + c * g.taps + t] =
              kernel[f * g.kernel_out_stride + c * g.kernel_in_stride + kernel_at[t]];
        }
      }
    }
  });
  return {copy.data(), depth, 1};
}

template <typename T>
Kernel ImplicitGemmConvolution(const Geometry& g, ThreadPool* pool) {
  // Each tap's window element per dim, and its kernel offset.
  auto tap_index = std::make_shared<std::vector<std::vector<int64_t>>>(g.taps);
  std::vector<int64_t> kernel_at(g.taps);
  for (int64_t t = 0; t < g.taps; ++t) {
    std::vector<int64_t>& win = (*tap_index)[t];
    win.resize(g.spatial);
    for (int64_t s = g.spatial - 1, rest = t; s >= 0; --s) {
      win[s] = rest % g.window[s].size;
      rest /= g.window[s].size;
    }
    kernel_at[t] = TapOf(g, 0, t).kernel;
  }
  const int64_t depth = g.group_inputs * g.taps;
  return [g, pool, tap_index, kernel_at, depth](const KernelArgs& args) {
    const T* in = reinterpret_cast<const T*>(args.operands[0]);
    const T* kernel = reinterpret_cast<const T*>(args.operands[1]);
    T* out = reinterpret_cast<T*>(args.outputs[0]);
    if (g.batch == 0 || g.group_outputs == 0) return;
    // The kernel as A = [output feature, (input feature, tap)].
    std::vector<T> copy;
    const MatrixView<const T> a = KernelRows(g, kernel, kernel_at, copy, *pool);
    const int64_t panel = GemmTileFor<T>().columns;
    const int64_t padded = (g.positions + panel - 1) / panel * panel;
    auto kernel_of = [&](int64_t q) {
      MatrixView<const T> aq = a;
      aq.data += q * g.group_outputs * a.row_stride;
      return aq;
    };
    // Each group's columns are (batch element, position), position fastest.
    // A GEMM per batch element pads its last panel (196 positions are four
    // 64-wide panels); the batch's columns as one GEMM, into a scratch C
    // copied out feature by feature, pad once. Whichever keeps the busiest
    // thread's columns fewer (ties: a GEMM per batch element, no copy).
    const int64_t threads = pool->num_threads();
    const int64_t columns = g.batch * g.positions;
    const int64_t panels = (columns + panel - 1) / panel;
    const int64_t pieces = std::min(threads, panels);
    const int64_t per_element = (g.batch * g.groups + threads - 1) / threads * padded;
    const int64_t combined = g.groups * ((panels + pieces - 1) / pieces) * panel;
    if (combined < per_element) {
      const int64_t chunk = ((columns + pieces - 1) / pieces + panel - 1) / panel * panel;
      const int64_t chunks = (columns + chunk - 1) / chunk;
      pool->ParallelFor(g.groups * chunks, 1, [&](int64_t lo, int64_t hi) {
        std::vector<T> product;
        for (int64_t task = lo; task < hi; ++task) {
          const int64_t q = task / chunks, j0 = task % chunks * chunk;
          const int64_t cols = std::min(chunk, columns - j0);
          const PatchPacker<T> pack{&g, tap_index.get(), in + GroupInputOffset(g, q)};
          product.resize(g.group_outputs * cols);
          GemmPackingB<T>(
              g.group_outputs, cols, depth, kernel_of(q),
              [&](int64_t p0, int64_t kc, int64_t b0, int64_t nc, T* dst, int64_t nr) {
                pack(p0, kc, j0 + b0, nc, dst, nr);
              },
              product.data(), cols);
          for (int64_t j = 0; j < cols;) {  // runs of one batch element's positions
            const int64_t n = (j0 + j) / g.positions, p = (j0 + j) % g.positions;
            const int64_t run = std::min(cols - j, g.positions - p);
            T* dst = out + n * g.out_batch_stride + q * g.group_outputs * g.out_feature_stride + p;
            for (int64_t f = 0; f < g.group_outputs; ++f)
              std::copy_n(&product[f * cols + j], run, dst + f * g.out_feature_stride);
            j += run;
          }
        }
      });
      return;
    }
    // Otherwise a GEMM per (batch element, group), its output in place; cut
    // into column chunks only when there are fewer of them than threads.
    const int64_t units = g.batch * g.groups;
    int64_t chunks = 1;
    if (units < pool->num_threads())
      chunks = std::min((pool->num_threads() + units - 1) / units, padded / panel);
    const int64_t chunk = ((g.positions + chunks - 1) / chunks + panel - 1) / panel * panel;
    chunks = (g.positions + chunk - 1) / chunk;
    pool->ParallelFor(units * chunks, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t task = lo; task < hi; ++task) {
        const int64_t unit = task / chunks, j0 = task % chunks * chunk;
        const int64_t n = unit / g.groups, q = unit % g.groups;
        const int64_t cols = std::min(chunk, g.positions - j0);
        const PatchPacker<T> pack{&g, tap_index.get(), in + GroupInputOffset(g, q)};
        const int64_t first = n * g.positions + j0;  // batch element n's columns
        GemmPackingB<T>(
            g.group_outputs, cols, depth, kernel_of(q),
            [&](int64_t p0, int64_t kc, int64_t b0, int64_t nc, T* dst, int64_t nr) {
              pack(p0, kc, first + b0, nc, dst, nr);
            },
            out + n * g.out_batch_stride + q * g.group_outputs * g.out_feature_stride + j0,
            g.out_feature_stride);
      }
    });
  };
}

template MatrixView<const float> KernelRows(const Geometry&, const float*,
                                            const std::vector<int64_t>&, std::vector<float>&,
                                            ThreadPool&);
template MatrixView<const double> KernelRows(const Geometry&, const double*,
                                             const std::vector<int64_t>&, std::vector<double>&,
                                             ThreadPool&);
template Kernel ImplicitGemmConvolution<float>(const Geometry& g, ThreadPool* pool);
template Kernel ImplicitGemmConvolution<double>(const Geometry& g, ThreadPool* pool);

}  // namespace strata::runtime::conv
