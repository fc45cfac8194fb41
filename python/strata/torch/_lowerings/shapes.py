"""View and shape ops: reshapes, permutes, slices, cat, pad."""
import strata

from ._table import aten, lower


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


@lower(aten.diagonal)
def _diagonal(x, offset=0, dim1=0, dim2=1):
    dim1, dim2 = dim1 % x.ndim, dim2 % x.ndim
    rest = [d for d in range(x.ndim) if d not in (dim1, dim2)]
    moved = strata.permute(x, *rest, dim1, dim2)
    rows, cols = x.shape[dim1], x.shape[dim2]
    start = max(-offset, 0)
    length = max(min(rows - start, cols - start - offset), 0)
    flat = moved.reshape(*[x.shape[d] for d in rest], rows * cols)
    picks = strata.arange(start, start + length) * (cols + 1) + offset
    return strata.index_select(flat, len(rest), picks)


@lower(aten.diagonal_scatter)
def _diagonal_scatter(x, src, offset=0, dim1=0, dim2=1):
    """x with its diagonal (as aten.diagonal reads it) replaced by src."""
    dim1, dim2 = dim1 % x.ndim, dim2 % x.ndim
    rest = [d for d in range(x.ndim) if d not in (dim1, dim2)]
    order = rest + [dim1, dim2]
    moved = strata.permute(x, *order)
    rows, cols = x.shape[dim1], x.shape[dim2]
    start = max(-offset, 0)
    length = src.shape[-1]
    if length == 0:
        return x
    flat = moved.reshape(*[x.shape[d] for d in rest], rows * cols)
    q = strata.arange(rows * cols)
    row = strata.floor(strata.astype(q, strata.float64) / cols).astype(strata.int64)
    on = strata.eq(q - row * cols - row, offset)
    which = strata.clamp(row - start, 0, length - 1)
    placed = strata.index_select(src.astype(x.dtype), len(rest), which)
    out = strata.where(on, placed, flat).reshape(*[x.shape[d] for d in order])
    inverse = [order.index(d) for d in range(x.ndim)]
    return strata.permute(out, *inverse)
