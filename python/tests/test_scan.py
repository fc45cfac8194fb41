"""strata.scan and checkpoint from Python: traced once, compiled once, with
gradients, against plain loops and torch.nn.GRU."""
import numpy as np
import pytest
import torch

import strata
from conftest import close, rng


def test_scan_matches_a_python_loop_in_both_directions():
    xs = rng(1).standard_normal((7, 3)).astype(np.float32)
    w = rng(2).standard_normal((3, 3)).astype(np.float32) * 0.5
    sw = strata.tensor(w)

    def body(carry, x):
        h = strata.tanh(x @ sw + carry["h"])
        return {"h": h, "n": carry["n"] + 1}, (h, h.sum())

    for reverse in [False, True]:
        init = {"h": strata.zeros(3), "n": strata.tensor(0)}
        carry, (hs, sums) = strata.scan(body, init, strata.tensor(xs), reverse=reverse)
        h = np.zeros(3, np.float32)
        expected = [None] * 7
        for i in (reversed(range(7)) if reverse else range(7)):
            h = np.tanh(xs[i] @ w + h)
            expected[i] = h
        close(carry["h"], h, rtol=1e-5, atol=1e-6)
        assert carry["n"].item() == 7
        close(hs, np.stack(expected), rtol=1e-5, atol=1e-6)
        close(sums, np.stack(expected).sum(1), rtol=1e-5, atol=1e-5)


def test_a_thousand_steps_call_the_body_once_and_the_second_step_hits_the_cache(metrics):
    calls = []

    def step(carry, x):
        calls.append(1)
        return carry * 0.999 + x, None

    xs = strata.tensor(np.ones((1000, 4), np.float32))
    carry, ys = strata.scan(step, strata.zeros(4), xs)
    assert ys is None
    expected = np.zeros(4)
    for _ in range(1000):
        expected = expected * 0.999 + 1
    close(carry, expected.astype(np.float32), rtol=1e-4)
    assert len(calls) == 1
    before = metrics()
    carry2, _ = strata.scan(step, strata.zeros(4), strata.tensor(np.full((1000, 4), 2, np.float32)))
    carry2.sync()
    after = metrics()
    assert len(calls) == 2  # traced again (the body may differ), ...
    assert after["compiles"] == before["compiles"]  # ... but not compiled again
    assert after["cache_hits"] == before["cache_hits"] + 1
    close(carry2, 2 * expected.astype(np.float32), rtol=1e-4)


def gru_layer(params, x, h0):
    """One GRU layer as torch.nn.GRU computes it, over x [T, B, I]."""
    w_ih, w_hh, b_ih, b_hh = params

    def cell(h, xt):
        gi = xt @ w_ih.T + b_ih
        gh = h @ w_hh.T + b_hh
        H = h.shape[-1]
        r = strata.sigmoid(gi[:, :H] + gh[:, :H])
        z = strata.sigmoid(gi[:, H:2 * H] + gh[:, H:2 * H])
        n = strata.tanh(gi[:, 2 * H:] + r * gh[:, 2 * H:])
        h = (1 - z) * n + z * h
        return h, h

    return strata.scan(cell, h0, x)


def test_two_layer_gru_with_scan_matches_torch_nn_gru_and_its_gradients():
    T, B, I, H = 12, 3, 5, 6
    torch.manual_seed(0)
    gru = torch.nn.GRU(I, H, num_layers=2)
    x = torch.randn(T, B, I)
    h0 = torch.randn(2, B, H)
    out, hn = gru(x, h0)
    (out.square().sum() + hn.sum()).backward()
    names = [f"{k}_l{layer}" for layer in range(2) for k in ["weight_ih", "weight_hh", "bias_ih", "bias_hh"]]
    torch_params = {n: getattr(gru, n) for n in names}

    def model(params):
        layer_in = strata.tensor(x.numpy())
        finals = []
        for layer in range(2):
            p = [params[f"{k}_l{layer}"] for k in ["weight_ih", "weight_hh", "bias_ih", "bias_hh"]]
            h, layer_in = gru_layer(p, layer_in, strata.tensor(h0[layer].numpy()))
            finals.append(h)
        return (layer_in * layer_in).sum() + strata.stack(finals).sum(), (layer_in, strata.stack(finals))

    params = {n: strata.tensor(t.detach().numpy()) for n, t in torch_params.items()}
    (value, (s_out, s_hn)), grads = strata.value_and_grad(model, has_aux=True)(params)
    close(s_out, out, rtol=1e-4, atol=1e-5)
    close(s_hn, hn, rtol=1e-4, atol=1e-5)
    close(grads, {n: t.grad for n, t in torch_params.items()}, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("remat", ["carries", "all", "dots", "dots_no_batch"])
def test_scan_gradients_under_every_remat_policy_match_the_unrolled_loop(remat):
    xs = rng(3).standard_normal((6, 2, 4)).astype(np.float32)
    w = rng(4).standard_normal((4, 4)).astype(np.float32) * 0.4

    def scanned(w):
        c, ys = strata.scan(lambda h, x: (strata.tanh(x @ w + h @ w), h), strata.zeros(2, 4),
                            strata.tensor(xs), remat=remat, unroll=2)
        return (c * c).sum() + ys.sum()

    def unrolled(w):
        h = strata.zeros(2, 4)
        total = 0
        for t in range(6):
            total = total + h.sum()
            h = strata.tanh(strata.tensor(xs[t]) @ w + h @ w)
        return (h * h).sum() + total

    close(strata.grad(scanned)(strata.tensor(w)), strata.grad(unrolled)(strata.tensor(w)).numpy(),
          rtol=1e-5, atol=1e-5)


def test_vjp_with_residuals_gives_vjp_s_gradients_from_the_synced_residuals():
    # (That the pullback then runs only the reverse loop is checked on its graph in C++:
    # ScanRemat.AStagedVjpReadsTheSyncedResidualsInsteadOfRunningTheLoopAgain.)
    xs = rng(5).standard_normal((6, 2, 4)).astype(np.float32)
    w = rng(6).standard_normal((4, 4)).astype(np.float32) * 0.4

    def scanned(w):
        c, ys = strata.scan(lambda h, x: (strata.tanh(x @ w + h @ w), h), strata.zeros(2, 4),
                            strata.tensor(xs))
        return (c * c).sum() + ys.sum()

    def unrolled(w):
        h, total = strata.zeros(2, 4), 0
        for t in range(6):
            total = total + h.sum()
            h = strata.tanh(strata.tensor(xs[t]) @ w + h @ w)
        return (h * h).sum() + total

    out, residuals, pullback = strata.vjp_with_residuals(scanned, strata.tensor(w))
    assert residuals
    strata.sync(out, *residuals)  # one program: the forward loop and its carry history
    close(out, unrolled(strata.tensor(w)).numpy(), rtol=1e-5, atol=1e-5)
    (grad,) = pullback(strata.ones([]))
    close(grad, strata.grad(unrolled)(strata.tensor(w)).numpy(), rtol=1e-5, atol=1e-5)
    with pytest.raises(strata.Error, match="residual"):
        pullback(strata.ones([]), [])


def test_checkpoint_gives_the_same_gradients():
    a = rng(5).standard_normal((4, 4)).astype(np.float32)

    def block(x, w):
        return {"y": strata.tanh(x @ w) * 2}

    def f(w, use_checkpoint):
        x = strata.tensor(a)
        out = strata.checkpoint(block, x, w) if use_checkpoint else block(x, w)
        return (out["y"] ** 2).sum()

    w = strata.tensor(a.T.copy())
    close(strata.grad(lambda w: f(w, True))(w), strata.grad(lambda w: f(w, False))(w).numpy(),
          rtol=1e-6, atol=1e-6)


def test_scan_errors_name_the_body():
    def wrong_carry(c, x):
        return c.sum(), None  # f32[] instead of f32[3]

    with pytest.raises(strata.Error, match=r"(?s)carry.*wrong_carry \(.*test_scan.py:\d+\)"):
        strata.scan(wrong_carry, strata.zeros(3), strata.zeros(4, 2))

    leaked = []

    def leaky(c, x):
        leaked.append(c * 2)
        return c + x, None

    with pytest.raises(strata.Error, match="leaks"):
        strata.scan(leaky, strata.zeros(2), strata.zeros(3, 2))
    with pytest.raises(TypeError, match="must return a pair"):
        strata.scan(lambda c, x: c, strata.zeros(2), strata.zeros(3, 2))
    with pytest.raises(strata.Error, match="length"):
        strata.scan(lambda c, x: (c, None), strata.zeros(2))
    carry, _ = strata.scan(lambda c, x: (c + 1, None), strata.zeros(2), length=5)
    close(carry, np.full(2, 5.0, np.float32))
