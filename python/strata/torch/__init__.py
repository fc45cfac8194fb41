"""strata as a PyTorch compiler: ``torch.compile(model, backend="strata")``.

Dynamo captures the model's Python into FX graphs; AOTAutograd turns each
into forward and backward graphs of core ATen ops; each ATen op is lowered
to strata's lazy ops (``_lowerings/``, one entry per op) and the graph is
traced once per input signature into one compiled strata program, which
then runs on the call's tensors (shared through DLPack, not copied).

- ``backend``: the Dynamo backend (also registered under the name
  "strata" by the package's ``torch_dynamo_backends`` entry point).
- ``explain(model, *args)``: compiles and runs the model once and reports
  every graph, its ops, each op that fell back to eager PyTorch, and every
  compile with its reason.
- ``lowered_ops()``: the ATen ops the table lowers.
- ``scan(fn, init, xs)``: ``jax.lax.scan`` over torch functions and tensors, as one
  strata While loop with gradients to everything the body touches.
- ``apply_layers(layers, x, *args, **kwargs)``: layers of one structure as one scan over
  their stacked parameters; ``scan_layers(model.model.layers)`` makes a model's own loop
  over its layers do so.
"""
import torch as _torch

from ._backend import REPORTS as _REPORTS
from ._backend import backend
from ._lowerings import lowered_ops
from ._layers import ScannedLayers, apply_layers, scan_layers
from ._scan import scan

__all__ = ["backend", "explain", "Explanation", "lowered_ops", "reports", "reset", "scan",
           "apply_layers", "scan_layers", "ScannedLayers"]


def reports():
    """The graphs strata compiled in this process, oldest first."""
    return list(_REPORTS)


def reset():
    """Forgets the graphs compiled so far (Dynamo's caches included)."""
    _REPORTS.clear()
    _torch._dynamo.reset()


class Explanation:
    """What compiling one call of a model did (``str()`` prints it)."""

    def __init__(self, graphs, dynamo, break_reasons=None):
        self.graphs = graphs
        self.graph_count = len(graphs)
        if break_reasons is None:
            break_reasons = [str(r.reason) for r in dynamo.break_reasons] if dynamo else []
        self.break_reasons = list(break_reasons)
        # Dynamo counts its graphs less one, which misses a break with nothing traced before it.
        self.graph_breaks = max(dynamo.graph_break_count if dynamo is not None else 0,
                                len(self.break_reasons))
        self.fallbacks = {}
        for g in graphs:
            for op, n in g.fallbacks.items():
                self.fallbacks[op] = self.fallbacks.get(op, 0) + n
        self.recompiles = [(g.kind, reason) for g in graphs for _, reason, _, _ in g.compiles
                           if reason.startswith("recompile")]

    def __str__(self):
        lines = [f"strata: {self.graph_count} ATen graph(s), {self.graph_breaks} Dynamo graph "
                 f"break(s), {sum(self.fallbacks.values())} op(s) run by eager PyTorch, "
                 f"{len(self.recompiles)} recompile(s)"]
        for reason in self.break_reasons:
            lines.append(f"  graph break: {reason}")
        for g in self.graphs:
            lines.append(str(g))
        return "\n".join(lines)

    __repr__ = __str__


def explain(model, *args, **kwargs):
    """Compiles `model` with the strata backend, calls it once on `args`
    (and, when the result is a tensor needing a gradient, runs its backward
    on its sum), and returns an Explanation of every graph, its ops, each
    fallback to eager PyTorch by op name, and each recompile with its reason."""
    reset()
    # Dynamo's explain lists the reasons of breaks in the frame it compiles, not of those in a
    # function it inlined (strata.torch.scan's fallbacks); its counters hold every reason.
    breaks = _torch._dynamo.utils.counters["graph_break"]
    before = dict(breaks)
    dynamo = None
    try:
        dynamo = _torch._dynamo.explain(model)(*args, **kwargs)
    except Exception:  # noqa: BLE001  Dynamo's explain is a courtesy; the report below is ours
        dynamo = None
    reasons = [reason for reason, n in breaks.items() if n > before.get(reason, 0)]
    reset()
    compiled = _torch.compile(model, backend=backend)
    out = compiled(*args, **kwargs)
    loss = out if isinstance(out, _torch.Tensor) else getattr(out, "loss", None)
    if loss is None and hasattr(out, "logits"):
        loss = out.logits
    if isinstance(loss, _torch.Tensor) and loss.requires_grad:
        loss.sum().backward()
    return Explanation(reports(), dynamo, reasons)
