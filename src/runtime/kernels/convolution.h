// The convolution kernel's shared pieces (convolution.cc): the geometry a
// run reads, the taps of an output position, and the strategies that live in
// files of their own (implicit GEMM over output features, and over output
// positions). Private to the kernels.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/gemm.h"
#include "kernels/kernels.h"

namespace strata::runtime::conv {

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

Geometry GeometryOf(const hlo::Instruction& inst);

// Where output position `p` (row-major over the output's spatial dims)
// reads tap `t` (row-major over the window): the input's spatial offset in
// elements, or -1 in padding or a dilation hole. Kernel offset of the tap.
struct Tap {
  int64_t input = 0;  // -1: no element
  int64_t kernel = 0;
};
Tap TapOf(const Geometry& g, int64_t p, int64_t t);

// Group q's first input element (batch or feature offset) and output feature.
int64_t GroupInputOffset(const Geometry& g, int64_t q);

// convolution_implicit.cc: planar float convolutions as GEMMs over output
// features that never build the patches.
bool ImplicitGemmApplies(const Geometry& g);
template <typename T>
Kernel ImplicitGemmConvolution(const Geometry& g, ThreadPool* pool);

// The kernel as rows [output feature (all groups), (input feature, tap)]:
// in place when its strides say so (OIHW), else copied into `copy`. Group
// q's rows start at q * group_outputs * row_stride (convolution_implicit.cc).
template <typename T>
MatrixView<const T> KernelRows(const Geometry& g, const T* kernel,
                               const std::vector<int64_t>& kernel_at, std::vector<T>& copy,
                               ThreadPool& pool);

// convolution_position.cc: the same over output positions, when the output
// features fill the GEMM's panels.
bool PositionGemmApplies(const Geometry& g, GemmTile tile);
template <typename T>
KernelInfo PositionGemmConvolution(const Geometry& g, ThreadPool* pool);

}  // namespace strata::runtime::conv
