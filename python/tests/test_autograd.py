"""grad, value_and_grad, vjp over pytrees, and PyTorch's backward / .grad /
no_grad, against torch.autograd."""
import numpy as np
import pytest
import torch

import strata
from conftest import close, rng


def both(a):
    return strata.tensor(a), torch.tensor(a, requires_grad=True)


def loss(lib, params, x):
    """The same model in either library: a small MLP with a tanh and a softmax."""
    h = lib.tanh(x @ params["w1"] + params["b1"])
    logits = h @ params["w2"]
    p = lib.softmax(logits, -1) if lib is strata else torch.softmax(logits, -1)
    return (p * p).sum() + (params["b1"] ** 2).mean()


def make_params():
    r = rng(4)
    return {"w1": r.standard_normal((5, 8)).astype(np.float32) * 0.5,
            "b1": r.standard_normal(8).astype(np.float32),
            "w2": r.standard_normal((8, 3)).astype(np.float32)}


def test_grad_over_a_dict_of_parameters_matches_torch():
    params = make_params()
    x = rng(5).standard_normal((6, 5)).astype(np.float32)
    s_params = {k: strata.tensor(v) for k, v in params.items()}
    t_params = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    g = strata.grad(lambda p: loss(strata, p, strata.tensor(x)))(s_params)
    loss(torch, t_params, torch.tensor(x)).backward()
    assert isinstance(g, dict)
    close(g, {k: t.grad for k, t in t_params.items()}, rtol=1e-4, atol=1e-6)


def test_value_and_grad_with_argnums_and_aux():
    a, b = rng(6).standard_normal((2, 4, 4)).astype(np.float32)

    def f(x, y, scale):
        z = (x @ y).sum() * scale
        return z, {"z": z, "x_mean": x.mean()}

    sx, sy = strata.tensor(a), strata.tensor(b)
    (value, aux), (gx, gy) = strata.value_and_grad(f, argnums=(0, 1), has_aux=True)(sx, sy, 3.0)
    tx, ty = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    tz = (tx @ ty).sum() * 3.0
    tz.backward()
    close(value, tz, rtol=1e-5)
    close(aux["z"], tz, rtol=1e-5)
    close(aux["x_mean"], a.mean(), rtol=1e-5)
    close((gx, gy), (tx.grad, ty.grad), rtol=1e-5, atol=1e-5)
    gy_only = strata.grad(lambda x, y: (x @ y).sum(), argnums=1)(sx, sy)
    close(gy_only, ty.grad / 3.0, rtol=1e-5, atol=1e-5)


def test_vjp_keeps_tuples_and_lists():
    a = rng(7).standard_normal((3, 3)).astype(np.float32)
    b = rng(8).standard_normal(3).astype(np.float32)

    def f(pair):
        x, v = pair
        return [x @ v, (x * x).sum(0)]

    out, pullback = strata.vjp(f, (strata.tensor(a), strata.tensor(b)))
    assert isinstance(out, list) and len(out) == 2
    c0, c1 = rng(9).standard_normal((2, 3)).astype(np.float32)
    (grads,) = pullback([strata.tensor(c0), strata.tensor(c1)])
    assert isinstance(grads, tuple)
    tx, tv = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    torch.autograd.backward([tx @ tv, (tx * tx).sum(0)], [torch.tensor(c0), torch.tensor(c1)])
    close(grads, (tx.grad, tv.grad), rtol=1e-5, atol=1e-6)
    with pytest.raises(strata.Error, match="structure"):
        pullback([strata.tensor(c0)])


def test_gradients_against_finite_differences():
    a = rng(10).uniform(0.5, 1.5, (4,)).astype(np.float64)

    def f(x):
        return (strata.log(x) * strata.sin(x) + strata.sqrt(x) / (1 + x * x)).sum()

    g = strata.grad(f)(strata.tensor(a)).numpy()
    eps = 1e-6
    for i in range(4):
        up, down = a.copy(), a.copy()
        up[i] += eps
        down[i] -= eps
        fd = (f(strata.tensor(up)).item() - f(strata.tensor(down)).item()) / (2 * eps)
        assert g[i] == pytest.approx(fd, rel=1e-6)


def test_backward_accumulates_into_grad_as_torch():
    a = rng(11).standard_normal((3, 4)).astype(np.float32)
    s, t = both(a)
    s.requires_grad_()
    assert s.requires_grad and s.grad is None
    for _ in range(2):
        (s * s * 3).sum().backward()
        (t * t * 3).sum().backward()
    close(s.grad, t.grad, rtol=1e-6)
    s.grad = None
    assert s.grad is None
    y = s.exp()
    y.backward(strata.ones(3, 4) * 2)
    close(s.grad, np.exp(a) * 2, rtol=1e-6)


def test_no_grad_and_detach_stop_gradients():
    a = rng(12).standard_normal(5).astype(np.float32)
    s = strata.tensor(a, requires_grad=True)
    with strata.no_grad():
        frozen = s * 10
    (frozen * s).sum().backward()
    close(s.grad, a * 10, rtol=1e-6)  # frozen is a constant
    g = strata.grad(lambda x: (x.detach() * x).sum())(strata.tensor(a))
    close(g, a, rtol=1e-6)


def test_bad_functions_and_trees_raise():
    x = strata.ones(3)
    with pytest.raises(strata.Error, match="scalar"):
        strata.grad(lambda v: v * 2)(x)
    with pytest.raises(TypeError, match="scalar strata.Tensor"):
        strata.grad(lambda v: 1.0)(x)
    with pytest.raises(TypeError, match=r"\(argument 0\): the leaf at \['b'\]\[1\] is a float"):
        strata.grad(lambda p: p["a"].sum())({"a": x, "b": [x, 2.0]})
    with pytest.raises(TypeError, match="keys in a pytree must be strings"):
        strata.grad(lambda p: p[1].sum())({1: x})
    with pytest.raises(ValueError, match="argnums 3 out of range"):
        strata.grad(lambda v: v.sum(), argnums=3)(x)

    def user_error(v):
        raise KeyError("from the user's function")

    with pytest.raises(KeyError, match="from the user's function"):
        strata.grad(user_error)(x)
