"""Tensors made from sizes and values, dtype conversions, and Python arithmetic on
sizes (symbolic shapes, traced with their values)."""
import math
import operator

import torch

import strata

from ._table import _sdt, aten, lower, LOWERINGS


# ---- creation ---------------------------------------------------------------------------------

@lower(aten.full)
def _full(size, fill_value, *, dtype=None, layout=None, device=None, pin_memory=None):
    dtype = _sdt(dtype) or (strata.float32 if isinstance(fill_value, float) else
                            strata.bool if isinstance(fill_value, bool) else strata.int64)
    return strata.full(list(size), fill_value, dtype=dtype)


@lower(aten.full_like)
def _full_like(x, fill_value, *, dtype=None, layout=None, device=None, pin_memory=None,
               memory_format=None):
    return strata.full(list(x.shape), fill_value, dtype=_sdt(dtype) or x.dtype)


@lower(aten.zeros_like)
def _zeros_like(x, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return _full_like(x, 0, dtype=dtype)


@lower(aten.ones_like)
def _ones_like(x, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return _full_like(x, 1, dtype=dtype)


@lower(aten.zeros, aten.new_zeros)
def _zeros(*args, dtype=None, layout=None, device=None, pin_memory=None):
    size = args[-1]
    return _full(size, 0, dtype=dtype or (args[0].dtype if len(args) == 2 else None))


@lower(aten.ones, aten.new_ones)
def _ones(*args, dtype=None, layout=None, device=None, pin_memory=None):
    size = args[-1]
    return _full(size, 1, dtype=dtype or (args[0].dtype if len(args) == 2 else None))


@lower(aten.empty_permuted)
def _empty_permuted(size, physical_layout, *, dtype=None, layout=None, device=None,
                    pin_memory=None):
    return _full(size, 0, dtype=dtype or torch.float32)


@lower(aten.empty.memory_format, aten.empty_strided, aten.new_empty, aten.new_empty_strided)
def _empty(*args, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    # Contents unspecified: zeros, so a read of them is at least repeatable.
    size = args[1] if len(args) >= 2 and isinstance(args[0], strata.Tensor) else args[0]
    like = args[0] if isinstance(args[0], strata.Tensor) else None
    return _full(size, 0, dtype=dtype or (like.dtype if like is not None else strata.float32))


@lower(aten.new_full)
def _new_full(x, size, fill_value, *, dtype=None, layout=None, device=None, pin_memory=None):
    return _full(size, fill_value, dtype=dtype or x.dtype)


@lower(aten.empty_like)
def _empty_like(x, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return _full_like(x, 0, dtype=dtype)


@lower(aten.scalar_tensor)
def _scalar_tensor(value, *, dtype=None, layout=None, device=None, pin_memory=None):
    return strata.full([], value, dtype=_sdt(dtype) or strata.float32)


@lower(aten.arange.start_step, aten.arange.start, aten.arange.default)
def _arange(*args, dtype=None, layout=None, device=None, pin_memory=None):
    start, end, step = (0, args[0], 1) if len(args) == 1 else (
        args[0], args[1], args[2] if len(args) > 2 else 1)
    if dtype is None:
        dtype = torch.float32 if any(isinstance(a, float) for a in (start, end, step)) \
            else torch.int64
    return strata.arange(start, end, step, dtype=_sdt(dtype))


@lower(aten._to_copy)
def _to_copy(x, *, dtype=None, layout=None, device=None, pin_memory=None, non_blocking=False,
             memory_format=None):
    return x if dtype is None else strata.astype(x, _sdt(dtype))


@lower(torch.ops.prims.convert_element_type)
def _convert_element_type(x, dtype):
    return strata.astype(x, _sdt(dtype))


@lower(aten.copy)
def _copy(x, src, non_blocking=False):
    return strata.broadcast_to(strata.astype(src, x.dtype), list(x.shape))


@lower(aten._assert_tensor_metadata, aten._assert_async)
def _assert_nothing(*args, **kwargs):
    return None


# ---- Python arithmetic on sizes (symbolic shapes, traced with their values) -------------------

for _op in (operator.add, operator.sub, operator.mul, operator.floordiv, operator.truediv,
            operator.mod, operator.neg, operator.pow, operator.eq, operator.ne, operator.lt,
            operator.le, operator.gt, operator.ge, operator.getitem, math.ceil, math.floor,
            math.sqrt, max, min):
    LOWERINGS[_op] = _op


@lower(aten.sym_size.int)
def _sym_size(x, dim):
    return x.shape[dim]


@lower(aten.sym_numel)
def _sym_numel(x):
    return x.numel()


@lower(aten.sym_stride.int)
def _sym_stride(x, dim):
    stride = 1
    for s in x.shape[dim + 1:] if dim >= 0 else x.shape[x.ndim + dim + 1:]:
        stride *= s
    return stride
