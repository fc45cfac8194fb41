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

#include "kernels/gemm.h"
#include "kernels/kernels.h"

namespace strata::runtime {
namespace {

// Row-major strides of `dims`.
std::vector<int64_t> StridesOf(const std::vector<int64_t>& dims) {
  std::vector<int64_t> strides(dims.size(), 1);
  for (int64_t i = static_cast<int64_t>(dims.size()) - 2; i >= 0; --i)
    strides[i] = strides[i + 1] * dims[i + 1];
  return strides;
}

// Everything a run needs, in elements, taken from the instruction once.
struct Geometry {
  int64_t spatial = 0;
  int64_t groups = 1;          // feature groups x batch groups (one of them is 1)
  bool batch_grouped = false;  // the groups split the batch, not the input features
  int64_t batch = 0;           // output batch
  int64_t group_inputs = 0;    // input features each group reads (the kernel's)
  int64_t group_outputs = 0;   // output features each group writes
  std::vector<hlo::WindowDim> window;
  std::vector<int64_t> in_size, out_size;  // per spatial dim
  int64_t in_batch_stride = 0, in_feature_stride = 0;
  std::vector<int64_t> in_spatial_stride;
  int64_t kernel_in_stride = 0, kernel_out_stride = 0;
  std::vector<int64_t> kernel_spatial_stride;
  int64_t out_batch_stride = 0, out_feature_stride = 0;
  std::vector<int64_t> out_spatial_stride;
  int64_t positions = 1;  // output positions per batch element
  int64_t taps = 1;       // window elements
};

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

// Where output position `p` (row-major over the output's spatial dims)
// reads tap `t` (row-major over the window): the input's spatial offset in
// elements, or -1 in padding or a dilation hole. Kernel offset of the tap.
struct Tap {
  int64_t input = 0;  // -1: no element
  int64_t kernel = 0;
};
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

// The kernel as rows [output feature (all groups), (input feature, tap)]:
// in place when its strides say so (OIHW), else copied into `copy`. Group
// q's rows start at q * group_outputs * row_stride.
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

}  // namespace

KernelInfo MakeConvolutionKernel(const hlo::Instruction& inst, ThreadPool& pool) {
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
