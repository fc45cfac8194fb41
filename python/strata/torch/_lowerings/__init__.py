"""The ATen lowering table: one entry per ATen op, each a function of strata
tensors (and the op's other arguments) returning what the op returns.

An entry is registered for an op overload (``aten.add.Tensor``) or for every
overload of an op (``aten.add``). The graphs reaching it are core ATen after
torch's decompositions (``_backend.decompositions``); the interpreter casts
each result to the dtype torch's own metadata gives the node and checks its
shape, so a lowering states the math and the dtype it naturally computes in.

Backward ops without a decomposition in torch (``convolution_backward``,
the pooling backwards) are the VJP of the forward lowering, taken by strata's
own autodiff: one rule, two ops.
"""
from . import control, creation, elementwise, indexing, nn, random, reductions, shapes  # noqa: F401
from ._table import DTYPES, LOWERINGS, lower, lowering_for, strata_dtype  # noqa: F401
from .random import RandomKeys  # noqa: F401

import torch as _torch


def lowered_ops():
    """The ATen ops (overload packets and overloads) the table lowers."""
    return sorted({str(op) for op in LOWERINGS if isinstance(op, (_torch._ops.OpOverload,
                                                                 _torch._ops.OpOverloadPacket))})
