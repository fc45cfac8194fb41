// Convolutions: XLA's general form, and PyTorch's convNd on top of it.
#include <fmt/ranges.h>

#include "strata/lazy/op_builder.h"

namespace strata {

using hlo::Opcode;
using lazy::Op;
using lazy::Wrap;

Tensor conv_general(const Tensor& input, const Tensor& kernel, std::vector<hlo::WindowDim> window,
                    const hlo::ConvolutionDims& dims, int64_t feature_group_count,
                    int64_t batch_group_count) {
  hlo::Attributes a;
  a.window = std::move(window);
  a.convolution = dims;
  a.feature_group_count = feature_group_count;
  a.batch_group_count = batch_group_count;
  return Wrap(Op(Opcode::kConvolution, {input.value(), kernel.value()}, std::move(a)));
}

namespace {

Tensor TorchConvolution(std::string_view op, const Tensor& input, const Tensor& weight,
                        const std::vector<int64_t>& stride, const std::vector<int64_t>& padding,
                        const std::vector<int64_t>& dilation, int64_t groups, int64_t spatial) {
  const int64_t k = weight.rank() - 2;  // the kernel's spatial dims
  if (spatial >= 0 && weight.rank() != spatial + 2) {
    Fail(
        "[{}] expected weight of rank {} (out channels, in channels / groups, {} kernel dims), "
        "got {}",
        op, spatial + 2, spatial, weight.shape().ToString());
  }
  if (k < 1) {
    Fail("[{}] expected weight [out channels, in channels / groups, kernel...], got {}", op,
         weight.shape().ToString());
  }
  const bool unbatched = input.rank() == k + 1;
  if (!unbatched && input.rank() != k + 2) {
    Fail(
        "[{}] expected input of rank {} (batch, channels, {} spatial dims) or {} (unbatched) "
        "for weight {}, got {}",
        op, k + 2, k, k + 1, weight.shape().ToString(), input.shape().ToString());
  }
  if (input.dtype() != weight.dtype()) {
    Fail("[{}] input and weight must have one dtype, got {} and {}", op, DTypeName(input.dtype()),
         DTypeName(weight.dtype()));
  }
  if (groups < 1) Fail("[{}] groups must be at least 1, got {}", op, groups);
  const Tensor x = unbatched ? unsqueeze(input, 0) : input;
  const int64_t channels = x.shape().dim(1), out_channels = weight.shape().dim(0);
  if (channels % groups != 0 || out_channels % groups != 0 ||
      weight.shape().dim(1) * groups != channels) {
    Fail(
        "[{}] input {} has {} channels and weight {} expects {} per group for groups={}; both "
        "channel counts must divide by groups",
        op, input.shape().ToString(), channels, weight.shape().ToString(), weight.shape().dim(1),
        groups);
  }
  const std::vector<int64_t> s = lazy::PerSpatialDim(op, "stride", stride, k, 1);
  const std::vector<int64_t> p = lazy::PerSpatialDim(op, "padding", padding, k, 0);
  const std::vector<int64_t> d = lazy::PerSpatialDim(op, "dilation", dilation, k, 1);
  std::vector<hlo::WindowDim> window(k);
  hlo::ConvolutionDims dims{0, 1, {}, 1, 0, {}, 0, 1, {}};
  for (int64_t i = 0; i < k; ++i) {
    window[i].size = weight.shape().dim(i + 2);
    window[i].stride = s[i];
    window[i].pad_low = window[i].pad_high = p[i];
    window[i].window_dilation = d[i];
    const __int128 dilated = __int128(window[i].size - 1) * d[i] + 1;
    if (x.shape().dim(i + 2) + 2 * __int128(p[i]) < dilated) {
      Fail(
          "[{}] the kernel ({} with dilation {}) is larger than the padded input ({} + 2 x {}) "
          "in spatial dim {} of {}",
          op, window[i].size, d[i], x.shape().dim(i + 2), p[i], i, input.shape().ToString());
    }
    dims.input_spatial.push_back(i + 2);
    dims.kernel_spatial.push_back(i + 2);
    dims.output_spatial.push_back(i + 2);
  }
  Tensor y = conv_general(x, weight, std::move(window), dims, groups);
  return unbatched ? squeeze(y, 0) : y;
}

}  // namespace

namespace lazy {

std::vector<int64_t> PerSpatialDim(std::string_view op, std::string_view what,
                                   const std::vector<int64_t>& values, int64_t spatial,
                                   int64_t least) {
  if (values.size() != 1 && static_cast<int64_t>(values.size()) != spatial) {
    Fail("[{}] {} takes one value or one per spatial dim ({}), got {} values", op, what, spatial,
         values.size());
  }
  std::vector<int64_t> out = values.size() == 1 ? std::vector<int64_t>(spatial, values[0]) : values;
  for (int64_t v : out) {
    if (v < least)
      Fail("[{}] {} must be at least {}, got {}", op, what, least, fmt::join(out, ", "));
  }
  return out;
}

}  // namespace lazy

Tensor conv(const Tensor& input, const Tensor& weight, std::vector<int64_t> stride,
            std::vector<int64_t> padding, std::vector<int64_t> dilation, int64_t groups) {
  return TorchConvolution("conv", input, weight, stride, padding, dilation, groups, -1);
}
Tensor conv1d(const Tensor& input, const Tensor& weight, std::vector<int64_t> stride,
              std::vector<int64_t> padding, std::vector<int64_t> dilation, int64_t groups) {
  return TorchConvolution("conv1d", input, weight, stride, padding, dilation, groups, 1);
}
Tensor conv2d(const Tensor& input, const Tensor& weight, std::vector<int64_t> stride,
              std::vector<int64_t> padding, std::vector<int64_t> dilation, int64_t groups) {
  return TorchConvolution("conv2d", input, weight, stride, padding, dilation, groups, 2);
}
Tensor conv3d(const Tensor& input, const Tensor& weight, std::vector<int64_t> stride,
              std::vector<int64_t> padding, std::vector<int64_t> dilation, int64_t groups) {
  return TorchConvolution("conv3d", input, weight, stride, padding, dilation, groups, 3);
}

}  // namespace strata
