"""The ATen lowering table: one entry per ATen op, each a function of strata
tensors (and the op's other arguments) returning what the op returns.

An entry is registered for an op overload (``aten.add.Tensor``) or for every
overload of an op (``aten.add``). The graphs reaching it are core ATen after
torch's decompositions (``_backend.decompositions``); the interpreter casts
each result to the dtype torch's own metadata gives the node and checks its
shape, so a lowering states the math and the dtype it naturally computes in.

Backward ops without a decomposition in torch (``convolution_backward``,
the pooling backwards) are the VJP of the forward lowering, taken by strata's
own autodiff: one rule, two ops.
"""
import math
import operator

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
        return strata.scalar(x, like.dtype)
    return strata.scalar(x)


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


# ---- elementwise ------------------------------------------------------------------------------

_UNARY = {
    aten.abs: strata.abs, aten.neg: strata.negative, aten.exp: strata.exp, aten.log: strata.log,
    aten.log1p: strata.log1p, aten.expm1: strata.expm1, aten.tanh: strata.tanh,
    aten.sigmoid: strata.sigmoid, aten.sqrt: strata.sqrt, aten.rsqrt: strata.rsqrt,
    aten.sin: strata.sin, aten.cos: strata.cos, aten.erf: strata.erf, aten.floor: strata.floor,
    aten.ceil: strata.ceil, aten.sign: strata.sign, aten.relu: strata.relu,
    aten.logical_not: strata.logical_not, aten.bitwise_not: strata.bitwise_not,
    aten.silu: strata.silu,
}
for _op, _fn in _UNARY.items():
    lower(_op)(lambda x, _fn=_fn: _fn(x))


@lower(aten.reciprocal)
def _reciprocal(x):
    return 1.0 / x


@lower(aten.sgn)
def _sgn(x):
    return strata.sign(x)


@lower(aten.gelu)
def _gelu(x, approximate="none"):
    return strata.gelu(x, approximate=approximate)


@lower(aten.isnan)
def _isnan(x):
    return strata.ne(x, x)


@lower(aten.isinf)
def _isinf(x):
    return strata.eq(strata.abs(x), math.inf)


def _binary(fn):
    def apply(a, b, *, alpha=None):
        if alpha is not None and alpha != 1:
            b = b * alpha
        if not isinstance(a, strata.Tensor):
            a = strata.scalar(a, b.dtype if _fits(a, b.dtype) else None)
        return fn(a, b)
    return apply


lower(aten.add)(_binary(operator.add))
lower(aten.sub)(_binary(operator.sub))
lower(aten.rsub)(lambda a, b, alpha=1: _binary(operator.sub)(b, a * alpha if alpha != 1 else a))
lower(aten.mul)(_binary(operator.mul))
lower(aten.maximum)(_binary(strata.maximum))
lower(aten.minimum)(_binary(strata.minimum))
lower(aten.remainder)(_binary(strata.remainder))
lower(aten.pow.Tensor_Tensor, aten.pow.Tensor_Scalar)(_binary(strata.pow))
lower(aten.eq)(_binary(strata.eq))
lower(aten.ne)(_binary(strata.ne))
lower(aten.lt)(_binary(strata.lt))
lower(aten.le)(_binary(strata.le))
lower(aten.gt)(_binary(strata.gt))
lower(aten.ge)(_binary(strata.ge))
lower(aten.logical_and)(_binary(strata.logical_and))
lower(aten.logical_or)(_binary(strata.logical_or))
lower(aten.bitwise_and)(_binary(strata.bitwise_and))
lower(aten.bitwise_or)(_binary(strata.bitwise_or))
lower(aten.bitwise_xor)(_binary(strata.bitwise_xor))


@lower(aten.logical_xor)
def _logical_xor(a, b):
    return strata.ne(strata.astype(a, strata.bool), strata.astype(b, strata.bool))


@lower(aten.pow.Scalar)
def _pow_scalar(base, exponent):
    return strata.pow(strata.scalar(base, exponent.dtype if _fits(base, exponent.dtype) else None),
                      exponent)


@lower(aten.div.Tensor, aten.div.Scalar)
def _div(a, b):
    if not isinstance(a, strata.Tensor):
        a = strata.scalar(a)
    return a / b


@lower(aten.div.Tensor_mode, aten.div.Scalar_mode)
def _div_mode(a, b, *, rounding_mode=None):
    if not isinstance(a, strata.Tensor):
        a = strata.scalar(a)
    if rounding_mode is None:
        return a / b
    floating = a.dtype in (strata.float16, strata.bfloat16, strata.float32, strata.float64)
    if not floating and not (isinstance(b, strata.Tensor) and b.dtype in (
            strata.float16, strata.bfloat16, strata.float32, strata.float64)) \
            and not isinstance(b, float):
        q = strata.floor(a.astype(strata.float64) / b) if rounding_mode == "floor" else None
        if rounding_mode == "trunc":
            qf = a.astype(strata.float64) / b
            q = strata.where(qf < 0, strata.ceil(qf), strata.floor(qf))
        return q.astype(a.dtype)
    q = a / b
    if rounding_mode == "floor":
        return strata.floor(q)
    return strata.where(q < 0, strata.ceil(q), strata.floor(q))


@lower(aten.fmod)
def _fmod(a, b):
    # C's fmod: the sign of a (strata's remainder takes b's, as torch.remainder).
    r = strata.remainder(a, b)
    b_t = _tensor(b, a)
    fix = strata.logical_and(strata.ne(r, 0), strata.ne(strata.lt(r, 0), strata.lt(a, 0)))
    return strata.where(fix, r - b_t, r)


@lower(aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar)
def _where(condition, a, b):
    like = a if isinstance(a, strata.Tensor) else b if isinstance(b, strata.Tensor) else None
    if like is not None:
        a, b = _tensor(a, like), _tensor(b, like)
    else:
        a, b = strata.scalar(a), strata.scalar(b)
    return strata.where(condition, a, b)


@lower(aten.clamp)
def _clamp(x, min=None, max=None):  # noqa: A002  torch's names
    if isinstance(min, strata.Tensor) or isinstance(max, strata.Tensor):
        if min is not None:
            x = strata.maximum(x, _tensor(min, x))
        if max is not None:
            x = strata.minimum(x, _tensor(max, x))
        return x
    return strata.clamp(x, min, max)


@lower(aten.clamp_min)
def _clamp_min(x, min):  # noqa: A002
    return _clamp(x, min=min)


@lower(aten.clamp_max)
def _clamp_max(x, max):  # noqa: A002
    return _clamp(x, max=max)


@lower(aten.hardtanh)
def _hardtanh(x, min_val=-1.0, max_val=1.0):
    return strata.clamp(x, min_val, max_val)


@lower(aten.masked_fill.Scalar, aten.masked_fill.Tensor)
def _masked_fill(x, mask, value):
    return strata.where(mask, _tensor(value, x), x)


# ---- backward helpers that may reach the table undecomposed ------------------------------------

@lower(aten.threshold_backward)
def _threshold_backward(grad, x, threshold):
    return strata.where(x <= threshold, strata.zeros_like(grad), grad)


@lower(aten.tanh_backward)
def _tanh_backward(grad, y):
    return grad * (1 - y * y)


@lower(aten.sigmoid_backward)
def _sigmoid_backward(grad, y):
    return grad * y * (1 - y)


@lower(aten.gelu_backward)
def _gelu_backward(grad, x, approximate="none"):
    _, pullback = strata.vjp(lambda v: strata.gelu(v, approximate=approximate), x)
    return pullback(grad)[0]


@lower(aten.silu_backward)
def _silu_backward(grad, x):
    s = strata.sigmoid(x)
    return grad * s * (1 + x * (1 - s))


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


# ---- shapes -----------------------------------------------------------------------------------

@lower(aten.view, aten._unsafe_view, aten.view_copy)
def _view(x, shape):
    return strata.reshape(x, *shape) if len(shape) else strata.reshape(x, ())


@lower(aten.permute, aten.permute_copy)
def _permute(x, dims):
    return strata.permute(x, *dims) if len(dims) else x


@lower(aten.t, aten.t_copy)
def _t(x):
    return x if x.ndim < 2 else strata.transpose(x, 0, 1)


@lower(aten.transpose.int, aten.transpose_copy.int)
def _transpose(x, dim0, dim1):
    return strata.transpose(x, dim0, dim1)


@lower(aten.expand, aten.expand_copy)
def _expand(x, size, *, implicit=False):
    return strata.expand(x, *size) if len(size) else x


@lower(aten.clone, aten.alias, aten.alias_copy, aten.detach, aten.lift_fresh_copy)
def _identity(x, *args, **kwargs):
    return x


@lower(aten.squeeze)
def _squeeze(x, dim=None):
    if dim is None:
        return strata.squeeze(x)
    dims = [dim] if isinstance(dim, int) else list(dim)
    dims = [d % max(x.ndim, 1) for d in dims if x.ndim and x.shape[d % x.ndim] == 1]
    if not dims:
        return x
    shape = [s for i, s in enumerate(x.shape) if i not in dims]
    return strata.reshape(x, *shape) if shape else strata.reshape(x, ())


@lower(aten.unsqueeze, aten.unsqueeze_copy)
def _unsqueeze(x, dim):
    return strata.unsqueeze(x, dim)


@lower(aten.cat)
def _cat(tensors, dim=0):
    tensors = [t for t in tensors if not (t.ndim == 1 and t.shape[0] == 0)] or tensors[:1]
    return tensors[0] if len(tensors) == 1 else strata.cat(tensors, dim)


@lower(aten.stack)
def _stack(tensors, dim=0):
    return strata.stack(tensors, dim)


@lower(aten.slice.Tensor, aten.slice_copy.Tensor)
def _slice(x, dim=0, start=None, end=None, step=1):
    size = x.shape[dim]
    start = 0 if start is None else start
    end = size if end is None else end
    start = max(min(start + size if start < 0 else start, size), 0)
    end = max(min(end + size if end < 0 else end, size), start)
    if start == 0 and end == size and step == 1:
        return x
    return strata.slice(x, dim, start, end, step)


@lower(aten.select.int, aten.select_copy.int)
def _select(x, dim, index):
    size = x.shape[dim]
    if not -size <= index < size:
        raise strata.Error(f"[aten.select] index {index} is out of range for dimension {dim} "
                           f"of size {size}")
    index %= size
    return strata.squeeze(strata.slice(x, dim, index, index + 1), dim)


@lower(aten.split.Tensor, aten.split_with_sizes, aten.split_with_sizes_copy, aten.split_copy)
def _split(x, split_size, dim=0):
    size = x.shape[dim]
    if isinstance(split_size, int):
        sizes = [split_size] * (size // split_size) + ([size % split_size] if size % split_size
                                                       else [])
    else:
        sizes = list(split_size)
    out, at = [], 0
    for s in sizes:
        out.append(strata.slice(x, dim, at, at + s))
        at += s
    return out


@lower(aten.unbind)
def _unbind(x, dim=0):
    return [strata.squeeze(strata.slice(x, dim, i, i + 1), dim) for i in range(x.shape[dim])]


@lower(aten.flip)
def _flip(x, dims):
    return strata.flip(x, list(dims))


@lower(aten.roll)
def _roll(x, shifts, dims=()):
    shifts = [shifts] if isinstance(shifts, int) else list(shifts)
    dims = list(dims) if dims else None
    if dims is None:
        flat = x.reshape(-1)
        return _roll(flat, shifts, [0]).reshape(*x.shape)
    for shift, dim in zip(shifts, dims):
        size = x.shape[dim]
        if size == 0:
            continue
        shift %= size
        if shift:
            x = strata.cat([strata.slice(x, dim, size - shift, size),
                            strata.slice(x, dim, 0, size - shift)], dim)
    return x


@lower(aten.constant_pad_nd)
def _constant_pad_nd(x, pad, value=0):
    low = [0] * x.ndim
    high = [0] * x.ndim
    for i in range(len(pad) // 2):
        low[x.ndim - 1 - i] = pad[2 * i]
        high[x.ndim - 1 - i] = pad[2 * i + 1]
    if any(p < 0 for p in low + high):
        for d in range(x.ndim):
            lo, hi = -min(low[d], 0), -min(high[d], 0)
            if lo or hi:
                x = strata.slice(x, d, lo, x.shape[d] - hi)
        low = [max(p, 0) for p in low]
        high = [max(p, 0) for p in high]
    return strata.pad(x, low, high, value)


@lower(aten.repeat)
def _repeat(x, repeats):
    lead = len(repeats) - x.ndim
    x = x.reshape(*([1] * lead), *x.shape) if lead else x
    shape, expanded = [], []
    for r, s in zip(repeats, x.shape):
        shape += [1, s]
        expanded += [r, s]
    out = strata.expand(x.reshape(*shape), *expanded)
    return out.reshape(*[r * s for r, s in zip(repeats, x.shape)])


@lower(aten.tril)
def _tril(x, diagonal=0):
    rows, cols = x.shape[-2], x.shape[-1]
    keep = strata.arange(cols).reshape(1, cols) <= strata.arange(rows).reshape(rows, 1) + diagonal
    return strata.where(keep, x, strata.zeros_like(x))


@lower(aten.triu)
def _triu(x, diagonal=0):
    rows, cols = x.shape[-2], x.shape[-1]
    keep = strata.arange(cols).reshape(1, cols) >= strata.arange(rows).reshape(rows, 1) + diagonal
    return strata.where(keep, x, strata.zeros_like(x))


# ---- gathers and scatters ---------------------------------------------------------------------

@lower(aten.index_select)
def _index_select(x, dim, index):
    return strata.index_select(x, dim, index.reshape(-1)) if index.ndim == 0 else \
        strata.index_select(x, dim, index)


@lower(aten.gather)
def _gather(x, dim, index, *, sparse_grad=False):
    return strata.take_along_dim(x, index, dim)


@lower(aten.scatter_add)
def _scatter_add(x, dim, index, src):
    return strata.scatter_add(x, dim, index, src)


@lower(aten.index_add)
def _index_add(x, dim, index, source, *, alpha=1):
    return strata.index_add(x, dim, index, source, alpha)


@lower(aten.embedding)
def _embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    flat = strata.index_select(weight, 0, indices.reshape(-1))
    return flat.reshape(*indices.shape, weight.shape[1])


@lower(aten.embedding_dense_backward)
def _embedding_backward(grad, indices, num_weights, padding_idx, scale_grad_by_freq):
    if scale_grad_by_freq:
        raise NotImplementedError("embedding_dense_backward with scale_grad_by_freq")
    dim = grad.shape[-1]
    flat_ids = indices.reshape(-1)
    flat_grad = grad.reshape(-1, dim)
    if padding_idx >= 0:
        keep = strata.astype(strata.ne(flat_ids, padding_idx), flat_grad.dtype).reshape(-1, 1)
        flat_grad = flat_grad * keep
    zeros = strata.zeros(num_weights, dim, dtype=grad.dtype)
    return strata.index_add(zeros, 0, flat_ids, flat_grad)


def _broadcast_indices(indices):
    shapes = [tuple(i.shape) for i in indices]
    return list(torch.broadcast_shapes(*shapes))


@lower(aten.index.Tensor)
def _index(x, indices):
    """x[i0, i1, ...] with integer tensors (None: a whole dimension), torch's advanced
    indexing: the index dims replace the indexed ones, or lead when they are apart."""
    indices = list(indices) + [None] * (x.ndim - len(indices))
    used = [d for d, i in enumerate(indices) if i is not None]
    if any(indices[d].dtype == strata.bool for d in used):
        raise NotImplementedError("aten.index with a boolean mask (a data-dependent shape)")
    shape = _broadcast_indices([indices[d] for d in used])
    # Flatten the indexed dims into one linear index.
    linear = None
    for d in used:
        size = x.shape[d]
        i = strata.broadcast_to(indices[d], shape).astype(strata.int64)
        i = strata.where(i < 0, i + size, i)
        linear = i if linear is None else linear * size + i
    contiguous = used == list(range(used[0], used[-1] + 1))
    order = used + [d for d in range(x.ndim) if d not in used]
    moved = strata.permute(x, *order) if order != list(range(x.ndim)) else x
    rest = [x.shape[d] for d in range(x.ndim) if d not in used]
    n = 1
    for d in used:
        n *= x.shape[d]
    flat = moved.reshape(n, *rest)
    picked = strata.index_select(flat, 0, linear.reshape(-1)).reshape(*shape, *rest)
    if contiguous and used[0] > 0:
        # torch keeps the index dims where the indexed dims were.
        lead = len(shape)
        before = list(range(lead, lead + used[0]))
        perm = before + list(range(lead)) + list(range(lead + used[0], lead + len(rest)))
        picked = strata.permute(picked, *perm)
    return picked


@lower(aten.index_put)
def _index_put(x, indices, values, accumulate=False):
    """x with values written (or, accumulating, added) at x[i0, i1, ...]. Where
    indices repeat without accumulate, torch leaves which write wins
    unspecified; here their sum."""
    indices = list(indices) + [None] * (x.ndim - len(indices))
    used = [d for d, i in enumerate(indices) if i is not None]
    if any(indices[d].dtype == strata.bool for d in used):
        raise NotImplementedError("aten.index_put with a boolean mask (a data-dependent shape)")
    order = used + [d for d in range(x.ndim) if d not in used]
    moved = strata.permute(x, *order) if order != list(range(x.ndim)) else x
    shape = _broadcast_indices([indices[d] for d in used])
    linear = None
    for d in used:
        size = x.shape[d]
        i = strata.broadcast_to(indices[d], shape).astype(strata.int64)
        i = strata.where(i < 0, i + size, i)
        linear = i if linear is None else linear * size + i
    rest = [x.shape[d] for d in order[len(used):]]
    n = 1
    for d in used:
        n *= x.shape[d]
    flat = moved.reshape(n, *rest)
    ids = linear.reshape(-1)
    # values broadcast against x[indices]: the index dims lead when moved to the front.
    if values.ndim and used != list(range(len(used))) and used == list(
            range(used[0], used[-1] + 1)):
        lead = used[0]
        values = strata.broadcast_to(values, [*[x.shape[d] for d in range(lead)], *shape,
                                              *[x.shape[d] for d in order[len(used) + lead:]]])
        perm = list(range(lead, lead + len(shape))) + list(range(lead)) + list(
            range(lead + len(shape), values.ndim))
        values = strata.permute(values, *perm)
    vals = strata.broadcast_to(values, [*shape, *rest]).reshape(-1, *rest).astype(x.dtype)
    if accumulate:
        out = strata.index_add(flat, 0, ids, vals)
    else:
        hits = strata.index_add(strata.zeros(n, dtype=strata.int32), 0, ids,
                                strata.ones(ids.shape[0], dtype=strata.int32))
        written = strata.index_add(strata.zeros_like(flat), 0, ids, vals)
        hit = (hits > 0).reshape(n, *([1] * len(rest)))
        out = strata.where(hit, written, flat)
    out = out.reshape(*[x.shape[d] for d in order])
    if order != list(range(x.ndim)):
        inverse = [order.index(d) for d in range(x.ndim)]
        out = strata.permute(out, *inverse)
    return out


def _positions(x, dim):
    """0..size-1 along `dim`, shaped to broadcast against x."""
    shape = [1] * x.ndim
    shape[dim] = x.shape[dim]
    return strata.arange(x.shape[dim]).reshape(*shape)


@lower(aten.slice_scatter)
def _slice_scatter(x, src, dim=0, start=None, end=None, step=1):
    dim %= x.ndim
    size = x.shape[dim]
    start = 0 if start is None else (start + size if start < 0 else start)
    end = size if end is None else (end + size if end < 0 else end)
    start, end = max(min(start, size), 0), max(min(end, size), 0)
    if src.shape[dim] == 0:
        return x
    p = _positions(x, dim)
    inside = strata.logical_and(strata.logical_and(p >= start, p < end),
                                strata.eq(strata.remainder(p - start, step), 0))
    # The src element each position inside reads: (p - start) / step (exact
    # there; clamped elsewhere, where it is not used).
    which = strata.floor(strata.astype(p - start, strata.float64) / step).astype(strata.int64)
    which = strata.clamp(which, 0, src.shape[dim] - 1)
    placed = strata.index_select(src, dim, which.reshape(-1))
    return strata.where(inside, placed, x)


@lower(aten.select_scatter)
def _select_scatter(x, src, dim, index):
    dim %= x.ndim
    index %= x.shape[dim]
    return _slice_scatter(x, strata.unsqueeze(src, dim), dim, index, index + 1)


@lower(aten.scatter.value, aten.scatter.src)
def _scatter(x, dim, index, src):
    """torch.scatter (no reduce): x with src written where index points along dim.
    Where indices repeat, torch leaves which write wins unspecified; here their sum."""
    hits = strata.scatter_add(strata.zeros_like(x, dtype=strata.int32), dim, index,
                              strata.ones_like(index, dtype=strata.int32))
    if isinstance(src, strata.Tensor):
        part = src
        for d in range(index.ndim):
            if part.shape[d] != index.shape[d]:
                part = strata.slice(part, d, 0, index.shape[d])
        written = strata.scatter_add(strata.zeros_like(x), dim, index, part.astype(x.dtype))
    else:
        written = strata.full(list(x.shape), src, dtype=x.dtype)
    return strata.where(hits > 0, written, x)


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


# ---- neural network ops -----------------------------------------------------------------------

@lower(aten._softmax)
def _softmax(x, dim, half_to_float=False):
    return strata.softmax(x, dim)


@lower(aten._log_softmax)
def _log_softmax(x, dim, half_to_float=False):
    return strata.log_softmax(x, dim)


@lower(aten._softmax_backward_data)
def _softmax_backward(grad, y, dim, input_dtype):
    return y * (grad - strata.sum(grad * y, [dim], True))


@lower(aten._log_softmax_backward_data)
def _log_softmax_backward(grad, y, dim, input_dtype):
    return grad - strata.exp(y) * strata.sum(grad, [dim], True)


@lower(aten.native_layer_norm)
def _native_layer_norm(x, normalized_shape, weight, bias, eps):
    dims = list(range(x.ndim - len(normalized_shape), x.ndim))
    mean = strata.mean(x, dims, True)
    centered = x - mean
    rstd = strata.rsqrt(strata.mean(centered * centered, dims, True) + eps)
    out = centered * rstd
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out, mean, rstd


@lower(aten.native_layer_norm_backward)
def _native_layer_norm_backward(grad, x, normalized_shape, mean, rstd, weight, bias, mask):
    dims = list(range(x.ndim - len(normalized_shape), x.ndim))
    lead = list(range(x.ndim - len(normalized_shape)))
    n = 1
    for d in dims:
        n *= x.shape[d]
    xhat = (x - mean) * rstd
    g = grad * weight if weight is not None else grad
    dx = rstd / n * (n * g - strata.sum(g, dims, True) - xhat * strata.sum(g * xhat, dims, True))
    dw = strata.sum(grad * xhat, lead, False) if weight is not None and mask[1] else None
    db = strata.sum(grad, lead, False) if bias is not None and mask[2] else None
    return (dx if mask[0] else None), dw, db


def _norm_dims(x):
    return [0] + list(range(2, x.ndim))


def _channel(v, x):
    return v.reshape(1, -1, *([1] * (x.ndim - 2)))


@lower(aten._native_batch_norm_legit_functional)
def _batch_norm_functional(x, weight, bias, running_mean, running_var, training, momentum, eps):
    dims = _norm_dims(x)
    if training:
        mean = strata.mean(x, dims, False)
        centered = x - _channel(mean, x)
        var = strata.mean(centered * centered, dims, False)
        n = x.numel() // x.shape[1]
        new_mean = running_mean * (1 - momentum) + mean * momentum
        new_var = running_var * (1 - momentum) + var * (n / max(n - 1, 1)) * momentum
    else:
        mean, var = running_mean, running_var
        new_mean, new_var = running_mean, running_var
    rstd = strata.rsqrt(var + eps)
    out = (x - _channel(mean, x)) * _channel(rstd, x)
    if weight is not None:
        out = out * _channel(weight, x)
    if bias is not None:
        out = out + _channel(bias, x)
    return out, mean, rstd, new_mean, new_var


@lower(aten._native_batch_norm_legit_no_training)
def _batch_norm_eval(x, weight, bias, running_mean, running_var, momentum, eps):
    out, _, _, _, _ = _batch_norm_functional(x, weight, bias, running_mean, running_var, False,
                                             momentum, eps)
    empty = strata.zeros(0, dtype=x.dtype)
    return out, empty, empty


@lower(aten._native_batch_norm_legit.no_stats)
def _batch_norm_no_stats(x, weight, bias, training, momentum, eps):
    dims = _norm_dims(x)
    mean = strata.mean(x, dims, False)
    centered = x - _channel(mean, x)
    rstd = strata.rsqrt(strata.mean(centered * centered, dims, False) + eps)
    out = centered * _channel(rstd, x)
    if weight is not None:
        out = out * _channel(weight, x)
    if bias is not None:
        out = out + _channel(bias, x)
    return out, mean, rstd


@lower(aten.native_batch_norm_backward)
def _batch_norm_backward(grad, x, weight, running_mean, running_var, save_mean, save_rstd, train,
                         eps, mask):
    dims = _norm_dims(x)
    if train:
        mean, rstd = save_mean, save_rstd
    else:
        mean, rstd = running_mean, strata.rsqrt(running_var + eps)
    n = x.numel() // x.shape[1]
    xhat = (x - _channel(mean, x)) * _channel(rstd, x)
    w = _channel(weight, x) if weight is not None else 1.0
    sum_g = strata.sum(grad, dims, False)
    sum_gx = strata.sum(grad * xhat, dims, False)
    if train:
        dx = _channel(rstd, x) * w * (grad - _channel(sum_g, x) / n - xhat * _channel(sum_gx, x) / n)
    else:
        dx = grad * _channel(rstd, x) * w
    return (dx if mask[0] else None), (sum_gx if mask[1] else None), (sum_g if mask[2] else None)


def _convolve(x, w, stride, padding, dilation, groups):
    spatial = x.ndim - 2
    conv = getattr(strata.nn.functional, f"conv{spatial}d")
    return conv(x, w, None, list(stride), list(padding), list(dilation), groups)


@lower(aten.convolution)
def _convolution(x, w, bias, stride, padding, dilation, transposed, output_padding, groups):
    if transposed:
        raise NotImplementedError("aten.convolution with transposed=True")
    y = _convolve(x, w, stride, padding, dilation, groups)
    if bias is not None:
        y = y + _channel(bias, y)
    return y


@lower(aten.convolution_backward)
def _convolution_backward(grad, x, w, bias_sizes, stride, padding, dilation, transposed,
                          output_padding, groups, mask):
    if transposed:
        raise NotImplementedError("aten.convolution_backward with transposed=True")
    _, pullback = strata.vjp(lambda a, b: _convolve(a, b, stride, padding, dilation, groups),
                             x, w)
    dx, dw = pullback(grad)
    db = strata.sum(grad, _norm_dims(grad), False) if mask[2] else None
    return (dx if mask[0] else None), (dw if mask[1] else None), db


def _pool_args(x, kernel_size, stride, padding):
    spatial = x.ndim - 2 if x.ndim > 2 else 1
    as_list = (lambda v: [v] * spatial if isinstance(v, int) else list(v))
    kernel = as_list(kernel_size)
    stride = as_list(stride) if stride else kernel
    return kernel, stride, as_list(padding)


def _max_pool(x, kernel_size, stride, padding, dilation, ceil_mode):
    kernel, stride, padding = _pool_args(x, kernel_size, stride, padding)
    fn = getattr(strata.nn.functional, f"max_pool{len(kernel)}d")
    return fn(x, kernel, stride, padding, list(dilation) if not isinstance(dilation, int)
              else dilation, ceil_mode, return_indices=True)


@lower(aten.max_pool2d_with_indices, aten.max_pool3d_with_indices)
def _max_pool_with_indices(x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    return _max_pool(x, kernel_size, stride, padding, dilation, ceil_mode)


@lower(aten.max_pool2d_with_indices_backward, aten.max_pool3d_with_indices_backward)
def _max_pool_backward(grad, x, kernel_size, stride, padding, dilation, ceil_mode, indices):
    _, pullback = strata.vjp(
        lambda a: _max_pool(a, kernel_size, stride, padding, dilation, ceil_mode)[0], x)
    return pullback(grad)[0]


def _avg_pool(x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    kernel, stride, padding = _pool_args(x, kernel_size, stride, padding)
    fn = getattr(strata.nn.functional, f"avg_pool{len(kernel)}d")
    return fn(x, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override)


@lower(aten.avg_pool2d, aten.avg_pool3d)
def _avg_pool_forward(x, kernel_size, stride=(), padding=0, ceil_mode=False,
                      count_include_pad=True, divisor_override=None):
    return _avg_pool(x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                     divisor_override)


@lower(aten.avg_pool2d_backward, aten.avg_pool3d_backward)
def _avg_pool_backward(grad, x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                       divisor_override):
    _, pullback = strata.vjp(lambda a: _avg_pool(a, kernel_size, stride, padding, ceil_mode,
                                                  count_include_pad, divisor_override), x)
    return pullback(grad)[0]


@lower(aten._adaptive_avg_pool2d)
def _adaptive_avg_pool2d(x, output_size):
    h, w = x.shape[-2], x.shape[-1]
    oh, ow = output_size
    if h % oh or w % ow:
        raise NotImplementedError("adaptive_avg_pool2d to a size that does not divide the input")
    return _avg_pool(x, [h // oh, w // ow], [h // oh, w // ow], 0, False, True, None)


@lower(aten._adaptive_avg_pool2d_backward)
def _adaptive_avg_pool2d_backward(grad, x):
    oh, ow = grad.shape[-2], grad.shape[-1]
    _, pullback = strata.vjp(lambda a: _adaptive_avg_pool2d(a, [oh, ow]), x)
    return pullback(grad)[0]


def _attention(q, k, v, is_causal, attn_mask, scale):
    """softmax(q k^T * scale + mask) v over [B, H, S, D] (k, v may have fewer heads:
    grouped-query attention), and the log-sum-exp of each row of scores."""
    heads, kv_heads = q.shape[1], k.shape[1]
    if kv_heads != heads:
        group = heads // kv_heads
        k = strata.expand(strata.unsqueeze(k, 2), k.shape[0], kv_heads, group, *k.shape[2:]) \
            .reshape(k.shape[0], heads, *k.shape[2:])
        v = strata.expand(strata.unsqueeze(v, 2), v.shape[0], kv_heads, group, *v.shape[2:]) \
            .reshape(v.shape[0], heads, *v.shape[2:])
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = strata.matmul(q, strata.transpose(k, -2, -1)) * scale
    if is_causal:
        rows, cols = q.shape[-2], k.shape[-2]
        keep = strata.arange(cols).reshape(1, cols) <= strata.arange(rows).reshape(rows, 1)
        scores = strata.where(keep, scores, strata.full([], -math.inf, dtype=scores.dtype))
    if attn_mask is not None:
        if attn_mask.dtype == strata.bool:
            scores = strata.where(attn_mask, scores,
                                  strata.full([], -math.inf, dtype=scores.dtype))
        else:
            scores = scores + attn_mask
    top = strata.amax(scores, [-1], True)
    top = strata.where(strata.eq(top, -math.inf), strata.zeros_like(top), top)
    weights = strata.exp(scores - top)
    total = strata.sum(weights, [-1], True)
    out = strata.matmul(weights / total, v)
    return out, strata.squeeze(strata.log(total) + top, -1)


@lower(aten._scaled_dot_product_flash_attention_for_cpu)
def _flash_attention(q, k, v, dropout_p=0.0, is_causal=False, *, attn_mask=None, scale=None):
    if dropout_p > 0:
        raise NotImplementedError("attention dropout")
    out, lse = _attention(q, k, v, is_causal, attn_mask, scale)
    return out, lse.astype(strata.float32)


@lower(aten._scaled_dot_product_flash_attention_for_cpu_backward)
def _flash_attention_backward(grad_out, q, k, v, out, logsumexp, dropout_p, is_causal, *,
                              attn_mask=None, scale=None):
    if dropout_p > 0:
        raise NotImplementedError("attention dropout")
    _, pullback = strata.vjp(lambda a, b, c: _attention(a, b, c, is_causal, attn_mask, scale)[0],
                             q, k, v)
    return tuple(pullback(grad_out))


@lower(aten.nll_loss_forward)
def _nll_loss_forward(x, target, weight, reduction, ignore_index):
    if weight is not None:
        raise NotImplementedError("nll_loss with class weights")
    classes = x.shape[-1] if x.ndim else 1
    valid = strata.ne(target, ignore_index)
    safe = strata.where(valid, target, strata.zeros_like(target))
    picked = strata.take_along_dim(x.reshape(-1, classes), safe.reshape(-1, 1), 1).reshape(
        *target.shape)
    losses = -picked * strata.astype(valid, x.dtype)
    total = strata.sum(strata.astype(valid, x.dtype).reshape(-1))
    if reduction == 0:  # none
        return losses, total
    summed = strata.sum(losses.reshape(-1))
    return (summed / total if reduction == 1 else summed), total


@lower(aten.nll_loss_backward)
def _nll_loss_backward(grad, x, target, weight, reduction, ignore_index, total_weight):
    if weight is not None:
        raise NotImplementedError("nll_loss with class weights")
    classes = x.shape[-1] if x.ndim else 1
    valid = strata.astype(strata.ne(target, ignore_index), x.dtype)
    safe = strata.where(strata.ne(target, ignore_index), target, strata.zeros_like(target))
    scale = grad if reduction == 0 else (grad / total_weight if reduction == 1 else grad)
    per = -(valid * scale)
    hot = strata.one_hot(safe.reshape(-1), classes, dtype=x.dtype)
    return (hot * per.reshape(-1, 1)).reshape(*x.shape)


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


@lower(aten.rand, aten.rand_like)
@random_lowering
def _rand(keys, size_or_x, *, dtype=None, layout=None, device=None, pin_memory=None,
          generator=None, memory_format=None):
    if isinstance(size_or_x, strata.Tensor):
        shape, dtype = list(size_or_x.shape), dtype or size_or_x.dtype
    else:
        shape = list(size_or_x)
    return strata.uniform(keys.next(), shape, 0.0, 1.0, dtype=_sdt(dtype) or strata.float32)


@lower(aten.randn, aten.randn_like)
@random_lowering
def _randn(keys, size_or_x, *, dtype=None, layout=None, device=None, pin_memory=None,
           generator=None, memory_format=None):
    if isinstance(size_or_x, strata.Tensor):
        shape, dtype = list(size_or_x.shape), dtype or size_or_x.dtype
    else:
        shape = list(size_or_x)
    return strata.normal(keys.next(), shape, 0.0, 1.0, dtype=_sdt(dtype) or strata.float32)


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


def lowered_ops():
    """The ATen ops (overload packets and overloads) the table lowers."""
    return sorted({str(op) for op in LOWERINGS if isinstance(op, (torch._ops.OpOverload,
                                                                 torch._ops.OpOverloadPacket))})
