"""Random ops (dropout, rand, randn, bernoulli)."""
import strata

from ._table import _sdt, aten, lower


# ---- random numbers (dropout) -----------------------------------------------------------------
# torch's RNG stream is not reproduced (its bits differ); the distribution is
# the same. Each compiled call draws a fresh key from torch's generator
# (_backend passes it as the graph's extra input), so torch.manual_seed still
# makes a run repeatable.

class RandomKeys:
    """The key a traced graph's random ops split from, one draw per op."""

    def __init__(self, key):
        self.key = key

    def next(self):
        self.key, sub = strata.split_key(self.key, 2)
        return sub


def random_lowering(fn):
    fn.needs_key = True
    return fn


def _random_shape(size_or_x, dtype):
    """(shape, strata dtype) of rand(size) / rand_like(x)."""
    if isinstance(size_or_x, strata.Tensor):
        return list(size_or_x.shape), _sdt(dtype) or size_or_x.dtype
    return list(size_or_x), _sdt(dtype) or strata.float32


@lower(aten.rand, aten.rand_like)
@random_lowering
def _rand(keys, size_or_x, *, dtype=None, layout=None, device=None, pin_memory=None,
          generator=None, memory_format=None):
    shape, dtype = _random_shape(size_or_x, dtype)
    return strata.uniform(keys.next(), shape, 0.0, 1.0, dtype=dtype)


@lower(aten.randn, aten.randn_like)
@random_lowering
def _randn(keys, size_or_x, *, dtype=None, layout=None, device=None, pin_memory=None,
           generator=None, memory_format=None):
    shape, dtype = _random_shape(size_or_x, dtype)
    return strata.normal(keys.next(), shape, 0.0, 1.0, dtype=dtype)


@lower(aten.bernoulli.p, aten.bernoulli.default)
@random_lowering
def _bernoulli(keys, x, p=None, *, generator=None):
    u = strata.uniform(keys.next(), list(x.shape), 0.0, 1.0, dtype=strata.float32)
    prob = x if p is None else p
    return strata.astype(strata.lt(u, prob), x.dtype)


@lower(aten.native_dropout)
@random_lowering
def _native_dropout(keys, x, p, train):
    if not train or p == 0:
        return x, strata.full(list(x.shape), True, dtype=strata.bool)
    keep = strata.ge(strata.uniform(keys.next(), list(x.shape), 0.0, 1.0), p)
    return x * strata.astype(keep, x.dtype) * (1.0 / (1.0 - p)), keep


@lower(aten.native_dropout_backward)
def _native_dropout_backward(grad, mask, scale):
    return grad * strata.astype(mask, grad.dtype) * scale
