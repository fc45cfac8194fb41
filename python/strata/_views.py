"""Views, as PyTorch has them: ``x[0]``, ``x.T``, ``x.reshape(...)`` and the
other view ops give a tensor that shares ``x``'s elements.

strata's values are immutable IR, so a view is not an alias of memory: it is
a link from the view to its base holding two functions, ``forward`` (the
view's value from the base's) and ``update`` (the base's value once the
view's elements are replaced). An in-place write to either side (``[]=``,
``copy_``, ``+=`` and the other in-place operators) rebinds the other side
through the links at once: a write to a view goes up to its base and from
there down to every other view of it; a write to a base goes down to its
views. Each rebinding is a few lazy ops, compiled with the rest of the
graph. Nothing is tracked for tensors nobody writes to beyond one link per
view, which dies with the view.

Which results are views follows torch: basic indexing (ints, slices, None,
``...``), ``T`` / ``mT`` / ``transpose`` / ``permute``, ``view``,
``reshape`` / ``flatten`` / ``squeeze`` / ``unsqueeze`` of a contiguous
tensor, ``expand`` / ``broadcast_to``, ``split`` / ``chunk`` pieces and
``detach``. Indexing with a tensor or a list copies, as in torch. Writing
through an expanded view is an Error, as in torch (several elements of the
view are one element of the base).
"""
import weakref

from . import _strata

# The C++ methods, kept on the extension module the first time this file runs
# (a reload of the package must not take the wrappers for them).
_RAW = _strata.__dict__.setdefault("_raw_tensor_methods", {
    name: getattr(_strata.Tensor, name)
    for name in ("copy_", "__getitem__", "__setitem__", "detach", "__iadd__", "__isub__",
                 "__imul__", "__itruediv__", "__iand__", "__ior__", "__ixor__")})
_raw_copy = _RAW["copy_"]
_raw_getitem = _RAW["__getitem__"]
_raw_setitem = _RAW["__setitem__"]
_raw_detach = _RAW["detach"]

# id(view) -> _Link; id(base) -> {id(view): weakref to the view}.
_links = {}
_children = {}
# Off while strata's own code traces (the torch backend's lowering): its
# intermediate values are nobody's views, and links would only cost time.
_tracking = True
# id(view) -> its strides (see _strides_of).
_strides = {}


class _Link:
    __slots__ = ("base", "forward", "update", "refusal")

    def __init__(self, base, forward, update, refusal):
        self.base = base
        self.forward = forward
        self.update = update
        self.refusal = refusal  # why a write through this view is an Error, or None


def _forget(view_id, base_id):
    _links.pop(view_id, None)
    _strides.pop(view_id, None)
    views = _children.get(base_id)
    if views is not None:
        views.pop(view_id, None)
        if not views:
            del _children[base_id]


def _register(view, base, forward, update, strides, refusal=None):
    """Makes `view` a view of `base` with `strides`; returns it."""
    if not _tracking:
        return view
    view_id, base_id = id(view), id(base)
    ref = weakref.ref(view, lambda _, v=view_id, b=base_id: _forget(v, b))
    _links[view_id] = _Link(base, forward, update, refusal)
    _children.setdefault(base_id, {})[view_id] = ref
    _strides[view_id] = strides
    return view


class untracked:
    """Within it, view ops give plain tensors (no links), as strata's own
    tracing code wants."""

    def __enter__(self):
        global _tracking
        self.saved, _tracking = _tracking, False

    def __exit__(self, *exc):
        global _tracking
        _tracking = self.saved


def _refresh_views(tensor, skip=None):
    """`tensor` was rebound: each of its views (but `skip`) takes its new value."""
    views = _children.get(id(tensor))
    if not views:
        return
    for ref in list(views.values()):
        view = ref()
        if view is None or view is skip:
            continue
        _raw_copy(view, _links[id(view)].forward(tensor))
        _refresh_views(view)


def written(tensor):
    """`tensor` was written in place: its views and its bases follow."""
    _refresh_views(tensor)
    child = tensor
    link = _links.get(id(child))
    while link is not None:
        base = link.base
        _raw_copy(base, link.update(base, child))
        _refresh_views(base, skip=child)
        child, link = base, _links.get(id(base))


def _check_writable(tensor):
    """Refuses a write the views above `tensor` cannot pass on, before it is made."""
    link = _links.get(id(tensor))
    while link is not None:
        if link.refusal is not None:
            raise _strata.Error(link.refusal)
        link = _links.get(id(link.base))


# ---- the in-place methods -------------------------------------------------------------------
def _in_place(raw):
    def method(self, *args):
        _check_writable(self)
        result = raw(self, *args)
        written(self)
        return result

    method.__name__ = raw.__name__
    method.__doc__ = raw.__doc__
    return method


def _kind(dtype):
    return 0 if dtype == _strata.bool else 2 if dtype.is_floating_point else 1


def _in_place_operator(name, op):
    """x //= y, x %= y, x **= y in place, as torch has them (Python's
    default rebinds the name to a new tensor, which a view's base never sees)."""

    def method(self, other):
        _check_writable(self)
        result = op(self, other)
        if _kind(result.dtype) > _kind(self.dtype):
            raise _strata.Error(
                f"[{name}] result type {result.dtype.name} can't be cast to the tensor's "
                f"type {self.dtype.name} in place")
        _raw_copy(self, result.astype(self.dtype))
        written(self)
        return self

    method.__name__ = name
    return method


# ---- the view ops ---------------------------------------------------------------------------
# Each view's strides (in elements of its root tensor's row-major layout),
# as torch would have them: they decide, as in torch, whether a reshape of a
# view is a view or a copy. A tensor that is no view is row-major.
def _strides_of(x):
    strides = _strides.get(id(x))
    if strides is not None:
        return strides
    out, step = [], 1
    for n in reversed(x.shape):
        out.append(step)
        step *= n
    return tuple(reversed(out))


def _reshape_strides(shape, strides, new_shape):
    """The strides that view (shape, strides) as new_shape without moving an
    element, or None where no strides can (torch's rule for view/reshape:
    each run of dims that is contiguous in memory is split or merged alone)."""
    if 0 in shape or 0 in new_shape:
        return _strides_of_shape(new_shape)
    if not shape:
        shape, strides = (1,), (1,)
    out = [0] * len(new_shape)
    view_d = len(new_shape) - 1
    base_stride = strides[-1]
    run_numel = view_numel = 1
    for d in range(len(shape) - 1, -1, -1):
        run_numel *= shape[d]
        # a run of dims ends where the next outer dim is not laid out right after it
        if d == 0 or (shape[d - 1] != 1 and strides[d - 1] != run_numel * base_stride):
            while view_d >= 0 and (view_numel < run_numel or new_shape[view_d] == 1):
                out[view_d] = view_numel * base_stride
                view_numel *= new_shape[view_d]
                view_d -= 1
            if view_numel != run_numel:
                return None
            if d > 0:
                base_stride = strides[d - 1]
                run_numel = view_numel = 1
    return tuple(out) if view_d == -1 else None


def _strides_of_shape(shape):
    out, step = [], 1
    for n in reversed(shape):
        out.append(step)
        step *= n
    return tuple(reversed(out))


def _basic(key):
    """Whether indexing by `key` gives a view (ints, slices, None, ...)."""
    items = key if isinstance(key, tuple) else (key,)
    for item in items:
        if item is None or item is Ellipsis or isinstance(item, slice):
            continue
        if isinstance(item, int) and not isinstance(item, bool):
            continue
        return False
    return True


def _index_strides(shape, strides, key):
    """The strides of x[key] for a basic key (ints, slices, None, ...)."""
    items = key if isinstance(key, tuple) else (key,)
    if any(item is Ellipsis for item in items):
        at = next(i for i, item in enumerate(items) if item is Ellipsis)
        consumed = sum(1 for item in items if item is not None and item is not Ellipsis)
        items = items[:at] + (slice(None),) * (len(shape) - consumed) + items[at + 1:]
    out, d = [], 0
    for item in items:
        if item is None:
            out.append(1)  # a size-1 dim: its stride never matters
        elif isinstance(item, slice):
            out.append(strides[d] * item.indices(shape[d])[2])
            d += 1
        else:
            d += 1
    return tuple(out) + tuple(strides[d:])


def _getitem(self, key):
    result = _raw_getitem(self, key)
    if not _basic(key):
        return result  # advanced indexing copies, as in torch
    return _getitem_view_of(result, self, key)


def _getitem_view_of(result, base_tensor, key):
    def update(base, view):
        new = _strata.tensor(base)  # a new handle on the base's value, not a copy of its data
        _raw_setitem(new, key, view)
        return new

    return _register(result, base_tensor, lambda base: _raw_getitem(base, key), update,
                     _index_strides(tuple(base_tensor.shape), _strides_of(base_tensor), key))


def _reshaping(raw, name):
    """reshape, flatten: a view where torch's strides allow one, else a copy.
    view: always a view (torch refuses the rest; here it writes back all the same)."""

    def op(x, *args, **kwargs):
        result = raw(x, *args, **kwargs)
        shape = tuple(result.shape)
        strides = _reshape_strides(tuple(x.shape), _strides_of(x), shape)
        if strides is None:
            if name != "view":
                return result
            strides = _strides_of_shape(shape)
        return _register(result, x, lambda base: raw(base, *args, **kwargs),
                         lambda base, view: _strata.reshape(view, base.shape), strides)

    op.__name__ = name
    op.__doc__ = raw.__doc__
    return op


def _squeeze(x, dim=None):
    result = _strata.squeeze(x, dim)
    shape, strides = tuple(x.shape), _strides_of(x)
    if dim is None:
        kept = [s for n, s in zip(shape, strides) if n != 1]
    else:
        d = dim % len(shape) if shape else 0
        kept = [s for i, (n, s) in enumerate(zip(shape, strides)) if i != d or n != 1]
    return _register(result, x, lambda base: _strata.squeeze(base, dim),
                     lambda base, view: _strata.reshape(view, base.shape), tuple(kept))


def _unsqueeze(x, dim):
    result = _strata.unsqueeze(x, dim)
    strides = list(_strides_of(x))
    strides.insert(dim % (len(strides) + 1), 1)
    return _register(result, x, lambda base: _strata.unsqueeze(base, dim),
                     lambda base, view: _strata.reshape(view, base.shape), tuple(strides))


def _permuted_view(result, x, order, forward, update):
    strides = _strides_of(x)
    return _register(result, x, forward, update, tuple(strides[d] for d in order))


def _transpose(x, dim0=None, dim1=None):
    result = _strata.transpose(x, dim0, dim1)  # transposing twice is the identity
    order = list(range(x.ndim))
    if dim0 is None:
        order.reverse()
    elif x.ndim:
        a, b = dim0 % x.ndim, dim1 % x.ndim
        order[a], order[b] = order[b], order[a]
    return _permuted_view(result, x, order, lambda base: _strata.transpose(base, dim0, dim1),
                          lambda base, view: _strata.transpose(view, dim0, dim1))


def _mT(x):
    result = _strata.mT(x)
    order = list(range(x.ndim))
    if x.ndim >= 2:
        order[-2], order[-1] = order[-1], order[-2]
    return _permuted_view(result, x, order, _strata.mT, lambda base, view: _strata.mT(view))


def _permute(x, *dims):
    order = list(dims[0]) if len(dims) == 1 and not isinstance(dims[0], int) else list(dims)
    result = _strata.permute(x, *dims)
    order = [d % len(order) for d in order]
    inverse = [0] * len(order)
    for i, d in enumerate(order):
        inverse[d] = i
    return _permuted_view(result, x, order, lambda base: _strata.permute(base, *dims),
                          lambda base, view: _strata.permute(view, *inverse))


def _expanding(raw, name):
    def op(x, *args, **kwargs):
        result = raw(x, *args, **kwargs)
        shape, strides = tuple(x.shape), _strides_of(x)
        new = tuple(result.shape)
        lead = len(new) - len(shape)
        out = [0] * lead + [s if n == m else 0 for n, m, s in zip(shape, new[lead:], strides)]
        refusal = None
        if any(s == 0 and n > 1 for n, s in zip(new, out)):
            refusal = (
                f"[{name}] a write through an expanded view: more than one element of the "
                f"view {new} is the same element of its base {shape} (torch refuses it too); "
                f"write to the base, or to a copy (x.{name}(...).clone())")
        return _register(result, x, lambda base: raw(base, *args, **kwargs),
                         lambda base, view: _strata.reshape(view, base.shape), tuple(out), refusal)

    op.__name__ = name
    return op


def _pieces(raw, name):
    """split / chunk: each piece is a view of its slice of x."""

    def op(x, size_or_chunks, dim=0):
        pieces = raw(x, size_or_chunks, dim)
        d = dim % x.ndim if x.ndim else 0
        start, views = 0, []
        for piece in pieces:
            stop = start + piece.shape[d]
            key = (slice(None),) * d + (slice(start, stop),)
            views.append(_getitem_view_of(piece, x, key))
            start = stop
        return type(pieces)(views) if isinstance(pieces, tuple) else views

    op.__name__ = name
    return op


def _detach(x):
    result = _raw_detach(x)
    return _register(result, x, _raw_detach, lambda base, view: view, _strides_of(x))


def install(package):
    """Makes the package's view ops give views and its in-place ops write through."""
    Tensor = _strata.Tensor
    Tensor.copy_ = _in_place(_raw_copy)
    Tensor.__setitem__ = _in_place(_raw_setitem)
    for name in ("__iadd__", "__isub__", "__imul__", "__itruediv__", "__iand__", "__ior__",
                 "__ixor__"):
        setattr(Tensor, name, _in_place(_RAW[name]))
    Tensor.__ifloordiv__ = _in_place_operator("__ifloordiv__", lambda a, b: a // b)
    Tensor.__imod__ = _in_place_operator("__imod__", lambda a, b: a % b)
    Tensor.__ipow__ = _in_place_operator("__ipow__", lambda a, b: a ** b)
    Tensor.__getitem__ = _getitem
    Tensor.detach = _detach
    Tensor.T = property(lambda self: _transpose(self))
    Tensor.mT = property(_mT)
    functions = {
        "reshape": _reshaping(_strata.reshape, "reshape"),
        "flatten": _reshaping(_strata.flatten, "flatten"),
        "squeeze": _squeeze,
        "unsqueeze": _unsqueeze,
        "transpose": _transpose,
        "permute": _permute,
        "expand": _expanding(_strata.expand, "expand"),
        "broadcast_to": _expanding(_strata.broadcast_to, "broadcast_to"),
        "split": _pieces(_strata.split, "split"),
        "chunk": _pieces(_strata.chunk, "chunk"),
    }
    for name, function in functions.items():
        setattr(package, name, function)
        setattr(Tensor, name, function)
    Tensor.view = _reshaping(_strata.reshape, "view")
