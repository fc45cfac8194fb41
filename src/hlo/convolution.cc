#include "strata/hlo/convolution.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <limits>

#include "strata/core/error.h"

namespace strata::hlo {
namespace {

// "3x3" -> {3, 3}; "1_1x0_2" -> {"1_1", "0_2"}.
std::vector<std::string_view> SplitOn(std::string_view text, char separator) {
  std::vector<std::string_view> parts;
  while (true) {
    size_t at = text.find(separator);
    parts.push_back(text.substr(0, at));
    if (at == std::string_view::npos) return parts;
    text.remove_prefix(at + 1);
  }
}

int64_t ParseField(std::string_view key, std::string_view value, std::string_view part) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), v);
  if (ec != std::errc() || end != part.data() + part.size() || part.empty()) {
    Fail("window field '{}' must be integers joined by 'x', found '{}'", key, value);
  }
  return v;
}

}  // namespace

void SetWindowField(std::vector<WindowDim>& window, std::string_view key, std::string_view value) {
  const std::vector<std::string_view> dims = SplitOn(value, 'x');
  if (!window.empty() && window.size() != dims.size()) {
    Fail("window field '{}' has {} dims ('{}'), the window's other fields {}", key, dims.size(),
         value, window.size());
  }
  window.resize(dims.size());
  for (size_t d = 0; d < dims.size(); ++d) {
    WindowDim& w = window[d];
    if (key == "pad") {
      const std::vector<std::string_view> sides = SplitOn(dims[d], '_');
      if (sides.size() != 2) {
        Fail("window field 'pad' must be low_high per dim joined by 'x', found '{}'", value);
      }
      w.pad_low = ParseField(key, value, sides[0]);
      w.pad_high = ParseField(key, value, sides[1]);
      continue;
    }
    const int64_t v = ParseField(key, value, dims[d]);
    if (key == "rhs_reversal") {
      if (v != 0 && v != 1) Fail("window field 'rhs_reversal' takes 0 or 1, found '{}'", value);
      w.window_reversal = v == 1;
      continue;
    }
    if (v < 1) Fail("window field '{}' must be at least 1, found '{}'", key, value);
    if (key == "size") {
      w.size = v;
    } else if (key == "stride") {
      w.stride = v;
    } else if (key == "lhs_dilate") {
      w.base_dilation = v;
    } else if (key == "rhs_dilate") {
      w.window_dilation = v;
    } else {
      Fail(
          "unknown window field '{}' (expected size, stride, pad, lhs_dilate, rhs_dilate or "
          "rhs_reversal)",
          key);
    }
  }
}

std::string WindowText(const std::vector<WindowDim>& window) {
  if (window.empty()) return "";
  auto field = [&](std::string_view key, auto value_of, auto is_default) {
    if (std::all_of(window.begin(), window.end(), is_default) && key != "size")
      return std::string();
    std::string text = fmt::format(" {}=", key);
    for (size_t d = 0; d < window.size(); ++d) text += (d ? "x" : "") + value_of(window[d]);
    return text;
  };
  std::string text =
      field(
          "size", [](const WindowDim& w) { return std::to_string(w.size); },
          [](const WindowDim&) { return false; }) +
      field(
          "stride", [](const WindowDim& w) { return std::to_string(w.stride); },
          [](const WindowDim& w) { return w.stride == 1; }) +
      field(
          "pad", [](const WindowDim& w) { return fmt::format("{}_{}", w.pad_low, w.pad_high); },
          [](const WindowDim& w) { return w.pad_low == 0 && w.pad_high == 0; }) +
      field(
          "lhs_dilate", [](const WindowDim& w) { return std::to_string(w.base_dilation); },
          [](const WindowDim& w) { return w.base_dilation == 1; }) +
      field(
          "rhs_dilate", [](const WindowDim& w) { return std::to_string(w.window_dilation); },
          [](const WindowDim& w) { return w.window_dilation == 1; }) +
      field(
          "rhs_reversal",
          [](const WindowDim& w) { return std::string(w.window_reversal ? "1" : "0"); },
          [](const WindowDim& w) { return !w.window_reversal; });
  return text.substr(1);
}

ConvolutionDims ParseDimLabels(std::string_view input, std::string_view kernel,
                               std::string_view output) {
  // Each part: its two named labels and its spatial dims in label order.
  struct Part {
    int64_t first = -1, second = -1;
    std::vector<int64_t> spatial;
  };
  auto read = [&](std::string_view text, char first, char second, std::string_view what) {
    Part part;
    std::vector<int64_t> spatial(text.size(), -1);
    for (size_t d = 0; d < text.size(); ++d) {
      const char c = text[d];
      int64_t* slot = c == first ? &part.first : c == second ? &part.second : nullptr;
      if (slot) {
        if (*slot >= 0) Fail("dim_labels: the {} '{}' repeats '{}'", what, text, c);
        *slot = static_cast<int64_t>(d);
      } else if (c >= '0' && c <= '9' && static_cast<size_t>(c - '0') + 2 < text.size()) {
        if (spatial[c - '0'] >= 0) Fail("dim_labels: the {} '{}' repeats '{}'", what, text, c);
        spatial[c - '0'] = static_cast<int64_t>(d);
      } else {
        Fail("dim_labels: the {} '{}' has label '{}' (expected {}, {} and a digit per spatial dim)",
             what, text, c, first, second);
      }
    }
    if (part.first < 0 || part.second < 0) {
      Fail("dim_labels: the {} '{}' needs both '{}' and '{}'", what, text, first, second);
    }
    for (size_t s = 0; s + 2 < text.size(); ++s) {
      if (spatial[s] < 0) Fail("dim_labels: the {} '{}' lacks spatial dim {}", what, text, s);
      part.spatial.push_back(spatial[s]);
    }
    return part;
  };
  const Part in = read(input, 'b', 'f', "input");
  const Part k = read(kernel, 'i', 'o', "kernel");
  const Part out = read(output, 'b', 'f', "output");
  if (in.spatial.size() != k.spatial.size() || in.spatial.size() != out.spatial.size()) {
    Fail("dim_labels: '{}_{}->{}' gives {}, {} and {} spatial dims; they must agree", input, kernel,
         output, in.spatial.size(), k.spatial.size(), out.spatial.size());
  }
  return {in.first,  in.second, in.spatial, k.first,    k.second,
          k.spatial, out.first, out.second, out.spatial};
}

std::string DimLabelsText(const ConvolutionDims& dims) {
  auto text = [](int64_t first, char first_label, int64_t second, char second_label,
                 const std::vector<int64_t>& spatial) {
    std::string s(spatial.size() + 2, '?');
    s[first] = first_label;
    s[second] = second_label;
    for (size_t i = 0; i < spatial.size(); ++i) s[spatial[i]] = static_cast<char>('0' + i);
    return s;
  };
  return text(dims.input_batch, 'b', dims.input_feature, 'f', dims.input_spatial) + "_" +
         text(dims.kernel_input_feature, 'i', dims.kernel_output_feature, 'o',
              dims.kernel_spatial) +
         "->" + text(dims.output_batch, 'b', dims.output_feature, 'f', dims.output_spatial);
}

int64_t ConvolutionOutputSize(int64_t input_size, const WindowDim& w) {
  // In 128 bits: the text may hold any int64 sizes, dilations and pads.
  using Wide = __int128;
  const Wide dilated_input = input_size == 0 ? 0 : Wide(input_size - 1) * w.base_dilation + 1;
  const Wide padded = dilated_input + w.pad_low + w.pad_high;
  const Wide dilated_window = Wide(w.size - 1) * w.window_dilation + 1;
  if (padded < dilated_window) return 0;
  const Wide out = (padded - dilated_window) / w.stride + 1;
  if (out > std::numeric_limits<int64_t>::max()) {
    Fail(
        "a window over {} elements (size {}, stride {}, pad {}_{}, dilations {} and {}) has more "
        "than 2^63 positions",
        input_size, w.size, w.stride, w.pad_low, w.pad_high, w.base_dilation, w.window_dilation);
  }
  return static_cast<int64_t>(out);
}

int64_t DilatedSize(int64_t size, int64_t dilation) {
  const __int128 dilated = size == 0 ? 0 : __int128(size - 1) * dilation + 1;
  if (dilated > std::numeric_limits<int64_t>::max()) {
    Fail("{} elements dilated by {} overflow 64 bits", size, dilation);
  }
  return static_cast<int64_t>(dilated);
}

}  // namespace strata::hlo
