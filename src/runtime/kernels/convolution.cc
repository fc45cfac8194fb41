// convolution, any dim_labels, window, dilation, feature and batch groups.
// For floats the work is a GEMM per group. The output positions are cut in
// blocks of rows. Each block's input patches are gathered into a row each
// ("im2col": the window's elements, each with the group's input features
// innermost). The block is then multiplied by the kernel, packed once per run
// as [window elements x input features, output features]. Integers run a
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

// One im2col row: the window's elements (row-major over the window) of the
// output position `along` describes, each with the group's input features
// innermost. Along the last spatial dim, taps whose features lie back to
// back in the input (channels-last, no dilation) are one copy.
template <typename T>
void PatchRow(const Geometry& h, const std::vector<std::vector<int64_t>>& along, const T* base,
              T* row) {
  const int64_t features = h.group_inputs, last = h.spatial - 1;
  if (last < 0) {  // no spatial dims: the one tap is the features
    for (int64_t i = 0; i < features; ++i) row[i] = base[i * h.in_feature_stride];
    return;
  }
  const std::vector<int64_t>& inner = along[last];
  const int64_t width = static_cast<int64_t>(inner.size());
  std::vector<int64_t> k(last, 0);  // the odometer over the outer dims
  const int64_t outer_taps = last == 0 ? 1 : h.taps / width;
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
  pool.ParallelFor(g.batch * features, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t task = lo; task < hi; ++task) {
      const int64_t n = task / features, i = task % features;
      const T* src = group_in + n * g.in_batch_stride + i * g.in_feature_stride;
      T* dst = copy.data() + n * spatial * features + i;
      for (int64_t sp = 0; sp < spatial; ++sp) dst[sp * features] = src[offsets[sp]];
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

template <typename T>
Kernel GemmConvolution(const Geometry& g, ThreadPool* pool) {
  return [g, pool](const KernelArgs& args) {
    const T* in = reinterpret_cast<const T*>(args.operands[0]);
    const T* kernel = reinterpret_cast<const T*>(args.operands[1]);
    T* out = reinterpret_cast<T*>(args.outputs[0]);
    const int64_t depth = g.taps * g.group_inputs;  // the GEMM's k
    const int64_t rows = g.batch * g.positions;
    if (rows == 0 || g.group_outputs == 0) return;
    std::vector<Tap> taps(g.taps);
    for (int64_t t = 0; t < g.taps; ++t) taps[t].kernel = TapOf(g, 0, t).kernel;
    std::vector<T> copy;
    Geometry h;
    for (int64_t q = 0; q < g.groups; ++q) {
      const T* group_in = ChannelsLast(g, in + GroupInputOffset(g, q), copy, h, *pool);
      T* group_out = out + q * g.group_outputs * g.out_feature_stride;
      if (depth == 0) {  // an empty window or no input features: zeros
        for (int64_t r = 0; r < rows; ++r) {
          T* o =
              group_out + r / g.positions * g.out_batch_stride + OutputOffset(g, r % g.positions);
          for (int64_t f = 0; f < g.group_outputs; ++f) o[f * g.out_feature_stride] = T(0);
        }
        continue;
      }
      // The group's kernel as [tap x input feature, output feature].
      std::vector<T> packed(depth * g.group_outputs);
      for (int64_t t = 0; t < g.taps; ++t) {
        for (int64_t i = 0; i < g.group_inputs; ++i) {
          const T* k = kernel + taps[t].kernel + i * g.kernel_in_stride +
                       q * g.group_outputs * g.kernel_out_stride;
          T* row = &packed[(t * g.group_inputs + i) * g.group_outputs];
          for (int64_t f = 0; f < g.group_outputs; ++f) row[f] = k[f * g.kernel_out_stride];
        }
      }
      // Tasks are row blocks, each cut into column pieces when there are
      // too few blocks for the pool (a small image with many features). With
      // one piece of columns (64 or fewer), the blocks shrink instead: a
      // weight gradient has few rows (kernel positions) and a deep window.
      const int64_t want = 2 * pool->num_threads();
      int64_t block_rows = kBlockRows;
      if ((rows + kBlockRows - 1) / kBlockRows < want && g.group_outputs <= 64) {
        block_rows = std::max<int64_t>(6, ((rows + want - 1) / want + 5) / 6 * 6);
      }
      const int64_t blocks = (rows + block_rows - 1) / block_rows;
      const int64_t pieces =
          blocks >= want ? 1 : std::min((g.group_outputs + 63) / 64, (want + blocks - 1) / blocks);
      const int64_t width = ((g.group_outputs + pieces - 1) / pieces + 63) / 64 * 64;
      const int64_t columns = (g.group_outputs + width - 1) / width;
      pool->ParallelFor(blocks * columns, 1, [&](int64_t t0, int64_t t1) {
        std::vector<T> patches(block_rows * depth), product(block_rows * width);
        std::vector<std::vector<int64_t>> along;
        std::vector<int64_t> out_at(block_rows);  // each row's output offset
        int64_t patched = -1;                     // the block `patches` holds
        for (int64_t task = t0; task < t1; ++task) {
          const int64_t b = task / columns, c0 = task % columns * width;
          const int64_t c1 = std::min(g.group_outputs, c0 + width), nc = c1 - c0;
          const int64_t r0 = b * block_rows, m = std::min(block_rows, rows - r0);
          for (int64_t r = 0; r < m && patched != b; ++r) {
            const int64_t n = (r0 + r) / g.positions, p = (r0 + r) % g.positions;
            TapOffsets(h, p, along);
            PatchRow(h, along, group_in + n * h.in_batch_stride, &patches[r * depth]);
          }
          patched = b;
          // The transposed product, kernelᵀ · patchesᵀ, for few output
          // features (an input gradient with 3 of them: the GEMM's wide tile
          // then runs along the positions instead of padding the features),
          // and for outputs that keep each feature's few positions together
          // over a shallow window (a weight gradient of a small image: the
          // product is written in runs instead of one element per feature
          // apart). Deep windows stay as they are: transposing the patches
          // for the GEMM's packing costs more there than it saves.
          const bool transposed =
              nc <= kFewOutputs ||
              (g.out_feature_stride != 1 && g.positions <= kFewPositions && depth <= kShallowDepth);
          if (transposed) {
            Gemm<T>(nc, m, depth, {packed.data() + c0, 1, g.group_outputs},
                    {patches.data(), 1, depth}, product.data(), m);
          } else {
            Gemm<T>(m, nc, depth, {patches.data(), depth, 1},
                    {packed.data() + c0, g.group_outputs, 1}, product.data(), nc);
          }
          for (int64_t r = 0; r < m; ++r) {
            const int64_t n = (r0 + r) / g.positions, p = (r0 + r) % g.positions;
            out_at[r] = n * g.out_batch_stride + OutputOffset(g, p);
          }
          T* first = group_out + c0 * g.out_feature_stride;
          if (transposed) {  // feature by feature: runs of positions
            for (int64_t f = 0; f < nc; ++f) {
              T* dst = first + f * g.out_feature_stride;
              const T* src = &product[f * m];
              for (int64_t r = 0; r < m; ++r) dst[out_at[r]] = src[r];
            }
          } else {
            for (int64_t r = 0; r < m; ++r) {
              const T* src = &product[r * nc];
              T* dst = first + out_at[r];
              for (int64_t f = 0; f < nc; ++f) dst[f * g.out_feature_stride] = src[f];
            }
          }
        }
      });
    }
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
      return {GemmConvolution<float>(g, &pool)};
    case DType::kF64:
      return {GemmConvolution<double>(g, &pool)};
    case DType::kS8:
      return {DirectConvolution<int8_t>(g, &pool)};
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
