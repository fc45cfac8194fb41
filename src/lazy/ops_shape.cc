// Shape ops: views (reshape, transpose, expand, squeeze), slicing, indexing
// through gather, and joining / splitting along a dim.
#include <fmt/format.h>

#include <algorithm>

#include "strata/lazy/index_check.h"
#include "strata/lazy/op_builder.h"

namespace strata {

using hlo::Opcode;
using lazy::Op;
using lazy::Wrap;

namespace {

Tensor ReshapeTo(const Tensor& x, std::vector<int64_t> dims) {
  if (x.shape().dims() == dims) return x;
  return Wrap(Op(Opcode::kReshape, {x.value()}, {}, Shape(x.dtype(), std::move(dims))));
}

std::string ShapesToString(const std::vector<Tensor>& tensors) {
  std::string out;
  for (const Tensor& t : tensors) out += (out.empty() ? "" : ", ") + t.shape().ToString();
  return out;
}

// expand / broadcast_to: -1 keeps a dim; only size-1 dims grow; new dims lead.
Tensor Expand(std::string_view op, const Tensor& x, const std::vector<int64_t>& dims) {
  const Shape& s = x.shape();
  auto rank = static_cast<int64_t>(dims.size());
  if (rank < s.rank()) {
    Fail("[{}] cannot expand {} to {}: the target has fewer dimensions than the tensor", op,
         s.ToString(), DimsToString(dims));
  }
  int64_t offset = rank - s.rank();
  std::vector<int64_t> out(dims);
  for (int64_t i = 0; i < rank; ++i) {
    bool existing = i >= offset;
    if (dims[i] == -1 && existing) {
      out[i] = s.dim(i - offset);
    } else if (dims[i] < 0) {
      Fail("[{}] cannot expand {} to {}: size {} at dimension {} is not allowed{}", op,
           s.ToString(), DimsToString(dims), dims[i], i,
           existing ? "" : " (a new leading dimension needs a size)");
    } else if (existing && s.dim(i - offset) != dims[i] && s.dim(i - offset) != 1) {
      Fail("[{}] cannot expand {} to {}: dimension {} is {}, and only size-1 dimensions can grow",
           op, s.ToString(), DimsToString(dims), i, s.dim(i - offset));
    }
  }
  return Wrap(lazy::BroadcastValue(x.value(), out));
}

// Python's clamping of a slice bound to [0, size].
int64_t ClampBound(int64_t bound, int64_t size) {
  if (bound < 0) bound += size;
  return std::clamp<int64_t>(bound, 0, size);
}

// Gathers x[.., index[i], ..] along `dim` for a 1-D index.
ir::Value GatherAlong(const Tensor& x, int64_t dim, const ir::Value& index) {
  if (x.shape().num_elements() == 0) {  // nothing to gather (a gather's slice would not fit)
    if (x.dim(dim) == 0 && index.shape().num_elements() > 0) {
      Fail("[index] cannot take {} indices from dimension {} of size 0 in {}",
           index.shape().num_elements(), dim, x.shape().ToString());
    }
    std::vector<int64_t> dims = x.shape().dims();
    dims[dim] = index.shape().dim(0);
    return zeros(dims, x.dtype()).value();
  }
  hlo::GatherDims g;
  g.index_vector_dim = 1;  // the index vector is implicit: one start per index element
  g.start_index_map = {dim};
  g.collapsed_slice_dims = {dim};
  g.slice_sizes = x.shape().dims();
  g.slice_sizes[dim] = 1;
  for (int64_t d = 0; d < x.rank(); ++d) {
    if (d != dim) g.offset_dims.push_back(d);
  }
  hlo::Attributes a;
  a.gather = std::move(g);
  return Op(Opcode::kGather, {x.value(), index}, std::move(a));
}

}  // namespace

Tensor reshape(const Tensor& x, std::vector<int64_t> dims) {
  int64_t inferred = -1, known = 1;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == -1) {
      if (inferred >= 0) Fail("[reshape] only one dimension can be -1, got {}", DimsToString(dims));
      inferred = static_cast<int64_t>(i);
    } else if (dims[i] < 0) {
      Fail("[reshape] invalid size {} in {} for {}", dims[i], DimsToString(dims),
           x.shape().ToString());
    } else {
      known *= dims[i];
    }
  }
  int64_t n = x.numel();
  if (inferred >= 0) {
    if (known == 0 || n % known != 0) {
      Fail("[reshape] cannot reshape {} ({} elements) into {}: the -1 dimension is not determined",
           x.shape().ToString(), n, DimsToString(dims));
    }
    dims[inferred] = n / known;
  } else if (known != n) {
    Fail("[reshape] cannot reshape {} ({} elements) into {} ({} elements)", x.shape().ToString(), n,
         DimsToString(dims), known);
  }
  return ReshapeTo(x, std::move(dims));
}

Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1) {
  int64_t a = lazy::NormalizeDim("transpose", dim0, x.shape());
  int64_t b = lazy::NormalizeDim("transpose", dim1, x.shape());
  if (a == b) return x;
  std::vector<int64_t> perm(x.rank());
  for (int64_t i = 0; i < x.rank(); ++i) perm[i] = i;
  std::swap(perm[a], perm[b]);
  return permute(x, perm);
}

Tensor mT(const Tensor& x) {
  if (x.rank() < 2) Fail("[mT] expects at least 2 dimensions, got {}", x.shape().ToString());
  return transpose(x, -2, -1);
}

Tensor permute(const Tensor& x, std::vector<int64_t> dims) {
  if (static_cast<int64_t>(dims.size()) != x.rank()) {
    Fail("[permute] {} is not a permutation of the {} dimensions of {}", DimsToString(dims),
         x.rank(), x.shape().ToString());
  }
  std::vector<int64_t> perm = lazy::NormalizeDims("permute", dims, x.shape());
  bool identity = true;
  for (int64_t i = 0; i < x.rank(); ++i) identity = identity && perm[i] == i;
  if (identity) return x;
  hlo::Attributes a;
  a.dimensions = std::move(perm);
  return Wrap(Op(Opcode::kTranspose, {x.value()}, std::move(a)));
}

Tensor flip(const Tensor& x, std::vector<int64_t> dims) {
  std::vector<int64_t> axes = lazy::NormalizeDims("flip", std::move(dims), x.shape());
  if (axes.empty() || x.rank() == 0) return x;  // a scalar's dim 0 (or -1) is itself, as torch
  std::sort(axes.begin(), axes.end());
  hlo::Attributes a;
  a.dimensions = std::move(axes);
  return Wrap(Op(Opcode::kReverse, {x.value()}, std::move(a)));
}

Tensor expand(const Tensor& x, std::vector<int64_t> dims) { return Expand("expand", x, dims); }
Tensor broadcast_to(const Tensor& x, std::vector<int64_t> dims) {
  return Expand("broadcast_to", x, dims);
}

Tensor squeeze(const Tensor& x, std::optional<int64_t> dim) {
  const Shape& s = x.shape();
  std::vector<int64_t> out;
  if (!dim) {
    for (int64_t d : s.dims()) {
      if (d != 1) out.push_back(d);
    }
  } else {
    int64_t d = lazy::NormalizeDim("squeeze", *dim, s);
    out = s.dims();
    if (s.rank() > 0 && s.dim(d) == 1) out.erase(out.begin() + d);  // a non-1 dim stays, as torch
  }
  return ReshapeTo(x, std::move(out));
}

Tensor unsqueeze(const Tensor& x, int64_t dim) {
  int64_t rank = x.rank();
  if (dim < -rank - 1 || dim > rank) {
    Fail("[unsqueeze] dimension {} out of range for {}: expected it in [{}, {}]", dim,
         x.shape().ToString(), -rank - 1, rank);
  }
  if (dim < 0) dim += rank + 1;
  std::vector<int64_t> out = x.shape().dims();
  out.insert(out.begin() + dim, 1);
  return ReshapeTo(x, std::move(out));
}

Tensor slice(const Tensor& x, int64_t dim, std::optional<int64_t> start, std::optional<int64_t> end,
             int64_t step) {
  if (x.rank() == 0) Fail("[slice] cannot slice a rank-0 tensor {}", x.shape().ToString());
  int64_t d = lazy::NormalizeDim("slice", dim, x.shape());
  if (step <= 0) Fail("[slice] step must be positive, got {} (for {})", step, x.shape().ToString());
  int64_t size = x.shape().dim(d);
  int64_t lo = start ? ClampBound(*start, size) : 0;
  int64_t hi = end ? ClampBound(*end, size) : size;
  hi = std::max(hi, lo);
  if (lo == 0 && hi == size && step == 1) return x;
  hlo::Attributes a;
  for (int64_t i = 0; i < x.rank(); ++i) a.slice.push_back({0, x.shape().dim(i), 1});
  a.slice[d] = {lo, hi, step};
  return Wrap(Op(Opcode::kSlice, {x.value()}, std::move(a)));
}

// Out-of-range indices are an error at the sync that runs the op (checked
// indexing, lazy::Context::set_index_checks); with checks off they clamp
// into range (XLA's gather semantics).
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  if (!IsInteger(index.dtype()) || index.rank() > 1) {
    Fail("[index_select] index must be a 1-D integer tensor, got {} (selecting from {})",
         index.shape().ToString(), x.shape().ToString());
  }
  if (x.rank() == 0)
    Fail("[index_select] cannot select from a rank-0 tensor {}", x.shape().ToString());
  int64_t d = lazy::NormalizeDim("index_select", dim, x.shape());
  int64_t count = index.numel();
  if (x.shape().dim(d) == 0 && count > 0) {
    Fail("[index_select] cannot select {} entries from dimension {} of size 0 in {}", count, d,
         x.shape().ToString());
  }
  ir::Value flat = index.rank() == 0 ? reshape(index, {1}).value() : index.value();
  return lazy::WithIndexCheck(Wrap(GatherAlong(x, d, flat)), index, x.shape().dim(d),
                              "index_select",
                              fmt::format("dimension {} of {}", d, x.shape().ToString()));
}

namespace {

// The index vectors of an op along dimension d over `dims` positions:
// (iota_0, .., indices, .., iota_{r-1}) stacked on a new last dim.
ir::Value AlongDimStarts(const ir::Value& indices, const std::vector<int64_t>& dims, int64_t d) {
  const int64_t rank = static_cast<int64_t>(dims.size());
  std::vector<int64_t> vector_dims = dims;
  vector_dims.push_back(1);
  std::vector<ir::Value> parts;
  for (int64_t i = 0; i < rank; ++i) {
    ir::Value part;
    if (i == d) {
      part = lazy::BroadcastValue(lazy::ConvertValue(indices, DType::kS64), dims);
    } else {
      hlo::Attributes iota;
      iota.dimensions = {i};
      part = Op(Opcode::kIota, {}, std::move(iota), Shape(DType::kS64, dims));
    }
    parts.push_back(Op(Opcode::kReshape, {part}, {}, Shape(DType::kS64, vector_dims)));
  }
  hlo::Attributes cat;
  cat.dimensions = {rank};
  return Op(Opcode::kConcatenate, std::move(parts), std::move(cat));
}

}  // namespace

// out[i..] = x[i.. with dim replaced by indices[i..]]: a gather whose index
// vectors are (iota_0, .., indices, .., iota_{r-1}); other dims broadcast.
Tensor take_along_dim(const Tensor& x, const Tensor& indices, int64_t dim) {
  const Shape& s = x.shape();
  const Shape& is = indices.shape();
  if (!IsInteger(indices.dtype())) {
    Fail("[take_along_dim] indices must be an integer tensor, got {} (for {})", is.ToString(),
         s.ToString());
  }
  if (is.rank() != s.rank()) {
    Fail("[take_along_dim] indices {} must have the rank of the input {}", is.ToString(),
         s.ToString());
  }
  if (s.rank() == 0) return x;
  int64_t d = lazy::NormalizeDim("take_along_dim", dim, s);
  std::vector<int64_t> out(s.rank()), x_dims(s.rank());
  for (int64_t i = 0; i < s.rank(); ++i) {
    if (i == d) {
      out[i] = is.dim(i);
      x_dims[i] = s.dim(i);
      continue;
    }
    if (s.dim(i) != is.dim(i) && s.dim(i) != 1 && is.dim(i) != 1) {
      Fail(
          "[take_along_dim] input {} and indices {} cannot be broadcast together outside dimension "
          "{}",
          s.ToString(), is.ToString(), d);
    }
    out[i] = x_dims[i] = s.dim(i) == 1 ? is.dim(i) : s.dim(i);
  }
  if (s.dim(d) == 0 && Product(out) > 0) {
    Fail("[take_along_dim] cannot take from dimension {} of size 0 in {}", d, s.ToString());
  }
  if (Product(out) == 0) return zeros(out, x.dtype());  // a gather's slice would not fit
  hlo::GatherDims g;
  g.index_vector_dim = s.rank();
  for (int64_t i = 0; i < s.rank(); ++i) {
    g.start_index_map.push_back(i);
    g.collapsed_slice_dims.push_back(i);
  }
  g.slice_sizes.assign(s.rank(), 1);
  hlo::Attributes a;
  a.gather = std::move(g);
  ir::Value starts = AlongDimStarts(indices.value(), out, d);
  return lazy::WithIndexCheck(
      Wrap(Op(Opcode::kGather, {lazy::BroadcastValue(x.value(), x_dims), starts}, std::move(a))),
      indices, s.dim(d), "take_along_dim", fmt::format("dimension {} of {}", d, s.ToString()));
}

ir::Value lazy::ScatterAddAlongDim(const ir::Value& x, int64_t d, const ir::Value& index,
                                   const ir::Value& src) {
  const int64_t rank = x.shape().rank();
  hlo::Attributes a;
  a.scatter.index_vector_dim = rank;
  for (int64_t i = 0; i < rank; ++i) {
    a.scatter.inserted_window_dims.push_back(i);
    a.scatter.scatter_dims_to_operand_dims.push_back(i);
  }
  a.called = {ir::ScalarCombiner(Opcode::kAdd, x.shape().dtype())};
  return Op(Opcode::kScatter, {x, AlongDimStarts(index, index.shape().dims(), d), src},
            std::move(a));
}

Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  const Shape& s = x.shape();
  const Shape& is = index.shape();
  const Shape& ss = src.shape();
  if (!IsInteger(index.dtype())) {
    Fail("[scatter_add] index must be an integer tensor, got {}", is.ToString());
  }
  if (src.dtype() != x.dtype()) {
    Fail("[scatter_add] src {} must have the dtype of the input {}", ss.ToString(), s.ToString());
  }
  if (is.rank() != s.rank() || ss.rank() != s.rank()) {
    Fail("[scatter_add] input {}, index {} and src {} must have one rank", s.ToString(),
         is.ToString(), ss.ToString());
  }
  if (s.rank() == 0) return x + src;
  const int64_t d = lazy::NormalizeDim("scatter_add", dim, s);
  for (int64_t i = 0; i < s.rank(); ++i) {
    if (is.dim(i) > ss.dim(i) || (i != d && is.dim(i) > s.dim(i))) {
      Fail(
          "[scatter_add] index {} may be no larger than src {} in any dimension, nor than the "
          "input {} outside dimension {}",
          is.ToString(), ss.ToString(), s.ToString(), d);
    }
  }
  if (is.num_elements() == 0) return x;
  if (s.dim(d) == 0) {
    Fail("[scatter_add] cannot add into dimension {} of size 0 in {}", d, s.ToString());
  }
  // As torch, only src's part the index covers is added.
  Tensor part = src;
  for (int64_t i = 0; i < s.rank(); ++i) {
    if (ss.dim(i) != is.dim(i)) part = slice(part, i, 0, is.dim(i));
  }
  // x itself is differentiable through the scatter (the rule passes its cotangent).
  ir::Value r = lazy::ScatterAddAlongDim(x.value(), d, index.value(), part.value());
  return lazy::WithIndexCheck(Wrap(r), index, s.dim(d), "scatter_add",
                              fmt::format("dimension {} of {}", d, s.ToString()));
}

Tensor concat(const std::vector<Tensor>& tensors, int64_t dim) {
  if (tensors.empty()) Fail("[concat] expects a non-empty list of tensors");
  const Shape& first = tensors[0].shape();
  if (first.rank() == 0)
    Fail("[concat] cannot concatenate rank-0 tensors ({})", ShapesToString(tensors));
  int64_t d = lazy::NormalizeDim("concat", dim, first);
  DType t = tensors[0].dtype();
  for (const Tensor& x : tensors) {
    const Shape& s = x.shape();
    bool same = s.rank() == first.rank();
    for (int64_t i = 0; same && i < s.rank(); ++i) same = i == d || s.dim(i) == first.dim(i);
    if (!same) {
      Fail(
          "[concat] tensors must have the same rank and equal sizes in every dimension but {}, got "
          "{}",
          d, ShapesToString(tensors));
    }
    t = lazy::PromoteTypes(t, x.dtype());
  }
  if (tensors.size() == 1) return astype(tensors[0], t);
  std::vector<ir::Value> operands;
  for (const Tensor& x : tensors) operands.push_back(lazy::ConvertValue(x.value(), t));
  hlo::Attributes a;
  a.dimensions = {d};
  return Wrap(Op(Opcode::kConcatenate, std::move(operands), std::move(a)));
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  if (tensors.empty()) Fail("[stack] expects a non-empty list of tensors");
  for (const Tensor& x : tensors) {
    if (x.shape().dims() != tensors[0].shape().dims()) {
      Fail("[stack] expects tensors of equal size, got {}", ShapesToString(tensors));
    }
  }
  int64_t rank = tensors[0].rank();
  if (dim < -rank - 1 || dim > rank) {
    Fail("[stack] dimension {} out of range for stacking {}: expected it in [{}, {}]", dim,
         ShapesToString(tensors), -rank - 1, rank);
  }
  std::vector<Tensor> expanded;
  for (const Tensor& x : tensors) expanded.push_back(unsqueeze(x, dim));
  return concat(expanded, dim < 0 ? dim + rank + 1 : dim);
}

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim) {
  if (x.rank() == 0) Fail("[split] cannot split a rank-0 tensor {}", x.shape().ToString());
  int64_t d = lazy::NormalizeDim("split", dim, x.shape());
  int64_t size = x.shape().dim(d);
  if (split_size < 0 || (split_size == 0 && size > 0)) {
    Fail("[split] split_size must be positive, got {} for dimension {} of {}", split_size, d,
         x.shape().ToString());
  }
  if (size == 0) return {x};
  std::vector<Tensor> pieces;
  for (int64_t start = 0; start < size; start += split_size)
    pieces.push_back(slice(x, d, start, start + split_size));
  return pieces;
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  if (chunks <= 0)
    Fail("[chunk] the number of chunks must be positive, got {} (for {})", chunks,
         x.shape().ToString());
  if (x.rank() == 0) Fail("[chunk] cannot chunk a rank-0 tensor {}", x.shape().ToString());
  int64_t d = lazy::NormalizeDim("chunk", dim, x.shape());
  int64_t size = x.shape().dim(d);
  // As torch.chunk: pieces of ceil(size / chunks), possibly fewer than
  // `chunks`; an empty dim gives `chunks` empty pieces.
  if (size == 0) return std::vector<Tensor>(chunks, x);
  return split(x, (size + chunks - 1) / chunks, d);
}

}  // namespace strata
