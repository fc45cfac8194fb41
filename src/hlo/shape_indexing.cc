// Shape rules of gather and scatter.
#include <fmt/ranges.h>

#include <algorithm>
#include <set>

#include "shape_rules.h"

namespace strata::hlo::shape_rules {
namespace {

// Batch dimensions of gather/scatter indices: all but index_vector_dim.
std::vector<int64_t> IndexBatchDims(const View& inst, const Shape& indices,
                                    int64_t index_vector_dim, int64_t* index_vector_size) {
  if (!IsInteger(indices.dtype()))
    Reject(inst, "indices must be integers, got {}", indices.ToString());
  if (index_vector_dim < 0 || index_vector_dim > indices.rank()) {
    Reject(inst, "index_vector_dim {} out of range for indices {}", index_vector_dim,
           indices.ToString());
  }
  *index_vector_size = index_vector_dim == indices.rank() ? 1 : indices.dim(index_vector_dim);
  std::vector<int64_t> batch;
  for (int64_t i = 0; i < indices.rank(); ++i) {
    if (i != index_vector_dim) batch.push_back(indices.dim(i));
  }
  return batch;
}

// Batch dims: operand (or input) dim a[i] pairs with indices dim b[i]; the
// two have one size, the indices dim is not index_vector_dim, and the
// operand dim is neither collapsed (inserted) nor indexed.
void CheckBatchingDims(const View& inst, const Shape& operand, const Shape& indices,
                       int64_t index_vector_dim, const std::vector<int64_t>& a,
                       const std::vector<int64_t>& b, const std::vector<int64_t>& windowless,
                       const std::vector<int64_t>& indexed) {
  if (a.size() != b.size()) {
    Reject(inst, "{} operand batching dims but {} indices batching dims", a.size(), b.size());
  }
  CheckDimensions(inst, a, operand.rank(), "operand batching dimension");
  CheckDimensions(inst, b, indices.rank(), "indices batching dimension");
  CheckSorted(inst, a, "operand batching dims");
  for (size_t i = 0; i < a.size(); ++i) {
    if (b[i] == index_vector_dim) {
      Reject(inst, "indices batching dimension {} is the index vector dimension", b[i]);
    }
    if (operand.dim(a[i]) != indices.dim(b[i])) {
      Reject(inst, "batching dims {} (size {}) and {} (size {}) differ", a[i], operand.dim(a[i]),
             b[i], indices.dim(b[i]));
    }
    for (const std::vector<int64_t>* other : {&windowless, &indexed}) {
      if (std::find(other->begin(), other->end(), a[i]) != other->end()) {
        Reject(inst, "operand batching dimension {} is also {}", a[i],
               other == &indexed ? "indexed" : "collapsed or inserted");
      }
    }
  }
}

Shape InferGather(const View& inst) {
  ExpectOperands(inst, 2);
  const Shape& operand = ArrayOperand(inst, 0);
  const Shape& indices = ArrayOperand(inst, 1);
  const GatherDims& g = inst.attrs.gather;
  int64_t index_size;
  auto batch = IndexBatchDims(inst, indices, g.index_vector_dim, &index_size);
  if (static_cast<int64_t>(g.slice_sizes.size()) != operand.rank()) {
    Reject(inst, "slice_sizes has {} entries, operand rank is {}", g.slice_sizes.size(),
           operand.rank());
  }
  for (int64_t i = 0; i < operand.rank(); ++i) {
    if (g.slice_sizes[i] < 0 || g.slice_sizes[i] > operand.dim(i)) {
      Reject(inst, "slice size {} of dimension {} must be in [0, {}]", g.slice_sizes[i], i,
             operand.dim(i));
    }
  }
  if (static_cast<int64_t>(g.start_index_map.size()) != index_size) {
    Reject(inst, "start_index_map has {} entries, index vector has {}", g.start_index_map.size(),
           index_size);
  }
  CheckDimensions(inst, g.start_index_map, operand.rank(), "start_index_map dimension");
  CheckDimensions(inst, g.collapsed_slice_dims, operand.rank(), "collapsed_slice_dims dimension");
  CheckSorted(inst, g.collapsed_slice_dims, "collapsed_slice_dims");
  CheckSorted(inst, g.offset_dims, "offset_dims");
  CheckBatchingDims(inst, operand, indices, g.index_vector_dim, g.operand_batching_dims,
                    g.start_indices_batching_dims, g.collapsed_slice_dims, g.start_index_map);
  std::vector<int64_t> windowless = g.collapsed_slice_dims;  // dims with no offset dim
  windowless.insert(windowless.end(), g.operand_batching_dims.begin(),
                    g.operand_batching_dims.end());
  for (int64_t c : windowless) {
    if (g.slice_sizes[c] > 1) {
      Reject(inst, "collapsed or batching dimension {} must have slice size <= 1", c);
    }
  }
  std::vector<int64_t> window;
  for (int64_t i = 0; i < operand.rank(); ++i) {
    if (std::find(windowless.begin(), windowless.end(), i) == windowless.end()) {
      window.push_back(g.slice_sizes[i]);
    }
  }
  if (window.size() != g.offset_dims.size()) {
    Reject(inst,
           "offset_dims has {} entries, expected {} (operand rank minus collapsed and batching "
           "dims)",
           g.offset_dims.size(), window.size());
  }
  int64_t out_rank = static_cast<int64_t>(batch.size() + window.size());
  CheckDimensions(inst, g.offset_dims, out_rank, "offset dimension");
  std::vector<int64_t> out(out_rank);
  size_t wi = 0, bi = 0;
  for (int64_t i = 0; i < out_rank; ++i) {
    bool is_offset =
        std::find(g.offset_dims.begin(), g.offset_dims.end(), i) != g.offset_dims.end();
    out[i] = is_offset ? window[wi++] : batch[bi++];
  }
  return Shape(operand.dtype(), out);
}

Shape InferScatter(const View& inst) {
  ExpectOperands(inst, 3);
  const Shape& operand = ArrayOperand(inst, 0);
  const Shape& indices = ArrayOperand(inst, 1);
  const Shape& updates = ArrayOperand(inst, 2);
  const ScatterDims& s = inst.attrs.scatter;
  if (updates.dtype() != operand.dtype()) {
    Reject(inst, "updates must have the operand's element type {}", DTypeName(operand.dtype()));
  }
  int64_t index_size;
  auto batch = IndexBatchDims(inst, indices, s.index_vector_dim, &index_size);
  CheckSorted(inst, s.update_window_dims, "update_window_dims");
  CheckSorted(inst, s.inserted_window_dims, "inserted_window_dims");
  CheckDimensions(inst, s.update_window_dims, updates.rank(), "update window dimension");
  CheckDimensions(inst, s.inserted_window_dims, operand.rank(), "inserted window dimension");
  CheckBatchingDims(inst, operand, indices, s.index_vector_dim, s.input_batching_dims,
                    s.scatter_indices_batching_dims, s.inserted_window_dims,
                    s.scatter_dims_to_operand_dims);
  std::vector<int64_t> windowless = s.inserted_window_dims;  // operand dims with no window dim
  windowless.insert(windowless.end(), s.input_batching_dims.begin(), s.input_batching_dims.end());
  if (static_cast<int64_t>(s.update_window_dims.size() + windowless.size()) != operand.rank()) {
    Reject(inst,
           "update_window_dims ({}) plus inserted_window_dims ({}) and input_batching_dims ({}) "
           "must equal operand rank {}",
           s.update_window_dims.size(), s.inserted_window_dims.size(), s.input_batching_dims.size(),
           operand.rank());
  }
  if (static_cast<int64_t>(s.scatter_dims_to_operand_dims.size()) != index_size) {
    Reject(inst, "scatter_dims_to_operand_dims has {} entries, index vector has {}",
           s.scatter_dims_to_operand_dims.size(), index_size);
  }
  CheckDimensions(inst, s.scatter_dims_to_operand_dims, operand.rank(), "scatter dimension");
  if (static_cast<int64_t>(batch.size() + s.update_window_dims.size()) != updates.rank()) {
    Reject(inst, "updates rank must be {} (scatter batch dims + window dims), got {}",
           batch.size() + s.update_window_dims.size(), updates.rank());
  }
  size_t bi = 0, wi = 0;
  for (int64_t i = 0; i < updates.rank(); ++i) {
    bool is_window = std::find(s.update_window_dims.begin(), s.update_window_dims.end(), i) !=
                     s.update_window_dims.end();
    if (is_window) {
      // Window dims map, in order, to operand dims that are not inserted.
      int64_t od = 0, seen = -1;
      for (; od < operand.rank(); ++od) {
        bool inserted = std::find(windowless.begin(), windowless.end(), od) != windowless.end();
        if (!inserted && ++seen == static_cast<int64_t>(wi)) break;
      }
      ++wi;
      if (updates.dim(i) > operand.dim(od)) {
        Reject(inst, "update window dimension {} has size {} > operand dimension {} size {}", i,
               updates.dim(i), od, operand.dim(od));
      }
    } else if (updates.dim(i) != batch[bi++]) {
      Reject(inst, "updates scatter dimension {} has size {}, indices give {}", i, updates.dim(i),
             batch[bi - 1]);
    }
  }
  if (inst.attrs.called.size() != 1) Reject(inst, "expected one to_apply computation");
  const Computation& f = *inst.attrs.called[0];
  Shape scalar = Shape::Scalar(operand.dtype());
  auto params = f.parameters();
  if (params.size() != 2 || params[0]->shape() != scalar || params[1]->shape() != scalar ||
      (f.root() && f.root()->shape() != scalar)) {
    Reject(inst, "to_apply {} must be ({}, {}) -> {}", f.name(), scalar.ToString(),
           scalar.ToString(), scalar.ToString());
  }
  return operand;
}

}  // namespace

Shape IndexingShape(const View& inst) {
  [[maybe_unused]] const Shape& declared = inst.declared;
  switch (inst.op) {
    case Opcode::kGather:
      return InferGather(inst);
    case Opcode::kScatter:
      return InferScatter(inst);
    default:
      Reject(inst, "is not an indexing op");
  }
}

}  // namespace strata::hlo::shape_rules
