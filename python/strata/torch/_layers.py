"""``strata.torch.apply_layers``: layers of one structure (a model's decoder layers) run as one
``strata.torch.scan`` over their stacked parameters, and ``scan_layers``, which makes a
``ModuleList`` of them do so inside the model that loops over it. Under ``torch.compile`` the
layers of a ``scan_layers`` list are one node of the graph, torch's scan op (``_compiled``)."""
import contextlib
import enum
import os
import sys

import torch
import torch.utils._pytree as pytree
from torch.fx.experimental.proxy_tensor import make_fx

import strata

from . import _backend
from ._scan import REMATS, _scan, _symbolic, _torch_scan_op


def _error(message):
    return strata.Error(f"[strata.torch.apply_layers] {message}")


def _state(layer):
    """The layer's parameters then buffers by dotted name, as ``dict(named_parameters()) |
    dict(named_buffers())`` gives them (a tensor shared twice named once), in one walk."""
    parameters, buffers, seen = {}, {}, set()
    for prefix, m in layer.named_modules():
        for into, own in ((parameters, m._parameters), (buffers, m._buffers)):
            for name, t in own.items():
                if t is None or id(t) in seen:
                    continue
                seen.add(id(t))
                into[f"{prefix}.{name}" if prefix else name] = t
    return parameters | buffers


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
    return _traced_forward(layer, x, args, kwargs).code


def _traced_forward(layer, x, args, kwargs):
    def forward(h, state):
        return torch.func.functional_call(layer, state, (h, *args), kwargs)

    return make_fx(forward, tracing_mode="fake", decomposition_table=_backend.decompositions(),
                   _allow_non_fake_inputs=True)(x, _state(layer))


# A module's own bookkeeping that _differs compares (its tensors, submodules and mode).
_STRUCTURE = frozenset({"_parameters", "_buffers", "_modules", "training"})
_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep


class _Reads:
    """What layer 0's forward read while it was traced as the loop's body: the attributes of
    its modules' own ``__dict__`` s, as (module name, attribute) pairs, and the modules whose
    ``__dict__`` code outside torch read whole (every attribute of those counts as read).

    The proof of the other layers rests on it: a layer whose modules hold the same values in
    every attribute layer 0's forward read (and the same set of attributes) traces to the same
    body, so only layers that differ in a read attribute are traced themselves. Hugging Face's
    decoder layers differ in ``layer_idx``, which a forward without a cache never reads."""

    _recording = None  # the _Reads being recorded, while a body is traced

    def __init__(self, layer):
        self.layer = layer
        self.names = set()
        self.whole = set()
        self._module_names = {id(m): name for name, m in layer.named_modules()}

    def saw(self, module, attr):
        name = self._module_names.get(id(module))
        if name is None:
            return
        if attr == "__dict__":
            if not sys._getframe(2).f_code.co_filename.startswith(_TORCH_DIR):
                self.whole.add(name)
        elif attr in object.__getattribute__(module, "__dict__"):
            self.names.add((name, attr))

    def read(self, name, attr):
        return name in self.whole or (name, attr) in self.names

    @contextlib.contextmanager
    def recording(self):
        """Every module of the layer, for the time of the trace, of a subclass of its own class
        that tells this record which attributes are read."""
        swapped = []
        previous, _Reads._recording = _Reads._recording, self
        try:
            for _, m in self.layer.named_modules():
                cls = type(m)
                m.__class__ = _recording_class(cls)
                swapped.append((m, cls))
            yield self
        finally:
            for m, cls in swapped:
                m.__class__ = cls
            _Reads._recording = previous


_RECORDING_CLASSES = {}


def _recording_class(cls):
    """``cls`` with a ``__getattribute__`` that reports each read to the _Reads recording."""
    sub = _RECORDING_CLASSES.get(cls)
    if sub is None:
        def __getattribute__(self, attr):
            reads = _Reads._recording
            if reads is not None:
                reads.saw(self, attr)
            return cls.__getattribute__(self, attr)

        sub = type(cls.__name__, (cls,), {"__getattribute__": __getattribute__,
                                          "__module__": cls.__module__,
                                          "__qualname__": cls.__qualname__})
        _RECORDING_CLASSES[cls] = sub
    return sub


_EQUAL_BY_VALUE = (bool, int, float, complex, str, bytes, type(None), torch.dtype, torch.device,
                   torch.Size, enum.Enum)


def _same(a, b):
    """Whether two attribute values are certainly the same to a forward: one object, equal
    plain values, or containers of such."""
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, _EQUAL_BY_VALUE):
        return a == b
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    return False


def _read_difference(first, other, reads):
    """How `other`'s forward may differ from layer 0's: ``(True, None)`` when it may trace
    otherwise (a module type, an attribute set, or the value of an attribute the forward read
    differs), ``(False, why)`` when it certainly computes otherwise, ``(False, None)`` when it
    traces the same. A tensor held as a plain attribute (not a parameter or buffer) that the
    forward reads is such a why when it differs: the loop runs layer 0's forward, which would
    use layer 0's tensor for every layer."""
    mine, theirs = dict(first.named_modules()), dict(other.named_modules())
    if list(mine) != list(theirs):
        return True, None
    for name, m in mine.items():
        n = theirs[name]
        if type(m) is not type(n):
            return True, None
        a, b = vars(m), vars(n)
        if a.keys() != b.keys():
            return True, None
        for attr, value in a.items():
            if attr in _STRUCTURE or not reads.read(name, attr):
                continue
            other_value = b[attr]
            tensors = [isinstance(v, torch.Tensor) for v in (value, other_value)]
            if all(tensors):
                if (value.shape != other_value.shape or value.dtype != other_value.dtype
                        or not torch.equal(value, other_value)):
                    where = f"{name}.{attr}" if name else attr
                    return False, (f"its {where} is a tensor that is not a parameter or buffer "
                                   "and differs from layer 0's; the loop runs layer 0's forward, "
                                   "so register it as a buffer (buffers are stacked like the "
                                   "weights)")
            elif any(tensors) or not _same(value, other_value):
                return True, None
    return False, None


# Layer lists already proven alike, by what the proof depended on (_alike_key), which a
# training loop need not repeat at every step.
_ALIKE = {}
def _plain(value):
    return isinstance(value, (bool, int, float, str, type(None)))


def _alike_key(layers, states, x, args, kwargs):
    """Everything the traced forwards of `layers` (their tensors `states`) on these arguments
    depend on: each layer's object, the types, modes and plain attributes of its modules, its
    tensors' shapes and dtypes, and the arguments' shapes, dtypes and plain values."""
    def module_key(layer, state):
        parts = []
        for name, m in layer.named_modules():
            attrs = tuple(sorted((k, v) for k, v in vars(m).items()
                                 if not k.startswith("_") and _plain(v)))
            parts.append((name, type(m), m.training, attrs))
        state = tuple((n, tuple(t.shape), t.dtype, t.requires_grad) for n, t in state.items())
        return id(layer), tuple(parts), state

    def value_key(v):
        if isinstance(v, torch.Tensor):
            return ("tensor", tuple(v.shape), v.dtype)
        return ("value", v) if _plain(v) else ("object", type(v))

    leaves = torch.utils._pytree.tree_leaves((x, args, kwargs))
    return (tuple(map(module_key, layers, states)), tuple(value_key(v) for v in leaves),
            torch.utils._pytree.tree_structure((args, kwargs)))


class _Proof:
    """The proof that `layers` are alike, made while layer 0's forward is traced as the loop's
    body (``_scan`` calls ``recording()`` around its trace and ``check()`` after it): one trace
    at any depth, plus one for each layer whose read attributes differ from layer 0's."""

    def __init__(self, layers, x, args, kwargs, key):
        self.layers, self.x, self.args, self.kwargs, self.key = layers, x, args, kwargs, key
        self.reads = _Reads(layers[0])

    def check_structure(self):
        """Raises naming the first layer whose type, mode or tensors are not layer 0's (before
        the tensors are stacked)."""
        for i, layer in enumerate(self.layers[1:], start=1):
            why = _differs(self.layers[0], layer)
            if why is not None:
                raise _error(f"layer {i} differs from layer 0: {why}")

    def recording(self):
        return self.reads.recording()

    def check(self, code=None):
        """After the trace: raises naming the first layer whose forward is not layer 0's
        (`code`: layer 0's traced forward, when the caller has it)."""
        first = self.layers[0]
        for i, layer in enumerate(self.layers[1:], start=1):
            trace, why = _read_difference(first, layer, self.reads)
            if trace:
                if code is None:
                    code = _traced_body(first, self.x, self.args, self.kwargs)
                if _traced_body(layer, self.x, self.args, self.kwargs) != code:
                    why = ("its traced forward is not layer 0's (a Python attribute changes "
                           "what it does)")
            if why is not None:
                raise _error(f"layer {i} differs from layer 0: {why}")
        if len(_ALIKE) > 64:
            _ALIKE.clear()
        _ALIKE[self.key] = True


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


def apply_layers(layers, x, *args, remat="carries", **kwargs):
    """``layers[-1](...layers[1](layers[0](x, *args, **kwargs), *args, **kwargs)...)`` as one
    strata loop over the layers' stacked parameters and buffers. The layers must match: the
    same type and mode, tensors of the same names, shapes and dtypes, and the same traced
    forward (the first layer that differs is named, with why). ``args`` and ``kwargs`` (an
    attention mask, position ids or embeddings) go to every layer. Gradients reach every
    layer's own parameters (``.grad`` as if the loop had been written out), ``x`` and the
    tensors in ``args`` / ``kwargs``. ``remat`` is the scan's.

    Under ``torch.compile`` a call is a graph break that runs as above; the layers of a
    ``scan_layers`` list are one node of the graph instead (``_compiled``)."""
    if torch.compiler.is_dynamo_compiling():
        return _FALLBACKS["list"](layers, x, args, kwargs, remat)
    return _apply_layers(layers, x, args, kwargs, remat)


def _apply_layers(layers, x, args, kwargs, remat):
    layers = list(layers)
    if remat not in REMATS:
        raise _error(f"remat must be one of {', '.join(REMATS)}, got {remat!r}")
    if not layers:
        return x
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"[strata.torch.apply_layers] x is a {type(x).__name__}, not a tensor")
    _check_arguments(args, kwargs)
    states = [_state(layer) for layer in layers]  # one walk of each layer per call
    key = _alike_key(layers, states, x, args, kwargs)
    proof = None if key in _ALIKE else _Proof(layers, x, args, kwargs, key)
    if proof is not None:
        proof.check_structure()
    first = layers[0]
    stacked = {n: torch.stack([state[n] for state in states]) for n in states[0]}

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
        return _hidden_state(
            torch.func.functional_call(first, state, (h, *call_args), call_kwargs)), None

    carry, _ = _scan(body, x, stacked, False, len(layers), remat,
                     consts=[leaves[i] for i in at], cache_key=("apply_layers", key), proof=proof)
    return carry


def _hidden_state(out):
    """A layer's output as the next layer's input (Hugging Face's layers may return a tuple)."""
    if isinstance(out, (tuple, list)):
        if len(out) != 1 and any(o is not None for o in out[1:]):
            raise _error("a layer returns more than its hidden state; each "
                         "layer's output is the next one's input")
        out = out[0]
    return out


# ---- under torch.compile ----------------------------------------------------------------------
#
# The loop is torch's scan op over the stacked tensors, which Dynamo records as one node and
# strata lowers to one While loop, its backward too. Its body cannot be the layer's forward
# traced by Dynamo: functional_call swaps the tensors of the layer's submodules, and Dynamo
# (torch 2.9) refuses that inside a scan body, as it lets functional_call write only the top
# module's own parameter and buffer dicts. So the body calls _layer_forward, which Dynamo
# records as one call without tracing it (nonstrict_trace) and AOTAutograd traces into ATen
# ops; and the proof that the layers are alike, a make_fx trace that Dynamo cannot trace
# either, runs while Dynamo traces, as a function whose result it takes as a constant
# (_why_not_one_node). Both reach the layers through the list's _Handle.

def _strata_loop(why):
    """The eager apply_layers, as a graph break that Dynamo reports with `why`."""
    def strata_loop(layers, x, args, kwargs, remat):
        return _apply_layers(layers, x, args, kwargs, remat)
    return torch._dynamo.disable(strata_loop, reason=f"strata.torch.apply_layers runs as its "
                                                     f"own strata loop: {why}")


_FALLBACKS = {
    "list": _strata_loop("its layers are not a scan_layers list (one node needs the handle on "
                         "the layers that scan_layers makes before compiling)"),
    "remat": _strata_loop("a remat other than 'carries' (torch's scan op keeps the carries)"),
    "call": _strata_loop("the call fails apply_layers' checks (the eager call says why)"),
    "differ": _strata_loop("the layers are not alike (the eager call says how)"),
    "integer": _strata_loop("x is not floating point (AOTAutograd cannot differentiate torch's "
                            "scan op then)"),
    "random": _strata_loop("a layer draws random numbers (torch's scan op would draw others "
                           "when its backward recomputes a step)"),
    "symbolic": _strata_loop("a tensor of symbolic shape (torch's scan op fails on them: "
                             "dynamic=True, or a dimension that changed between calls)"),
}


class _Handle:
    """A ScannedLayers as a constant that Dynamo hands to the functions it does not trace (it
    takes such a constant only if made before compiling), with the calls' plain arguments,
    which nonstrict_trace cannot take: filed by _why_not_one_node for _layer_forward."""

    def __init__(self, layers):
        self.layers = layers
        self.calls = []  # (layer 0's position, args and kwargs leaves, tensor positions, spec)

    def __eq__(self, other):
        return isinstance(other, _Handle) and other.layers is self.layers

    def __hash__(self):
        return id(self.layers)


pytree.register_constant(_Handle)

_TENSOR = "strata.torch: a tensor of"  # tags a tensor's (shape, dtype) in a _signature


def _compiled(owner, positions, x, args, kwargs):
    """apply_layers over ``owner[i] for i in positions`` while Dynamo traces (it traces this):
    torch's scan op where it can run them, else a graph break to the eager loop."""
    layers = [owner[i] for i in positions]
    if not layers:
        return x
    why, call = _why_not_traced(layers, x, args, kwargs, owner.remat), None
    if why is None:
        why, call = _why_not_one_node(owner._handle, positions.start, positions.stop,
                                      positions.step, _signature((x, args, kwargs)))
    if why is not None:
        return _FALLBACKS[why](layers, x, args, kwargs, owner.remat)
    call = int(call)  # a plain int: nonstrict_trace refuses the constant result's own wrapper
    states = [_state(layer) for layer in layers]
    # Fresh tensors (free in strata): torch's op refuses inputs that alias each other, as
    # Hugging Face's position_ids and cache_position do.
    tensors = [leaf.clone() for leaf in pytree.tree_leaves((args, kwargs))
               if isinstance(leaf, torch.Tensor)]
    handle = owner._handle
    h = x
    if not x.requires_grad:
        # Torch's op (2.9) differentiates through a carry only if its init requires grad: the
        # first layer runs before the loop, which starts from its output. (Which needs a
        # gradient iff the later ones' do: they run the same forward on tensors that need
        # gradients alike, as _differs checks.)
        h, states = _layer_forward(handle, call, x, states[0], tensors), states[1:]
        if not states:
            return h
    stacked = {name: torch.stack([state[name] for state in states]) for name in states[0]}

    def step(carry, xs):
        state, _ = xs
        # A fresh tensor: torch's op refuses a carry that aliases an input.
        out = _layer_forward(handle, call, carry, state, tensors)
        return out.clone(memory_format=torch.contiguous_format), []

    # With the stacked tensors, one empty row per layer: the loop's length when they are none.
    out, _ = _torch_scan_op(step, h.clone(memory_format=torch.contiguous_format),
                            (stacked, h.new_empty((len(states), 0))))
    return out


def _why_not_traced(layers, x, args, kwargs, remat):
    """What Dynamo can check itself (and guard, so that a change recompiles)."""
    if remat != "carries":
        return "remat"
    leaves = pytree.tree_leaves((args, kwargs))
    if not isinstance(x, torch.Tensor) or not all(
            leaf is None or isinstance(leaf, (torch.Tensor, bool, int, float, str))
            for leaf in leaves):
        return "call"
    if not x.is_floating_point():
        return "integer"
    if _symbolic([x] + [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]):
        return "symbolic"
    if any(_differs(layers[0], layer) is not None for layer in layers[1:]):
        return "differ"
    return None


def _signature(tree):
    """`tree` with each tensor as its (_TENSOR, shape, dtype): constants Dynamo can pass."""
    return pytree.tree_map(
        lambda v: (_TENSOR, tuple(v.shape), v.dtype) if isinstance(v, torch.Tensor) else v, tree)


def _is_tensor_signature(value):
    return isinstance(value, tuple) and len(value) == 3 and value[0] == _TENSOR


@torch._dynamo.assume_constant_result
def _why_not_one_node(handle, start, stop, step, signature):
    """Run by Dynamo as Python while it traces: proves layers ``start:stop:step`` of the handle
    alike as the eager call does, and files the call's plain arguments for _layer_forward.
    ``(why not, None)``, or ``(None, the filed call's number)``. Dynamo assumes the result
    constant: a later change to a Python attribute of a layer (not its tensors, type or mode,
    which Dynamo guards) is not seen by the compiled graph."""
    layers = [handle.layers[i] for i in range(start, stop, step)]  # (iterating it is a loop)
    # Zeros for the tensors: the proof traces over fake tensors, so only shapes matter.
    x, args, kwargs = pytree.tree_map(
        lambda v: torch.zeros(v[1], dtype=v[2]) if _is_tensor_signature(v) else v, signature,
        is_leaf=_is_tensor_signature)
    key = _alike_key(layers, [_state(layer) for layer in layers], x, args, kwargs)
    proof = _Proof(layers, x, args, kwargs, key)
    with torch._guards.tracing(None):  # make_fx here is ours, not a part of Dynamo's trace
        try:
            proof.check_structure()
            with proof.recording():
                forward = _traced_forward(layers[0], x, args, kwargs)
            proof.check(forward.code)
        except strata.Error:
            return "differ", None
    graph = forward.graph
    outs = [n for n in pytree.tree_leaves(graph.find_nodes(op="output")[0].args[0])
            if n is not None]
    if len(outs) != 1 or outs[0].meta["val"].shape != x.shape or \
            outs[0].meta["val"].dtype != x.dtype:
        return "call", None  # not a hidden state like x: the eager call says what
    if any(map(_draws_random_numbers, graph.nodes)):
        return "random", None
    leaves, spec = pytree.tree_flatten((args, kwargs))
    at = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
    call = (start, [None if i in at else leaf for i, leaf in enumerate(leaves)], at, spec)
    if call not in handle.calls:
        handle.calls.append(call)
    return None, handle.calls.index(call)


def _draws_random_numbers(node):
    """Whether an ATen node draws random numbers: its op is tagged so, and it is not attention
    with ``dropout_p`` 0 (which torch tags the same)."""
    if node.op != "call_function" or \
            torch.Tag.nondeterministic_seeded not in getattr(node.target, "tags", ()):
        return False
    names = [a.name for a in node.target._schema.arguments]
    if "dropout_p" not in names:
        return True
    at = names.index("dropout_p")
    return (node.args[at] if at < len(node.args) else node.kwargs.get("dropout_p", 0.0)) > 0


@torch._dynamo.nonstrict_trace
def _layer_forward(handle, call, h, state, tensors):
    """The loop's body: the filed call's first layer on `h` with the tensors `state`, its
    arguments the call's plain values with `tensors` in their places."""
    first, leaves, at, spec = handle.calls[call]
    leaves = list(leaves)
    for i, t in zip(at, tensors):
        leaves[i] = t
    args, kwargs = pytree.tree_unflatten(leaves, spec)
    return _hidden_state(
        torch.func.functional_call(handle.layers[first], state, (h, *args), kwargs))


class _Stack(torch.nn.Module):
    """What a ScannedLayers gives a loop over it: one call that runs its layers `positions`."""

    def __init__(self, owner, positions):
        super().__init__()
        self.__dict__["owner"] = owner  # not a submodule: the layers stay the owner's
        self.__dict__["positions"] = positions

    def forward(self, x, *args, **kwargs):
        if torch.compiler.is_dynamo_compiling():
            return _compiled(self.owner, self.positions, x, args, kwargs)
        layers = [self.owner[i] for i in self.positions]
        return _apply_layers(layers, x, args, kwargs, self.owner.remat)


class ScannedLayers(torch.nn.ModuleList):
    """A ``ModuleList`` whose loops run as one scan: iterating it (or a slice of it, as Hugging
    Face models do with ``self.layers[:n]``) yields one callable that runs the layers through
    ``apply_layers``. Indexing one layer, ``len``, parameters and the state dict are the
    list's own, so checkpoints and optimizers see the same names. Under ``torch.compile`` the
    loop is one node of the graph where torch's scan op can run it (``_compiled``)."""

    def __init__(self, layers, remat="carries"):
        super().__init__(layers)
        if remat not in REMATS:
            raise _error(f"remat must be one of {', '.join(REMATS)}, got {remat!r}")
        self.remat = remat
        self._handle = _Handle(self)  # made now: under torch.compile it must exist already

    def __iter__(self):
        return iter([_Stack(self, range(len(self)))])

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [_Stack(self, range(len(self))[index])]
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

