"""Reductions, cumulative ops and matrix products."""
import strata

from ._table import _dims, _sdt, aten, lower


# ---- reductions -------------------------------------------------------------------------------

@lower(aten.sum)
def _sum(x, dim=None, keepdim=False, *, dtype=None):
    if dtype is not None:
        x = strata.astype(x, _sdt(dtype))
    elif x.dtype == strata.bool or x.dtype in (strata.uint8, strata.int8, strata.int16,
                                              strata.int32):
        x = strata.astype(x, strata.int64)  # torch sums bools and small ints as int64
    if x.ndim == 0:
        return x
    return strata.sum(x, _dims(dim, x.ndim), keepdim)


@lower(aten.mean)
def _mean(x, dim=None, keepdim=False, *, dtype=None):
    if dtype is not None:
        x = strata.astype(x, _sdt(dtype))
    if x.ndim == 0:
        return x
    return strata.mean(x, _dims(dim, x.ndim), keepdim)


@lower(aten.amax)
def _amax(x, dim=(), keepdim=False):
    return x if x.ndim == 0 else strata.amax(x, _dims(dim, x.ndim), keepdim)


@lower(aten.amin)
def _amin(x, dim=(), keepdim=False):
    return x if x.ndim == 0 else strata.amin(x, _dims(dim, x.ndim), keepdim)


@lower(aten.max.dim)
def _max_dim(x, dim, keepdim=False):
    return strata.amax(x, dim, keepdim), strata.argmax(x, dim, keepdim)


@lower(aten.min.dim)
def _min_dim(x, dim, keepdim=False):
    return strata.amin(x, dim, keepdim), strata.argmin(x, dim, keepdim)


@lower(aten.max.default)
def _max_all(x):
    return x if x.ndim == 0 else strata.amax(x)


@lower(aten.min.default)
def _min_all(x):
    return x if x.ndim == 0 else strata.amin(x)


@lower(aten.argmax)
def _argmax(x, dim=None, keepdim=False):
    if dim is None:
        return strata.argmax(x.reshape(-1), 0, False)
    return strata.argmax(x, dim, keepdim)


@lower(aten.argmin)
def _argmin(x, dim=None, keepdim=False):
    if dim is None:
        return strata.argmin(x.reshape(-1), 0, False)
    return strata.argmin(x, dim, keepdim)


@lower(aten.var.correction, aten.var.dim)
def _var(x, dim=None, *, correction=None, keepdim=False, unbiased=None):
    dims = _dims(dim, x.ndim)
    n = 1
    for d in dims:
        n *= x.shape[d]
    if correction is None:
        correction = 1 if unbiased is None or unbiased else 0
    mean = strata.mean(x, dims, True)
    centered = x - mean
    return strata.sum(centered * centered, dims, keepdim) / max(n - correction, 0)


@lower(aten.var_mean.correction)
def _var_mean(x, dim=None, *, correction=None, keepdim=False):
    return _var(x, dim, correction=correction, keepdim=keepdim), _mean(x, dim, keepdim)


@lower(aten.any.dim, aten.any.dims, aten.any.default)
def _any(x, dim=None, keepdim=False):
    nonzero = strata.astype(strata.ne(x, 0), strata.int64)
    if x.ndim == 0:
        return strata.gt(nonzero, 0)
    return strata.gt(strata.sum(nonzero, _dims(dim, x.ndim), keepdim), 0)


@lower(aten.all.dim, aten.all.dims, aten.all.default)
def _all(x, dim=None, keepdim=False):
    zero = strata.astype(strata.eq(x, 0), strata.int64)
    if x.ndim == 0:
        return strata.eq(zero, 0)
    return strata.eq(strata.sum(zero, _dims(dim, x.ndim), keepdim), 0)


@lower(aten.prod.dim_int, aten.prod.default)
def _prod(x, dim=None, keepdim=False, *, dtype=None):
    if dtype is not None:
        x = strata.astype(x, _sdt(dtype))
    if x.ndim == 0:
        return x
    if dim is None:
        return strata.cumprod(x.reshape(-1), 0)[-1]
    r = strata.slice(strata.cumprod(x, dim), dim, x.shape[dim] - 1, x.shape[dim])
    return r if keepdim else strata.squeeze(r, dim)


@lower(aten.cumsum)
def _cumsum(x, dim, *, dtype=None):
    if dtype is not None:
        x = strata.astype(x, _sdt(dtype))
    return strata.cumsum(x, dim)


@lower(aten.cumprod)
def _cumprod(x, dim, *, dtype=None):
    if dtype is not None:
        x = strata.astype(x, _sdt(dtype))
    return strata.cumprod(x, dim)


# ---- linear algebra ---------------------------------------------------------------------------

@lower(aten.mm, aten.bmm, aten.matmul)
def _mm(a, b):
    return strata.matmul(a, b)


@lower(aten.addmm)
def _addmm(bias, a, b, *, beta=1, alpha=1):
    product = strata.matmul(a, b)
    if alpha != 1:
        product = product * alpha
    if beta == 0:
        return product
    return product + (bias if beta == 1 else bias * beta)


@lower(aten.baddbmm)
def _baddbmm(bias, a, b, *, beta=1, alpha=1):
    return _addmm(bias, a, b, beta=beta, alpha=alpha)


@lower(aten.dot)
def _dot(a, b):
    return strata.sum(a * b)


@lower(aten.sort.default, aten.sort.stable)
def _sort(x, dim=-1, descending=False, *, stable=False):
    if x.ndim == 0:
        return x, strata.zeros_like(x, dtype=strata.int64)
    return tuple(strata.sort(x, dim, descending, stable=True))  # strata's sort is stable


@lower(aten.topk)
def _topk(x, k, dim=-1, largest=True, sorted=True):  # noqa: A002  torch's names
    return tuple(strata.topk(x, k, dim, largest, True))
