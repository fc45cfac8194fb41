// The VJP of reduce-window (pooling), as JAX's rules:
//   add:            the cotangent spread back by a sum over windows of the
//                   cotangent itself, strides becoming holes (interior
//                   padding) and the padding chosen so the result has the
//                   input's size;
//   maximum/minimum: select-and-scatter: each window's cotangent goes to the
//                   element the window picked (the first largest or smallest).
#include <algorithm>

#include "strata/hlo/builder.h"
#include "vjp_rules.h"

namespace strata::vjp_rules {
namespace {

int64_t Dilated(int64_t size, int64_t dilation) {
  return size == 0 ? 0 : (size - 1) * dilation + 1;
}

Tensor SumCotangent(const Tensor& g, const Shape& input,
                    const std::vector<hlo::WindowDim>& window) {
  hlo::Attributes pad;
  std::vector<hlo::WindowDim> spread(window.size());
  for (size_t d = 0; d < window.size(); ++d) {
    const hlo::WindowDim& w = window[d];
    const int64_t in = Dilated(input.dim(d), w.base_dilation);
    const int64_t k = Dilated(w.size, w.window_dilation);
    const int64_t out = Dilated(g.shape().dim(d), w.stride);
    const int64_t low = k - w.pad_low - 1;
    pad.padding.push_back({low, in + k - 1 - out - low, w.stride - 1});
    spread[d].size = w.size;
    spread[d].stride = w.base_dilation;
    spread[d].window_dilation = w.window_dilation;
  }
  // Without holes to put in (stride 1) the padding is the window's own, so a
  // prefix sum's cotangent is a suffix sum the runtime runs as a scan.
  const bool holes = std::any_of(
      pad.padding.begin(), pad.padding.end(),
      [](const hlo::PadRange& p) { return p.interior != 0 || p.low < 0 || p.high < 0; });
  if (!holes) {
    for (size_t d = 0; d < window.size(); ++d) {
      spread[d].pad_low = pad.padding[d].low;
      spread[d].pad_high = pad.padding[d].high;
    }
    return reduce_window(g, Opcode::kAdd, std::move(spread));
  }
  Tensor padded = T(
      lazy::Op(Opcode::kPad, {g.value(), Zeros(Shape::Scalar(g.dtype())).value()}, std::move(pad)));
  return reduce_window(padded, Opcode::kAdd, std::move(spread));
}

Tensor ExtremeCotangent(const Tensor& g, const Tensor& input,
                        const std::vector<hlo::WindowDim>& window, bool is_max) {
  for (const hlo::WindowDim& w : window) {
    if (w.base_dilation != 1) {
      Fail("[grad] reduce-window {}: no gradient when the window dilates its input (lhs_dilate)",
           is_max ? "maximum" : "minimum");
    }
  }
  hlo::Attributes a;
  a.window = window;
  a.called = {ir::ScalarComparator(is_max ? hlo::Comparison::kGe : hlo::Comparison::kLe, g.dtype()),
              ir::ScalarCombiner(Opcode::kAdd, g.dtype())};
  return T(lazy::Op(Opcode::kSelectAndScatter,
                    {input.value(), g.value(), Zeros(Shape::Scalar(g.dtype())).value()},
                    std::move(a)));
}

}  // namespace

std::vector<Tensor> ReduceWindowVjp(const RuleArgs& args) {
  [[maybe_unused]] const auto& [node, ops, g, out] = args;
  const hlo::Attributes& a = node.attributes();
  std::vector<Tensor> in(ops.size());
  if (ops.size() != 2 || !Differentiable(ops[0].shape())) {
    if (ops.size() != 2) Fail("[grad] no VJP for a variadic reduce-window");
    return in;
  }
  const std::optional<Opcode> op = hlo::SimpleReducer(*a.called.at(0));
  if (op == Opcode::kAdd) {
    in[0] = SumCotangent(g, ops[0].shape(), a.window);
  } else if (op == Opcode::kMaximum || op == Opcode::kMinimum) {
    in[0] = ExtremeCotangent(g, T(ops[0]), a.window, op == Opcode::kMaximum);
  } else {
    Fail("[grad] no VJP for a reduce-window by {}", a.called.at(0)->name());
  }
  return in;
}

}  // namespace strata::vjp_rules
