#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "kernels/convolution.h"

namespace strata::runtime::conv {

// ---- implicit GEMM over output positions -------------------------------------
//
// The same product turned around: C[position, feature] = patches[position,
// (c, tap)] · kernel[(c, tap), feature]. The kernel, packed once per run
// into the GEMM's panels, is B; the patches are A, supplied a tile of mr
// positions at a time (GemmRowTiles). Padding is made real first (a
// zero-bordered copy of the input), so no read needs a bounds check. A tile
// is up to mr positions of one output row (a row's tiles as even as they
// can be: 7 as 4 + 3), evenly spaced in the input, so its element
// (i, (c, tap)) is at base + i * stride + offset[(c, tap)]: the indirect
// micro-kernel reads it where it lies and nothing is packed. Where a run of
// positions stays evenly spaced across rows (pointwise, unpadded), a tile
// may cross rows. Each block of positions is then transposed into the
// planar output.
//
// Against the form above (M = features), the GEMM's long side is the
// positions and the patches are never packed; it needs the features to
// fill the GEMM's panel width, so it is taken only where they do.

// Measured (bench/RESULTS.md) against the form above, which these keep:
// a shallow window (1 x 1 over 64 features: the transposition out costs as
// much as the product) and, with narrow panels (AVX2: 16 columns, 8
// accumulators in a 6-row tile), rows cut into tiles of 3 (7 = 4 + 3).
constexpr int64_t kMinPositionDepth = 128;
constexpr int64_t kMinNarrowTileRows = 4;

bool PositionGemmApplies(const Geometry& g, GemmTile tile) {
  if (!ImplicitGemmApplies(g)) return false;
  if (g.group_inputs * g.taps < kMinPositionDepth) return false;
  const int64_t width = g.out_size[g.spatial - 1];
  const int64_t shortest = width / ((width + tile.rows - 1) / tile.rows);
  if (tile.columns < 32 && g.spatial > 1 && shortest < kMinNarrowTileRows) return false;
  const int64_t padded = (g.group_outputs + tile.columns - 1) / tile.columns * tile.columns;
  return g.group_outputs * 8 >= padded * 7;  // at most 1/8 of the panels' columns idle
}

// The input with its padding made real: [batch, features, padded spatial...]
// (negative padding crops). Where nothing is padded, the input itself.
struct PaddedInput {
  bool copied = false;
  int64_t elements = 0;  // of the copy
  int64_t batch_stride = 0, feature_stride = 0;
  std::vector<int64_t> size, spatial_stride;  // per spatial dim
};

PaddedInput PaddedInputOf(const Geometry& g, int64_t features) {
  PaddedInput p;
  p.size.resize(g.spatial);
  p.spatial_stride.resize(g.spatial);
  int64_t plane = 1;
  for (int64_t s = g.spatial - 1; s >= 0; --s) {
    const hlo::WindowDim& w = g.window[s];
    p.copied = p.copied || w.pad_low != 0 || w.pad_high != 0;
    p.size[s] = g.in_size[s] + w.pad_low + w.pad_high;
    p.spatial_stride[s] = plane;
    plane *= p.size[s];
  }
  if (!p.copied) {
    p.batch_stride = g.in_batch_stride;
    p.feature_stride = g.in_feature_stride;
    p.spatial_stride = g.in_spatial_stride;
    return p;
  }
  p.feature_stride = plane;
  p.batch_stride = features * plane;
  p.elements = g.batch * p.batch_stride;
  return p;
}

// Work below this many bytes runs on the calling thread.
constexpr int64_t kInlineBytes = int64_t{1} << 20;

template <typename T>
void CopyPadded(const Geometry& g, const PaddedInput& p, int64_t features, const T* in, T* out,
                ThreadPool& pool) {
  const int64_t last = g.spatial - 1, width = p.size[last];
  const int64_t rows = p.feature_stride / width;  // padded rows per plane
  const int64_t pad = g.window[last].pad_low, in_width = g.in_size[last];
  const int64_t lo = std::clamp<int64_t>(pad, 0, width);  // columns [lo, hi) come from the input
  const int64_t hi = std::clamp<int64_t>(pad + in_width, lo, width);
  // A small copy runs on the calling thread: waking the pool for it cost
  // more than it saved (the stem's 334 KiB).
  const int64_t planes = g.batch * features;
  const bool small = planes * p.feature_stride * int64_t{sizeof(T)} < kInlineBytes;
  pool.ParallelFor(planes, small ? planes : 1, [&](int64_t first, int64_t end) {
    for (int64_t plane = first; plane < end; ++plane) {
      const int64_t n = plane / features, c = plane % features;
      const T* src = in + n * g.in_batch_stride + c * g.in_feature_stride;
      T* dst = out + plane * p.feature_stride;
      for (int64_t r = 0; r < rows; ++r, dst += width) {
        int64_t at = 0;  // the input row's offset, or -1 in padding
        for (int64_t s = last - 1, rest = r; s >= 0 && at >= 0; --s) {
          const int64_t i = rest % p.size[s] - g.window[s].pad_low;
          rest /= p.size[s];
          at = i < 0 || i >= g.in_size[s] ? -1 : at + i * g.in_spatial_stride[s];
        }
        if (at < 0 || hi == lo) {
          std::fill_n(dst, width, T(0));
          continue;
        }
        std::fill_n(dst, lo, T(0));
        std::copy_n(src + at + (lo - pad), hi - lo, dst + lo);
        std::fill_n(dst + hi, width - hi, T(0));
      }
    }
  });
}

// The padded copy and the packed kernel live in the instruction's scratch
// (reused from run to run: no fresh pages to fault in).
// Rows [first, first + rows) of the padded planes of batch element n's
// `channels` features from c0 (a 2-D input), into band[c * band_stride + r *
// width]: the rows one block of output rows reads, copied where the block
// runs so they are read back from cache.
template <typename T>
void CopyBand(const Geometry& g, int64_t n, int64_t c0, int64_t channels, int64_t first,
              int64_t rows, int64_t width, const T* in, T* band, int64_t band_stride) {
  const int64_t pad = g.window[1].pad_low, in_width = g.in_size[1];
  const int64_t lo = std::clamp<int64_t>(pad, 0, width);  // columns [lo, hi) from the input
  const int64_t hi = std::clamp<int64_t>(pad + in_width, lo, width);
  for (int64_t c = 0; c < channels; ++c) {
    const T* src = in + n * g.in_batch_stride + (c0 + c) * g.in_feature_stride;
    T* dst = band + c * band_stride;
    for (int64_t r = 0; r < rows; ++r, dst += width) {
      const int64_t i = first + r - g.window[0].pad_low;
      if (i < 0 || i >= g.in_size[0] || hi == lo) {
        std::fill_n(dst, width, T(0));
        continue;
      }
      const T* row = src + i * g.in_spatial_stride[0];
      std::fill_n(dst, lo, T(0));
      std::copy_n(row + (lo - pad), hi - lo, dst + lo);
      std::fill_n(dst + hi, width - hi, T(0));
    }
  }
}

// Where a row of `width` positions is cut into tiles of at most mr, as even
// as they can be (`tall` tiles of height + 1, then height: 7 as 4 + 3).
struct RowCuts {
  int64_t height = 0, tall_end = 0;
  RowCuts(int64_t width, int64_t mr) {
    const int64_t tiles = (width + mr - 1) / mr;
    height = width / tiles;
    tall_end = width % tiles * (height + 1);
  }
  // Positions from column o to the end of its tile.
  int64_t Rest(int64_t o) const {
    const int64_t end = o < tall_end ? (o / (height + 1) + 1) * (height + 1)
                                     : tall_end + ((o - tall_end) / height + 1) * height;
    return end - o;
  }
};

// Long by design: the plan (bands, panels, cuts) and the kernel closure that
// runs it share every size the plan works out.
template <typename T>
KernelInfo PositionGemmConvolution(const Geometry& g, ThreadPool* pool) {
  const int64_t features = g.groups * g.group_inputs;
  PaddedInput padded = PaddedInputOf(g, features);
  const int64_t depth = g.group_inputs * g.taps;
  const int64_t mr = GemmTileFor<T>().rows;
  // A large padded 2-D input is copied a band of rows at a time, by the
  // task that reads it (written to memory whole and read back, the copy
  // cost a quarter of a strided convolution's time): blocks are
  // `band_outputs` output rows of one batch element, about kBandPositions
  // positions (bands overlap by the window's height less the stride: the
  // fewer rows, the more is copied twice), whose rows of the padded input
  // fill `band_rows`; each task's band holds its group's features. A small
  // input (the stem's) is copied whole: it stays in cache anyway.
  constexpr int64_t kBandFrom = int64_t{1} << 20, kBandPositions = 256, kMaxBand = 256 << 10;
  const bool banded =
      padded.copied && g.spatial == 2 && padded.elements * int64_t{sizeof(T)} >= kBandFrom;
  int64_t band_outputs = 0, band_rows = 0;
  if (banded) {
    const hlo::WindowDim& w = g.window[0];
    auto rows_for = [&](int64_t outputs) {
      return (outputs - 1) * w.stride + (w.size - 1) * w.window_dilation + 1;
    };
    band_outputs = std::clamp<int64_t>(kBandPositions / std::max<int64_t>(1, g.out_size[1]), 1,
                                       std::max<int64_t>(1, g.out_size[0]));
    auto tasks = [&] {
      return g.groups * g.batch * ((g.out_size[0] + band_outputs - 1) / band_outputs);
    };
    while (band_outputs > 1 &&
           (tasks() < 2 * pool->num_threads() ||
            g.group_inputs * rows_for(band_outputs) * padded.size[1] * int64_t{sizeof(T)} >
                kMaxBand)) {
      band_outputs = (band_outputs + 1) / 2;
    }
    band_rows = rows_for(band_outputs);
    padded.feature_stride = band_rows * padded.size[1];
    padded.elements = 0;
  }
  // Each (input feature, tap)'s offset from its position's base, and each
  // tap's kernel offset.
  std::vector<int64_t> offsets(depth), kernel_at(g.taps);
  for (int64_t t = 0; t < g.taps; ++t) {
    int64_t at = 0;
    for (int64_t s = g.spatial - 1, rest = t; s >= 0; --s) {
      at += rest % g.window[s].size * g.window[s].window_dilation * padded.spatial_stride[s];
      rest /= g.window[s].size;
    }
    for (int64_t c = 0; c < g.group_inputs; ++c)
      offsets[c * g.taps + t] = c * padded.feature_stride + at;
    kernel_at[t] = TapOf(g, 0, t).kernel;
  }
  // Whether a run of positions across output rows is still evenly spaced
  // in the input (a tile may then cross rows): each dim's step one
  // position along equals a whole row of the next.
  bool linear = true;
  for (int64_t s = 0; s + 1 < g.spatial; ++s) {
    linear =
        linear && g.window[s].stride * padded.spatial_stride[s] ==
                      g.out_size[s + 1] * g.window[s + 1].stride * padded.spatial_stride[s + 1];
  }
  const PanelLayout layout = PanelLayoutFor<T>(depth, g.group_outputs);
  const int64_t copy_bytes = (padded.elements * int64_t{sizeof(T)} + 63) / 64 * 64;
  const int64_t panel_bytes = g.groups * layout.size() * int64_t{sizeof(T)};
  Kernel run = [g, pool, padded, features, offsets, kernel_at, linear, layout, copy_bytes, mr,
                banded, band_outputs](const KernelArgs& args) {
    const T* in = reinterpret_cast<const T*>(args.operands[0]);
    const T* kernel = reinterpret_cast<const T*>(args.operands[1]);
    T* out = reinterpret_cast<T*>(args.outputs[0]);
    const int64_t outputs = g.group_outputs;
    if (g.batch == 0 || outputs == 0) return;
    if (padded.copied && !banded) {
      T* copy = reinterpret_cast<T*>(args.scratch);
      CopyPadded(g, padded, features, in, copy, *pool);
      in = copy;
    }
    // B: per group, the kernel's rows transposed, packed into panels.
    std::vector<T> kernel_copy;
    const MatrixView<const T> rows = KernelRows(g, kernel, kernel_at, kernel_copy, *pool);
    T* const panels = reinterpret_cast<T*>(args.scratch + copy_bytes);
    const int64_t panel_tasks = g.groups * layout.panels();
    const bool few = g.groups * layout.size() * int64_t{sizeof(T)} < kInlineBytes;
    pool->ParallelFor(panel_tasks, few ? panel_tasks : 1, [&](int64_t lo, int64_t hi) {
      for (int64_t task = lo; task < hi; ++task) {
        const int64_t q = task / layout.panels(), panel = task % layout.panels();
        const MatrixView<const T> b{rows.data + q * outputs * rows.row_stride, rows.col_stride,
                                    rows.row_stride};
        PackPanels<T>(layout, b, panel, panel + 1, panels + q * layout.size());
      }
    });
    const int64_t threads = pool->num_threads();
    const int64_t last = g.spatial - 1, width = g.out_size[last],
                  row_stride = g.window[last].stride;
    const RowCuts cuts(width, mr);
    auto transpose_out = [&](int64_t q, int64_t r0, int64_t count, const T* product) {
      for (int64_t j = 0; j < count;) {  // runs of one batch element's positions
        const int64_t n = (r0 + j) / g.positions, p = (r0 + j) % g.positions;
        const int64_t run = std::min(count - j, g.positions - p);
        T* dst = out + n * g.out_batch_stride + q * outputs * g.out_feature_stride + p;
        Transpose<T>(run, outputs, product + j * outputs, outputs, dst, g.out_feature_stride);
        j += run;
      }
    };
    if (banded) {
      const int64_t chunks = (g.out_size[0] + band_outputs - 1) / band_outputs;
      const int64_t padded_width = padded.size[1];
      pool->ParallelFor(g.groups * g.batch * chunks, 1, [&](int64_t lo, int64_t hi) {
        // Kept per thread from run to run (a fresh one would fault its pages in).
        thread_local std::vector<T> product, band;
        band.resize(g.group_inputs * padded.feature_stride);
        for (int64_t task = lo; task < hi; ++task) {
          const int64_t q = task / (g.batch * chunks), n = task / chunks % g.batch;
          const int64_t o0 = task % chunks * band_outputs;  // first output row
          const int64_t o1 = std::min(g.out_size[0], o0 + band_outputs);
          const hlo::WindowDim& w = g.window[0];
          CopyBand(g, n, q * g.group_inputs, g.group_inputs, o0 * w.stride,
                   (o1 - o0 - 1) * w.stride + (w.size - 1) * w.window_dilation + 1, padded_width,
                   in, band.data(), padded.feature_stride);
          const int64_t count = (o1 - o0) * width;
          auto tile = [&](int64_t i0) -> RowTile<T> {
            const int64_t row = i0 / width, o = i0 % width;
            const int64_t rows = std::min({mr, count - i0, cuts.Rest(o)});
            return {band.data() + row * w.stride * padded_width + o * row_stride, row_stride, rows};
          };
          product.resize(count * outputs);
          GemmRowTiles<T>(count, layout, panels + q * layout.size(), offsets.data(), tile,
                          product.data(), outputs);
          transpose_out(q, n * g.positions + o0 * width, count, product.data());
        }
      });
      return;
    }
    // Blocks of whole output rows (of mr positions where tiles may cross
    // rows), the same number per thread, each about 16 tiles.
    const int64_t total = g.batch * g.positions, unit = linear ? mr : width;
    const int64_t units = (total + unit - 1) / unit;
    const int64_t per_thread = (units + threads - 1) / threads;
    const int64_t blocks = threads * std::max<int64_t>(1, per_thread * unit / (16 * mr));
    pool->ParallelFor(g.groups * blocks, 1, [&](int64_t lo, int64_t hi) {
      thread_local std::vector<T> product;
      for (int64_t task = lo; task < hi; ++task) {
        const int64_t q = task / blocks, b = task % blocks;
        const int64_t r0 = std::min(total, b * units / blocks * unit);
        const int64_t count = std::min(total, (b + 1) * units / blocks * unit) - r0;
        if (count == 0) continue;
        const T* group_in = in + q * g.group_inputs * padded.feature_stride;
        auto tile = [&](int64_t i0) -> RowTile<T> {
          const int64_t r = r0 + i0, position = r % g.positions;
          int64_t rows = std::min({mr, count - i0, g.positions - position});
          if (!linear) rows = std::min(rows, cuts.Rest(position % width));
          int64_t at = r / g.positions * padded.batch_stride;
          for (int64_t s = last, rest = position; s >= 0; --s) {
            at += rest % g.out_size[s] * g.window[s].stride * padded.spatial_stride[s];
            rest /= g.out_size[s];
          }
          return {group_in + at, row_stride, rows};
        };
        product.resize(count * outputs);
        GemmRowTiles<T>(count, layout, panels + q * layout.size(), offsets.data(), tile,
                        product.data(), outputs);
        transpose_out(q, r0, count, product.data());
      }
    });
  };
  return {std::move(run), copy_bytes + panel_bytes};
}

template KernelInfo PositionGemmConvolution<float>(const Geometry& g, ThreadPool* pool);
template KernelInfo PositionGemmConvolution<double>(const Geometry& g, ThreadPool* pool);

}  // namespace strata::runtime::conv
