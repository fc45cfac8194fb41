"""Control flow: torch's ``scan`` higher-order op as a strata While loop.

``torch.ops.higher_order.scan(combine, init, xs, additional_inputs)`` is
what torch's own ``scan`` (``torch._higher_order_ops.scan``) leaves in a
graph, under ``torch.compile`` and under ``make_fx``: ``combine`` is a graph
of ``(*carry, *x, *additional) -> [*carry, *y]``, ``xs`` are scanned over
their leading dimension and ``ys`` come back stacked there. AOTAutograd
differentiates it into a second scan (the reverse loop, over the forward's
saved carries), so one lowering serves both graphs. A ``strata.torch.scan``
inside another's body is recorded as this op (``_scan.py``), which makes
nested scans one loop inside another.
"""
import torch

import strata

from ._table import lower


@lower(torch.ops.higher_order.scan)
def _scan(combine, init, xs, additional_inputs=(), *rest):
    from .. import _backend  # the interpreter, which imports this table
    if rest:
        raise NotImplementedError(f"scan with {len(rest)} arguments past additional_inputs")
    init, xs, additional = list(init), list(xs), list(additional_inputs)
    if not xs:
        raise NotImplementedError("scan without xs")
    carries = len(init)

    def step(carry, x):
        try:
            outs, mutations = _backend.interpret(combine, list(carry) + list(x) + additional)
        except _backend.LoweringError as e:  # the whole loop falls back, named by its op
            raise NotImplementedError(f"its body: {e}") from None
        if mutations:
            raise NotImplementedError("a scan body that writes into its inputs")
        outs = list(outs)
        return outs[:carries], outs[carries:]

    carry, ys = strata.scan(step, init, xs)
    return [*carry, *(ys or [])]
