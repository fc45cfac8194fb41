"""``strata.torch.apply_layers``: layers of one structure (a model's decoder layers) run as one
``strata.torch.scan`` over their stacked parameters, and ``scan_layers``, which makes a
``ModuleList`` of them do so inside the model that loops over it."""
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import strata

from . import _backend
from ._scan import REMATS, _scan


def _error(message):
    return strata.Error(f"[strata.torch.apply_layers] {message}")


def _state(layer):
    return dict(layer.named_parameters()) | dict(layer.named_buffers())


def _describe(t):
    return f"{str(t.dtype).removeprefix('torch.')}{list(t.shape)}"


def _differs(first, other):
    """Why `other` is not a copy of `first`'s structure, or None."""
    if type(other) is not type(first):
        return f"it is a {type(other).__name__}, layer 0 a {type(first).__name__}"
    if other.training != first.training:
        return f"it is in {'train' if other.training else 'eval'} mode, layer 0 is not"
    a, b = _state(first), _state(other)
    if list(a) != list(b):
        missing = sorted(set(a) ^ set(b))
        return f"its tensors are named otherwise ({', '.join(missing) or 'in another order'})"
    for name, t in a.items():
        u = b[name]
        if t.shape != u.shape or t.dtype != u.dtype:
            return f"its {name} is {_describe(u)}, layer 0's {_describe(t)}"
        if t.requires_grad != u.requires_grad:
            return f"its {name} {'does' if u.requires_grad else 'does not'} require grad"
    return None


def _traced_body(layer, x, args, kwargs):
    """The layer's forward as core ATen code, its own tensors as arguments (Python attributes
    that change what it computes, such as a different activation, change this code)."""
    def forward(h, state):
        return torch.func.functional_call(layer, state, (h, *args), kwargs)

    gm = make_fx(forward, tracing_mode="fake", decomposition_table=_backend.decompositions(),
                 _allow_non_fake_inputs=True)(x, _state(layer))
    return gm.code


# Layer lists already proven alike, by what the proof depended on (_alike_key): the proof
# traces every layer, which a training loop need not repeat at every step.
_ALIKE = {}


def _plain(value):
    return isinstance(value, (bool, int, float, str, type(None)))


def _alike_key(layers, x, args, kwargs):
    """Everything the traced forwards of `layers` on these arguments depend on: each layer's
    object, the types, modes and plain attributes of its modules, its tensors' shapes and
    dtypes, and the arguments' shapes, dtypes and plain values."""
    def module_key(layer):
        parts = []
        for name, m in layer.named_modules():
            attrs = tuple(sorted((k, v) for k, v in vars(m).items()
                                 if not k.startswith("_") and _plain(v)))
            parts.append((name, type(m), m.training, attrs))
        state = tuple((n, tuple(t.shape), t.dtype, t.requires_grad)
                      for n, t in _state(layer).items())
        return id(layer), tuple(parts), state

    def value_key(v):
        if isinstance(v, torch.Tensor):
            return ("tensor", tuple(v.shape), v.dtype)
        return ("value", v) if _plain(v) else ("object", type(v))

    leaves = torch.utils._pytree.tree_leaves((x, args, kwargs))
    return (tuple(module_key(layer) for layer in layers), tuple(value_key(v) for v in leaves),
            torch.utils._pytree.tree_structure((args, kwargs)))


def _check_alike(layers, x, args, kwargs):
    """Raises naming the first layer unlike layer 0; returns the key the proof is kept by."""
    key = _alike_key(layers, x, args, kwargs)
    if key in _ALIKE:
        return key
    first = layers[0]
    code = _traced_body(first, x, args, kwargs)
    for i, layer in enumerate(layers[1:], start=1):
        why = _differs(first, layer)
        if why is None and _traced_body(layer, x, args, kwargs) != code:
            why = "its traced forward is not layer 0's (a Python attribute changes what it does)"
        if why is not None:
            raise _error(f"layer {i} differs from layer 0: {why}")
    if len(_ALIKE) > 64:
        _ALIKE.clear()
    _ALIKE[key] = True
    return key


def _check_arguments(args, kwargs):
    for name, value in list(enumerate(args)) + list(kwargs.items()):
        leaves = torch.utils._pytree.tree_leaves(value)
        for leaf in leaves:
            if leaf is None or isinstance(leaf, (torch.Tensor, bool, int, float, str)):
                continue
            what = f"argument {name}" if isinstance(name, int) else name
            raise _error(f"{what} is a {type(leaf).__name__}, which a scan over "
                         "the layers cannot carry from one layer to the next (a key-value "
                         "cache: call the model with use_cache=False)")


@torch._dynamo.disable
def apply_layers(layers, x, *args, remat="carries", **kwargs):
    """``layers[-1](...layers[1](layers[0](x, *args, **kwargs), *args, **kwargs)...)`` as one
    strata loop over the layers' stacked parameters and buffers. The layers must match: the
    same type and mode, tensors of the same names, shapes and dtypes, and the same traced
    forward (the first layer that differs is named, with why). ``args`` and ``kwargs`` (an
    attention mask, position ids or embeddings) go to every layer. Gradients reach every
    layer's own parameters (``.grad`` as if the loop had been written out), ``x`` and the
    tensors in ``args`` / ``kwargs``. ``remat`` is the scan's."""
    layers = list(layers)
    if remat not in REMATS:
        raise _error(f"remat must be one of {', '.join(REMATS)}, got {remat!r}")
    if not layers:
        return x
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"[strata.torch.apply_layers] x is a {type(x).__name__}, not a tensor")
    _check_arguments(args, kwargs)
    key = _check_alike(layers, x, args, kwargs)
    first = layers[0]
    names = list(_state(first))
    stacked = {n: torch.stack([_state(layer)[n] for layer in layers]) for n in names}

    # The tensors among args and kwargs go in as arguments of the body (the rest, plain
    # values, are part of the key), so its trace is kept under the key of the proof, which
    # covers what it depends on, and later calls skip tracing.
    leaves, spec = torch.utils._pytree.tree_flatten((args, kwargs))
    at = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]

    def body(h, state, tensors):
        filled = list(leaves)
        for i, t in zip(at, tensors):
            filled[i] = t
        call_args, call_kwargs = torch.utils._pytree.tree_unflatten(filled, spec)
        out = torch.func.functional_call(first, state, (h, *call_args), call_kwargs)
        if isinstance(out, (tuple, list)):
            if len(out) != 1 and any(o is not None for o in out[1:]):
                raise _error("a layer returns more than its hidden state; each "
                             "layer's output is the next one's input")
            out = out[0]
        return out, None

    carry, _ = _scan(body, x, stacked, False, len(layers), remat,
                     consts=[leaves[i] for i in at], cache_key=("apply_layers", key))
    return carry


class _Stack(torch.nn.Module):
    """What a ScannedLayers gives a loop over it: one call that runs every layer."""

    def __init__(self, owner, layers):
        super().__init__()
        self.__dict__["owner"] = owner  # not a submodule: the layers stay the owner's
        self.__dict__["layers"] = layers

    def forward(self, x, *args, **kwargs):
        return apply_layers(self.layers, x, *args, remat=self.owner.remat, **kwargs)


class ScannedLayers(torch.nn.ModuleList):
    """A ``ModuleList`` whose loops run as one scan: iterating it (or a slice of it, as Hugging
    Face models do with ``self.layers[:n]``) yields one callable that runs the layers through
    ``apply_layers``. Indexing one layer, ``len``, parameters and the state dict are the
    list's own, so checkpoints and optimizers see the same names."""

    def __init__(self, layers, remat="carries"):
        super().__init__(layers)
        if remat not in REMATS:
            raise _error(f"remat must be one of {', '.join(REMATS)}, got {remat!r}")
        self.remat = remat

    def __iter__(self):
        return iter([_Stack(self, list(self._modules.values()))])

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [_Stack(self, list(self._modules.values())[index])]
        return super().__getitem__(index)


def scan_layers(layers, remat="carries"):
    """``model.model.layers = strata.torch.scan_layers(model.model.layers)``: the one line that
    makes a model's loop over its layers one strata scan."""
    if isinstance(layers, ScannedLayers):
        return layers
    if isinstance(layers, torch.nn.Module) and not isinstance(layers, torch.nn.ModuleList):
        raise TypeError(f"[strata.torch.scan_layers] takes a torch.nn.ModuleList (or a list) of "
                        f"layers, got one {type(layers).__name__}")
    try:
        layers = list(layers)
    except TypeError:
        raise TypeError(f"[strata.torch.scan_layers] takes a torch.nn.ModuleList (or a list) of "
                        f"layers, got {type(layers).__name__}") from None
    return ScannedLayers(layers, remat)

