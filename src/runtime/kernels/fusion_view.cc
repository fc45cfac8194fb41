#include "kernels/fusion_view.h"

#include <algorithm>

namespace strata::runtime {
namespace {

using hlo::Instruction;
using hlo::Opcode;

struct Axis {
  int64_t size, stride;
};
// Each of a value's dims as the axes of the base it walks, outermost first
// (a reshape may have split or joined dims).
using Axes = std::vector<std::vector<Axis>>;

// Unit axes dropped, neighbours that walk memory as one axis joined.
std::vector<Axis> Merged(const std::vector<Axis>& axes) {
  std::vector<Axis> out;
  for (const Axis& a : axes) {
    if (a.size == 1) continue;
    if (!out.empty() && out.back().stride == a.stride * a.size) {
      out.back() = {out.back().size * a.size, a.stride};
    } else {
      out.push_back(a);
    }
  }
  return out;
}

std::vector<Axis> Flat(const Axes& dims) {
  std::vector<Axis> all;
  for (const auto& d : dims) all.insert(all.end(), d.begin(), d.end());
  return Merged(all);
}

bool Broadcast(const Instruction& b, Axes& dims) {
  const Shape& in = b.operand(0)->shape();
  Axes out;
  for (int64_t size : b.shape().dims()) out.push_back({{size, 0}});
  for (int64_t i = 0; i < in.rank(); ++i) {
    const int64_t to = b.dimensions[i];
    if (in.dim(i) == b.shape().dim(to)) {
      out[to] = dims[i];
    } else if (in.dim(i) != 1) {
      return false;
    }
  }
  dims = std::move(out);
  return true;
}

bool Slice(const Instruction& s, Axes& dims, int64_t& offset) {
  for (size_t d = 0; d < dims.size(); ++d) {
    const hlo::SliceRange& r = s.slice[d];
    const int64_t size = s.operand(0)->shape().dim(static_cast<int64_t>(d));
    if (r.start == 0 && r.limit == size && r.stride == 1) continue;
    const int64_t count = s.shape().dim(static_cast<int64_t>(d));
    std::vector<Axis> axes = Merged(dims[d]);
    if (axes.size() <= 1) {
      const int64_t stride = axes.empty() ? 0 : axes[0].stride;
      offset += r.start * stride;
      dims[d] = {{count, stride * r.stride}};
      continue;
    }
    // A dim made of several axes: a whole number of its outer axis's steps.
    int64_t inner = 1;
    for (size_t k = 1; k < axes.size(); ++k) inner *= axes[k].size;
    if (r.stride != 1 || r.start % inner != 0 || count % inner != 0) return false;
    offset += r.start / inner * axes[0].stride;
    axes[0].size = count / inner;
    dims[d] = std::move(axes);
  }
  return true;
}

void Reverse(const Instruction& r, Axes& dims, int64_t& offset) {
  // Reversing a dim reverses each of its axes: n-1-i over mixed radices.
  for (int64_t d : r.dimensions) {
    for (Axis& a : dims[d]) {
      offset += (a.size - 1) * a.stride;
      a.stride = -a.stride;
    }
  }
}

bool Reshape(const Instruction& r, Axes& dims) {
  std::vector<Axis> axes = Flat(dims);
  size_t next = 0;
  Axes out;
  for (int64_t size : r.shape().dims()) {
    std::vector<Axis> dim;
    int64_t need = size;
    while (need > 1) {
      if (next == axes.size()) return false;
      Axis& a = axes[next];
      if (a.size <= need) {
        if (need % a.size != 0) return false;
        dim.push_back(a);
        need /= a.size;
        ++next;
      } else {  // split the axis: its outer part here, the rest for later dims
        if (a.size % need != 0) return false;
        dim.push_back({need, a.stride * (a.size / need)});
        a.size /= need;
        need = 1;
      }
    }
    out.push_back(std::move(dim));
  }
  if (next != axes.size()) return false;
  dims = std::move(out);
  return true;
}

}  // namespace

bool IsIndexMap(const Instruction& i) {
  switch (i.opcode()) {
    case Opcode::kBroadcast:
    case Opcode::kTranspose:
    case Opcode::kSlice:
    case Opcode::kReverse:
    case Opcode::kReshape:
      return i.shape().is_array() && i.operand_count() == 1 && i.operand(0)->shape().is_array();
    default:
      return false;
  }
}

const Instruction& ViewBase(const Instruction& top) {
  const Instruction* at = &top;
  while (IsIndexMap(*at)) at = at->operand(0);
  return *at;
}

bool MovesElements(const Instruction& top) {
  for (const Instruction* at = &top; IsIndexMap(*at); at = at->operand(0)) {
    const Opcode op = at->opcode();
    if (op == Opcode::kTranspose || op == Opcode::kSlice || op == Opcode::kReverse) return true;
  }
  return false;
}

std::optional<OperandView> ViewOf(const Instruction& top) {
  std::vector<const Instruction*> chain;  // top first
  for (const Instruction* at = &top; IsIndexMap(*at); at = at->operand(0)) chain.push_back(at);
  const Shape& base = ViewBase(top).shape();
  if (!base.is_array()) return std::nullopt;
  // A view with no elements reads nothing (and its axes of size 0 would
  // divide by zero below).
  if (top.shape().is_array() && top.shape().num_elements() == 0) {
    return OperandView{{0}, {1}, 0};
  }
  Axes dims(base.rank());
  int64_t stride = 1;
  for (int64_t d = base.rank() - 1; d >= 0; --d) {
    dims[d] = {{base.dim(d), stride}};
    stride *= base.dim(d);
  }
  int64_t offset = 0;
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    const Instruction& op = **it;
    switch (op.opcode()) {
      case Opcode::kBroadcast:
        if (!Broadcast(op, dims)) return std::nullopt;
        break;
      case Opcode::kTranspose: {
        Axes out;
        for (int64_t from : op.dimensions) out.push_back(dims[from]);
        dims = std::move(out);
        break;
      }
      case Opcode::kSlice:
        if (!Slice(op, dims, offset)) return std::nullopt;
        break;
      case Opcode::kReverse:
        Reverse(op, dims, offset);
        break;
      default:  // kReshape
        if (!Reshape(op, dims)) return std::nullopt;
        break;
    }
  }
  OperandView view;
  view.offset = offset;
  for (const Axis& a : Flat(dims)) {
    view.dims.push_back(a.size);
    view.strides.push_back(a.stride);
  }
  return view;
}

}  // namespace strata::runtime
