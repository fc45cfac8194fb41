"""Gathers and scatters: index_select, gather, scatter, index, index_put."""
import torch

import strata

from ._table import aten, lower


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


class _Indexed:
    """x's indexed dims moved to the front and flattened into one: `flat` is
    [n, *rest], `ids` the linear index into its first dim (negative indices
    counted from the end), `shape` the indices' broadcast shape."""

    def __init__(self, x, indices, op):
        indices = list(indices) + [None] * (x.ndim - len(indices))
        self.used = [d for d, i in enumerate(indices) if i is not None]
        if any(indices[d].dtype == strata.bool for d in self.used):
            raise NotImplementedError(f"{op} with a boolean mask (a data-dependent shape)")
        self.order = self.used + [d for d in range(x.ndim) if d not in self.used]
        moved = strata.permute(x, *self.order) if self.order != list(range(x.ndim)) else x
        self.shape = _broadcast_indices([indices[d] for d in self.used])
        linear = None
        for d in self.used:
            size = x.shape[d]
            i = strata.broadcast_to(indices[d], self.shape).astype(strata.int64)
            i = strata.where(i < 0, i + size, i)
            linear = i if linear is None else linear * size + i
        self.rest = [x.shape[d] for d in self.order[len(self.used):]]
        self.n = 1
        for d in self.used:
            self.n *= x.shape[d]
        self.flat = moved.reshape(self.n, *self.rest)
        self.ids = linear.reshape(-1)


@lower(aten.index.Tensor)
def _index(x, indices):
    """x[i0, i1, ...] with integer tensors (None: a whole dimension), torch's advanced
    indexing: the index dims replace the indexed ones, or lead when they are apart."""
    at = _Indexed(x, indices, "aten.index")
    used, shape, rest = at.used, at.shape, at.rest
    contiguous = used == list(range(used[0], used[-1] + 1))
    picked = strata.index_select(at.flat, 0, at.ids).reshape(*shape, *rest)
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
    at = _Indexed(x, indices, "aten.index_put")
    used, order, shape, rest, n, flat, ids = (at.used, at.order, at.shape, at.rest, at.n, at.flat,
                                              at.ids)
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
    if step == 1:
        # x's head, src, x's tail: one copy. (A gather of src at clamped
        # positions, as the general case below, cost 4x as much in the
        # backward of every slice a Llama layer takes.)
        parts = [strata.slice(x, dim, 0, start)] if start > 0 else []
        parts.append(src.astype(x.dtype))
        if end < size:
            parts.append(strata.slice(x, dim, end, size))
        return parts[0] if len(parts) == 1 else strata.concat(parts, dim)
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


def _one_per_row(x, dim, index):
    """Whether a scatter writes one element per row along dim, every row:
    index is x's shape with 1 along dim (nll_loss's gradient, a one-hot), and
    the positions are exact in the float the mask compares them in."""
    return (x.ndim > 0 and index.ndim == x.ndim and index.shape[dim] == 1
            and all(index.shape[d] == x.shape[d] for d in range(x.ndim) if d != dim)
            and x.dtype in (strata.float32, strata.bfloat16, strata.float16, strata.float64)
            and x.shape[dim] <= 1 << 24)


def _scatter_one_per_row(x, dim, index, src):
    """x with src written where each row's index points, as a select on
    (position == index): both sides broadcasts, so the mask is computed in
    the fused loop that reads it and never written (a scatter of hits, a
    [rows, classes] integer compare, cost more than the rest of the loss's
    gradient). The indices keep strata's range check."""
    compute = strata.float64 if x.dtype == strata.float64 else strata.float32
    shape = list(x.shape)
    at = strata.expand(strata.astype(index, compute), *shape)
    positions = strata.expand(strata.astype(_positions(x, dim), compute), *shape)
    if isinstance(src, strata.Tensor):
        for d in range(src.ndim):  # src[i, j, ...] at index[i, j, ...]
            if src.shape[d] != index.shape[d]:
                src = strata.slice(src, d, 0, index.shape[d])
        src = strata.expand(src.astype(x.dtype), *shape)
    else:
        src = strata.full([], src, dtype=x.dtype)
    out = strata.where(strata.eq(at, positions), src, x)
    return strata._strata._with_index_check(out, index, x.shape[dim], "aten.scatter",
                                            f"dimension {dim} of {list(x.shape)}")


@lower(aten.scatter.value, aten.scatter.src)
def _scatter(x, dim, index, src):
    """torch.scatter (no reduce): x with src written where index points along dim.
    Where indices repeat, torch leaves which write wins unspecified; here their sum."""
    dim %= max(x.ndim, 1)
    if _one_per_row(x, dim, index):
        return _scatter_one_per_row(x, dim, index, src)
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
