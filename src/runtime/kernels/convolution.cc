// convolution, any dim_labels, window, dilation, feature and batch groups.
// Planar (NCHW) float convolutions run as implicit GEMMs that never build
// the patches: over output positions when the output features fill the
// GEMM's panels, else over output features (sections below); a few outputs
// over a dilated input scatter their products. Otherwise, for floats, the
// work is a GEMM per group and per phase class (output
// positions that read the same window elements under lhs dilation). The
// output positions are cut in blocks of rows. Each block's input patches are
// gathered into a row each ("im2col": the window's elements, each with the
// group's input features innermost). The block is then multiplied by the
// kernel, packed once per run as [window elements x input features, output
// features], in whichever orientation suits the output. Integers run a
// direct loop.
#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "kernels/convolution.h"
namespace strata::runtime {
namespace conv {

// Row-major strides of `dims`.
std::vector<int64_t> StridesOf(const std::vector<int64_t>& dims) {
  std::vector<int64_t> strides(dims.size(), 1);
  for (int64_t i = static_cast<int64_t>(dims.size()) - 2; i >= 0; --i)
    strides[i] = strides[i + 1] * dims[i + 1];
  return strides;
}

Geometry GeometryOf(const hlo::Instruction& inst) {
  const hlo::ConvolutionDims& d = inst.convolution;
  const Shape& in = inst.operand(0)->shape();
  const Shape& kernel = inst.operand(1)->shape();
  const Shape& out = inst.shape();
  const std::vector<int64_t> is = StridesOf(in.dims()), ks = StridesOf(kernel.dims()),
                             os = StridesOf(out.dims());
  Geometry g;
  g.spatial = static_cast<int64_t>(d.input_spatial.size());
  g.batch_grouped = inst.batch_group_count > 1;
  g.groups = inst.feature_group_count * inst.batch_group_count;
  g.batch = out.dim(d.output_batch);
  g.group_inputs = kernel.dim(d.kernel_input_feature);
  g.group_outputs = kernel.dim(d.kernel_output_feature) / g.groups;
  g.window = inst.window;
  g.in_batch_stride = is[d.input_batch];
  g.in_feature_stride = is[d.input_feature];
  g.kernel_in_stride = ks[d.kernel_input_feature];
  g.kernel_out_stride = ks[d.kernel_output_feature];
  g.out_batch_stride = os[d.output_batch];
  g.out_feature_stride = os[d.output_feature];
  for (int64_t s = 0; s < g.spatial; ++s) {
    g.in_size.push_back(in.dim(d.input_spatial[s]));
    g.out_size.push_back(out.dim(d.output_spatial[s]));
    g.in_spatial_stride.push_back(is[d.input_spatial[s]]);
    g.kernel_spatial_stride.push_back(ks[d.kernel_spatial[s]]);
    g.out_spatial_stride.push_back(os[d.output_spatial[s]]);
    g.positions *= g.out_size.back();
    g.taps *= g.window[s].size;
  }
  return g;
}

Tap TapOf(const Geometry& g, int64_t p, int64_t t) {
  Tap tap;
  for (int64_t s = g.spatial - 1; s >= 0; --s) {
    const hlo::WindowDim& w = g.window[s];
    const int64_t o = p % g.out_size[s], k = t % w.size;
    p /= g.out_size[s];
    t /= w.size;
    tap.kernel += (w.window_reversal ? w.size - 1 - k : k) * g.kernel_spatial_stride[s];
    if (tap.input < 0) continue;
    const int64_t dilated = o * w.stride - w.pad_low + k * w.window_dilation;
    if (dilated < 0 || dilated % w.base_dilation != 0 ||
        dilated / w.base_dilation >= g.in_size[s]) {
      tap.input = -1;
      continue;
    }
    tap.input += dilated / w.base_dilation * g.in_spatial_stride[s];
  }
  return tap;
}

// One output position's taps along each spatial dim: along[s][k] is the
// input offset of window element k of dim s, or -1 (padding or a hole).
// A tap's offset is the sum over the dims: no division per tap.
void TapOffsets(const Geometry& g, int64_t p, std::vector<std::vector<int64_t>>& along) {
  along.resize(g.spatial);
  for (int64_t s = g.spatial - 1; s >= 0; --s) {
    const hlo::WindowDim& w = g.window[s];
    const int64_t o = p % g.out_size[s];
    p /= g.out_size[s];
    std::vector<int64_t>& a = along[s];
    a.resize(w.size);
    for (int64_t k = 0; k < w.size; ++k) {
      const int64_t dilated = o * w.stride - w.pad_low + k * w.window_dilation;
      const bool inside = dilated >= 0 && dilated % w.base_dilation == 0 &&
                          dilated / w.base_dilation < g.in_size[s];
      a[k] = inside ? dilated / w.base_dilation * g.in_spatial_stride[s] : -1;
    }
  }
}

// One im2col row: the window elements `along` lists (per dim; `taps` in
// all, row-major: the whole window or a phase class's part of it), each
// with the group's input features innermost. Along the last spatial dim,
// taps whose features lie back to back in the input (channels-last, no
// dilation) are one copy.
template <typename T>
void PatchRow(const Geometry& h, const std::vector<std::vector<int64_t>>& along, int64_t taps,
              const T* base, T* row) {
  const int64_t features = h.group_inputs, last = h.spatial - 1;
  if (last < 0) {  // no spatial dims: the one tap is the features
    for (int64_t i = 0; i < features; ++i) row[i] = base[i * h.in_feature_stride];
    return;
  }
  const std::vector<int64_t>& inner = along[last];
  const int64_t width = static_cast<int64_t>(inner.size());
  std::vector<int64_t> k(last, 0);  // the odometer over the outer dims
  const int64_t outer_taps = last == 0 ? 1 : taps / width;
  for (int64_t u = 0; u < outer_taps; ++u, row += width * features) {
    int64_t at = 0;
    for (int64_t s = 0; s < last && at >= 0; ++s) {
      const int64_t a = along[s][k[s]];
      at = a < 0 ? -1 : at + a;
    }
    for (int64_t s = last - 1; s >= 0; --s) {
      if (++k[s] < static_cast<int64_t>(along[s].size())) break;
      k[s] = 0;
    }
    if (at < 0) {
      std::fill_n(row, width * features, T(0));
      continue;
    }
    if (h.in_feature_stride != 1) {
      for (int64_t j = 0; j < width; ++j) {
        T* dst = row + j * features;
        if (inner[j] < 0) {
          std::fill_n(dst, features, T(0));
        } else {
          for (int64_t i = 0; i < features; ++i)
            dst[i] = base[at + inner[j] + i * h.in_feature_stride];
        }
      }
      continue;
    }
    for (int64_t j = 0; j < width;) {
      T* dst = row + j * features;
      if (inner[j] < 0) {
        std::fill_n(dst, features, T(0));
        ++j;
        continue;
      }
      int64_t run = 1;  // taps whose features follow each other in the input
      while (j + run < width && inner[j + run] == inner[j] + run * features) ++run;
      std::memcpy(dst, base + at + inner[j], run * features * sizeof(T));
      j += run;
    }
  }
}

int64_t OutputOffset(const Geometry& g, int64_t p) {
  int64_t offset = 0;
  for (int64_t s = g.spatial - 1; s >= 0; --s) {
    offset += p % g.out_size[s] * g.out_spatial_stride[s];
    p /= g.out_size[s];
  }
  return offset;
}

// Group q's first input element (batch or feature offset) and output feature.
int64_t GroupInputOffset(const Geometry& g, int64_t q) {
  return g.batch_grouped ? q * g.batch * g.in_batch_stride
                         : q * g.group_inputs * g.in_feature_stride;
}

constexpr int64_t kTile = 16;  // transposing copies: a tile of 16 x 16 elements

// The group's input features strided (PyTorch's NCHW) make im2col gather
// them one element at a time. Copied once per run into [batch, spatial...,
// features], each patch row is a memcpy; `h` is then the copy's geometry.
template <typename T>
const T* ChannelsLast(const Geometry& g, const T* group_in, std::vector<T>& copy, Geometry& h,
                      ThreadPool& pool) {
  h = g;
  if (g.in_feature_stride == 1 || g.group_inputs == 1) return group_in;
  int64_t spatial = 1;
  for (int64_t size : g.in_size) spatial *= size;
  std::vector<int64_t> offsets(spatial, 0);  // each spatial position's offset in the input
  for (int64_t sp = 0; sp < spatial; ++sp) {
    for (int64_t d = g.spatial - 1, rest = sp; d >= 0; --d) {
      offsets[sp] += rest % g.in_size[d] * g.in_spatial_stride[d];
      rest /= g.in_size[d];
    }
  }
  copy.resize(g.batch * spatial * g.group_inputs);
  const int64_t features = g.group_inputs;
  // In tiles of kTile features x kTile positions, so that both the reads
  // (a run of positions per feature) and the writes (a run of features per
  // position) stay within a few cache lines.
  const int64_t feature_tiles = (features + kTile - 1) / kTile;
  pool.ParallelFor(g.batch * feature_tiles, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t task = lo; task < hi; ++task) {
      const int64_t n = task / feature_tiles, i0 = task % feature_tiles * kTile;
      const int64_t i1 = std::min(features, i0 + kTile);
      const T* src = group_in + n * g.in_batch_stride;
      T* dst = copy.data() + n * spatial * features;
      for (int64_t s0 = 0; s0 < spatial; s0 += kTile) {
        const int64_t s1 = std::min(spatial, s0 + kTile);
        for (int64_t sp = s0; sp < s1; ++sp) {
          for (int64_t i = i0; i < i1; ++i)
            dst[sp * features + i] = src[i * g.in_feature_stride + offsets[sp]];
        }
      }
    }
  });
  h.in_feature_stride = 1;
  h.in_batch_stride = spatial * features;
  int64_t stride = features;
  for (int64_t d = g.spatial - 1; d >= 0; --d) {
    h.in_spatial_stride[d] = stride;
    stride *= g.in_size[d];
  }
  return copy.data();
}

constexpr int64_t kBlockRows = 192;  // output positions per im2col block (a multiple of 6)
// When the GEMM runs transposed (below); measured in bench/conv_bench.py.
constexpr int64_t kFewOutputs = 16;
constexpr int64_t kFewPositions = 256;
constexpr int64_t kShallowDepth = 4096;

// Output positions that read the same window elements. With lhs dilation
// (a strided convolution's input gradient) most window elements of a
// position fall in holes, and which ones depends only on the position's
// phase modulo the dilation: each phase is a dense convolution over the
// window elements it reads (oneDNN's and XLA:CPU's split), its own GEMM.
// Without lhs dilation there is one class of every position and tap.
struct PhaseClass {
  std::vector<std::vector<int64_t>> kept;  // per spatial dim, the window elements read
  std::vector<int64_t> taps;               // the kept taps, row-major over the window
  std::vector<int64_t> positions;          // output positions (row-major) in the class
};

std::vector<PhaseClass> PhaseClasses(const Geometry& g) {
  std::vector<int64_t> period(g.spatial);
  int64_t classes = 1;
  for (int64_t s = 0; s < g.spatial; ++s) {
    period[s] = g.window[s].base_dilation;
    classes *= period[s];
  }
  std::vector<PhaseClass> out(classes);
  std::vector<int64_t> residue(g.spatial);
  for (int64_t c = 0; c < classes; ++c) {
    PhaseClass& pc = out[c];
    pc.kept.resize(g.spatial);
    for (int64_t s = g.spatial - 1, rest = c; s >= 0; --s) {
      residue[s] = rest % period[s];
      rest /= period[s];
      const hlo::WindowDim& w = g.window[s];
      for (int64_t k = 0; k < w.size; ++k) {
        if ((residue[s] + k * w.window_dilation) % period[s] == 0) pc.kept[s].push_back(k);
      }
    }
    // The kept taps' indices in the whole window, row-major.
    pc.taps.push_back(0);
    for (int64_t s = 0; s < g.spatial; ++s) {
      std::vector<int64_t> next;
      for (int64_t t : pc.taps) {
        for (int64_t k : pc.kept[s]) next.push_back(t * g.window[s].size + k);
      }
      pc.taps = std::move(next);
    }
  }
  // Each position's class: its per-dim residues of (o * stride - pad_low).
  for (int64_t p = 0; p < g.positions; ++p) {
    int64_t c = 0, scale = 1;
    for (int64_t s = g.spatial - 1, rest = p; s >= 0; --s) {
      const hlo::WindowDim& w = g.window[s];
      const int64_t o = rest % g.out_size[s];
      rest /= g.out_size[s];
      const int64_t r = ((o * w.stride - w.pad_low) % period[s] + period[s]) % period[s];
      c += r * scale;
      scale *= period[s];
    }
    out[c].positions.push_back(p);
  }
  return out;
}

// One window element at unit stride without padding or dilation, over a
// channels-last input (`h`, the copy's geometry): output row r's patch is
// input row r.
bool Pointwise(const Geometry& g, const Geometry& h) {
  if (g.taps != 1 || h.in_feature_stride != 1) return false;
  int64_t stride = g.group_inputs;
  for (int64_t s = g.spatial - 1; s >= 0; --s) {
    const hlo::WindowDim& w = g.window[s];
    if (w.stride != 1 || w.pad_low != 0 || w.base_dilation != 1 || g.out_size[s] != g.in_size[s] ||
        h.in_spatial_stride[s] != stride) {
      return false;
    }
    stride *= g.in_size[s];
  }
  return h.in_batch_stride == stride;
}

template <typename T>
Kernel GemmConvolution(const Geometry& g, ThreadPool* pool) {
  auto classes = std::make_shared<const std::vector<PhaseClass>>(PhaseClasses(g));
  return [g, pool, classes](const KernelArgs& args) {
    const T* in = reinterpret_cast<const T*>(args.operands[0]);
    const T* kernel = reinterpret_cast<const T*>(args.operands[1]);
    T* out = reinterpret_cast<T*>(args.outputs[0]);
    if (g.batch * g.positions == 0 || g.group_outputs == 0) return;
    std::vector<int64_t> kernel_at(g.taps);  // each tap's kernel offset
    for (int64_t t = 0; t < g.taps; ++t) kernel_at[t] = TapOf(g, 0, t).kernel;
    std::vector<T> copy;
    Geometry h;
    for (int64_t q = 0; q < g.groups; ++q) {
      const T* group_in = ChannelsLast(g, in + GroupInputOffset(g, q), copy, h, *pool);
      T* group_out = out + q * g.group_outputs * g.out_feature_stride;
      for (const PhaseClass& pc : *classes) {
        const int64_t taps = static_cast<int64_t>(pc.taps.size());
        const int64_t depth = taps * g.group_inputs;  // the GEMM's k
        const int64_t rows = g.batch * static_cast<int64_t>(pc.positions.size());
        if (rows == 0) continue;
        // Row r of the class: batch element r / |positions|, its position.
        auto position_of = [&](int64_t r) {
          return pc.positions[r % static_cast<int64_t>(pc.positions.size())];
        };
        auto batch_of = [&](int64_t r) { return r / static_cast<int64_t>(pc.positions.size()); };
        if (depth == 0) {  // every window element in a hole, or no input features: zeros
          for (int64_t r = 0; r < rows; ++r) {
            T* o = group_out + batch_of(r) * g.out_batch_stride + OutputOffset(g, position_of(r));
            for (int64_t f = 0; f < g.group_outputs; ++f) o[f * g.out_feature_stride] = T(0);
          }
          continue;
        }
        // The group's kernel at the class's taps, as [tap x input feature,
        // output feature]: in tiles of taps x output features (a weight
        // gradient's kernel is an NCHW cotangent, its features H·W apart).
        std::vector<T> packed(depth * g.group_outputs);
        const int64_t tap_tiles = (taps + kTile - 1) / kTile;
        const T* group_kernel = kernel + q * g.group_outputs * g.kernel_out_stride;
        pool->ParallelFor(tap_tiles * g.group_inputs, 1, [&](int64_t lo, int64_t hi) {
          for (int64_t task = lo; task < hi; ++task) {
            const int64_t i = task % g.group_inputs, j0 = task / g.group_inputs * kTile;
            const int64_t j1 = std::min(taps, j0 + kTile);
            for (int64_t f0 = 0; f0 < g.group_outputs; f0 += kTile) {
              const int64_t f1 = std::min(g.group_outputs, f0 + kTile);
              for (int64_t j = j0; j < j1; ++j) {
                const T* k = group_kernel + kernel_at[pc.taps[j]] + i * g.kernel_in_stride;
                T* row = &packed[(j * g.group_inputs + i) * g.group_outputs];
                for (int64_t f = f0; f < f1; ++f) row[f] = k[f * g.kernel_out_stride];
              }
            }
          }
        });
        // Tasks are row blocks, each cut into column pieces when there are
        // too few blocks for the pool (a small image with many features).
        // With one piece of columns (64 or fewer), the blocks shrink
        // instead: a weight gradient has few rows (kernel positions) and a
        // deep window.
        const bool pointwise = Pointwise(g, h);
        const int64_t want = 2 * pool->num_threads();
        int64_t block_rows = kBlockRows;
        if ((rows + kBlockRows - 1) / kBlockRows < want && g.group_outputs <= 64) {
          block_rows = std::max<int64_t>(6, ((rows + want - 1) / want + 5) / 6 * 6);
        }
        const int64_t blocks = (rows + block_rows - 1) / block_rows;
        const int64_t pieces =
            blocks >= want ? 1
                           : std::min((g.group_outputs + 63) / 64, (want + blocks - 1) / blocks);
        const int64_t width = ((g.group_outputs + pieces - 1) / pieces + 63) / 64 * 64;
        const int64_t columns = (g.group_outputs + width - 1) / width;
        pool->ParallelFor(blocks * columns, 1, [&](int64_t t0, int64_t t1) {
          std::vector<T> patches(pointwise ? 0 : block_rows * depth), product(block_rows * width);
          std::vector<std::vector<int64_t>> along, kept(g.spatial);
          std::vector<int64_t> out_at(block_rows);  // each row's output offset
          int64_t patched = -1;                     // the block `patches` holds
          for (int64_t task = t0; task < t1; ++task) {
            const int64_t b = task / columns, c0 = task % columns * width;
            const int64_t c1 = std::min(g.group_outputs, c0 + width), nc = c1 - c0;
            const int64_t r0 = b * block_rows, m = std::min(block_rows, rows - r0);
            // A pointwise convolution's patch row is its input row: the
            // GEMM reads the (channels-last) input in place.
            const T* a = pointwise ? group_in + r0 * depth : patches.data();
            for (int64_t r = 0; r < m && patched != b && !pointwise; ++r) {
              TapOffsets(h, position_of(r0 + r), along);
              for (int64_t s = 0; s < g.spatial; ++s) {  // the class's window elements
                kept[s].clear();
                for (int64_t k : pc.kept[s]) kept[s].push_back(along[s][k]);
              }
              PatchRow(h, kept, taps, group_in + batch_of(r0 + r) * h.in_batch_stride,
                       &patches[r * depth]);
            }
            patched = b;
            // The transposed product, kernelᵀ · patchesᵀ, for few output
            // features (an input gradient with 3 of them: the GEMM's wide
            // tile then runs along the positions instead of padding the
            // features), and for outputs that keep each feature's few
            // positions together over a shallow window (a weight gradient of
            // a small image: the product is written in runs instead of one
            // element per feature apart). Deep windows stay as they are:
            // transposing the patches for the GEMM's packing costs more
            // there than it saves.
            const bool transposed =
                nc <= kFewOutputs || (g.out_feature_stride != 1 && g.positions <= kFewPositions &&
                                      depth <= kShallowDepth);
            if (transposed) {
              Gemm<T>(nc, m, depth, {packed.data() + c0, 1, g.group_outputs}, {a, 1, depth},
                      product.data(), m);
            } else {
              Gemm<T>(m, nc, depth, {a, depth, 1}, {packed.data() + c0, g.group_outputs, 1},
                      product.data(), nc);
            }
            for (int64_t r = 0; r < m; ++r) {
              out_at[r] =
                  batch_of(r0 + r) * g.out_batch_stride + OutputOffset(g, position_of(r0 + r));
            }
            T* first = group_out + c0 * g.out_feature_stride;
            if (transposed) {  // feature by feature: runs of positions
              for (int64_t f = 0; f < nc; ++f) {
                T* dst = first + f * g.out_feature_stride;
                const T* src = &product[f * m];
                for (int64_t r = 0; r < m; ++r) dst[out_at[r]] = src[r];
              }
            } else if (g.out_feature_stride == 1) {
              for (int64_t r = 0; r < m; ++r) std::copy_n(&product[r * nc], nc, first + out_at[r]);
            } else {  // NCHW: in tiles, each feature's positions written in a run
              for (int64_t ra = 0; ra < m; ra += kTile) {
                const int64_t rb = std::min(m, ra + kTile);
                for (int64_t f = 0; f < nc; ++f) {
                  T* dst = first + f * g.out_feature_stride;
                  for (int64_t r = ra; r < rb; ++r) dst[out_at[r]] = product[r * nc + f];
                }
              }
            }
          }
        });
      }
    }
  };
}

// ---- scattered products: few output features over a dilated input -----------
//
// A strided convolution's input gradient with few features (the stem's: 3)
// reads a cotangent dilated by the stride, so as a GEMM over output
// positions its M is 3 and most of each window is holes. Turned around, each
// input element adds its products to the output positions it reaches: per
// batch element one dense GEMM,
//   products[(f, tap), i] = kernel[(f, tap), c] · input[c, i],
// over the input's positions i (M = features x taps, K = input features),
// then each product row added into the output at i·dilation + pad - tap.
// Unit stride only (an output position then gets each tap from at most one
// input element).
constexpr int64_t kMaxScatteredOutputs = 16;

bool ScatterApplies(const Geometry& g) {
  if (g.spatial == 0 || g.groups != 1 || g.group_inputs == 0) return false;
  if (g.group_outputs > kMaxScatteredOutputs || g.in_feature_stride == 1) return false;
  bool dilated = false;
  int64_t in_stride = 1, out_stride = 1;
  for (int64_t s = g.spatial - 1; s >= 0; --s) {
    const hlo::WindowDim& w = g.window[s];
    if (w.stride != 1) return false;
    dilated = dilated || w.base_dilation > 1;
    if (g.in_spatial_stride[s] != in_stride || g.out_spatial_stride[s] != out_stride) return false;
    in_stride *= g.in_size[s];
    out_stride *= g.out_size[s];
  }
  return dilated;
}

template <typename T>
Kernel ScatterConvolution(const Geometry& g, ThreadPool* pool) {
  std::vector<std::vector<int64_t>> win(g.taps, std::vector<int64_t>(g.spatial));
  std::vector<int64_t> kernel_at(g.taps);
  for (int64_t t = 0; t < g.taps; ++t) {
    for (int64_t s = g.spatial - 1, rest = t; s >= 0; --s) {
      win[t][s] = rest % g.window[s].size;
      rest /= g.window[s].size;
    }
    kernel_at[t] = TapOf(g, 0, t).kernel;
  }
  int64_t in_positions = 1;
  for (int64_t size : g.in_size) in_positions *= size;
  return [g, pool, win, kernel_at, in_positions](const KernelArgs& args) {
    const T* in = reinterpret_cast<const T*>(args.operands[0]);
    const T* kernel = reinterpret_cast<const T*>(args.operands[1]);
    T* out = reinterpret_cast<T*>(args.outputs[0]);
    const int64_t features = g.group_outputs, taps = g.taps, c_in = g.group_inputs;
    if (g.batch == 0 || features == 0) return;
    // The kernel as A = [(output feature, tap), input feature].
    std::vector<T> a(features * taps * c_in);
    for (int64_t f = 0; f < features; ++f) {
      for (int64_t t = 0; t < taps; ++t) {
        for (int64_t c = 0; c < c_in; ++c) {
          a[(f * taps + t) * c_in + c] =
              kernel[f * g.kernel_out_stride + c * g.kernel_in_stride + kernel_at[t]];
        }
      }
    }
    // Tasks: (batch element, output features); features split only when
    // there are fewer batch elements than threads (outputs stay disjoint).
    const int64_t splits =
        g.batch >= pool->num_threads() ? 1 : std::min<int64_t>(features, pool->num_threads());
    const int64_t last = g.spatial - 1;
    pool->ParallelFor(g.batch * splits, 1, [&](int64_t lo, int64_t hi) {
      std::vector<T> products;
      std::vector<int64_t> index(g.spatial);
      for (int64_t task = lo; task < hi; ++task) {
        const int64_t n = task / splits, part = task % splits;
        const int64_t f0 = part * features / splits, f1 = (part + 1) * features / splits;
        const int64_t rows = (f1 - f0) * taps;
        if (rows == 0) continue;
        products.resize(rows * in_positions);
        Gemm<T>(rows, in_positions, c_in, {a.data() + f0 * taps * c_in, c_in, 1},
                {in + n * g.in_batch_stride, g.in_feature_stride, 1}, products.data(),
                in_positions);
        T* o = out + n * g.out_batch_stride;
        for (int64_t f = f0; f < f1; ++f) {
          std::fill_n(o + f * g.out_feature_stride, g.positions, T(0));
        }
        const hlo::WindowDim& lw = g.window[last];
        const int64_t row_in = g.in_size[last], row_out = g.out_size[last];
        const int64_t d = lw.base_dilation;
        for (int64_t f = f0; f < f1; ++f) {
          T* plane = o + f * g.out_feature_stride;
          for (int64_t t = 0; t < taps; ++t) {
            const T* row = products.data() + ((f - f0) * taps + t) * in_positions;
            // Input column i reaches output column i * d + shift, inside for
            // i in [i_lo, i_hi).
            const int64_t shift = lw.pad_low - win[t][last] * lw.window_dilation;
            const int64_t i_lo = shift < 0 ? (-shift + d - 1) / d : 0;
            const int64_t i_hi =
                std::min(row_in, row_out - shift <= 0 ? 0 : (row_out - shift + d - 1) / d);
            for (int64_t r = 0; r < in_positions / row_in; ++r) {  // the input's rows
              int64_t at = 0;  // the output row's offset, or -1 outside
              for (int64_t s = last - 1, rest = r; s >= 0; --s) {
                index[s] = rest % g.in_size[s];
                rest /= g.in_size[s];
              }
              for (int64_t s = 0; s < last && at >= 0; ++s) {
                const hlo::WindowDim& w = g.window[s];
                const int64_t oc =
                    index[s] * w.base_dilation + w.pad_low - win[t][s] * w.window_dilation;
                at = oc < 0 || oc >= g.out_size[s] ? -1 : at + oc * g.out_spatial_stride[s];
              }
              if (at < 0 || i_hi <= i_lo) continue;
              const T* src = row + r * row_in;
              T* dst = plane + at + i_lo * d + shift;
              for (int64_t i = i_lo; i < i_hi; ++i, dst += d) *dst += src[i];
            }
          }
        }
      }
    });
  };
}

// Integers: each output element summed directly, wrapping as XLA's do.
template <typename T>
Kernel DirectConvolution(const Geometry& g, ThreadPool* pool) {
  return [g, pool](const KernelArgs& args) {
    const T* in = reinterpret_cast<const T*>(args.operands[0]);
    const T* kernel = reinterpret_cast<const T*>(args.operands[1]);
    T* out = reinterpret_cast<T*>(args.outputs[0]);
    const int64_t features = g.groups * g.group_outputs;
    pool->ParallelFor(g.batch * g.positions, 64, [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        const int64_t n = r / g.positions, p = r % g.positions;
        for (int64_t f = 0; f < features; ++f) {
          const int64_t q = f / std::max<int64_t>(g.group_outputs, 1);
          const T* base = in + GroupInputOffset(g, q) + n * g.in_batch_stride;
          T acc = T(0);
          for (int64_t t = 0; t < g.taps; ++t) {
            const Tap tap = TapOf(g, p, t);
            if (tap.input < 0) continue;
            for (int64_t i = 0; i < g.group_inputs; ++i) {
              const T x = base[tap.input + i * g.in_feature_stride];
              const T k = kernel[tap.kernel + i * g.kernel_in_stride + f * g.kernel_out_stride];
              acc = WrappingAdd(acc, WrappingMultiply(x, k));
            }
          }
          out[n * g.out_batch_stride + OutputOffset(g, p) + f * g.out_feature_stride] = acc;
        }
      }
    });
  };
}

}  // namespace conv

KernelInfo MakeConvolutionKernel(const hlo::Instruction& inst, ThreadPool& pool) {
  using namespace conv;
  const Geometry g = GeometryOf(inst);
  const DType dtype = inst.shape().dtype();
  switch (dtype) {
    case DType::kF32:
      if (ScatterApplies(g)) return {ScatterConvolution<float>(g, &pool)};
      if (PositionGemmApplies(g, GemmTileFor<float>()))
        return PositionGemmConvolution<float>(g, &pool);
      if (ImplicitGemmApplies(g)) return {ImplicitGemmConvolution<float>(g, &pool)};
      return {GemmConvolution<float>(g, &pool)};
    case DType::kF64:
      if (ScatterApplies(g)) return {ScatterConvolution<double>(g, &pool)};
      if (PositionGemmApplies(g, GemmTileFor<double>()))
        return PositionGemmConvolution<double>(g, &pool);
      if (ImplicitGemmApplies(g)) return {ImplicitGemmConvolution<double>(g, &pool)};
      return {GemmConvolution<double>(g, &pool)};
    case DType::kS8:
      return {DirectConvolution<int8_t>(g, &pool)};
    case DType::kS16:
      return {DirectConvolution<int16_t>(g, &pool)};
    case DType::kU16:
      return {DirectConvolution<uint16_t>(g, &pool)};
    case DType::kS32:
      return {DirectConvolution<int32_t>(g, &pool)};
    case DType::kS64:
      return {DirectConvolution<int64_t>(g, &pool)};
    case DType::kU8:
      return {DirectConvolution<uint8_t>(g, &pool)};
    case DType::kU32:
      return {DirectConvolution<uint32_t>(g, &pool)};
    case DType::kU64:
      return {DirectConvolution<uint64_t>(g, &pool)};
    default:
      UnsupportedType(inst, dtype);
  }
}

}  // namespace strata::runtime
