#include "strata/hlo/shape_inference.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <set>

#include "strata/core/error.h"

namespace strata::hlo {
namespace {

// What the rules read: opcode, operand shapes, attributes, declared shape.
struct View {
  Opcode op;
  std::span<const Shape* const> operands;
  const Attributes& attrs;
  const Shape& declared;
  int64_t operand_count() const { return static_cast<int64_t>(operands.size()); }
  const Shape& operand_shape(int64_t i) const { return *operands[i]; }
};

// Formats "[opcode] message; operands: f32[2,3], s32[]".
template <typename... Args>
[[noreturn]] void Reject(const View& inst, fmt::format_string<Args...> format, Args&&... args) {
  std::string operands;
  for (int64_t i = 0; i < inst.operand_count(); ++i) {
    if (i) operands += ", ";
    operands += inst.operand_shape(i).ToString();
  }
  throw Error(fmt::format("[{}] {} (operands: {})", OpcodeName(inst.op),
                          fmt::format(format, std::forward<Args>(args)...),
                          operands.empty() ? "none" : operands));
}

void ExpectOperands(const View& inst, int64_t n) {
  if (inst.operand_count() != n) {
    Reject(inst, "expected {} operand(s), got {}", n, inst.operand_count());
  }
}

const Shape& ArrayOperand(const View& inst, int64_t i) {
  const Shape& s = inst.operand_shape(i);
  if (!s.is_array()) Reject(inst, "operand {} must be an array, got tuple {}", i, s.ToString());
  return s;
}

// Dimension numbers must be unique and in [0, rank).
void CheckDimensions(const View& inst, const std::vector<int64_t>& dims, int64_t rank,
                     std::string_view what) {
  std::set<int64_t> seen;
  for (int64_t d : dims) {
    if (d < 0 || d >= rank) Reject(inst, "{} {} out of range for rank {}", what, d, rank);
    if (!seen.insert(d).second) Reject(inst, "{} {} repeated in {}", what, d, fmt::join(dims, ","));
  }
}

void CheckSorted(const View& inst, const std::vector<int64_t>& dims, std::string_view what) {
  if (!std::is_sorted(dims.begin(), dims.end())) {
    Reject(inst, "{} must be sorted, got {{{}}}", what, fmt::join(dims, ","));
  }
}

bool IsNumeric(DType t) { return t != DType::kPred; }

Shape InferElementwise(const View& inst) {
  Opcode op = inst.op;
  if (IsElementwiseUnary(op)) {
    ExpectOperands(inst, 1);
    const Shape& x = ArrayOperand(inst, 0);
    DType t = x.dtype();
    bool ok;
    switch (op) {
      case Opcode::kNegate:
      case Opcode::kAbs:
      case Opcode::kSign:
        ok = IsNumeric(t);
        break;
      case Opcode::kNot:
        ok = t == DType::kPred || IsInteger(t);
        break;
      default:
        ok = IsFloating(t);
        break;
    }
    if (!ok) Reject(inst, "unsupported element type {}", DTypeName(t));
    return x;
  }
  ExpectOperands(inst, 2);
  const Shape& a = ArrayOperand(inst, 0);
  const Shape& b = ArrayOperand(inst, 1);
  if (a != b)
    Reject(inst, "operands must have equal shapes, got {} and {}", a.ToString(), b.ToString());
  DType t = a.dtype();
  bool ok;
  switch (op) {
    case Opcode::kAnd:
    case Opcode::kOr:
    case Opcode::kXor:
      ok = t == DType::kPred || IsInteger(t);
      break;
    case Opcode::kShiftLeft:
    case Opcode::kShiftRightLogical:
    case Opcode::kShiftRightArithmetic:
      ok = IsInteger(t);
      break;
    case Opcode::kAtan2:
      ok = IsFloating(t);
      break;
    default:
      ok = IsNumeric(t);
      break;
  }
  if (!ok) Reject(inst, "unsupported element type {}", DTypeName(t));
  return a;
}

Shape InferReduce(const View& inst) {
  int64_t n = inst.operand_count() / 2;
  if (inst.operand_count() < 2 || inst.operand_count() % 2 != 0) {
    Reject(inst, "expected N operands and N init values, got {} operands", inst.operand_count());
  }
  if (inst.attrs.called.size() != 1) Reject(inst, "expected one to_apply computation");
  const Shape& first = ArrayOperand(inst, 0);
  CheckDimensions(inst, inst.attrs.dimensions, first.rank(), "reduced dimension");
  std::vector<Shape> results;
  std::vector<int64_t> out_dims;
  for (int64_t d = 0; d < first.rank(); ++d) {
    if (std::find(inst.attrs.dimensions.begin(), inst.attrs.dimensions.end(), d) ==
        inst.attrs.dimensions.end()) {
      out_dims.push_back(first.dim(d));
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    const Shape& x = ArrayOperand(inst, i);
    const Shape& init = ArrayOperand(inst, n + i);
    if (x.dims() != first.dims()) {
      Reject(inst, "operand {} has dimensions {} but operand 0 has {}", i, DimsToString(x.dims()),
             DimsToString(first.dims()));
    }
    if (!init.is_scalar() || init.dtype() != x.dtype()) {
      Reject(inst, "init value {} must be a {} scalar, got {}", i, DTypeName(x.dtype()),
             init.ToString());
    }
    results.push_back(Shape(x.dtype(), out_dims));
  }
  // to_apply: (acc_0..acc_{n-1}, x_0..x_{n-1}) -> acc scalars.
  const Computation& f = *inst.attrs.called[0];
  auto params = f.parameters();
  if (static_cast<int64_t>(params.size()) != 2 * n) {
    Reject(inst, "to_apply {} must take {} scalar parameters, takes {}", f.name(), 2 * n,
           params.size());
  }
  std::vector<Shape> scalars;
  for (int64_t i = 0; i < n; ++i) scalars.push_back(Shape::Scalar(results[i].dtype()));
  for (int64_t i = 0; i < 2 * n; ++i) {
    if (params[i]->shape() != scalars[i % n]) {
      Reject(inst, "to_apply {} parameter {} must be {}, is {}", f.name(), i,
             scalars[i % n].ToString(), params[i]->shape().ToString());
    }
  }
  Shape expected_root = n == 1 ? scalars[0] : Shape::Tuple(scalars);
  if (f.root() && f.root()->shape() != expected_root) {
    Reject(inst, "to_apply {} must return {}, returns {}", f.name(), expected_root.ToString(),
           f.root()->shape().ToString());
  }
  return n == 1 ? results[0] : Shape::Tuple(results);
}

Shape InferDot(const View& inst) {
  ExpectOperands(inst, 2);
  const Shape& lhs = ArrayOperand(inst, 0);
  const Shape& rhs = ArrayOperand(inst, 1);
  const DotDims& d = inst.attrs.dot;
  if (lhs.dtype() != rhs.dtype()) {
    Reject(inst, "operands must have one element type, got {} and {}", DTypeName(lhs.dtype()),
           DTypeName(rhs.dtype()));
  }
  if (lhs.dtype() == DType::kPred) Reject(inst, "pred operands are not supported");
  if (d.lhs_batch.size() != d.rhs_batch.size() ||
      d.lhs_contracting.size() != d.rhs_contracting.size()) {
    Reject(inst, "lhs and rhs must have as many batch and contracting dimensions");
  }
  std::vector<int64_t> lhs_used = d.lhs_batch, rhs_used = d.rhs_batch;
  lhs_used.insert(lhs_used.end(), d.lhs_contracting.begin(), d.lhs_contracting.end());
  rhs_used.insert(rhs_used.end(), d.rhs_contracting.begin(), d.rhs_contracting.end());
  CheckDimensions(inst, lhs_used, lhs.rank(), "lhs batch/contracting dimension");
  CheckDimensions(inst, rhs_used, rhs.rank(), "rhs batch/contracting dimension");
  for (size_t i = 0; i < d.lhs_batch.size(); ++i) {
    if (lhs.dim(d.lhs_batch[i]) != rhs.dim(d.rhs_batch[i])) {
      Reject(inst, "batch dimension sizes differ: lhs {} vs rhs {}", lhs.dim(d.lhs_batch[i]),
             rhs.dim(d.rhs_batch[i]));
    }
  }
  for (size_t i = 0; i < d.lhs_contracting.size(); ++i) {
    if (lhs.dim(d.lhs_contracting[i]) != rhs.dim(d.rhs_contracting[i])) {
      Reject(inst,
             "contracting dimension sizes differ: lhs dimension {} is {}, rhs dimension {} is {}",
             d.lhs_contracting[i], lhs.dim(d.lhs_contracting[i]), d.rhs_contracting[i],
             rhs.dim(d.rhs_contracting[i]));
    }
  }
  std::vector<int64_t> out;
  for (int64_t b : d.lhs_batch) out.push_back(lhs.dim(b));
  for (int64_t i = 0; i < lhs.rank(); ++i) {
    if (std::find(lhs_used.begin(), lhs_used.end(), i) == lhs_used.end()) out.push_back(lhs.dim(i));
  }
  for (int64_t i = 0; i < rhs.rank(); ++i) {
    if (std::find(rhs_used.begin(), rhs_used.end(), i) == rhs_used.end()) out.push_back(rhs.dim(i));
  }
  return Shape(lhs.dtype(), out);
}

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
  for (int64_t c : g.collapsed_slice_dims) {
    if (g.slice_sizes[c] > 1) Reject(inst, "collapsed dimension {} must have slice size <= 1", c);
  }
  std::vector<int64_t> window;
  for (int64_t i = 0; i < operand.rank(); ++i) {
    if (std::find(g.collapsed_slice_dims.begin(), g.collapsed_slice_dims.end(), i) ==
        g.collapsed_slice_dims.end()) {
      window.push_back(g.slice_sizes[i]);
    }
  }
  if (window.size() != g.offset_dims.size()) {
    Reject(inst, "offset_dims has {} entries, expected {} (operand rank minus collapsed dims)",
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
  if (static_cast<int64_t>(s.update_window_dims.size() + s.inserted_window_dims.size()) !=
      operand.rank()) {
    Reject(inst,
           "update_window_dims ({}) plus inserted_window_dims ({}) must equal operand rank {}",
           s.update_window_dims.size(), s.inserted_window_dims.size(), operand.rank());
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
        bool inserted = std::find(s.inserted_window_dims.begin(), s.inserted_window_dims.end(),
                                  od) != s.inserted_window_dims.end();
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

void CheckStartIndices(const View& inst, int64_t first, int64_t rank) {
  if (inst.operand_count() != first + rank) {
    Reject(inst, "expected {} start indices (one per dimension), got {}", rank,
           inst.operand_count() - first);
  }
  for (int64_t i = first; i < inst.operand_count(); ++i) {
    const Shape& s = ArrayOperand(inst, i);
    if (!s.is_scalar() || !IsInteger(s.dtype())) {
      Reject(inst, "start index {} must be an integer scalar, got {}", i - first, s.ToString());
    }
  }
}

Shape CheckCalledSignature(const View& inst, const Computation& f, const std::vector<Shape>& args,
                           std::string_view role) {
  auto params = f.parameters();
  if (params.size() != args.size()) {
    Reject(inst, "{} {} takes {} parameters, given {}", role, f.name(), params.size(), args.size());
  }
  for (size_t i = 0; i < args.size(); ++i) {
    if (params[i]->shape() != args[i]) {
      Reject(inst, "{} {} parameter {} is {}, given {}", role, f.name(), i,
             params[i]->shape().ToString(), args[i].ToString());
    }
  }
  if (!f.root()) Reject(inst, "{} {} has no root", role, f.name());
  return f.root()->shape();
}

// replica_groups: equal-sized groups of distinct non-negative partition ids.
// Returns the group size, or 0 for the empty list (one group of all).
int64_t CheckReplicaGroups(const View& inst) {
  const ReplicaGroups& groups = inst.attrs.replica_groups;
  // Ids seen, by id (a bitmap: this runs for every collective in every pass).
  std::vector<bool> seen;
  for (const auto& g : groups) {
    if (g.empty()) Reject(inst, "replica_groups has an empty group");
    if (g.size() != groups[0].size()) {
      Reject(inst, "replica groups must have one size, got {} and {}", groups[0].size(), g.size());
    }
    for (int64_t id : g) {
      if (id < 0) Reject(inst, "replica_groups has a negative id {}", id);
      if (id >= static_cast<int64_t>(seen.size())) {
        if (id > (int64_t{1} << 24)) Reject(inst, "replica_groups id {} is out of range", id);
        seen.resize(std::max<size_t>(2 * seen.size(), id + 1), false);
      }
      if (seen[id]) Reject(inst, "id {} appears twice in replica_groups", id);
      seen[id] = true;
    }
  }
  return groups.empty() ? 0 : static_cast<int64_t>(groups[0].size());
}

// (T[], T[]) -> T[] for an all-reduce or reduce-scatter's to_apply.
void CheckCollectiveReducer(const View& inst, DType dtype) {
  if (inst.attrs.called.size() != 1) Reject(inst, "expected one to_apply computation");
  Shape scalar = Shape::Scalar(dtype);
  CheckCalledSignature(inst, *inst.attrs.called[0], {scalar, scalar}, "to_apply");
  if (inst.attrs.called[0]->root()->shape() != scalar) {
    Reject(inst, "to_apply {} must return {}", inst.attrs.called[0]->name(), scalar.ToString());
  }
}

// The one dimension an all-gather, reduce-scatter or all-to-all splits or joins.
int64_t CollectiveDimension(const View& inst, const Shape& x) {
  if (inst.attrs.dimensions.size() != 1) {
    Reject(inst, "expected dimensions={{d}} with one dimension, got {} (strata has no tuple form)",
           inst.attrs.dimensions.size());
  }
  CheckDimensions(inst, inst.attrs.dimensions, x.rank(), "dimension");
  return inst.attrs.dimensions[0];
}

Shape InferCollective(const View& inst) {
  switch (inst.op) {
    case Opcode::kPartitionId:
    case Opcode::kReplicaId:
      ExpectOperands(inst, 0);
      return Shape::Scalar(DType::kU32);
    case Opcode::kAllReduce: {
      if (inst.operand_count() < 1) Reject(inst, "expected at least one operand");
      CheckReplicaGroups(inst);
      std::vector<Shape> results;
      for (int64_t i = 0; i < inst.operand_count(); ++i) {
        const Shape& x = ArrayOperand(inst, i);
        if (x.dtype() != inst.operand_shape(0).dtype()) {
          Reject(inst, "operands must share one element type (one to_apply)");
        }
        results.push_back(x);
      }
      CheckCollectiveReducer(inst, results[0].dtype());
      return results.size() == 1 ? results[0] : Shape::Tuple(std::move(results));
    }
    case Opcode::kAllGather:
    case Opcode::kReduceScatter: {
      ExpectOperands(inst, 1);
      const Shape& x = ArrayOperand(inst, 0);
      int64_t d = CollectiveDimension(inst, x);
      int64_t n = CheckReplicaGroups(inst);
      bool gather = inst.op == Opcode::kAllGather;
      if (!gather) CheckCollectiveReducer(inst, x.dtype());
      std::vector<int64_t> dims = x.dims();
      if (n == 0) {  // one group of all partitions: the declared shape says how many
        const Shape& y = inst.declared;
        bool fits = y.is_array() && y.dtype() == x.dtype() && y.rank() == x.rank();
        for (int64_t k = 0; fits && k < x.rank(); ++k) {
          int64_t big = gather ? y.dim(k) : x.dim(k), small = gather ? x.dim(k) : y.dim(k);
          fits = k == d ? small > 0 && big % small == 0 : big == small;
        }
        if (!fits) {
          Reject(inst,
                 "without replica_groups the result shape must say the group size; {} does not fit",
                 y.ToString());
        }
        return y;
      }
      if (gather) {
        dims[d] *= n;
      } else {
        if (dims[d] % n != 0) {
          Reject(inst, "dimension {} of size {} does not split into {} blocks", d, dims[d], n);
        }
        dims[d] /= n;
      }
      return Shape(x.dtype(), dims);
    }
    case Opcode::kAllToAll: {
      ExpectOperands(inst, 1);
      const Shape& x = ArrayOperand(inst, 0);
      int64_t d = CollectiveDimension(inst, x);
      int64_t n = CheckReplicaGroups(inst);
      if (n > 0 && x.dim(d) % n != 0) {
        Reject(inst, "dimension {} of size {} does not split into {} blocks", d, x.dim(d), n);
      }
      return x;
    }
    case Opcode::kCollectivePermute: {
      ExpectOperands(inst, 1);
      const Shape& x = ArrayOperand(inst, 0);
      std::set<int64_t> sources, targets;
      for (auto [source, target] : inst.attrs.source_target_pairs) {
        if (source < 0 || target < 0) Reject(inst, "negative id in source_target_pairs");
        if (!sources.insert(source).second) Reject(inst, "source {} appears twice", source);
        if (!targets.insert(target).second) Reject(inst, "target {} appears twice", target);
      }
      return x;
    }
    default:
      Reject(inst, "not a collective");
  }
}

}  // namespace

Shape InferShape(const Instruction& instruction) {
  std::vector<const Shape*> operands;
  operands.reserve(instruction.operand_count());
  for (const Instruction* op : instruction.operands()) operands.push_back(&op->shape());
  return InferShape(instruction.opcode(), operands, instruction.attributes(), instruction.shape());
}

Shape InferShape(Opcode opcode, std::span<const Shape* const> operand_shapes,
                 const Attributes& attributes, const Shape& declared) {
  View inst{opcode, operand_shapes, attributes, declared};
  switch (inst.op) {
    case Opcode::kParameter:
      ExpectOperands(inst, 0);
      if (inst.attrs.parameter_number < 0) Reject(inst, "parameter number must be >= 0");
      return declared;
    case Opcode::kConstant:
      ExpectOperands(inst, 0);
      if (inst.attrs.literal.shape() != declared) {
        Reject(inst, "literal has shape {}, instruction declares {}",
               inst.attrs.literal.shape().ToString(), declared.ToString());
      }
      return declared;
    case Opcode::kIota:
      ExpectOperands(inst, 0);
      if (!declared.is_array() || declared.rank() == 0 || declared.dtype() == DType::kPred) {
        Reject(inst, "iota needs a numeric array shape of rank >= 1, got {}", declared.ToString());
      }
      if (inst.attrs.dimensions.size() != 1 || inst.attrs.dimensions[0] < 0 ||
          inst.attrs.dimensions[0] >= declared.rank()) {
        Reject(inst, "iota_dimension must be in [0, {})", declared.rank());
      }
      return declared;
    case Opcode::kConvert:
    case Opcode::kBitcastConvert: {
      ExpectOperands(inst, 1);
      const Shape& x = ArrayOperand(inst, 0);
      if (!declared.is_array()) Reject(inst, "result must be an array");
      if (inst.op == Opcode::kBitcastConvert &&
          DTypeSize(x.dtype()) != DTypeSize(declared.dtype())) {
        Reject(inst, "{} and {} differ in size", DTypeName(x.dtype()), DTypeName(declared.dtype()));
      }
      return Shape(declared.dtype(), x.dims());
    }
    case Opcode::kBroadcast: {
      ExpectOperands(inst, 1);
      const Shape& x = ArrayOperand(inst, 0);
      if (!declared.is_array() || declared.dtype() != x.dtype()) {
        Reject(inst, "result {} must be an array of {}", declared.ToString(), DTypeName(x.dtype()));
      }
      if (static_cast<int64_t>(inst.attrs.dimensions.size()) != x.rank()) {
        Reject(inst, "dimensions has {} entries, operand rank is {}", inst.attrs.dimensions.size(),
               x.rank());
      }
      CheckDimensions(inst, inst.attrs.dimensions, declared.rank(), "broadcast dimension");
      for (int64_t i = 0; i < x.rank(); ++i) {
        if (x.dim(i) != declared.dim(inst.attrs.dimensions[i])) {
          Reject(inst, "operand dimension {} (size {}) cannot map to result dimension {} (size {})",
                 i, x.dim(i), inst.attrs.dimensions[i], declared.dim(inst.attrs.dimensions[i]));
        }
      }
      return declared;
    }
    case Opcode::kReshape: {
      ExpectOperands(inst, 1);
      const Shape& x = ArrayOperand(inst, 0);
      if (!declared.is_array() || declared.dtype() != x.dtype() ||
          declared.num_elements() != x.num_elements()) {
        Reject(inst, "cannot reshape {} to {}", x.ToString(), declared.ToString());
      }
      return declared;
    }
    case Opcode::kTranspose: {
      ExpectOperands(inst, 1);
      const Shape& x = ArrayOperand(inst, 0);
      if (static_cast<int64_t>(inst.attrs.dimensions.size()) != x.rank()) {
        Reject(inst, "permutation {{{}}} is not a permutation of rank {}",
               fmt::join(inst.attrs.dimensions, ","), x.rank());
      }
      CheckDimensions(inst, inst.attrs.dimensions, x.rank(), "permutation entry");
      std::vector<int64_t> out;
      for (int64_t p : inst.attrs.dimensions) out.push_back(x.dim(p));
      return Shape(x.dtype(), out);
    }
    case Opcode::kCopy:
      ExpectOperands(inst, 1);
      return inst.operand_shape(0);
    case Opcode::kSlice: {
      ExpectOperands(inst, 1);
      const Shape& x = ArrayOperand(inst, 0);
      if (static_cast<int64_t>(inst.attrs.slice.size()) != x.rank()) {
        Reject(inst, "slice has {} ranges, operand rank is {}", inst.attrs.slice.size(), x.rank());
      }
      std::vector<int64_t> out;
      for (int64_t i = 0; i < x.rank(); ++i) {
        const SliceRange& r = inst.attrs.slice[i];
        if (r.start < 0 || r.start > r.limit || r.limit > x.dim(i) || r.stride < 1) {
          Reject(inst, "slice [{}:{}:{}] invalid for dimension {} of size {}", r.start, r.limit,
                 r.stride, i, x.dim(i));
        }
        out.push_back(r.limit == r.start ? 0 : (r.limit - r.start - 1) / r.stride + 1);
      }
      return Shape(x.dtype(), out);
    }
    case Opcode::kDynamicSlice: {
      if (inst.operand_count() < 1) Reject(inst, "expected an operand");
      const Shape& x = ArrayOperand(inst, 0);
      CheckStartIndices(inst, 1, x.rank());
      if (static_cast<int64_t>(inst.attrs.dynamic_slice_sizes.size()) != x.rank()) {
        Reject(inst, "dynamic_slice_sizes has {} entries, operand rank is {}",
               inst.attrs.dynamic_slice_sizes.size(), x.rank());
      }
      for (int64_t i = 0; i < x.rank(); ++i) {
        if (inst.attrs.dynamic_slice_sizes[i] < 0 || inst.attrs.dynamic_slice_sizes[i] > x.dim(i)) {
          Reject(inst, "slice size {} of dimension {} must be in [0, {}]",
                 inst.attrs.dynamic_slice_sizes[i], i, x.dim(i));
        }
      }
      return Shape(x.dtype(), inst.attrs.dynamic_slice_sizes);
    }
    case Opcode::kDynamicUpdateSlice: {
      if (inst.operand_count() < 2) Reject(inst, "expected an operand and an update");
      const Shape& x = ArrayOperand(inst, 0);
      const Shape& u = ArrayOperand(inst, 1);
      if (u.rank() != x.rank() || u.dtype() != x.dtype()) {
        Reject(inst, "update {} must match the operand's rank and type {}", u.ToString(),
               x.ToString());
      }
      for (int64_t i = 0; i < x.rank(); ++i) {
        if (u.dim(i) > x.dim(i)) {
          Reject(inst, "update dimension {} ({}) larger than operand's ({})", i, u.dim(i),
                 x.dim(i));
        }
      }
      CheckStartIndices(inst, 2, x.rank());
      return x;
    }
    case Opcode::kConcatenate: {
      if (inst.operand_count() < 1) Reject(inst, "expected at least one operand");
      const Shape& first = ArrayOperand(inst, 0);
      if (inst.attrs.dimensions.size() != 1 || inst.attrs.dimensions[0] < 0 ||
          inst.attrs.dimensions[0] >= first.rank()) {
        Reject(inst, "concatenate dimension must be in [0, {})", first.rank());
      }
      int64_t dim = inst.attrs.dimensions[0];
      std::vector<int64_t> out = first.dims();
      out[dim] = 0;
      for (int64_t i = 0; i < inst.operand_count(); ++i) {
        const Shape& s = ArrayOperand(inst, i);
        bool ok = s.rank() == first.rank() && s.dtype() == first.dtype();
        for (int64_t d = 0; ok && d < s.rank(); ++d) ok = d == dim || s.dim(d) == first.dim(d);
        if (!ok) {
          Reject(inst, "operand {} {} must match {} in every dimension but {}", i, s.ToString(),
                 first.ToString(), dim);
        }
        if (__builtin_add_overflow(out[dim], s.dim(dim), &out[dim])) {
          Reject(inst, "concatenated dimension {} overflows int64", dim);
        }
      }
      return Shape(first.dtype(), out);
    }
    case Opcode::kPad: {
      ExpectOperands(inst, 2);
      const Shape& x = ArrayOperand(inst, 0);
      const Shape& v = ArrayOperand(inst, 1);
      if (!v.is_scalar() || v.dtype() != x.dtype()) {
        Reject(inst, "padding value must be a {} scalar", DTypeName(x.dtype()));
      }
      if (static_cast<int64_t>(inst.attrs.padding.size()) != x.rank()) {
        Reject(inst, "padding has {} entries, operand rank is {}", inst.attrs.padding.size(),
               x.rank());
      }
      std::vector<int64_t> out;
      for (int64_t i = 0; i < x.rank(); ++i) {
        const PadRange& p = inst.attrs.padding[i];
        int64_t interior_total = 0, size = 0;
        bool overflow = p.interior < 0 ||
                        __builtin_mul_overflow(std::max<int64_t>(x.dim(i) - 1, 0), p.interior,
                                               &interior_total) ||
                        __builtin_add_overflow(p.low, p.high, &size) ||
                        __builtin_add_overflow(size, x.dim(i), &size) ||
                        __builtin_add_overflow(size, interior_total, &size);
        if (overflow || size < 0) {
          Reject(inst, "padding {}_{}_{} invalid for dimension {} of size {}", p.low, p.high,
                 p.interior, i, x.dim(i));
        }
        out.push_back(size);
      }
      return Shape(x.dtype(), out);
    }
    case Opcode::kReverse: {
      ExpectOperands(inst, 1);
      const Shape& x = ArrayOperand(inst, 0);
      CheckDimensions(inst, inst.attrs.dimensions, x.rank(), "reversed dimension");
      return x;
    }
    case Opcode::kSelect: {
      ExpectOperands(inst, 3);
      const Shape& p = ArrayOperand(inst, 0);
      const Shape& a = ArrayOperand(inst, 1);
      const Shape& b = ArrayOperand(inst, 2);
      if (a != b)
        Reject(inst, "branches must have equal shapes, got {} and {}", a.ToString(), b.ToString());
      if (p.dtype() != DType::kPred || (!p.is_scalar() && p.dims() != a.dims())) {
        Reject(inst, "predicate must be pred{} or a pred scalar, got {}", DimsToString(a.dims()),
               p.ToString());
      }
      return a;
    }
    case Opcode::kCompare: {
      ExpectOperands(inst, 2);
      const Shape& a = ArrayOperand(inst, 0);
      const Shape& b = ArrayOperand(inst, 1);
      if (a != b)
        Reject(inst, "operands must have equal shapes, got {} and {}", a.ToString(), b.ToString());
      return Shape(DType::kPred, a.dims());
    }
    case Opcode::kClamp: {
      ExpectOperands(inst, 3);
      const Shape& lo = ArrayOperand(inst, 0);
      const Shape& x = ArrayOperand(inst, 1);
      const Shape& hi = ArrayOperand(inst, 2);
      for (const Shape* bound : {&lo, &hi}) {
        if (bound->dtype() != x.dtype() || (!bound->is_scalar() && bound->dims() != x.dims())) {
          Reject(inst, "bounds must be {} or {} scalars, got {}", x.ToString(),
                 DTypeName(x.dtype()), bound->ToString());
        }
      }
      return x;
    }
    case Opcode::kIsFinite: {
      ExpectOperands(inst, 1);
      const Shape& x = ArrayOperand(inst, 0);
      if (!IsFloating(x.dtype())) Reject(inst, "operand must be floating point");
      return Shape(DType::kPred, x.dims());
    }
    case Opcode::kReduce:
      return InferReduce(inst);
    case Opcode::kDot:
      return InferDot(inst);
    case Opcode::kGather:
      return InferGather(inst);
    case Opcode::kScatter:
      return InferScatter(inst);
    case Opcode::kTuple: {
      std::vector<Shape> elements;
      for (const Shape* s : inst.operands) elements.push_back(*s);
      return Shape::Tuple(std::move(elements));
    }
    case Opcode::kGetTupleElement: {
      ExpectOperands(inst, 1);
      const Shape& t = inst.operand_shape(0);
      if (!t.is_tuple()) Reject(inst, "operand must be a tuple, got {}", t.ToString());
      if (inst.attrs.tuple_index < 0 || inst.attrs.tuple_index >= t.tuple_size()) {
        Reject(inst, "index {} out of range for {}", inst.attrs.tuple_index, t.ToString());
      }
      return t.tuple_shape(inst.attrs.tuple_index);
    }
    case Opcode::kWhile: {
      ExpectOperands(inst, 1);
      if (inst.attrs.called.size() != 2) Reject(inst, "expected condition and body computations");
      const Shape& state = inst.operand_shape(0);
      Shape cond = CheckCalledSignature(inst, *inst.attrs.called[0], {state}, "condition");
      if (cond != Shape::Scalar(DType::kPred)) {
        Reject(inst, "condition {} must return pred[], returns {}", inst.attrs.called[0]->name(),
               cond.ToString());
      }
      Shape body = CheckCalledSignature(inst, *inst.attrs.called[1], {state}, "body");
      if (body != state) {
        Reject(inst, "body {} must return the loop state {}, returns {}",
               inst.attrs.called[1]->name(), state.ToString(), body.ToString());
      }
      return state;
    }
    case Opcode::kOptimizationBarrier:
      // The identity, opaque to the passes (recomputation is not CSE'd away).
      ExpectOperands(inst, 1);
      return inst.operand_shape(0);
    case Opcode::kCall:
    case Opcode::kFusion: {
      if (inst.attrs.called.size() != 1) Reject(inst, "expected one called computation");
      std::vector<Shape> args;
      for (const Shape* s : inst.operands) args.push_back(*s);
      return CheckCalledSignature(inst, *inst.attrs.called[0], args, "callee");
    }
    case Opcode::kRngBitGenerator: {
      ExpectOperands(inst, 1);
      const Shape& state = inst.operand_shape(0);
      if (state != Shape(DType::kU64, {2})) {
        Reject(inst, "state must be u64[2] (key, counter), got {}", state.ToString());
      }
      if (!declared.is_tuple() || declared.tuple_size() != 2 || declared.tuple_shape(0) != state ||
          !declared.tuple_shape(1).is_array() ||
          (declared.tuple_shape(1).dtype() != DType::kU32 &&
           declared.tuple_shape(1).dtype() != DType::kU64)) {
        Reject(inst, "result must be (u64[2], u32[...] or u64[...]), got {}", declared.ToString());
      }
      return declared;
    }
    default:
      if (IsCollective(inst.op)) return InferCollective(inst);
      return InferElementwise(inst);
  }
}

}  // namespace strata::hlo
