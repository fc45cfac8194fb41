"""The torch.compile backend: Dynamo's FX graph -> AOTAutograd (forward and
backward graphs of core ATen ops) -> strata's lazy ops, traced once per input
signature into one strata.CompiledGraph, run on the call's tensors by DLPack.

An op the lowering table lacks (or a lowering refuses for its arguments)
splits the graph: torch's CapabilityBasedPartitioner keeps the runs of
lowered ops as strata graphs and leaves the rest to eager PyTorch; every
such fallback is recorded by name, as is every recompile and its reason
(``strata.torch.explain``).
"""
import collections
import functools
import operator
import logging
import time
from collections import Counter

import torch
import torch.fx
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupport

import strata

from . import _cache, _masks
from ._lowerings import DTYPES, RandomKeys, lowering_for, strata_dtype

log = logging.getLogger("strata.torch")

# ---- what happened: the records explain() reads ----------------------------------------------


class GraphReport:
    """One ATen graph handed to strata: its ops, what fell back, each compile."""

    def __init__(self, kind, ops, fallbacks):
        self.kind = kind  # "forward", "backward" or "inference"
        self.ops = ops  # Counter of ATen op names in the graph
        self.fallbacks = fallbacks  # Counter of op names run by eager PyTorch
        self.compiles = []  # (signature text, reason, seconds, from the persistent cache)
        self.calls = 0
        # Mutated inputs (an optimizer's weights and moments) whose new value
        # strata wrote straight into their storage, and those copied back.
        self.written_in_place = 0
        self.copied_back = 0

    def __str__(self):
        lines = [f"{self.kind} graph: {sum(self.ops.values())} ops "
                 f"({len(self.ops)} kinds), {len(self.compiles)} compile(s), "
                 f"{self.calls} call(s)"]
        if self.written_in_place or self.copied_back:
            lines.append(f"  mutated inputs: {self.written_in_place} written in place, "
                         f"{self.copied_back} copied back")
        lines.append("  ops: " + ", ".join(f"{op} x{n}" if n > 1 else op
                                           for op, n in sorted(self.ops.items())))
        if self.fallbacks:
            lines.append("  fallbacks to eager PyTorch: " + ", ".join(
                f"{op} x{n}" if n > 1 else op for op, n in sorted(self.fallbacks.items())))
        for signature, reason, seconds, cached in self.compiles:
            where = "loaded from the persistent cache" if cached else f"compiled in {seconds:.3f} s"
            lines.append(f"  {reason}: {where} for {signature}")
        return "\n".join(lines)


REPORTS = []


# ---- the interpreter ------------------------------------------------------------------------


def op_name(target):
    return str(target) if hasattr(target, "overloadpacket") else getattr(
        target, "__name__", str(target))


class LoweringError(Exception):
    """A lowering that cannot take this node (NotImplementedError, a wrong result)."""

    def __init__(self, node, message):
        super().__init__(f"{op_name(node.target)}: {message}")
        self.node = node


_FLOATING = (strata.float16, strata.bfloat16, strata.float32, strata.float64)


def _check(node, value):
    """A lowered result against torch's own metadata: its dtype made to match,
    its shape the same (else the lowering is wrong: an error, not a number).
    Floats where torch has integers are refused rather than truncated."""
    expected = node.meta.get("val")
    if isinstance(expected, torch.Tensor) and isinstance(value, strata.Tensor):
        want = strata_dtype(expected.dtype)
        if value.dtype in _FLOATING and want not in _FLOATING:
            raise LoweringError(node, f"gave {value.dtype}, torch's is {want}")
        if value.dtype != want:
            value = strata.astype(value, want)
        # Sizes torch traced symbolically (dynamic=True) are checked by rank
        # only: their example value is one shape of many.
        shape = tuple(None if isinstance(s, torch.SymInt) else int(s) for s in expected.shape)
        got = tuple(value.shape)
        if len(got) != len(shape) or any(w is not None and g != w for g, w in zip(got, shape)):
            want = tuple("?" if w is None else w for w in shape)
            raise LoweringError(node, f"gave shape {got}, torch's is {want}")
        return value
    if isinstance(expected, (list, tuple)) and isinstance(value, (list, tuple)):
        return type(value)(_check_item(node, e, v) for e, v in zip(expected, value))
    return value


def _check_item(node, expected, value):
    if isinstance(expected, torch.Tensor) and isinstance(value, strata.Tensor):
        want = strata_dtype(expected.dtype)
        return value if value.dtype == want else strata.astype(value, want)
    return value


def interpret(gm, inputs, keys=None, refused=None, attrs=None):
    """Runs the graph's nodes on strata values (tracing: nothing computes).
    Returns (outputs, mutations): the output node's values and, for each
    ``copy_`` into an input, (placeholder position, new value).

    `attrs` maps get_attr targets to strata values to use for them (a scan
    body's captured tensors, which are inputs of the loop); other tensor
    attributes become constants.

    With a set `refused`, a node whose lowering fails is added to it and its
    result stood in for by fresh tensors of torch's shapes, so one pass finds
    every node that must run in eager PyTorch; else the failure raises.

    Its values are nobody's views (strata/_views.py): none is linked. Its
    numbers are the program's literals, not scalar parameters: a graph fixes
    them (Dynamo guards on the Python values it saw), and baked in, the
    compiler folds them (``pow(x, 1.0)`` of a square's gradient is x) and no
    scalar is passed per call."""
    with strata._views.untracked(), strata._strata._BakeScalars():
        return _interpret(gm, inputs, keys, refused, attrs)


def _interpret(gm, inputs, keys, refused, attrs):
    env = {}
    placeholders = {}
    mutations = []
    it = iter(inputs)
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            env[node] = next(it)
            placeholders[node] = len(placeholders)
        elif node.op == "get_attr" and attrs is not None and node.target in attrs:
            env[node] = attrs[node.target]
        elif node.op == "get_attr":
            value = getattr_path(gm, node.target)
            env[node] = to_strata_constant(value) if isinstance(value, torch.Tensor) else value
        elif node.op == "call_function":
            args = torch.fx.node.map_arg(node.args, env.__getitem__)
            kwargs = torch.fx.node.map_arg(node.kwargs, env.__getitem__)
            if node.target is torch.ops.aten.copy_.default:
                dst, src = node.args[0], args[1]
                value = _copy_into(env[dst], src)
                if dst in placeholders:
                    mutations.append((placeholders[dst], value))
                env[dst] = value
                env[node] = value
                continue
            try:
                env[node] = _lower_node(node, args, kwargs, keys)
            except LoweringError:
                if refused is None:
                    raise
                refused.add(node)
                env[node] = _stand_in(node)
        elif node.op == "output":
            return torch.fx.node.map_arg(node.args[0], env.__getitem__), mutations
        else:
            raise LoweringError(node, f"FX op {node.op} is not supported")
    raise LoweringError(None, "graph has no output")


def _lower_node(node, args, kwargs, keys):
    fn = lowering_for(node.target)
    if fn is None:
        raise LoweringError(node, "has no lowering")
    if getattr(fn, "needs_key", False) and keys is None:
        # Inside torch's scan body, where no key per step is threaded: the loop runs in torch.
        raise LoweringError(node, "draws random numbers where strata has no key for them "
                                  "(a body of torch's scan op)")
    try:
        if getattr(fn, "needs_key", False):
            value = fn(keys, *args, **kwargs)
        else:
            value = fn(*args, **kwargs)
    except NotImplementedError as e:
        raise LoweringError(node, f"not lowered for these arguments ({e})") from None
    except (strata.Error, TypeError, ValueError, IndexError) as e:
        raise LoweringError(node, f"{type(e).__name__}: {e}") from None
    return _check(node, value)


def _stand_in(node):
    """Fresh tensors of a refused node's result shapes (for tracing what follows)."""
    def make(v):
        if isinstance(v, torch.Tensor):
            example = _example(v)
            if example is None:
                raise LoweringError(node, "a refused op with sizes that have no hint")
            return placeholder_for(example)
        if isinstance(v, torch.SymInt):
            return v.node.hint
        if isinstance(v, (list, tuple)):
            return type(v)(make(x) for x in v)
        return v
    return make(node.meta.get("val"))


def _copy_into(dst, src):
    if not isinstance(src, strata.Tensor):
        src = strata.scalar(src, dst.dtype)
    return strata.broadcast_to(strata.astype(src, dst.dtype), list(dst.shape))


def getattr_path(obj, target):
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def to_strata_constant(t):
    return strata.from_dlpack(t.detach().contiguous().clone())


def placeholder_for(t):
    """A strata tensor of t's shape and dtype in a buffer of its own (a real
    one: AOTAutograd calls the compilers with fake tensors active)."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    with unset_fake_temporarily():
        return strata.from_dlpack(torch.empty(tuple(t.shape), dtype=t.dtype))


# ---- one ATen graph, compiled per input signature ---------------------------------------------


def _key_input():
    """A fresh key from torch's generator: torch.manual_seed makes runs repeatable."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    with unset_fake_temporarily():
        return _draw_key()


# What a key placeholder is made like (tracing draws nothing from torch's generator).
_KEY_SHAPE = torch.empty(2, dtype=torch.uint64)


def _draw_key():
    seed = torch.randint(0, 2**62, (1,), dtype=torch.int64)
    return torch.cat([seed, torch.zeros(1, dtype=torch.int64)]).view(torch.uint64)


def _describe(signature):
    parts = []
    for s in signature:
        if s[0] == "t":
            dims = ",".join(str(d) for d in s[1])
            parts.append(f"{str(s[2]).replace('torch.', '')}[{dims}]")
        else:
            parts.append(repr(s[1]))
    return "(" + ", ".join(parts) + ")"


def _reason(old, new):
    changes = [f"input {i} changed from {_describe([a])[1:-1]} to {_describe([b])[1:-1]}"
               for i, (a, b) in enumerate(zip(old, new)) if a != b]
    return ", ".join(changes) or "a new input signature"


class _Entry:
    __slots__ = ("graph", "positions", "outputs", "mutations", "homes", "key")


def _apart(tensors, homes):
    """Whether every input an output is written into has a storage no other
    input shares (else writing it early could change what another reads)."""
    storages = [t.untyped_storage().data_ptr() for t in tensors]
    counts = collections.Counter(storages)
    return all(counts[storages[i]] == 1 for _, i in homes)


class StrataGraph:
    """The callable AOTAutograd runs for one ATen graph (boxed: it takes the
    argument list and empties it)."""

    def __init__(self, gm, report):
        self._boxed_call = True  # an instance attribute: Dynamo's disable wrapper copies it
        self.gm = gm
        self.report = report
        self.entries = {}
        self.last_signature = None
        self.needs_key = any(getattr(lowering_for(n.target), "needs_key", False)
                             for n in gm.graph.nodes if n.op == "call_function")

    @staticmethod
    def signature(args):
        return tuple(("t", tuple(a.shape), a.dtype) if isinstance(a, torch.Tensor)
                     else ("v", a) for a in args)

    def compile_for(self, args, signature):
        start = time.perf_counter()
        inputs = []
        positions = []
        for i, a in enumerate(args):
            if isinstance(a, torch.Tensor):
                inputs.append(placeholder_for(a))
                positions.append(i)
            else:
                inputs.append(int(a) if isinstance(a, torch.SymInt) else a)
        key = placeholder_for(_KEY_SHAPE) if self.needs_key else None
        outputs, mutations = interpret(self.gm, inputs, RandomKeys(key) if key is not None
                                       else None)
        flat = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
        tensors, layout = [], []
        for o in flat:
            if isinstance(o, strata.Tensor):
                layout.append(("t", len(tensors)))
                tensors.append(o)
            else:
                layout.append(("v", o))
        mutation_slots = []
        for position, value in mutations:
            mutation_slots.append((position, len(tensors)))
            tensors.append(value)
        graph_inputs = [inputs[i] for i in positions] + ([key] if key is not None else [])
        graph, cached = _cache.compiled_graph(graph_inputs, tensors)
        entry = _Entry()
        entry.graph, entry.positions, entry.outputs = graph, positions, layout
        entry.mutations, entry.key = mutation_slots, key is not None
        # A mutated input's new value is written straight into its storage
        # where the program allows it (strata's donation): no second copy of
        # an optimizer's weights and moments, and no copy back.
        entry.homes = [(slot, positions.index(position)) for position, slot in mutation_slots
                       if position in positions]
        reason = "first compile" if self.last_signature is None else "recompile: " + _reason(
            self.last_signature, signature)
        if self.last_signature is not None:
            log.warning("strata: recompiling the %s graph (%s)", self.report.kind, reason)
        self.report.compiles.append((_describe(signature), reason, time.perf_counter() - start,
                                     cached))
        self.entries[signature] = entry
        return entry

    def __call__(self, *call_args):
        # Boxed (one list, emptied here, as AOTAutograd's forward calls it) or
        # positional (its backward, through Dynamo's disable wrapper).
        boxed = len(call_args) == 1 and isinstance(call_args[0], list)
        args = call_args[0] if boxed else list(call_args)
        signature = self.signature(args)
        entry = self.entries.get(signature)
        if entry is None:
            entry = self.compile_for(args, signature)
        self.last_signature = signature
        self.report.calls += 1
        tensors = [args[i] for i in entry.positions]
        tensors = [t.detach() if t.requires_grad else t for t in tensors]
        if entry.key:
            tensors.append(_key_input())
        homes = entry.homes if entry.homes and _apart(tensors, entry.homes) else ()
        try:
            results = entry.graph.run(tensors, homes)
        except strata.Error as e:
            raise strata.Error(f"[strata.torch] {self.report.kind} graph: {e}") from None
        results = [torch.from_dlpack(r) for r in results]
        for position, slot in entry.mutations:
            target = args[position]
            if results[slot].data_ptr() == target.data_ptr():
                torch.autograd.graph.increment_version(target)  # written in place, as copy_ would
                self.report.written_in_place += 1
            else:
                target.copy_(results[slot])
                self.report.copied_back += 1
        out = [results[v] if kind == "t" else v for kind, v in entry.outputs]
        args.clear()
        return out


# ---- the compiler AOTAutograd calls -------------------------------------------------------------


class _Lowered(OperatorSupport):
    def __init__(self, refused):
        super().__init__()
        self.refused = refused

    def is_node_supported(self, submodules, node):
        if node.op != "call_function" or node in self.refused:
            return False
        return node.target is torch.ops.aten.copy_.default or lowering_for(node.target) is not None


def _example(value):
    """An example input as a concrete torch tensor or int (fake tensors and
    symbolic sizes by their hints)."""
    if isinstance(value, torch.SymInt):
        return value.node.hint
    if isinstance(value, torch.Tensor):
        shape = tuple(s.node.hint if isinstance(s, torch.SymInt) else int(s) for s in value.shape)
        if None in shape:
            return None
        from torch._subclasses.fake_tensor import unset_fake_temporarily
        with unset_fake_temporarily():
            return torch.empty(shape, dtype=value.dtype)
    return value


def _find_refused(gm):
    """The nodes whose lowering refuses their arguments: the graph traced once
    on example inputs from the placeholders' metadata."""
    refused = set()
    examples = [_example(n.meta.get("val")) for n in gm.graph.nodes if n.op == "placeholder"]
    if any(e is None for e in examples):
        return refused  # sizes with no hint: a refusal shows at the first call instead
    inputs = [placeholder_for(e) if isinstance(e, torch.Tensor) else e for e in examples]
    interpret(gm, inputs, RandomKeys(placeholder_for(_KEY_SHAPE)), refused)
    return refused


def _split(gm, refused, compile_part):
    partitioner = CapabilityBasedPartitioner(gm, _Lowered(refused),
                                             allows_single_node_partition=True)
    partitions = partitioner.propose_partitions()
    fused = partitioner.fuse_partitions(partitions)
    for name, sub in list(fused.named_children()):
        if name.startswith("fused_"):
            setattr(fused, name, compile_part(sub))
    # The partitioner sorts by data flow alone: a graph whose work is all
    # mutation (an optimizer step returns nothing) comes back with its output
    # node first and the parts that write its inputs after it, never run.
    graph = fused.graph
    output = next(n for n in graph.nodes if n.op == "output")
    last = list(graph.nodes)[-1]
    if last is not output:
        last.append(output)
    graph.lint()
    fused.recompile()
    return fused


def compile_aten(gm, example_inputs, kind):
    """AOTAutograd's compiler of one ATen graph (called with fake tensors
    active: strata's tracing runs outside them)."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    with unset_fake_temporarily():
        return _compile_aten(gm, kind)


def _check_inputs(gm, kind):
    """Every tensor input is a CPU tensor of a dtype strata has: else an Error
    naming the input and the op that reads it (never a crash at the call)."""
    for position, node in enumerate(n for n in gm.graph.nodes if n.op == "placeholder"):
        value = node.meta.get("val")
        if not isinstance(value, torch.Tensor):
            continue
        readers = [op_name(u.target) for u in node.users if u.op == "call_function"]
        read_by = f" (read by {readers[0]})" if readers else ""
        if value.device.type != "cpu":
            raise strata.Error(f"[strata.torch] input {position} of the {kind} graph{read_by} "
                               f"is on device '{value.device}'; strata runs CPU tensors")
        if value.dtype not in DTYPES:
            raise strata.Error(f"[strata.torch] input {position} of the {kind} graph{read_by} is "
                               f"{value.dtype}, which strata has no dtype for")


def _compile_aten(gm, kind):
    _check_inputs(gm, kind)
    if kind == "inference":  # no joint graph to have done it (_partition)
        _masks.causal_masks(gm)
    ops = Counter(op_name(n.target) for n in gm.graph.nodes if n.op == "call_function")
    unsupported = {n for n in gm.graph.nodes if n.op == "call_function"
                   and n.target is not torch.ops.aten.copy_.default
                   and lowering_for(n.target) is None}
    try:
        refused = unsupported | _find_refused(gm)
    except LoweringError as e:  # a refused op whose result cannot be stood in for
        refused = unsupported | {e.node}
    fallbacks = Counter(op_name(n.target) for n in refused)
    report = GraphReport(kind, ops, fallbacks)
    REPORTS.append(report)
    if not refused:
        return StrataGraph(gm, report)
    for name, n in sorted(fallbacks.items()):
        log.warning("strata: %s runs in eager PyTorch (%d node(s) in a %s graph): it has no "
                    "lowering for these arguments", name, n, kind)
    split = _split(gm, refused, lambda sub: _BoxedCall(StrataGraph(sub, report)))
    return _Unboxed(split)


class _BoxedCall(torch.nn.Module):
    """A strata part inside a split graph, called with positional tensors."""

    def __init__(self, graph):
        super().__init__()
        self.graph = graph
        output = next(n for n in graph.gm.graph.nodes if n.op == "output")
        self.single = not isinstance(output.args[0], (tuple, list))

    def forward(self, *args):
        out = self.graph(list(args))
        return out[0] if self.single else tuple(out)


class _Unboxed:
    def __init__(self, gm):
        self._boxed_call = True
        self.gm = gm

    def __call__(self, *call_args):
        boxed = len(call_args) == 1 and isinstance(call_args[0], list)
        args = call_args[0] if boxed else list(call_args)
        out = self.gm(*args)
        args.clear()
        return out


# Ops strata lowers whole rather than taking torch's decomposition: the
# flash-attention forward's decomposition returns its log-sum-exp in another
# layout than the op's own, which its backward (lowered here) would misread.
KEEP_WHOLE = (torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default,)


def decompositions():
    from torch._decomp import core_aten_decompositions
    table = dict(core_aten_decompositions())
    for op in KEEP_WHOLE:
        table.pop(op, None)
    return table


def _partition(joint, joint_inputs, **kwargs):
    """torch's min-cut split of the joint graph (as inductor's), after a
    constant causal mask becomes attention's is_causal (_masks.py)."""
    from torch._functorch.partitioners import min_cut_rematerialization_partition
    _masks.causal_masks(joint)
    return min_cut_rematerialization_partition(joint, joint_inputs, **kwargs)


@functools.lru_cache(maxsize=None)
def _aot_backend():
    from torch._dynamo.backends.common import aot_autograd
    return aot_autograd(
        fw_compiler=functools.partial(compile_aten, kind="forward"),
        bw_compiler=functools.partial(compile_aten, kind="backward"),
        inference_compiler=functools.partial(compile_aten, kind="inference"),
        decompositions=decompositions(),
        partition_fn=_partition,
        keep_inference_input_mutations=True,
    )


_ONE_HOT = (torch.nn.functional.one_hot, torch._C._nn.one_hot)


def _written_tensor(node):
    """The tensor an in-place call of Dynamo's graph writes, or None."""
    if node.op == "call_method" and node.target.endswith("_") and not node.target.startswith(
            "_") and node.target not in ("requires_grad_", "retain_grad_"):
        return node.args[0]
    if node.op == "call_function" and node.target in (operator.iadd, operator.isub,
                                                      operator.imul, operator.itruediv,
                                                      operator.setitem):
        return node.args[0]
    name = getattr(node.target, "__name__", "") if node.op == "call_function" else ""
    if name.endswith("_") and not name.startswith("_") and node.args:
        return node.args[0]
    return None


def _prepare(gm):
    """What eager torch checks on the data that AOTAutograd's graph loses:
    an in-place write to a tensor whose elements overlap (an expand's
    result) is torch's error at compile time, and F.one_hot keeps its range
    check (strata::one_hot, checked at run time like every index)."""
    changed = False
    for node in gm.graph.nodes:
        written = _written_tensor(node)
        value = written.meta.get("example_value") if isinstance(written, torch.fx.Node) else None
        if isinstance(value, torch.Tensor) and torch._debug_has_internal_overlap(value) == 1:
            raise RuntimeError(
                f"unsupported operation: more than one element of the written-to tensor "
                f"refers to a single memory location (strata: {node.format_node()}, as eager "
                f"torch refuses it). Please clone() the tensor before performing the operation.")
        if node.op == "call_function" and node.target in _ONE_HOT:
            classes = node.args[1] if len(node.args) > 1 else node.kwargs.get("num_classes", -1)
            if isinstance(classes, int) and classes >= 0:
                node.target = torch.ops.strata.one_hot.default
                node.args, node.kwargs = (node.args[0], classes), {}
                changed = True
    if changed:
        gm.recompile()


def backend(gm, example_inputs, **options):
    """torch.compile(fn, backend="strata"): the Dynamo backend."""
    _prepare(gm)
    return _aot_backend()(gm, example_inputs, **options)

