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
# ids of live tensors that are not laid out row-major in their base (a
# transposed or column-sliced view): reshape of one copies, as in torch.
_strided = set()


class _Link:
    __slots__ = ("base", "forward", "update", "refusal")

    def __init__(self, base, forward, update, refusal):
        self.base = base
        self.forward = forward
        self.update = update
        self.refusal = refusal  # why a write through this view is an Error, or None


def _forget(view_id, base_id):
    _links.pop(view_id, None)
    _strided.discard(view_id)
    views = _children.get(base_id)
    if views is not None:
        views.pop(view_id, None)
        if not views:
            del _children[base_id]


def _register(view, base, forward, update, strided=False, refusal=None):
    """Makes `view` a view of `base`; returns it."""
    if not _tracking:
        return view
    view_id, base_id = id(view), id(base)
    ref = weakref.ref(view, lambda _, v=view_id, b=base_id: _forget(v, b))
    _links[view_id] = _Link(base, forward, update, refusal)
    _children.setdefault(base_id, {})[view_id] = ref
    if strided or base_id in _strided:
        _strided.add(view_id)
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


def _window_is_row_major(shape, key):
    """Whether x[key] of a row-major x is row-major in x's memory: ints and
    slices of the leading dims, then at most one partial slice, then whole
    dims (size-1 dims never break it)."""
    items = key if isinstance(key, tuple) else (key,)
    if any(item is Ellipsis for item in items):
        before = items[:items.index(Ellipsis)]
        after = items[items.index(Ellipsis) + 1:]
        consumed = sum(1 for item in items if item is not None and item is not Ellipsis)
        items = before + (slice(None),) * (len(shape) - consumed) + after
    dim, partial = 0, False
    for item in items:
        if item is None:
            continue
        if dim >= len(shape):
            break
        size = shape[dim]
        whole = isinstance(item, slice) and range(size)[item] == range(size)
        if partial and not whole and size != 1:
            return False
        if isinstance(item, slice) and not whole and size != 1:
            if (item.step or 1) != 1:
                return False
            partial = True
        dim += 1
    return True


def _getitem(self, key):
    result = _raw_getitem(self, key)
    if not _basic(key):
        return result  # advanced indexing copies, as in torch

    def update(base, view):
        new = _strata.tensor(base)  # a new handle on the base's value, not a copy of its data
        _raw_setitem(new, key, view)
        return new

    return _register(result, self, lambda base: _raw_getitem(base, key), update,
                     strided=not _window_is_row_major(self.shape, key))


def _reshaping(raw, name):
    """reshape-like ops: a view of a row-major tensor, a copy of a strided one."""

    def op(x, *args, **kwargs):
        result = raw(x, *args, **kwargs)
        if id(x) in _strided and name != "view":
            return result
        return _register(result, x, lambda base: raw(base, *args, **kwargs),
                         lambda base, view: _strata.reshape(view, base.shape))

    op.__name__ = name
    op.__doc__ = raw.__doc__
    return op


def _permuted(p, ndim):
    dims = [d % ndim for d in p] if ndim else []
    return dims != list(range(ndim))


def _transpose(x, dim0=None, dim1=None):
    result = _strata.transpose(x, dim0, dim1)
    # transposing twice is the identity: the update is the op itself
    moves = x.ndim > 1 and (dim0 is None or (dim0 % x.ndim) != (dim1 % x.ndim))
    return _register(result, x, lambda base: _strata.transpose(base, dim0, dim1),
                     lambda base, view: _strata.transpose(view, dim0, dim1), strided=moves)


def _mT(x):
    result = _strata.mT(x)
    return _register(result, x, _strata.mT, lambda base, view: _strata.mT(view), strided=True)


def _permute(x, *dims):
    order = list(dims[0]) if len(dims) == 1 and not isinstance(dims[0], int) else list(dims)
    result = _strata.permute(x, *dims)
    inverse = [0] * len(order)
    for i, d in enumerate(order):
        inverse[d % len(order)] = i
    return _register(result, x, lambda base: _strata.permute(base, *dims),
                     lambda base, view: _strata.permute(view, *inverse),
                     strided=_permuted(order, x.ndim))


def _expanding(raw, name):
    def op(x, *args, **kwargs):
        result = raw(x, *args, **kwargs)
        refusal = (
            f"[{name}] a write through an expanded view: more than one element of the view "
            f"{tuple(result.shape)} is the same element of its base {tuple(x.shape)} (torch "
            f"refuses it too); write to the base, or to a copy (x.{name}(...).clone())")
        return _register(result, x, lambda base: raw(base, *args, **kwargs), None,
                         strided=True, refusal=refusal)

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


def _getitem_view_of(result, base_tensor, key):
    def update(base, view):
        new = _strata.tensor(base)
        _raw_setitem(new, key, view)
        return new

    return _register(result, base_tensor, lambda base: _raw_getitem(base, key), update,
                     strided=not _window_is_row_major(base_tensor.shape, key))


def _detach(x):
    result = _raw_detach(x)
    return _register(result, x, _raw_detach, lambda base, view: view)


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
        "squeeze": _reshaping(_strata.squeeze, "squeeze"),
        "unsqueeze": _reshaping(_strata.unsqueeze, "unsqueeze"),
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
