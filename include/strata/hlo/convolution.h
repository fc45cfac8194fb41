// A convolution's attributes in XLA's text form, and what its result holds.
//   window={size=3x3 stride=2x2 pad=1_1x1_1 lhs_dilate=1x1 rhs_dilate=2x2 rhs_reversal=0x1}
//   dim_labels=b01f_01io->b01f   (b batch, f feature, i / o the kernel's input and
//                                 output features, 0 1 2 ... the spatial dims)
// The parser reads the window's fields and the labels through these; the
// printer writes them back the same way.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "strata/hlo/module.h"

namespace strata::hlo {

// Sets one `key=value` field of a window (size, stride, pad, lhs_dilate,
// rhs_dilate, rhs_reversal), growing it to the value's number of dims.
// Throws strata::Error naming the field and what it expected.
void SetWindowField(std::vector<WindowDim>& window, std::string_view key, std::string_view value);
// The text inside window={...}; empty for a window of no dims.
std::string WindowText(const std::vector<WindowDim>& window);

// Reads "b01f_01io->b01f" (given as its three parts). Throws strata::Error
// when a part repeats or lacks a label, or the parts disagree on the number
// of spatial dims.
ConvolutionDims ParseDimLabels(std::string_view input, std::string_view kernel,
                               std::string_view output);
// "b01f_01io->b01f" for `dims`.
std::string DimLabelsText(const ConvolutionDims& dims);

// The size of a spatial dim of the result: the window's positions over the
// dilated, padded input (0 when it does not fit once). Throws strata::Error
// when that exceeds int64.
int64_t ConvolutionOutputSize(int64_t input_size, const WindowDim& w);
// (size - 1) * dilation + 1 (0 for size 0); throws strata::Error past int64.
int64_t DilatedSize(int64_t size, int64_t dilation);

}  // namespace strata::hlo
