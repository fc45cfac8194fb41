// The VJP of convolution: both cotangents are convolutions again (JAX's
// transpose rules, written for XLA's attributes).
//   input:  the output cotangent convolved with the kernel turned around (its
//           window reversed, its input and output features swapped), strides
//           becoming holes in the cotangent (base dilation) and the padding
//           chosen so the result has the input's size;
//   kernel: the input convolved with the cotangent as the window, batch and
//           feature swapping roles, the kernel's dilation becoming the stride.
// Feature groups of the forward become batch groups of the kernel's rule.
#include <algorithm>

#include "vjp_rules.h"

namespace strata::vjp_rules {
namespace {

int64_t Dilated(int64_t size, int64_t dilation) {
  return size == 0 ? 0 : (size - 1) * dilation + 1;
}

// The kernel as [input feature, output feature, spatial...] ("io01..."),
// with feature groups moved from its output features onto its input
// features: [groups x in, out / groups, ...] (the input rule's kernel).
Tensor KernelForInputRule(const Tensor& kernel, const hlo::ConvolutionDims& d, int64_t groups) {
  std::vector<int64_t> perm = {d.kernel_input_feature, d.kernel_output_feature};
  perm.insert(perm.end(), d.kernel_spatial.begin(), d.kernel_spatial.end());
  Tensor k = permute(kernel, perm);
  if (groups == 1) return k;
  std::vector<int64_t> dims = k.shape().dims();
  const int64_t in = dims[0], out = dims[1];
  std::vector<int64_t> split = {in, groups, out / groups};
  split.insert(split.end(), dims.begin() + 2, dims.end());
  k = reshape(k, split);  // [in, g, out/g, ...]
  std::vector<int64_t> order = {1, 0, 2};
  for (size_t i = 3; i < split.size(); ++i) order.push_back(static_cast<int64_t>(i));
  k = permute(k, order);  // [g, in, out/g, ...]
  std::vector<int64_t> merged = {groups * in, out / groups};
  merged.insert(merged.end(), dims.begin() + 2, dims.end());
  return reshape(k, merged);
}

// Spatial dim s as the forward saw it: the input's size after base
// dilation, the window's after its dilation, and the output's size before
// and after dilating it by the stride.
struct Extent {
  int64_t in, k, out_size, out;
};

Extent ExtentOf(const Tensor& g, const Tensor& input, const hlo::Attributes& a, int64_t s) {
  const hlo::ConvolutionDims& d = a.convolution;
  const hlo::WindowDim& w = a.window[s];
  const int64_t out_size = g.shape().dim(d.output_spatial[s]);
  return {Dilated(input.shape().dim(d.input_spatial[s]), w.base_dilation),
          Dilated(w.size, w.window_dilation), out_size, Dilated(out_size, w.stride)};
}

Tensor InputCotangent(const Tensor& g, const Tensor& input, const Tensor& kernel,
                      const hlo::Attributes& a) {
  const hlo::ConvolutionDims& d = a.convolution;
  const int64_t spatial = static_cast<int64_t>(d.input_spatial.size());
  std::vector<hlo::WindowDim> window(spatial);
  for (int64_t s = 0; s < spatial; ++s) {
    const hlo::WindowDim& w = a.window[s];
    [[maybe_unused]] const auto [in, k, out_size, out] = ExtentOf(g, input, a, s);
    hlo::WindowDim& t = window[s];
    t.size = w.size;
    t.stride = w.base_dilation;
    t.base_dilation = w.stride;
    t.window_dilation = w.window_dilation;
    t.pad_low = k - w.pad_low - 1;
    t.pad_high = in + k - 1 - out - t.pad_low;
    t.window_reversal = !w.window_reversal;
  }
  // g's batch and feature are the output's; the kernel is now "io01...":
  // its dim 1 (the forward's output features per group) is the rule's input.
  hlo::ConvolutionDims t;
  t.input_batch = d.output_batch;
  t.input_feature = d.output_feature;
  t.input_spatial = d.output_spatial;
  t.kernel_input_feature = 1;
  t.kernel_output_feature = 0;
  t.output_batch = d.input_batch;
  t.output_feature = d.input_feature;
  t.output_spatial = d.input_spatial;
  for (int64_t s = 0; s < spatial; ++s) t.kernel_spatial.push_back(s + 2);
  // Batch groups are feature groups here: group j's output features hold
  // the gradient of the input's batch block j, and move there.
  const int64_t groups = a.feature_group_count * a.batch_group_count;
  Tensor r = conv_general(g, KernelForInputRule(kernel, d, groups), std::move(window), t, groups);
  if (a.batch_group_count == 1) return r;
  std::vector<int64_t> canonical = {d.input_batch, d.input_feature};
  canonical.insert(canonical.end(), d.input_spatial.begin(), d.input_spatial.end());
  Tensor c = permute(r, canonical);  // [batch / groups, groups x features, spatial...]
  std::vector<int64_t> dims = c.shape().dims();
  const int64_t b = a.batch_group_count, n = dims[0], f = dims[1] / b;
  std::vector<int64_t> split = {n, b, f}, order = {1, 0, 2}, merged = {b * n, f};
  for (int64_t s = 0; s < spatial; ++s) {
    split.push_back(dims[s + 2]);
    order.push_back(s + 3);
    merged.push_back(dims[s + 2]);
  }
  c = reshape(permute(reshape(c, split), order), merged);
  std::vector<int64_t> inverse(canonical.size());
  for (size_t i = 0; i < canonical.size(); ++i) inverse[canonical[i]] = static_cast<int64_t>(i);
  return permute(c, inverse);
}

Tensor KernelCotangent(const Tensor& g, const Tensor& input, const Tensor& kernel,
                       const hlo::Attributes& a) {
  const hlo::ConvolutionDims& d = a.convolution;
  const int64_t spatial = static_cast<int64_t>(d.input_spatial.size());
  std::vector<hlo::WindowDim> window(spatial);
  std::vector<int64_t> reversed;
  for (int64_t s = 0; s < spatial; ++s) {
    const hlo::WindowDim& w = a.window[s];
    const auto [in, k, out_size, out] = ExtentOf(g, input, a, s);
    hlo::WindowDim& t = window[s];
    t.size = out_size;
    t.stride = w.window_dilation;
    t.base_dilation = w.base_dilation;
    t.window_dilation = w.stride;
    t.pad_low = w.pad_low;
    t.pad_high = out - in + k - w.pad_low - 1;
    if (w.window_reversal) reversed.push_back(d.kernel_spatial[s]);
  }
  hlo::ConvolutionDims t;
  t.input_batch = d.input_feature;
  t.input_feature = d.input_batch;
  t.input_spatial = d.input_spatial;
  t.kernel_input_feature = d.output_batch;
  t.kernel_output_feature = d.output_feature;
  t.kernel_spatial = d.output_spatial;
  t.output_batch = d.kernel_input_feature;
  t.output_feature = d.kernel_output_feature;
  t.output_spatial = d.kernel_spatial;
  // Feature groups of the forward split its input features, which are this
  // rule's batch: batch groups here, and the other way round.
  Tensor r =
      conv_general(input, g, std::move(window), t, a.batch_group_count, a.feature_group_count);
  if (reversed.empty()) return r;
  hlo::Attributes flip;
  flip.dimensions = reversed;
  return T(lazy::Op(Opcode::kReverse, {r.value()}, std::move(flip)));
}

}  // namespace

std::vector<Tensor> ConvolutionVjp(const RuleArgs& args) {
  [[maybe_unused]] const auto& [node, ops, g, out] = args;
  const hlo::Attributes& a = node.attributes();
  const Tensor input = T(ops[0]), kernel = T(ops[1]);
  std::vector<Tensor> in(2);
  if (Differentiable(ops[0].shape())) in[0] = InputCotangent(g, input, kernel, a);
  if (Differentiable(ops[1].shape())) in[1] = KernelCotangent(g, input, kernel, a);
  return in;
}

}  // namespace strata::vjp_rules
