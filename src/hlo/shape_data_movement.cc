// Shape rules of data movement: broadcast, reshape, transpose, copy, slices, concatenate, pad,
// reverse.
#include <fmt/ranges.h>

#include <algorithm>
#include <set>

#include "shape_rules.h"

namespace strata::hlo::shape_rules {

// Long by design: one case per opcode of this shape rule (ShapeRule::kDataMovement).
Shape DataMovementShape(const View& inst) {
  [[maybe_unused]] const Shape& declared = inst.declared;
  switch (inst.op) {
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
    default:
      Reject(inst, "is not a data-movement op");
  }
}

}  // namespace strata::hlo::shape_rules
