"""Causal masks that attention is handed as tensors, turned back into its
``is_causal`` flag.

Hugging Face's models build their causal mask themselves (an arange, a
compare, an expand) and pass it to scaled_dot_product_attention as
``attn_mask``. The fused kernel then adds a [S, S] mask to every score tile
and cannot skip the tiles above the diagonal, which a causal call does:
twice the products, forward and backward. When the mask is computed from
constants alone (no input of the graph reaches it, no random op), its value
is known while compiling: it is computed here with eager torch and, when it
is exactly the causal mask (True / 0 on and below the diagonal, False /
-inf or the dtype's lowest above it, the same for every batch and head),
the call takes ``is_causal=True`` and no mask. The results are the same
numbers: a masked score's exponential is 0 either way.

Run on AOTAutograd's joint graph before the partitioner splits it, so the
forward and the backward calls both change and the mask's computation dies.
"""
import torch
import torch.fx
from torch._subclasses.fake_tensor import unset_fake_temporarily

aten = torch.ops.aten
_FORWARD = aten._scaled_dot_product_flash_attention_for_cpu.default
_BACKWARD = aten._scaled_dot_product_flash_attention_for_cpu_backward.default
# op: positions of query, key and is_causal in its args, and the defaults of
# the optional positional args (the forward's dropout_p and is_causal)
_CALLS = {_FORWARD: (0, 1, 4, (0.0, False)), _BACKWARD: (1, 2, 7, ())}
_LARGEST = 1 << 26  # elements of a mask worth computing while compiling


def _constant_ancestors(node):
    """The nodes `node` is computed from, in graph order, when all are ATen
    calls on constants alone (no input, attribute or random op); else None."""
    seen, stack = {}, [node]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        if n.op != "call_function" or not isinstance(n.target, torch._ops.OpOverload):
            return None
        if torch.Tag.nondeterministic_seeded in n.target.tags:
            return None
        seen[n] = None
        stack.extend(n.all_input_nodes)
    order = {n: i for i, n in enumerate(node.graph.nodes)}
    return sorted(seen, key=order.__getitem__)


def _value(node, ancestors):
    """The tensor `node` computes, by eager torch on real tensors."""
    graph = torch.fx.Graph()
    env = {}
    for n in ancestors:
        env[n] = graph.node_copy(n, lambda x: env[x])
    graph.output(env[node])
    return torch.fx.GraphModule(torch.nn.Module(), graph)()


def is_causal_mask(mask, queries, keys):
    """Whether `mask` (bool: keep where True; float: added) is the causal
    mask of `queries` x `keys` positions for every leading index."""
    if queries != keys or mask.dim() < 2 or tuple(mask.shape[-2:]) != (queries, keys):
        return False
    keep = torch.ones(queries, keys, dtype=torch.bool).tril()
    if mask.dtype == torch.bool:
        return bool(torch.equal(mask, keep.expand(mask.shape)))
    if not mask.is_floating_point():
        return False
    if not bool((mask.masked_select(keep.expand(mask.shape)) == 0).all()):
        return False
    hidden = mask.masked_select(~keep.expand(mask.shape))
    return bool(((hidden == -torch.inf) | (hidden == torch.finfo(mask.dtype).min)).all())


def causal_masks(gm):
    """Rewrites every flash-attention call of `gm` whose mask is a constant
    causal mask to is_causal=True without one. Returns how many."""
    rewritten = 0
    known = {}
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in _CALLS:
            continue
        mask = node.kwargs.get("attn_mask")
        if not isinstance(mask, torch.fx.Node):
            continue
        q_at, k_at, causal_at, defaults = _CALLS[node.target]
        query, key = node.args[q_at].meta.get("val"), node.args[k_at].meta.get("val")
        fake = mask.meta.get("val")
        if not isinstance(fake, torch.Tensor) or query is None or key is None:
            continue
        if fake.numel() > _LARGEST or query.shape[-2] != key.shape[-2]:
            continue
        if mask not in known:
            ancestors = _constant_ancestors(mask)
            with unset_fake_temporarily():  # AOTAutograd calls with fake tensors on
                known[mask] = ancestors is not None and is_causal_mask(
                    _value(mask, ancestors), query.shape[-2], key.shape[-2])
        if not known[mask]:
            continue
        kwargs = {k: v for k, v in node.kwargs.items() if k != "attn_mask"}
        args = list(node.args)
        if "is_causal" in kwargs:
            kwargs["is_causal"] = True
        else:
            first_default = causal_at + 1 - len(defaults)
            while len(args) <= causal_at:
                args.append(defaults[len(args) - first_default])
            args[causal_at] = True
        node.args, node.kwargs = tuple(args), kwargs
        rewritten += 1
    if rewritten:
        gm.graph.eliminate_dead_code()
        gm.recompile()
    return rewritten
