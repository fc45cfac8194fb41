"""``strata.torch.scan``: ``jax.lax.scan`` over torch tensors and functions, run as one strata
While loop.

``fn(carry, x) -> (carry, y)`` is traced once (``make_fx`` over fake tensors, functionalized,
decomposed to core ATen as the backend's graphs are) into an FX graph; each call lowers that
graph through the backend's table into the body of ``strata.scan``. Tensors ``fn`` closes over
(a module's parameters included) become inputs of the loop, so gradients reach them too, as
they reach ``init`` and ``xs``: the backward is strata's reverse While, run by a
``torch.autograd.Function``. The traced body is kept across calls when what the trace read can
be checked (``_body_key``).

Under ``torch.compile`` a call is torch's own scan op (``torch._higher_order_ops.scan``), which
Dynamo records as one node of the graph and strata lowers to one While loop, its backward too;
where that op cannot do what this scan does, the call is a graph break that runs as above."""
import contextlib
import enum
import functools
import types

import torch
import torch.utils._pytree as pytree
from torch._higher_order_ops.scan import scan as _torch_scan_op
from torch.func import functionalize
from torch.fx.experimental.proxy_tensor import make_fx
from torch.overrides import TorchFunctionMode

import strata

from . import _backend
from ._lowerings import lowering_for
from ._lowerings.random import RandomKeys

REMATS = ("carries", "all", "dots", "dots_no_batch")


# How many scan bodies are being traced now: a scan called inside one is
# nested, and recorded as torch's scan op (one node of the outer body).
_tracing = 0
# How the body traces: over fake tensors, or, once a scan is found nested in it, over real
# ones (torch's scan op copies the tensors a nested body captures, which fails on fake ones).
_mode = ["fake"]


class _Nested(Exception):
    """A scan nested in a body traced over fake tensors: trace it again over real ones."""


def _error(message):
    return strata.Error(f"[strata.torch.scan] {message}")


def _leaves(name, tree):
    """The tensor leaves of `tree` with their paths ("init['h']"), and its structure (spec and
    where its None leaves, empty nodes, stand)."""
    with_paths, spec = pytree.tree_flatten_with_path(tree)
    paths, leaves, nones = [], [], []
    for path, leaf in with_paths:
        nones.append(leaf is None)
        if leaf is None:
            continue
        where = name + pytree.keystr(path)
        if not isinstance(leaf, torch.Tensor):
            raise TypeError(f"[strata.torch.scan] {where} is a {type(leaf).__name__}, "
                            "not a torch.Tensor")
        if leaf.device.type != "cpu":
            raise _error(f"{where} is on {leaf.device}; strata runs on the CPU")
        if isinstance(leaf, torch._subclasses.fake_tensor.FakeTensor):
            raise _error(f"{where} is a fake tensor: a scan inside another scan's body or a "
                         "traced function is not supported yet; call it on real tensors")
        paths.append(where)
        leaves.append(leaf)
    return leaves, (spec, nones), paths


def _unflatten(tensors, structure):
    spec, nones = structure
    it = iter(tensors)
    return pytree.tree_unflatten([None if none else next(it) for none in nones], spec)


def _describe(t):
    return f"{str(t.dtype).removeprefix('torch.')}{list(t.shape)}"


class _Body:
    """fn traced once: its graph, the specs of what it returns, and the tensors it captures."""

    def __init__(self, fn, init_leaves, init_structure, init_paths, x_examples, xs_structure,
                 consts=(), consts_structure=None):
        self.carry_count = len(init_leaves)
        self.x_count = len(x_examples)
        self.y_structure = None
        carry_structure = []

        def flat(*leaves):
            carry = _unflatten(leaves[:self.carry_count], init_structure)
            x = _unflatten(leaves[self.carry_count:self.carry_count + self.x_count],
                           xs_structure)
            if consts_structure is None:
                out = fn(carry, x)
            else:  # loop-invariant inputs as arguments, not captured: the graph outlives them
                out = fn(carry, x, _unflatten(leaves[self.carry_count + self.x_count:],
                                              consts_structure))
            if not isinstance(out, (tuple, list)) or len(out) != 2:
                raise _error(f"the body {_name(fn)} must return (carry, y), got "
                             f"{type(out).__name__}")
            new_carry, y = out
            carry_leaves, structure = _body_leaves(fn, "carry", new_carry)
            carry_structure.append(structure)
            y_leaves, self.y_structure = _body_leaves(fn, "y", y)
            return (*carry_leaves, *y_leaves)

        global _tracing
        try:
            _tracing += 1
            try:
                gm = self._trace(flat, "fake", init_leaves, x_examples, consts)
            except _Nested:
                carry_structure.clear()
                gm = self._trace(flat, "real", init_leaves, x_examples, consts)
        except RuntimeError as e:
            if type(e).__name__ == "GuardOnDataDependentSymNode":
                raise _error(f"the body {_name(fn)} branches on, or converts to a Python number, "
                             "a value computed from tensors (.item(), float(), bool(), an if on "
                             "a tensor): the body is traced once for every step, so no value is "
                             "known then; keep it a tensor (torch.where for an if)") from None
            if "mutating a non-functional tensor" in str(e):
                raise _error(f"the body {_name(fn)} writes in place into a tensor it did not "
                             "get as an argument (a side effect outside the loop); return the "
                             "new value in the carry instead") from None
            raise
        finally:
            _tracing -= 1
        if carry_structure[0] != init_structure:
            raise _error(f"the body {_name(fn)} returns a carry of structure "
                         f"{carry_structure[0][0]}, but init is {init_structure[0]}")
        self.gm = gm
        self._check(fn, init_leaves, init_paths)

    @staticmethod
    def _trace(flat, mode, init_leaves, x_examples, consts):
        _mode.append(mode)
        try:
            return make_fx(functionalize(flat), tracing_mode=mode,
                           decomposition_table=_backend.decompositions(),
                           _allow_non_fake_inputs=True)(*init_leaves, *x_examples, *consts)
        finally:
            _mode.pop()

    def _check(self, fn, init_leaves, init_paths):
        gm = self.gm
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        outputs = next(n for n in gm.graph.nodes if n.op == "output").args[0]
        for k, (leaf, path) in enumerate(zip(init_leaves, init_paths)):
            got = outputs[k].meta.get("val")
            if got is not None and (got.shape != leaf.shape or got.dtype != leaf.dtype):
                raise _error(f"the carry leaf {path} comes back from {_name(fn)} as "
                             f"{_describe(got)}, but went in as {_describe(leaf)}")
        self.captured, self.targets = [], []
        self.needs_key = False
        for node in gm.graph.nodes:
            if node.op == "get_attr":
                value = _backend.getattr_path(gm, node.target)
                if isinstance(value, torch.Tensor):
                    self.captured.append(value)
                    self.targets.append(node.target)
            elif node.op == "call_function":
                if node.target is torch.ops.aten._local_scalar_dense.default:
                    raise _error(f"the body {_name(fn)} reads a tensor's value as a Python "
                                 "number (.item(), int(), float() or bool() of a tensor): the "
                                 "body is traced once for every step, so no step's value is "
                                 "known then; keep it a tensor (torch.where for an if)")
                if node.target is torch.ops.aten.copy_.default and node.args[0] in placeholders:
                    raise _error(f"the body {_name(fn)} writes in place into its argument "
                                 f"{node.args[0].name}; return the new value instead")
                self.needs_key |= getattr(lowering_for(node.target), "needs_key", False)

    def run(self, carry, x, consts, captured, key):
        keys = RandomKeys(key) if key is not None else None
        outs, _ = _backend.interpret(self.gm, list(carry) + list(x) + list(consts), keys=keys,
                                     attrs=dict(zip(self.targets, captured)))
        outs = list(outs)
        return outs[:self.carry_count], outs[self.carry_count:]


def _body_leaves(fn, what, tree):
    with_paths, spec = pytree.tree_flatten_with_path(tree)
    leaves = []
    for path, leaf in with_paths:
        if leaf is not None and not isinstance(leaf, torch.Tensor):
            raise _error(f"the body {_name(fn)} returns a {type(leaf).__name__} in its {what} "
                         f"(at {what}{pytree.keystr(path)}); every leaf must be a tensor")
        if leaf is not None:
            leaves.append(leaf)
    return leaves, (spec, [leaf is None for _, leaf in with_paths])


def _name(fn):
    code = getattr(fn, "__code__", None)
    name = getattr(fn, "__qualname__", type(fn).__name__)
    return f"{name} ({code.co_filename}:{code.co_firstlineno})" if code else name


def _to_strata(t):
    return strata.from_dlpack(t.detach().contiguous())


def _to_torch(t):
    return torch.from_dlpack(t)


def _all_to_torch(tensors, also=()):
    """Torch views of strata tensors, computed by one run of one program (syncing them one
    by one would run the loop once for each) that also computes the strata tensors `also`."""
    if tensors or also:
        strata.sync(*tensors, *also)
    return [_to_torch(t) for t in tensors]


class _Loop:
    """One call's loop: which inputs are what, and how to run it on strata tensors."""

    def __init__(self, body, carries, xs, consts, length, reverse, remat, keys):
        self.body, self.carries, self.xs, self.consts = body, carries, xs, consts
        self.length, self.reverse, self.remat = length, reverse, remat
        self.keys = keys  # a strata key per step when the body draws random numbers

    def __call__(self, *inputs):
        """inputs: init leaves, xs leaves, loop-invariant arguments, then captured tensors."""
        c, x, k = self.carries, self.xs, self.consts
        init, xs = list(inputs[:c]), list(inputs[c:c + x])
        consts, captured = list(inputs[c + x:c + x + k]), list(inputs[c + x + k:])
        keys = self.keys
        step_xs = xs + ([keys] if keys is not None else [])

        def step(carry, x_leaves):
            x_leaves = list(x_leaves or [])
            key = x_leaves.pop() if keys is not None else None
            return self.body.run(carry, x_leaves, consts, captured, key)

        carry, ys = strata.scan(step, init, step_xs if step_xs else None, length=self.length,
                                reverse=self.reverse, remat=self.remat)
        return list(carry) + list(ys or [])


class _ScanFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, loop, *inputs):
        ins = [_to_strata(t) for t in inputs]
        wanted = [i for i, t in enumerate(inputs)
                  if ctx.needs_input_grad[i + 1] and t.is_floating_point()]
        if wanted:
            def f(*diff):
                full = list(ins)
                for i, d in zip(wanted, diff):
                    full[i] = d
                return loop(*full)
            # The backward's graph is built now, and the forward values it reads (the loop's
            # carry history and saved residuals) are computed by the forward's program with its
            # outputs: the backward then runs only the reverse loop, not the forward again.
            outs, residuals, pullback = strata.vjp_with_residuals(f, *[ins[i] for i in wanted])
            ctx.pullback, ctx.wanted = pullback, wanted
            ctx.out_meta = [(list(o.shape), o.dtype) for o in outs]
        else:
            outs, residuals = loop(*ins), []
        results = _all_to_torch(list(outs), residuals)
        ctx.mark_non_differentiable(*[r for r in results if not r.is_floating_point()])
        ctx.input_count = len(inputs)
        return tuple(results)

    @staticmethod
    def backward(ctx, *grads):
        grads_in = [None] * ctx.input_count
        if getattr(ctx, "pullback", None) is None:
            return (None, *grads_in)
        cotangents = []
        for g, (shape, dtype) in zip(grads, ctx.out_meta):
            cotangents.append(strata.zeros(shape, dtype) if g is None else _to_strata(g))
        got = _all_to_torch(list(ctx.pullback(cotangents)))
        for i, g in zip(ctx.wanted, got):
            grads_in[i] = g
        return (None, *grads_in)


def scan(fn, init, xs=None, reverse=False, length=None, remat="carries"):
    """``jax.lax.scan`` on torch: ``fn(carry, x) -> (carry, y)`` over the leading dimension of
    every leaf of ``xs`` (pytrees of CPU tensors), as one strata While loop. Returns
    ``(carry, ys)``, ``ys`` the ``y`` of every step stacked (``None`` where ``fn`` returns
    ``None``). ``length`` gives the step count when ``xs`` is ``None`` or empty; ``reverse``
    runs the steps from the last; ``remat`` is what the backward keeps: ``"carries"`` (the
    default: the carries, recomputing each step), ``"all"``, ``"dots"`` or
    ``"dots_no_batch"``. Gradients reach ``init``, ``xs`` and every tensor ``fn`` captures.
    ``fn`` is traced once per signature: later calls reuse the trace while what it read is
    unchanged (``_body_key``), and read the tensors it captures anew.

    Inside another scan's body the call is torch's own scan op
    (``torch._higher_order_ops.scan``), one node of the outer body, which strata lowers to a
    While loop inside the outer one (``xs`` must be given there; ``remat`` is the outer
    loop's). Under ``torch.compile`` it is that op too, one node of the graph that strata
    lowers to one While loop, forward and backward, unless the op cannot do what this scan
    does (``_FALLBACKS``: an integer carry or y in a loop that needs a gradient, zero steps, a
    body that draws random numbers, a ``remat`` other than ``"carries"``, no carry, a carry
    that needs a gradient only after its second step, symbolic shapes): then the call is a
    graph break, with that reason in Dynamo's report, and runs as its own strata loop."""
    if _tracing:
        return _torch_scan(fn, init, xs, reverse, length)
    if torch.compiler.is_dynamo_compiling():
        return _compiled_scan(fn, init, xs, reverse, length, remat)
    return _scan(fn, init, xs, reverse, length, remat)


# ---- under torch.compile ----------------------------------------------------------------------

def _strata_loop(why):
    """The eager scan, as a graph break that Dynamo reports with `why`."""
    def strata_loop(*args):
        return _scan(*args)
    return torch._dynamo.disable(strata_loop, reason=f"strata.torch.scan runs as its own "
                                                     f"strata loop: {why}")


# Where torch's scan op cannot do what this scan does, the call is a graph break: one function
# per reason, so that Dynamo's report (strata.torch.explain) says which.
_FALLBACKS = {
    "call": _strata_loop("the call fails strata.torch.scan's checks (the eager call says why)"),
    "remat": _strata_loop("a remat other than 'carries' (torch's scan op keeps the carries)"),
    "no carry": _strata_loop("init holds no tensor (torch's scan op needs a carry)"),
    "no steps": _strata_loop("zero steps (torch's scan op needs one)"),
    "integer": _strata_loop("an integer or bool carry or y in a loop that needs a gradient "
                            "(AOTAutograd cannot differentiate torch's scan op then)"),
    "random": _strata_loop("the body draws random numbers (torch's scan op would draw others "
                           "when its backward recomputes a step)"),
    "symbolic": _strata_loop("a tensor of symbolic shape (torch's scan op fails on them: "
                             "dynamic=True, or a dimension that changed between calls)"),
    "late gradient": _strata_loop("a carry needs a gradient only after its second step (torch's "
                                  "scan op differentiates a carry only if its init needs one)"),
}


class _RandomDraws(TorchFunctionMode):
    """Notes whether the torch functions called under it draw random numbers."""

    ALWAYS = frozenset({"rand", "rand_like", "randn", "randn_like", "randint", "randint_like",
                        "randperm", "bernoulli", "bernoulli_", "multinomial", "normal",
                        "normal_", "poisson", "uniform_", "exponential_", "geometric_",
                        "log_normal_", "cauchy_", "random_"})
    # These draw when training with p > 0: torch.dropout(x, p, train), F.dropout(x, p, training).
    DROPOUTS = frozenset({"dropout", "dropout_", "alpha_dropout", "feature_alpha_dropout",
                          "dropout1d", "dropout2d", "dropout3d"})

    def __init__(self):
        super().__init__()
        self.seen = False

    def __torch_function__(self, func, _types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name in self.ALWAYS:
            self.seen = True
        elif name in self.DROPOUTS:
            p = args[1] if len(args) > 1 else kwargs.get("p", 0.5)
            training = args[2] if len(args) > 2 else kwargs.get("training",
                                                                kwargs.get("train", True))
            self.seen = self.seen or (bool(training) and p > 0)
        elif name == "scaled_dot_product_attention":
            self.seen = self.seen or (args[4] if len(args) > 4 else kwargs.get("dropout_p", 0)) > 0
        return func(*args, **kwargs)


def _compiled_scan(fn, init, xs, reverse, length, remat):
    """scan while Dynamo traces it."""
    why, result = _as_torch_scan(fn, init, xs, reverse, length, remat)
    if why is not None:
        return _FALLBACKS[why](fn, init, xs, reverse, length, remat)
    return result


def _as_torch_scan(fn, init, xs, reverse, length, remat):
    """``(None, (carry, ys))`` from torch's scan op, or ``(why not, None)`` with nothing added to
    the graph that is used. Dynamo traces this (it runs only under Dynamo)."""
    init_leaves, init_structure = _tensor_leaves(init)
    xs_leaves, xs_structure = _tensor_leaves(xs)
    if init_leaves is None or xs_leaves is None or remat not in REMATS:
        return "call", None
    if remat != "carries":
        return "remat", None
    if not init_leaves:
        return "no carry", None
    if _symbolic(init_leaves + xs_leaves):
        return "symbolic", None
    if any(t.dim() == 0 for t in xs_leaves):
        return "call", None
    steps = [t.shape[0] for t in xs_leaves] or [length]
    if steps[0] is None or steps[0] < 0 or any(n != steps[0] for n in steps) or \
            (length is not None and length != steps[0]):
        return "call", None
    if steps[0] == 0:
        return "no steps", None

    # The loop's first step, traced outside it, tells what y is, whether the loop needs a
    # gradient and whether the body draws random numbers. Unless used below, it is dropped.
    draws = _RandomDraws()
    with draws:
        out = fn(_unflatten(init_leaves, init_structure),
                 _unflatten([t[-1] if reverse else t[0] for t in xs_leaves], xs_structure))
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        return "call", None
    carry_leaves, carry_structure = _tensor_leaves(out[0])
    y_leaves, y_structure = _tensor_leaves(out[1])
    if carry_leaves is None or y_leaves is None or carry_structure != init_structure or any(
            c.shape != i.shape or c.dtype != i.dtype for c, i in zip(carry_leaves, init_leaves)):
        return "call", None
    if draws.seen:
        return "random", None
    outs = carry_leaves + y_leaves
    if any(not t.is_floating_point() for t in outs) and any(t.requires_grad for t in outs):
        return "integer", None
    # Torch's op (2.9) differentiates through a carry only if its init requires grad, so a carry
    # that comes to need a gradient (from zeros and parameters, as a recurrent net starts)
    # would lose it. Then the first step stays, and the loop starts from its carry.
    first_step = any(c.requires_grad and not i.requires_grad
                     for c, i in zip(carry_leaves, init_leaves))
    if first_step and not all(t.requires_grad for t in carry_leaves):
        return "late gradient", None

    def step(carry, x):
        new_carry, y = fn(_unflatten(carry, init_structure),
                          _unflatten(x[:len(xs_leaves)], xs_structure))
        # Fresh contiguous tensors: torch's op refuses outputs that alias an input or each
        # other, and carries whose strides are not init's. A clone is free in strata.
        return ([t.clone(memory_format=torch.contiguous_format)
                 for t in _tensor_leaves(new_carry)[0]],
                [t.clone(memory_format=torch.contiguous_format) for t in _tensor_leaves(y)[0]])

    start, count = (carry_leaves, steps[0] - 1) if first_step else (init_leaves, steps[0])
    if count:
        # Fresh contiguous inputs, for the same reasons (leaves of init or xs may be one
        # tensor). With `length` alone, the loop runs over a tensor of that many empty rows.
        rest = [t[:-1] if reverse else t[1:] for t in xs_leaves] if first_step else xs_leaves
        over = [t.clone() for t in rest] or [init_leaves[0].new_empty((count, 0))]
        carry, ys = _torch_scan_op(
            step, [t.clone(memory_format=torch.contiguous_format) for t in start], over,
            reverse=reverse)
    else:
        carry, ys = start, [y.new_empty((0, *y.shape)) for y in y_leaves]
    if first_step:
        ys = [torch.cat([r, y[None]] if reverse else [y[None], r]) for y, r in zip(y_leaves, ys)]
    return None, (_unflatten(carry, init_structure), _unflatten(ys, y_structure))


def _symbolic(tensors):
    """Whether a tensor has a size Dynamo traces symbolically. Dynamo shows such a size to the
    code it traces as an int; a function it does not trace sees it, and Dynamo sees the shape
    of what that returns."""
    return _symbolic_rows(tensors).shape[0] > 0


@torch._dynamo.nonstrict_trace
def _symbolic_rows(tensors):
    symbolic = any(isinstance(n, torch.SymInt) for t in tensors for n in t.shape)
    return torch.empty(1 if symbolic else 0)


def _tensor_leaves(tree):
    """The tensors of a pytree and its structure as _unflatten takes it (``None`` leaves are
    empty nodes), or ``(None, None)`` when a leaf is something else."""
    leaves, spec = pytree.tree_flatten(tree)
    tensors = [leaf for leaf in leaves if leaf is not None]
    if not all(isinstance(t, torch.Tensor) for t in tensors):
        return None, None
    return tensors, (spec, [leaf is None for leaf in leaves])


def _torch_scan(fn, init, xs, reverse, length):
    """The scan as torch's higher-order op, which make_fx records as one node."""
    from torch._higher_order_ops.scan import scan as hop_scan
    leaves = [leaf for leaf in pytree.tree_leaves(xs) if leaf is not None]
    if not leaves:
        raise _error("a scan inside another scan's body needs xs "
                     "(a length alone is not supported there); scan over a tensor of that "
                     "length instead")
    if length is not None and any(leaf.shape[0] != length for leaf in leaves):
        raise _error(f"length={length} but xs has {leaves[0].shape[0]} steps")
    if _mode[-1] == "fake":
        raise _Nested()
    # Torch's op takes only tensors in y: its leaves go through as a list. Their structure
    # (None leaves included) comes from one step run outside the trace (fn may not write it
    # out from inside: torch's op traces fn with Dynamo, which refuses side effects).
    from torch.fx.experimental.proxy_tensor import disable_proxy_modes_tracing
    with disable_proxy_modes_tracing(), torch.no_grad():
        _, y = fn(pytree.tree_map(lambda t: t.clone(), init), pytree.tree_map(lambda t: t[0], xs))
    y_leaves, y_spec = pytree.tree_flatten(y)
    present = [leaf is not None for leaf in y_leaves]
    empty = not any(present)  # torch's op fails on a step without y: it gets a 0-d stand-in

    def flat_fn(carry, x):
        new_carry, y = fn(carry, x)
        if empty:  # made from an input: a constant would leave the op's graph as None
            return new_carry, [pytree.tree_leaves(x)[0].new_zeros(())]
        return new_carry, [leaf for leaf in pytree.tree_flatten(y)[0] if leaf is not None]

    with torch.no_grad():  # strata differentiates the outer loop, this one within it: not torch
        carry, ys = hop_scan(flat_fn, init, xs, reverse=reverse)
    stacked = iter([] if empty else ys)
    return carry, pytree.tree_unflatten([next(stacked) if p else None for p in present], y_spec)


# Traced bodies, by what their trace depended on (_body_key; apply_layers': its layers and its
# arguments' shapes), each with the objects its key names by id (kept alive, so that no other
# object takes an id while the key holds it).
_BODIES = {}


class _Unknowable(Exception):
    """fn reads something whose effect on its trace cannot be checked from outside."""


# Values compared by value; objects of these kinds by identity alone (their contents are
# assumed not to change, as jax.jit assumes of globals and classes).
_BY_VALUE = (bool, int, float, complex, str, bytes, type(None), type(Ellipsis), torch.dtype,
             torch.device, torch.Size, enum.Enum)
_BY_IDENTITY = (type, types.ModuleType, types.BuiltinFunctionType, types.MethodDescriptorType,
                types.WrapperDescriptorType, types.MethodWrapperType, torch._ops.OpOverload,
                torch._ops.OpOverloadPacket)
_MOST_OBJECTS = 10000  # an fn that reaches more is traced every call rather than walked


def _body_key(fn, init_leaves, init_structure, xs_leaves, xs_structure):
    """(key, objects it names) for the trace of `fn` on leaves of these shapes, or (None, ())
    when fn reaches something _fingerprint cannot check. The trace depends on fn's code, on
    what it captures and the globals it names (tensors by identity, shape, dtype and
    requires_grad, as the loop reads them anew each call; modules and other objects by type
    and attributes, a module's mode included; plain values by value), and on the leaves'
    structure, shapes, dtypes and requires_grad. Not on reverse, length or remat: those shape
    the loop around the body."""
    kept, seen = [], {}
    try:
        code = _fingerprint(fn, kept, seen)
    except _Unknowable:
        return None, ()

    def signature(leaves, skip=0):  # xs: a step's shape, without the number of steps
        return tuple((tuple(t.shape[skip:]), t.dtype, t.requires_grad) for t in leaves)

    structures = tuple((spec, tuple(nones)) for spec, nones in (init_structure, xs_structure))
    return (("scan", code, signature(init_leaves), signature(xs_leaves, skip=1), structures,
             torch.is_grad_enabled()), kept)


def _fingerprint(value, kept, seen):
    """A hashable summary of everything about `value` a trace could read; ids only of tensors
    (the trace captures those very tensors). Objects met again are named by when they were
    first met, so the summary of a fresh but equal object graph is equal."""
    if isinstance(value, _BY_VALUE):
        return type(value), value
    if id(value) in seen:
        return "seen", seen[id(value)]
    if len(seen) >= _MOST_OBJECTS:
        raise _Unknowable()
    seen[id(value)] = len(seen)
    kept.append(value)

    def each(values):
        return tuple(_fingerprint(v, kept, seen) for v in values)

    if isinstance(value, torch.Tensor):
        return "tensor", id(value), tuple(value.shape), value.dtype, value.requires_grad
    if isinstance(value, types.FunctionType):
        cells = []
        for cell in value.__closure__ or ():
            try:
                cells.append(cell.cell_contents)
            except ValueError:  # a cell not yet filled
                cells.append("<empty cell>")
        names = sorted(_global_names(value.__code__) & value.__globals__.keys())
        return ("function", value.__code__, each(value.__defaults__ or ()),
                each(sorted((value.__kwdefaults__ or {}).items())), each(cells),
                tuple((n, _fingerprint(value.__globals__[n], kept, seen)) for n in names))
    if isinstance(value, types.MethodType):
        return "method", each((value.__func__, value.__self__))
    if isinstance(value, functools.partial):
        return "partial", each((value.func, value.args, sorted(value.keywords.items())))
    if isinstance(value, _BY_IDENTITY):
        return "object", id(value)
    if isinstance(value, (tuple, list)):
        return type(value), each(value)
    if isinstance(value, dict):
        return type(value), each(value.items())
    if isinstance(value, (set, frozenset)):
        return type(value), frozenset(each(value))
    attributes = getattr(value, "__dict__", None)
    if attributes is None or hasattr(type(value), "__slots__"):
        raise _Unknowable()  # state outside __dict__ (a C type's, slots) cannot be compared
    return "object", type(value), each(attributes.items())


def _global_names(code):
    """The names `code` and the functions defined in it may load as globals."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names


def _scan(fn, init, xs, reverse, length, remat, consts=None, cache_key=None, proof=None):
    """scan, and ``fn(carry, x, consts)`` with loop-invariant ``consts`` (a pytree of tensors)
    passed as arguments: a body traced so can be kept under ``cache_key`` and reused by later
    calls with other ``consts`` of the same shapes (without a key, scan's own: _body_key). A
    ``proof`` (apply_layers') watches the trace (``proof.recording()``) and is checked after
    it, before the loop runs; with one the body is traced anew."""
    if remat not in REMATS:
        raise _error(f"remat must be one of {', '.join(REMATS)}, got {remat!r}")
    init_leaves, init_structure, init_paths = _leaves("init", init)
    xs_leaves, xs_structure, xs_paths = _leaves("xs", xs)
    const_leaves, const_structure, _ = _leaves("consts", consts)
    n = _length(xs_leaves, xs_paths, length)
    kept = ()
    if cache_key is None and proof is None:
        cache_key, kept = _body_key(fn, init_leaves, init_structure, xs_leaves, xs_structure)
    cached = _BODIES.get(cache_key) if cache_key is not None and proof is None else None
    body = cached[0] if cached is not None else None
    if body is None:
        examples = [x[0] if n > 0 else x.new_empty(x.shape[1:]) for x in xs_leaves]
        with proof.recording() if proof is not None else contextlib.nullcontext():
            body = _Body(fn, init_leaves, init_structure, init_paths, examples, xs_structure,
                         const_leaves, const_structure if consts is not None else None)
        if proof is not None:
            proof.check()
        if cache_key is not None:
            if len(_BODIES) >= 64:
                _BODIES.clear()
            _BODIES[cache_key] = body, kept
    inputs = init_leaves + xs_leaves + const_leaves + body.captured
    keys = None
    if body.needs_key:  # a key per step, from torch's generator (torch.manual_seed repeats a run)
        key = strata.from_dlpack(_backend._draw_key())
        keys = (strata.stack(strata.split_key(key, n)) if n > 0
                else strata.zeros([0, 2], strata.uint64))
    loop = _Loop(body, len(init_leaves), len(xs_leaves), len(const_leaves), n, reverse, remat,
                 keys)
    outs = _ScanFunction.apply(loop, *inputs)
    carry = _unflatten(outs[:len(init_leaves)], init_structure)
    ys = _unflatten(outs[len(init_leaves):], body.y_structure)
    return carry, ys


def _length(xs_leaves, xs_paths, length):
    sizes = set()
    for leaf, path in zip(xs_leaves, xs_paths):
        if leaf.dim() == 0:
            raise _error(f"{path} is 0-d; every leaf of xs needs a leading dimension to scan over")
        sizes.add(leaf.shape[0])
    if len(sizes) > 1:
        found = ", ".join(f"{p}: {leaf.shape[0]}" for leaf, p in zip(xs_leaves, xs_paths))
        raise _error(f"the leaves of xs differ in length ({found})")
    if sizes:
        n = sizes.pop()
        if length is not None and length != n:
            raise _error(f"length={length} but xs has {n} steps")
        return n
    if length is None:
        raise _error("give xs or length: with neither the step count is unknown")
    if length < 0:
        raise _error(f"length must be >= 0, got {length}")
    return int(length)
