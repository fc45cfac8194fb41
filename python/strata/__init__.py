"""strata: a lazy-tensor compiler.

Ops record IR and return at once; reading a value (``numpy()``, ``item()``,
``sync()``) compiles the whole pending graph once and reuses the compiled
program for every later graph of the same structure. ``scan`` bodies and
the functions given to ``grad`` are called once, when they trace.
"""
import numpy as _np

from . import _strata
from ._strata import *  # noqa: F401,F403  the tensor, the dtypes, the ops, the transforms
from ._strata import Tensor, Error, InternalError, dtype  # noqa: F401
import importlib as _importlib  # noqa: E402

# The Python package strata.nn (its own module; `import *` bound the C++
# submodule _strata.nn, which it re-exports, to the same name).
nn = _importlib.import_module(".nn", __name__)
from ._strata import optim  # noqa: F401,E402
from . import debug  # noqa: F401,E402  strata.debug.visualize_sharding

import sys as _sys  # noqa: E402

_sys.modules[__name__ + ".optim"] = optim  # import strata.optim
_sys.modules[__name__ + ".nn.functional"] = nn.functional

# Ops that are also methods (x.exp(), x.sum(dim=1), ...), as in PyTorch.
_METHODS = [
    "abs", "sign", "exp", "log", "log1p", "expm1", "tanh", "sigmoid", "sqrt", "rsqrt", "sin",
    "cos", "erf", "floor", "ceil", "logical_not", "relu", "maximum", "minimum", "pow",
    "remainder", "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "matmul",
    "clamp", "sum", "mean", "amax", "amin", "argmax", "argmin", "reshape", "transpose",
    "permute", "flip", "expand", "broadcast_to", "squeeze", "unsqueeze", "flatten", "index_select",
    "take_along_dim", "split", "chunk", "softmax", "log_softmax", "index_add", "add",
    "subtract", "multiply", "divide", "scatter_add", "argsort", "cumsum", "cumprod",
    "logcumsumexp",
]
# ... and every op an opcode row generates (its api column Api(name)).
_METHODS += [r["api"] for r in _strata._opcode_rows() if r["generated"] and r["api"] not in _METHODS]
for _name in _METHODS:
    setattr(Tensor, _name, _strata._instancemethod(getattr(_strata, _name)))
Tensor.view = Tensor.reshape
Tensor.sub = Tensor.subtract
Tensor.mul = Tensor.multiply
Tensor.div = Tensor.divide
Tensor.float = lambda self: self.astype(float32)  # noqa: F405
Tensor.double = lambda self: self.astype(float64)  # noqa: F405
Tensor.long = lambda self: self.astype(int64)  # noqa: F405
Tensor.int = lambda self: self.astype(int32)  # noqa: F405
Tensor.bfloat16 = lambda self: self.astype(bfloat16)  # noqa: F405
Tensor.half = lambda self: self.astype(float16)  # noqa: F405
Tensor.T = property(lambda self: _strata.transpose(self))
Tensor.mT = property(lambda self: _strata.mT(self))


def _max(self, dim=None, keepdim=False):
    """x.max() is the largest element; x.max(dim) is (values, indices), as in PyTorch."""
    if dim is None:
        return _strata.amax(self)
    return _strata.amax(self, dim, keepdim), _strata.argmax(self, dim, keepdim)


def _min(self, dim=None, keepdim=False):
    if dim is None:
        return _strata.amin(self)
    return _strata.amin(self, dim, keepdim), _strata.argmin(self, dim, keepdim)


# torch.return_types: sort and topk give (values, indices) with those names.
import collections as _collections  # noqa: E402

_SortResult = _collections.namedtuple("sort", ["values", "indices"])
_TopkResult = _collections.namedtuple("topk", ["values", "indices"])


def sort(x, dim=-1, descending=False, *, stable=False):
    """torch.sort: (values, indices) along dim; NaN sorts as the largest, ties keep
    their order (strata's sort is always stable)."""
    return _SortResult(*_strata._sort(x, dim, descending, stable=stable))


def topk(x, k, dim=-1, largest=True, sorted=True):  # noqa: A002  torch's argument name
    """torch.topk: the k largest (or smallest) values along dim and their indices."""
    return _TopkResult(*_strata._topk(x, k, dim, largest, sorted))


_CummaxResult = _collections.namedtuple("cummax", ["values", "indices"])
_CumminResult = _collections.namedtuple("cummin", ["values", "indices"])


def cummax(x, dim):
    """torch.cummax: the running maximum along dim and where it was found."""
    return _CummaxResult(*_strata._cummax(x, dim))


def cummin(x, dim):
    """torch.cummin: the running minimum along dim and where it was found."""
    return _CumminResult(*_strata._cummin(x, dim))


Tensor.cummax = cummax
Tensor.cummin = cummin
Tensor.sort = sort
Tensor.topk = topk
Tensor.max = _max
Tensor.min = _min
max = amax  # noqa: A001,F405  strata.max(x, dim) reduces, as numpy.max
min = amin  # noqa: A001,F405


def _iter(self):
    if self.ndim == 0:  # as torch: a 0-d tensor is not a sequence
        raise TypeError("iteration over a 0-d tensor")
    return (self[i] for i in range(len(self)))


def _repr(self):
    if self.dtype == bfloat16:  # noqa: F405
        array = self.astype(float32).numpy()  # noqa: F405
    else:
        array = self.numpy()
    values = _np.array2string(array, separator=", ", prefix="tensor(")
    return f"tensor({values}, dtype={self.dtype!r})"


def _tensor_new(cls, data, dtype=None):
    """strata.Tensor(data, dtype=None): a tensor holding a copy of data, as
    strata.tensor. Every Tensor is made whole by the C++ side; none exists
    half-made (pybind11's own __new__ made one whose methods crashed)."""
    if cls is not Tensor:
        raise TypeError("strata.Tensor cannot be subclassed")
    return tensor(data, dtype)  # noqa: F405


Tensor.__new__ = staticmethod(_tensor_new)
Tensor.__init__ = lambda self, *args, **kwargs: None  # made whole by __new__
Tensor.__iter__ = _iter
Tensor.__repr__ = _repr
Tensor.tolist = lambda self: self.numpy().tolist()
Tensor.__array__ = lambda self, dtype=None: (
    self.numpy() if dtype is None else self.numpy().astype(dtype))
Tensor.__array_priority__ = 1000  # numpy_array + tensor calls Tensor.__radd__


def clone(x):
    """torch.clone: a tensor with x's value that no write to x (or its views) reaches."""
    return _strata._clone(x)


Tensor.clone = clone

# Views as torch has them: x[0], x.T, x.reshape(...) share x's elements, and
# in-place writes reach through them (strata/_views.py).
from . import _views  # noqa: E402

_views.install(_sys.modules[__name__])
