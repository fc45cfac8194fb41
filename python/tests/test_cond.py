"""strata.cond and strata.switch_case from Python: both branches traced once,
one compile for every predicate, values and gradients against PyTorch running
the branch the predicate chose."""
import numpy as np
import pytest
import torch

import strata
from conftest import close, rng


def branches(lib, w):
    def true_fn(x, y):
        return {"out": lib.tanh(x @ w) + y, "aux": y * 2}

    def false_fn(x, y):
        return {"out": (x * x) @ w - y, "aux": y}

    return true_fn, false_fn


def test_cond_matches_torch_running_the_chosen_branch_with_one_compile():
    x = rng(1).standard_normal((4, 3)).astype(np.float32)
    w = rng(2).standard_normal((3, 2)).astype(np.float32)
    y = rng(3).standard_normal((4, 2)).astype(np.float32)
    calls = []
    strata.reset_metrics()
    for s in [1.0, -2.0, 0.5, -0.1]:
        sw = strata.tensor(w)
        sx, sy = strata.tensor(x), strata.tensor(y)
        t_fn, f_fn = branches(strata, sw)

        def traced_true(a, b):
            calls.append("true")
            return t_fn(a, b)

        pred = strata.tensor(np.float32(s)) > 0
        out = strata.cond(pred, traced_true, f_fn, (sx, sy))
        loss = _loss(out)
        gx, gw = strata.grad(
            lambda a, v: _loss(strata.cond(pred, *branches(strata, v), (a, sy))), argnums=(0, 1)
        )(sx, sw)

        tw = torch.tensor(w, requires_grad=True)
        tx = torch.tensor(x, requires_grad=True)
        t_true, t_false = branches(torch, tw)
        t_out = (t_true if s > 0 else t_false)(tx, torch.tensor(y))
        t_loss = _loss(t_out)
        t_loss.backward()
        close(out["out"], t_out["out"].detach(), rtol=1e-5, atol=1e-5)
        close(loss, t_loss.detach(), rtol=1e-5, atol=1e-5)
        close((gx, gw), (tx.grad, tw.grad), rtol=1e-4, atol=1e-5)
        if s == 1.0:
            first_compiles = strata.metrics()["compiles"]
    assert calls == ["true"] * 4  # traced once per cond call, whatever pred holds
    # The other predicates reuse the programs the first one compiled.
    assert strata.metrics()["compiles"] == first_compiles


def _loss(out):
    return (out["out"] * out["out"]).sum() + out["aux"].sum()


def test_switch_case_clamps_the_index_and_differentiates_the_chosen_branch():
    x = rng(4).standard_normal(5).astype(np.float32)
    fns = [lambda v: v + 1, lambda v: v * v, lambda v: strata.sin(v)]
    torch_fns = [lambda v: v + 1, lambda v: v * v, lambda v: torch.sin(v)]
    for i in [-3, 0, 1, 2, 7]:
        sx = strata.tensor(x)
        out = strata.switch_case(strata.tensor(np.int64(i)), fns, (sx,))
        g = strata.grad(lambda a: strata.switch_case(strata.tensor(np.int32(i)), fns, (a,)).sum())(sx)
        tx = torch.tensor(x, requires_grad=True)
        t_out = torch_fns[min(max(i, 0), 2)](tx)
        t_out.sum().backward()
        close(out, t_out.detach(), rtol=1e-6, atol=1e-6)
        close(g, tx.grad, rtol=1e-6, atol=1e-6)


def test_cond_inside_scan_picks_per_step():
    xs = rng(5).standard_normal((6, 3)).astype(np.float32)

    def step(c, x):
        c = strata.cond(x.sum() > 0, lambda c, x: c + x, lambda c, x: c * 0.5, (c, x))
        return c, c.sum()

    carry, sums = strata.scan(step, strata.zeros(3), strata.tensor(xs))
    c = np.zeros(3, np.float32)
    expected = []
    for x in xs:
        c = c + x if x.sum() > 0 else c * 0.5
        expected.append(c.sum())
    close(carry, c, rtol=1e-6, atol=1e-6)
    close(sums, np.array(expected, np.float32), rtol=1e-5, atol=1e-6)


def test_bad_branches_are_errors_naming_them():
    x = strata.tensor(np.ones(3, np.float32))
    pred = x.sum() > 0
    with pytest.raises(strata.Error, match="false_fn returned f32\\[2\\]"):
        strata.cond(pred, lambda v: v, lambda v: v[:2], (x,))
    with pytest.raises(strata.Error, match="exactly one element"):
        strata.cond(x > 0, lambda v: v, lambda v: v, (x,))
    with pytest.raises(TypeError, match="operands must be a tuple"):
        strata.cond(pred, lambda v: v, lambda v: v, x)
    leaked = []

    def leaky(v):
        leaked.append(v * 2)
        return v

    with pytest.raises(strata.Error, match="true_fn leaks"):
        strata.cond(pred, leaky, lambda v: v, (x,))
