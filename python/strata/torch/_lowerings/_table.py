"""The table itself and what every family of lowerings shares: the
registry, dtypes, and the conversion of Python numbers and dims."""

import torch

import strata

aten = torch.ops.aten

LOWERINGS = {}


def lower(*ops):
    """Registers a lowering for each op overload or op (every overload) in ops."""
    def register(fn):
        for op in ops:
            LOWERINGS[op] = fn
        return fn
    return register


def lowering_for(target):
    """The lowering of an FX node's target, or None."""
    fn = LOWERINGS.get(target)
    if fn is None and hasattr(target, "overloadpacket"):
        fn = LOWERINGS.get(target.overloadpacket)
    return fn


DTYPES = {
    torch.bool: strata.bool, torch.int8: strata.int8, torch.int16: strata.int16,
    torch.int32: strata.int32, torch.int64: strata.int64, torch.uint8: strata.uint8,
    torch.uint16: strata.uint16, torch.uint32: strata.uint32, torch.uint64: strata.uint64,
    torch.float16: strata.float16, torch.bfloat16: strata.bfloat16,
    torch.float32: strata.float32, torch.float64: strata.float64,
}


def strata_dtype(dtype):
    """A torch dtype as strata's (an Error naming it when strata has none)."""
    try:
        return DTYPES[dtype]
    except KeyError:
        raise strata.Error(f"[strata.torch] strata has no dtype for {dtype}") from None


def _sdt(dtype):
    """A torch dtype (or None, or already strata's) as strata's."""
    if dtype is None or isinstance(dtype, strata.dtype):
        return dtype
    return strata_dtype(dtype)


def _tensor(x, like=None):
    """x as a strata tensor: tensors pass, a Python number takes `like`'s dtype
    when it keeps its kind there (an int in a float tensor), as in torch."""
    if isinstance(x, strata.Tensor):
        return x
    if like is not None and _fits(x, like.dtype):
        return strata.scalar(_wrapped(x, like.dtype), like.dtype)
    return strata.scalar(x)


_INTEGER_BITS = {
    strata.int8: (8, True), strata.int16: (16, True), strata.int32: (32, True),
    strata.int64: (64, True), strata.uint8: (8, False), strata.uint16: (16, False),
    strata.uint32: (32, False), strata.uint64: (64, False),
}


def _wrapped(x, dtype):
    """A Python int next to an integer tensor wraps into its dtype, as torch's
    uint8 tensor + 256 adds 0."""
    if isinstance(x, bool) or not isinstance(x, int) or dtype not in _INTEGER_BITS:
        return x
    bits, signed = _INTEGER_BITS[dtype]
    x %= 1 << bits
    return x - (1 << bits) if signed and x >= 1 << (bits - 1) else x


def _fits(value, dtype):
    """Whether a Python number keeps its kind in `dtype` (an int in an int tensor...)."""
    if isinstance(value, bool):
        return True
    if isinstance(value, int):
        return True
    return dtype in (strata.float16, strata.bfloat16, strata.float32, strata.float64)


def _dims(dim, rank):
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return list(range(rank))
    if isinstance(dim, int):
        return [dim]
    return list(dim)
