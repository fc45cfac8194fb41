// Tensor ops with PyTorch / NumPy semantics. Each builds lazy IR only.
// Elementwise binary ops broadcast (NumPy rules) and promote types
// (PyTorch rules: bool < integers < floating; a C++ scalar operand adopts
// the tensor's dtype unless it is a float scalar meeting an integer tensor,
// which gives f32). Scalars become scalar parameters of the program, so
// changing them never recompiles; wrap a value in constant() to bake it in
// (0 and 1 are always baked in). A bad call throws strata::Error naming the
// op, the shapes and what was expected: "[matmul] ...".
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "strata/hlo/opcode.h"
#include "strata/lazy/tensor.h"

namespace strata {

// ---- creation ---------------------------------------------------------------
Tensor zeros(std::vector<int64_t> dims, DType dtype = DType::kF32);
Tensor ones(std::vector<int64_t> dims, DType dtype = DType::kF32);
Tensor full(std::vector<int64_t> dims, double value, DType dtype = DType::kF32);
Tensor arange(int64_t end, DType dtype = DType::kS64);
Tensor arange(double start, double end, double step = 1, DType dtype = DType::kF32);
Tensor eye(int64_t n, DType dtype = DType::kF32);
// A scalar baked into the program as a literal (changing it recompiles).
Tensor constant(double value, DType dtype = DType::kF32);
// A scalar that is a program parameter (changing it never recompiles).
Tensor scalar(double value, DType dtype = DType::kF32);
// The same from an integer, exact beyond 2^53; an integer dtype narrower than
// 64 bits keeps the low bits (wraps, as torch's `uint8_tensor + 256`).
Tensor integer_scalar(int64_t value, DType dtype = DType::kS64);
// integer_scalar's value baked into the program, as constant's.
Tensor integer_constant(int64_t value, DType dtype = DType::kS64);

// While one lives on this thread, every scalar made (scalar, integer_scalar,
// full, a number next to a tensor) is a literal of the program, as constant
// makes, not a parameter. For front ends whose programs fix their numbers
// (a torch.compile graph, whose literals Dynamo guards on): the compiler
// then folds and specializes them (x ** 1.0 is x), and no scalar crosses
// into the program per call.
class BakeScalars {
 public:
  explicit BakeScalars(bool bake = true);
  ~BakeScalars();
  BakeScalars(const BakeScalars&) = delete;
  BakeScalars& operator=(const BakeScalars&) = delete;
  static bool active();

 private:
  bool previous_;
};
Tensor integer_full(std::vector<int64_t> dims, int64_t value, DType dtype = DType::kS64);

// Random numbers from an explicit key (Philox-4x32-10; the same key gives
// the same numbers everywhere). A key is a u64[2] tensor; split a key to get
// independent ones.
Tensor random_key(uint64_t seed);
std::vector<Tensor> split_key(const Tensor& key, int64_t count);
Tensor uniform(const Tensor& key, std::vector<int64_t> dims, double low = 0, double high = 1,
               DType dtype = DType::kF32);
Tensor normal(const Tensor& key, std::vector<int64_t> dims, double mean = 0, double stddev = 1,
              DType dtype = DType::kF32);
Tensor uniform(uint64_t seed, std::vector<int64_t> dims, double low = 0, double high = 1,
               DType dtype = DType::kF32);
Tensor normal(uint64_t seed, std::vector<int64_t> dims, double mean = 0, double stddev = 1,
              DType dtype = DType::kF32);

// ---- elementwise --------------------------------------------------------------
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(double a, const Tensor& b);
Tensor operator-(const Tensor& a);
Tensor pow(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, double exponent);
Tensor remainder(const Tensor& a, const Tensor& b);  // sign of the divisor, as torch.remainder
// torch.div's rounding modes: the quotient rounded toward -inf (floor, also
// torch.floor_divide and Python's //) or toward zero (trunc). Integers divide
// exactly in their own dtype; an integer divisor of 0 is an Error from the
// sync (torch's ZeroDivisionError), as in remainder.
Tensor floor_divide(const Tensor& a, const Tensor& b);
Tensor trunc_divide(const Tensor& a, const Tensor& b);

// The elementwise ops of the opcode rows whose api column is Api(name)
// (include/strata/hlo/opcode.h): `Tensor name(const Tensor& x)` for a unary
// row (abs, exp, log, sigmoid, tan, cbrt, ...), `Tensor name(const Tensor& a,
// const Tensor& b)` for a binary one (maximum, minimum, atan2). They promote
// as torch: an op that takes only floats computes integer operands in f32.
#define STRATA_LAZY_DECLARE_ROW(e, name, kind, complex, ...) STRATA_LAZY_DECLARE_##kind(__VA_ARGS__)
#define STRATA_LAZY_DECLARE_Other(...)
#define STRATA_LAZY_DECLARE_Collective(...)
#define STRATA_LAZY_DECLARE_Unary(api, ...) STRATA_LAZY_DECLARE_UNARY_##api
#define STRATA_LAZY_DECLARE_Binary(api, ...) STRATA_LAZY_DECLARE_BINARY_##api
#define STRATA_LAZY_DECLARE_UNARY_Api(n) Tensor n(const Tensor& x);
#define STRATA_LAZY_DECLARE_BINARY_Api(n) Tensor n(const Tensor& a, const Tensor& b);
#define STRATA_LAZY_DECLARE_UNARY_Custom(n)
#define STRATA_LAZY_DECLARE_BINARY_Custom(n)
#define STRATA_LAZY_DECLARE_UNARY_Internal()
#define STRATA_LAZY_DECLARE_BINARY_Internal()
STRATA_HLO_OPCODES(STRATA_LAZY_DECLARE_ROW)
#undef STRATA_LAZY_DECLARE_ROW
#undef STRATA_LAZY_DECLARE_Other
#undef STRATA_LAZY_DECLARE_Collective
#undef STRATA_LAZY_DECLARE_Unary
#undef STRATA_LAZY_DECLARE_Binary
#undef STRATA_LAZY_DECLARE_UNARY_Api
#undef STRATA_LAZY_DECLARE_BINARY_Api
#undef STRATA_LAZY_DECLARE_UNARY_Custom
#undef STRATA_LAZY_DECLARE_BINARY_Custom
#undef STRATA_LAZY_DECLARE_UNARY_Internal
#undef STRATA_LAZY_DECLARE_BINARY_Internal

// Written by hand (Custom rows): their semantics go past the row's.
Tensor sign(const Tensor& x);
Tensor floor(const Tensor& x);
Tensor ceil(const Tensor& x);
Tensor logical_not(const Tensor& x);
Tensor clamp(const Tensor& x, std::optional<double> low, std::optional<double> high);

// Comparisons give pred (bool) tensors.
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
// Bitwise ops, as torch: on integer and bool tensors only (a float operand
// is an error); on bools they are the logical ops.
Tensor bitwise_and(const Tensor& a, const Tensor& b);
Tensor bitwise_or(const Tensor& a, const Tensor& b);
Tensor bitwise_xor(const Tensor& a, const Tensor& b);
Tensor bitwise_not(const Tensor& x);
Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b);
Tensor astype(const Tensor& x, DType dtype);

// ---- linear algebra -------------------------------------------------------------
// torch.matmul: 1-D and 2-D operands, and batched with broadcast batch dims.
Tensor matmul(const Tensor& a, const Tensor& b);

// ---- convolution (ops_convolution.cc) ---------------------------------------------
// XLA's convolution: any dim_labels, window (strides, padding, dilations,
// reversal), feature and batch groups; the shape rule's errors name what
// does not fit. Differentiable in the input and the kernel.
Tensor conv_general(const Tensor& input, const Tensor& kernel, std::vector<hlo::WindowDim> window,
                    const hlo::ConvolutionDims& dims, int64_t feature_group_count = 1,
                    int64_t batch_group_count = 1);
// torch.nn.functional.convNd: input [N, C, *spatial] (or [C, *spatial],
// unbatched), weight [O, C / groups, *kernel]; stride, padding and dilation
// give one value per spatial dim or one for all. conv1d / conv2d / conv3d
// check the rank. No bias: add it (bias.reshape({O, 1, ...})).
Tensor conv(const Tensor& input, const Tensor& weight, std::vector<int64_t> stride = {1},
            std::vector<int64_t> padding = {0}, std::vector<int64_t> dilation = {1},
            int64_t groups = 1);
Tensor conv1d(const Tensor& input, const Tensor& weight, std::vector<int64_t> stride = {1},
              std::vector<int64_t> padding = {0}, std::vector<int64_t> dilation = {1},
              int64_t groups = 1);
Tensor conv2d(const Tensor& input, const Tensor& weight, std::vector<int64_t> stride = {1},
              std::vector<int64_t> padding = {0}, std::vector<int64_t> dilation = {1},
              int64_t groups = 1);
Tensor conv3d(const Tensor& input, const Tensor& weight, std::vector<int64_t> stride = {1},
              std::vector<int64_t> padding = {0}, std::vector<int64_t> dilation = {1},
              int64_t groups = 1);

// ---- pooling (ops_pooling.cc) ------------------------------------------------------
// XLA's reduce-window with the identity of `op` (add, maximum, minimum) as
// init: one window dim per dim of x. Differentiable (max / min through
// select-and-scatter, without input dilation).
Tensor reduce_window(const Tensor& x, hlo::Opcode op, std::vector<hlo::WindowDim> window);
// torch.nn.functional.max_poolNd / avg_poolNd on [N, C, *spatial] (or
// [C, *spatial]): kernel, stride (empty: the kernel), padding and (max)
// dilation give one value per spatial dim or one for all. Padding is -inf for
// max; avg divides by the whole window (count_include_pad) or by the input
// elements it covers. ceil_mode rounds the output size up as torch does (the
// last window starts inside the input or its left padding).
Tensor max_pool1d(const Tensor& x, std::vector<int64_t> kernel, std::vector<int64_t> stride = {},
                  std::vector<int64_t> padding = {0}, std::vector<int64_t> dilation = {1},
                  bool ceil_mode = false);
Tensor max_pool2d(const Tensor& x, std::vector<int64_t> kernel, std::vector<int64_t> stride = {},
                  std::vector<int64_t> padding = {0}, std::vector<int64_t> dilation = {1},
                  bool ceil_mode = false);
Tensor max_pool3d(const Tensor& x, std::vector<int64_t> kernel, std::vector<int64_t> stride = {},
                  std::vector<int64_t> padding = {0}, std::vector<int64_t> dilation = {1},
                  bool ceil_mode = false);
// max_poolNd with torch's return_indices: the values and, for each, where
// its maximum is in its input plane (the spatial dims flattened), as s64.
// Ties give the first position in the window; a NaN gives a NaN's.
struct ValuesIndices;
ValuesIndices max_pool1d_with_indices(const Tensor& x, std::vector<int64_t> kernel,
                                      std::vector<int64_t> stride = {},
                                      std::vector<int64_t> padding = {0},
                                      std::vector<int64_t> dilation = {1}, bool ceil_mode = false);
ValuesIndices max_pool2d_with_indices(const Tensor& x, std::vector<int64_t> kernel,
                                      std::vector<int64_t> stride = {},
                                      std::vector<int64_t> padding = {0},
                                      std::vector<int64_t> dilation = {1}, bool ceil_mode = false);
ValuesIndices max_pool3d_with_indices(const Tensor& x, std::vector<int64_t> kernel,
                                      std::vector<int64_t> stride = {},
                                      std::vector<int64_t> padding = {0},
                                      std::vector<int64_t> dilation = {1}, bool ceil_mode = false);
// divisor_override (torch's): every window's sum divided by it instead.
Tensor avg_pool1d(const Tensor& x, std::vector<int64_t> kernel, std::vector<int64_t> stride = {},
                  std::vector<int64_t> padding = {0}, bool count_include_pad = true,
                  bool ceil_mode = false, std::optional<int64_t> divisor_override = std::nullopt);
Tensor avg_pool2d(const Tensor& x, std::vector<int64_t> kernel, std::vector<int64_t> stride = {},
                  std::vector<int64_t> padding = {0}, bool count_include_pad = true,
                  bool ceil_mode = false, std::optional<int64_t> divisor_override = std::nullopt);
Tensor avg_pool3d(const Tensor& x, std::vector<int64_t> kernel, std::vector<int64_t> stride = {},
                  std::vector<int64_t> padding = {0}, bool count_include_pad = true,
                  bool ceil_mode = false, std::optional<int64_t> divisor_override = std::nullopt);

// ---- reductions (dims may be negative; empty dims = all) -------------------------
Tensor sum(const Tensor& x, std::vector<int64_t> dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, std::vector<int64_t> dims = {}, bool keepdim = false);
Tensor max(const Tensor& x, std::vector<int64_t> dims = {}, bool keepdim = false);
Tensor min(const Tensor& x, std::vector<int64_t> dims = {}, bool keepdim = false);
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);  // s64, first index on ties
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim = false);

// ---- shape ------------------------------------------------------------------------
Tensor reshape(const Tensor& x, std::vector<int64_t> dims);  // one -1 allowed
Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1);
// The last two dimensions swapped (torch's x.mT; x.T of a matrix).
Tensor mT(const Tensor& x);
Tensor permute(const Tensor& x, std::vector<int64_t> dims);
// The order of elements reversed along each of `dims` (torch.flip).
Tensor flip(const Tensor& x, std::vector<int64_t> dims);
Tensor expand(const Tensor& x, std::vector<int64_t> dims);  // -1 keeps a dim
Tensor broadcast_to(const Tensor& x, std::vector<int64_t> dims);
Tensor squeeze(const Tensor& x, std::optional<int64_t> dim = std::nullopt);
Tensor unsqueeze(const Tensor& x, int64_t dim);
// x[start:end:step] along `dim` (negative and out-of-range bounds clamp as in Python).
Tensor slice(const Tensor& x, int64_t dim, std::optional<int64_t> start, std::optional<int64_t> end,
             int64_t step = 1);
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);  // integer index, 1-D
Tensor take_along_dim(const Tensor& x, const Tensor& indices, int64_t dim);
Tensor concat(const std::vector<Tensor>& tensors, int64_t dim = 0);
// Pads `low[d]` and `high[d]` elements of `value` before and after each dim.
Tensor pad(const Tensor& x, std::vector<int64_t> low, std::vector<int64_t> high, double value = 0);
// x[starts[0] : starts[0] + sizes[0], ...] for rank-0 integer start tensors
// (data, so a new start never recompiles). As in XLA, starts are clamped so
// the window stays inside x.
Tensor dynamic_slice(const Tensor& x, const std::vector<Tensor>& starts,
                     std::vector<int64_t> sizes);
// x with `update` written at `starts` (clamped the same way).
Tensor dynamic_update_slice(const Tensor& x, const Tensor& update,
                            const std::vector<Tensor>& starts);
// torch.index_add: x with alpha * source's slices along `dim` added at the
// positions `index` (1-D integer) names; repeated indices accumulate.
Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source,
                 double alpha = 1);
// torch.scatter_add: x with src[i..] added at x[i.. with dim replaced by
// index[i..]], over index's positions (index no larger than src anywhere,
// nor than x outside dim); repeated positions accumulate.
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0);
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);

// ---- sorting (ops_sort.cc) ------------------------------------------------------------
// A torch-style pair of results: sort, topk, cummax, cummin.
struct ValuesIndices {
  Tensor values;
  Tensor indices;  // s64
};
// torch.sort: x's values along `dim` in ascending (or descending) order and
// where each came from. NaN sorts as the largest value (last ascending, first
// descending), -0 and +0 as equal; ties keep their order (the sort is always
// stable, `stable` or not). Differentiable in x.
ValuesIndices sort(const Tensor& x, int64_t dim = -1, bool descending = false, bool stable = false);
Tensor argsort(const Tensor& x, int64_t dim = -1, bool descending = false, bool stable = false);
// torch.topk: the k largest (or smallest) values along `dim`, in order, and
// their indices; on ties the earlier element first. 0 <= k <= size of dim.
ValuesIndices topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true,
                   bool sorted = true);

// ---- cumulative (ops_cumulative.cc) -----------------------------------------------------
// torch.cumsum / cumprod (bool and integers accumulate in s64), cummax /
// cummin (values and the index of each running extreme: the later one on
// ties; a NaN, once seen, stays), logcumsumexp (floats). Differentiable.
Tensor cumsum(const Tensor& x, int64_t dim);
Tensor cumprod(const Tensor& x, int64_t dim);
ValuesIndices cummax(const Tensor& x, int64_t dim);
ValuesIndices cummin(const Tensor& x, int64_t dim);
Tensor logcumsumexp(const Tensor& x, int64_t dim);

// ---- functions ----------------------------------------------------------------------
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
Tensor one_hot(const Tensor& index, int64_t num_classes, DType dtype = DType::kF32);

}  // namespace strata
