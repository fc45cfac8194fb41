// Pooling: XLA's reduce-window, and PyTorch's max / avg pooling on it.
#include <fmt/ranges.h>

#include <limits>

#include "strata/lazy/op_builder.h"

namespace strata {

using hlo::Opcode;
using lazy::Op;
using lazy::Wrap;

Tensor reduce_window(const Tensor& x, Opcode op, std::vector<hlo::WindowDim> window) {
  if (op != Opcode::kAdd && op != Opcode::kMaximum && op != Opcode::kMinimum) {
    Fail("[reduce_window] reduces by add, maximum or minimum, got {}", hlo::OpcodeName(op));
  }
  if (x.dtype() == DType::kPred) Fail("[reduce_window] is not defined for bool tensors");
  if (op != Opcode::kAdd && !IsFloating(x.dtype())) {
    Fail("[reduce_window] {} takes floats (its identity is an infinity), got {}",
         hlo::OpcodeName(op), x.shape().ToString());
  }
  double identity = 0;
  if (op != Opcode::kAdd) {
    const double inf = std::numeric_limits<double>::infinity();
    identity = op == Opcode::kMaximum ? -inf : inf;
  }
  hlo::Attributes a;
  a.window = std::move(window);
  a.called = {ir::ScalarCombiner(op, x.dtype())};
  ir::Value init = lazy::ScalarValue(identity, x.dtype(), {});
  return Wrap(Op(Opcode::kReduceWindow, {x.value(), init}, std::move(a)));
}

namespace {

// The window of a torch pooling over x's trailing `spatial` dims (the
// leading batch and channel dims take windows of one).
// With ceil_mode the output size rounds up, as torch's does, except that the
// last window must start inside the input or its left padding; the windows
// that adds reach past the padding on the right (pad_high grows to cover
// them, and its elements are the reduction's identity).
std::vector<hlo::WindowDim> PoolWindow(std::string_view op, const Tensor& x, int64_t spatial,
                                       const std::vector<int64_t>& kernel,
                                       const std::vector<int64_t>& stride,
                                       const std::vector<int64_t>& padding,
                                       const std::vector<int64_t>& dilation, bool ceil_mode) {
  if (x.rank() != spatial + 1 && x.rank() != spatial + 2) {
    Fail("[{}] expected input of rank {} (batch, channels, {} spatial dims) or {}, got {}", op,
         spatial + 2, spatial, spatial + 1, x.shape().ToString());
  }
  const std::vector<int64_t> k = lazy::PerSpatialDim(op, "kernel_size", kernel, spatial, 1);
  const std::vector<int64_t> s =
      stride.empty() ? k : lazy::PerSpatialDim(op, "stride", stride, spatial, 1);
  const std::vector<int64_t> p = lazy::PerSpatialDim(op, "padding", padding, spatial, 0);
  const std::vector<int64_t> d = lazy::PerSpatialDim(op, "dilation", dilation, spatial, 1);
  std::vector<hlo::WindowDim> window(x.rank());
  const int64_t first = x.rank() - spatial;
  for (int64_t i = 0; i < spatial; ++i) {
    hlo::WindowDim& w = window[first + i];
    if (p[i] > k[i] / 2) {
      Fail("[{}] padding ({}) must be at most half the kernel size ({}) in spatial dim {}", op,
           p[i], k[i], i);
    }
    const int64_t size = x.shape().dim(first + i);
    if (size + 2 * __int128(p[i]) < __int128(k[i] - 1) * d[i] + 1) {
      Fail(
          "[{}] the window ({} with dilation {}) is larger than the padded input ({} + 2 x {}) "
          "in spatial dim {} of {}",
          op, k[i], d[i], size, p[i], i, x.shape().ToString());
    }
    w.size = k[i];
    w.stride = s[i];
    w.pad_low = w.pad_high = p[i];
    w.window_dilation = d[i];
    if (ceil_mode) {
      const int64_t span = (k[i] - 1) * d[i] + 1, room = size + 2 * p[i] - span;
      int64_t out = (room + s[i] - 1) / s[i] + 1;
      if ((out - 1) * s[i] >= size + p[i]) --out;
      w.pad_high += (out - 1) * s[i] + span - (size + 2 * p[i]);
    }
  }
  return window;
}

Tensor MaxPool(std::string_view op, const Tensor& x, int64_t spatial,
               const std::vector<int64_t>& kernel, const std::vector<int64_t>& stride,
               const std::vector<int64_t>& padding, const std::vector<int64_t>& dilation,
               bool ceil_mode) {
  if (!IsFloating(x.dtype())) Fail("[{}] takes floats, got {}", op, x.shape().ToString());
  return reduce_window(x, Opcode::kMaximum,
                       PoolWindow(op, x, spatial, kernel, stride, padding, dilation, ceil_mode));
}

// The position of each window's maximum in x's plane: a reduce-window of
// (value, position) pairs whose combiner keeps the larger value, the smaller
// position on a tie and a NaN over any number (argmax's). Padding is
// (-inf, the plane's size): a real element always wins it.
ValuesIndices MaxPoolWithIndices(std::string_view op, const Tensor& x, int64_t spatial,
                                 const std::vector<int64_t>& kernel,
                                 const std::vector<int64_t>& stride,
                                 const std::vector<int64_t>& padding,
                                 const std::vector<int64_t>& dilation, bool ceil_mode) {
  if (!IsFloating(x.dtype())) Fail("[{}] takes floats, got {}", op, x.shape().ToString());
  std::vector<hlo::WindowDim> window =
      PoolWindow(op, x, spatial, kernel, stride, padding, dilation, ceil_mode);
  Tensor values = reduce_window(x, Opcode::kMaximum, window);
  const int64_t first = x.rank() - spatial;
  std::vector<int64_t> plane(x.shape().dims().begin() + first, x.shape().dims().end());
  int64_t positions = 1;
  for (int64_t d : plane) positions *= d;
  Tensor where = broadcast_to(reshape(arange(positions), plane), x.shape().dims());
  const DType compute = lazy::ComputeType(x.dtype());
  hlo::Attributes a;
  a.window = std::move(window);
  a.called = {ir::ArgCombiner(/*is_max=*/true, compute, DType::kS64)};
  ir::Value pooled = Op(Opcode::kReduceWindow,
                        {lazy::ConvertValue(x.value(), compute), where.value(),
                         lazy::ScalarValue(-std::numeric_limits<double>::infinity(), compute, {}),
                         lazy::ScalarValue(static_cast<double>(positions), DType::kS64, {})},
                        std::move(a));
  return {values, Wrap(ir::Value{pooled.node, 1})};
}

// torch's divisor: the window's elements inside the input and, with
// count_include_pad, its padding, but never what ceil_mode adds past it;
// or divisor_override.
Tensor AvgPool(std::string_view op, const Tensor& x, int64_t spatial,
               const std::vector<int64_t>& kernel, const std::vector<int64_t>& stride,
               const std::vector<int64_t>& padding, bool count_include_pad, bool ceil_mode,
               std::optional<int64_t> divisor_override) {
  if (!IsFloating(x.dtype())) Fail("[{}] takes floats, got {}", op, x.shape().ToString());
  if (divisor_override && *divisor_override == 0) {
    Fail("[{}] divisor_override must not be zero", op);
  }
  std::vector<hlo::WindowDim> window =
      PoolWindow(op, x, spatial, kernel, stride, padding, {1}, ceil_mode);
  Tensor sum = reduce_window(x, Opcode::kAdd, window);
  if (divisor_override) return sum / static_cast<double>(*divisor_override);
  bool padded = false, past_padding = false;
  int64_t elements = 1;
  for (const hlo::WindowDim& w : window) {
    elements *= w.size;
    padded = padded || w.pad_low > 0;
    past_padding = past_padding || w.pad_high > w.pad_low;
  }
  if (!past_padding && (count_include_pad || !padded)) {
    return sum / static_cast<double>(elements);
  }
  // What each window covers: the same windows over ones (the input's
  // elements), with the padding made ones too when it counts.
  Tensor ones = full(x.shape().dims(), 1.0, x.dtype());
  if (count_include_pad) {
    std::vector<int64_t> low, high;
    for (hlo::WindowDim& w : window) {
      low.push_back(w.pad_low);
      high.push_back(w.pad_low);
      w.pad_high -= w.pad_low;
      w.pad_low = 0;
    }
    ones = pad(ones, low, high, 1.0);
  }
  return sum / reduce_window(ones, Opcode::kAdd, std::move(window));
}

}  // namespace

// torch's API has one entry point per rank; each forwards to the
// rank-generic implementation above, so the repetition below is only names.
Tensor max_pool1d(const Tensor& x, std::vector<int64_t> kernel, std::vector<int64_t> stride,
                  std::vector<int64_t> padding, std::vector<int64_t> dilation, bool ceil_mode) {
  return MaxPool("max_pool1d", x, 1, kernel, stride, padding, dilation, ceil_mode);
}
ValuesIndices max_pool1d_with_indices(const Tensor& x, std::vector<int64_t> kernel,
                                      std::vector<int64_t> stride, std::vector<int64_t> padding,
                                      std::vector<int64_t> dilation, bool ceil_mode) {
  return MaxPoolWithIndices("max_pool1d", x, 1, kernel, stride, padding, dilation, ceil_mode);
}
Tensor max_pool2d(const Tensor& x, std::vector<int64_t> kernel, std::vector<int64_t> stride,
                  std::vector<int64_t> padding, std::vector<int64_t> dilation, bool ceil_mode) {
  return MaxPool("max_pool2d", x, 2, kernel, stride, padding, dilation, ceil_mode);
}
ValuesIndices max_pool2d_with_indices(const Tensor& x, std::vector<int64_t> kernel,
                                      std::vector<int64_t> stride, std::vector<int64_t> padding,
                                      std::vector<int64_t> dilation, bool ceil_mode) {
  return MaxPoolWithIndices("max_pool2d", x, 2, kernel, stride, padding, dilation, ceil_mode);
}
Tensor max_pool3d(const Tensor& x, std::vector<int64_t> kernel, std::vector<int64_t> stride,
                  std::vector<int64_t> padding, std::vector<int64_t> dilation, bool ceil_mode) {
  return MaxPool("max_pool3d", x, 3, kernel, stride, padding, dilation, ceil_mode);
}
ValuesIndices max_pool3d_with_indices(const Tensor& x, std::vector<int64_t> kernel,
                                      std::vector<int64_t> stride, std::vector<int64_t> padding,
                                      std::vector<int64_t> dilation, bool ceil_mode) {
  return MaxPoolWithIndices("max_pool3d", x, 3, kernel, stride, padding, dilation, ceil_mode);
}
Tensor avg_pool1d(const Tensor& x, std::vector<int64_t> kernel, std::vector<int64_t> stride,
                  std::vector<int64_t> padding, bool count_include_pad, bool ceil_mode,
                  std::optional<int64_t> divisor_override) {
  return AvgPool("avg_pool1d", x, 1, kernel, stride, padding, count_include_pad, ceil_mode,
                 divisor_override);
}
Tensor avg_pool2d(const Tensor& x, std::vector<int64_t> kernel, std::vector<int64_t> stride,
                  std::vector<int64_t> padding, bool count_include_pad, bool ceil_mode,
                  std::optional<int64_t> divisor_override) {
  return AvgPool("avg_pool2d", x, 2, kernel, stride, padding, count_include_pad, ceil_mode,
                 divisor_override);
}
Tensor avg_pool3d(const Tensor& x, std::vector<int64_t> kernel, std::vector<int64_t> stride,
                  std::vector<int64_t> padding, bool count_include_pad, bool ceil_mode,
                  std::optional<int64_t> divisor_override) {
  return AvgPool("avg_pool3d", x, 3, kernel, stride, padding, count_include_pad, ceil_mode,
                 divisor_override);
}

}  // namespace strata
