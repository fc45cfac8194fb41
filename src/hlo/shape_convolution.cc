// The shape rule of convolution (XLA's operation semantics, "Conv").
#include "shape_rules.h"
#include "strata/hlo/convolution.h"

namespace strata::hlo::shape_rules {

Shape ConvolutionShape(const View& inst) {
  ExpectOperands(inst, 2);
  const Shape& input = ArrayOperand(inst, 0);
  const Shape& kernel = ArrayOperand(inst, 1);
  const ConvolutionDims& d = inst.attrs.convolution;
  const std::vector<WindowDim>& window = inst.attrs.window;
  if (input.dtype() != kernel.dtype()) {
    Reject(inst, "input and kernel must have one element type, got {} and {}",
           DTypeName(input.dtype()), DTypeName(kernel.dtype()));
  }
  if (!IsNumeric(input.dtype())) Reject(inst, "pred operands are not supported");
  const int64_t spatial = static_cast<int64_t>(d.input_spatial.size());
  const int64_t rank = spatial + 2;
  if (input.rank() != rank || kernel.rank() != rank) {
    Reject(inst, "dim_labels {} name {} dims; the input has {} and the kernel {}", DimLabelsText(d),
           rank, input.rank(), kernel.rank());
  }
  std::vector<int64_t> in_dims = {d.input_batch, d.input_feature};
  in_dims.insert(in_dims.end(), d.input_spatial.begin(), d.input_spatial.end());
  std::vector<int64_t> kernel_dims = {d.kernel_input_feature, d.kernel_output_feature};
  kernel_dims.insert(kernel_dims.end(), d.kernel_spatial.begin(), d.kernel_spatial.end());
  std::vector<int64_t> out_dims = {d.output_batch, d.output_feature};
  out_dims.insert(out_dims.end(), d.output_spatial.begin(), d.output_spatial.end());
  CheckDimensions(inst, in_dims, rank, "input dimension");
  CheckDimensions(inst, kernel_dims, rank, "kernel dimension");
  CheckDimensions(inst, out_dims, rank, "output dimension");
  if (static_cast<int64_t>(window.size()) != spatial) {
    Reject(inst, "the window has {} dims, the convolution {} spatial dims", window.size(), spatial);
  }
  for (int64_t s = 0; s < spatial; ++s) {
    if (window[s].size != kernel.dim(d.kernel_spatial[s])) {
      Reject(inst, "window size {} of spatial dim {} differs from the kernel's {}", window[s].size,
             s, kernel.dim(d.kernel_spatial[s]));
    }
  }
  const int64_t groups = inst.attrs.feature_group_count;
  const int64_t batch_groups = inst.attrs.batch_group_count;
  if (groups < 1 || batch_groups < 1) {
    Reject(inst, "feature_group_count ({}) and batch_group_count ({}) must be at least 1", groups,
           batch_groups);
  }
  if (groups > 1 && batch_groups > 1) {
    Reject(inst, "feature_group_count ({}) and batch_group_count ({}) cannot both exceed 1", groups,
           batch_groups);
  }
  const int64_t input_features = input.dim(d.input_feature);
  const int64_t kernel_inputs = kernel.dim(d.kernel_input_feature);
  const int64_t kernel_outputs = kernel.dim(d.kernel_output_feature);
  const int64_t batch = input.dim(d.input_batch);
  if (input_features % groups != 0 || input_features / groups != kernel_inputs) {
    Reject(inst,
           "the input's {} features over feature_group_count {} must equal the kernel's {} input "
           "features",
           input_features, groups, kernel_inputs);
  }
  if (kernel_outputs % groups != 0) {
    Reject(inst, "the kernel's {} output features are not divisible by feature_group_count {}",
           kernel_outputs, groups);
  }
  if (batch % batch_groups != 0 || kernel_outputs % batch_groups != 0) {
    Reject(inst,
           "batch_group_count {} must divide the input's batch ({}) and the kernel's output "
           "features ({})",
           batch_groups, batch, kernel_outputs);
  }
  std::vector<int64_t> dims(rank);
  dims[d.output_batch] = batch / batch_groups;
  dims[d.output_feature] = kernel_outputs;
  for (int64_t s = 0; s < spatial; ++s) {
    const WindowDim& w = window[s];
    const int64_t size = input.dim(d.input_spatial[s]);
    const int64_t dilated = DilatedSize(size, w.base_dilation);
    DilatedSize(w.size, w.window_dilation);  // throws past int64
    if (static_cast<__int128>(dilated) + w.pad_low + w.pad_high < 0) {
      Reject(inst, "spatial dim {}: padding {}_{} trims more than the input's {} elements", s,
             w.pad_low, w.pad_high, dilated);
    }
    dims[d.output_spatial[s]] = ConvolutionOutputSize(size, w);
  }
  return Shape(AccumulationType(inst, input.dtype(), dims), dims);
}

}  // namespace strata::hlo::shape_rules
