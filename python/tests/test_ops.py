"""Every op family under its NumPy / PyTorch name, against NumPy and PyTorch."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import strata
from conftest import close, rng

A = rng(0).uniform(0.2, 2.0, (3, 4, 5)).astype(np.float32)
S = rng(1).standard_normal((3, 4, 5)).astype(np.float32)

UNARY = ["abs", "sign", "exp", "log", "log1p", "expm1", "tanh", "sqrt", "sin", "cos", "floor",
         "ceil"]


@pytest.mark.parametrize("name", UNARY)
def test_unary_against_numpy(name):
    x = A if name in ("log", "log1p", "sqrt") else S
    close(getattr(strata, name)(strata.tensor(x)), getattr(np, name)(x), rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("name,reference", [
    ("sigmoid", torch.sigmoid), ("rsqrt", torch.rsqrt), ("erf", torch.erf), ("relu", torch.relu),
    ("silu", F.silu)])
def test_unary_against_torch(name, reference):
    x = A if name == "rsqrt" else S
    close(getattr(strata, name)(strata.tensor(x)), reference(torch.tensor(x)), rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("name", ["add", "subtract", "multiply", "divide", "maximum", "minimum",
                                  "remainder", "power"])
def test_binary_against_numpy(name):
    b = rng(2).uniform(0.5, 1.5, (4, 1)).astype(np.float32)
    op = "pow" if name == "power" else name
    reference = np.mod if name == "remainder" else getattr(np, name)
    close(getattr(strata, op)(strata.tensor(S if name != "power" else A), strata.tensor(b)),
          reference(S if name != "power" else A, b), rtol=1e-5, atol=1e-6)


def test_a_square_is_a_product_and_keeps_torch_s_dtypes():
    # x ** 2 (a Python number) is x * x, not a pow kernel with the exponent as a program
    # parameter; the result's dtype is torch's, and other exponents still pow.
    x = np.array([1.5, -2, 3, np.nan, -0.5, np.inf], np.float32)
    for y in (strata.tensor(x) ** 2, strata.pow(strata.tensor(x), 2.0)):
        close(y, torch.tensor(x) ** 2, rtol=0, atol=0)
        assert "power(" not in strata.hlo_text(y)
    assert "power(" in strata.hlo_text(strata.tensor(x) ** 3)
    ints = np.array([3, -4, 5], np.int64)
    for exponent in (2, 2.0):
        got = strata.tensor(ints) ** exponent
        want = torch.tensor(ints) ** exponent
        assert str(got.dtype).removeprefix("strata.") == str(want.dtype).removeprefix("torch.")
        close(got, want.numpy(), rtol=0, atol=0)


def test_comparisons_logic_where_and_clamp():
    s = strata.tensor(S)
    for name in ["eq", "ne", "lt", "le", "gt", "ge"]:
        np_name = {"eq": "equal", "ne": "not_equal", "lt": "less", "le": "less_equal",
                   "gt": "greater", "ge": "greater_equal"}[name]
        close(getattr(strata, name)(s, 0.1), getattr(np, np_name)(S, np.float32(0.1)))
    close(strata.where(s > 0, s, 0.0), np.where(S > 0, S, 0))
    close(strata.logical_and(s > 0, s < 1), (S > 0) & (S < 1))
    close(strata.logical_or(s > 1, s < -1), (S > 1) | (S < -1))
    close(strata.clamp(s, -0.5, 0.5), np.clip(S, -0.5, 0.5))
    close(strata.clamp(s, max=0.2), np.minimum(S, 0.2))


@pytest.mark.parametrize("name", ["sum", "mean", "amax", "amin"])
@pytest.mark.parametrize("dim", [None, 0, -1, (0, 2)])
def test_reductions_against_numpy(name, dim):
    for keepdim in [False, True]:
        close(getattr(strata, name)(strata.tensor(S), dim, keepdim),
              getattr(np, name)(S, axis=dim, keepdims=keepdim), rtol=1e-5, atol=1e-6)


def test_argmax_argmin_first_index_on_ties():
    x = np.array([[1, 3, 3], [2, 2, 0]], np.float32)
    close(strata.argmax(strata.tensor(x), 1), x.argmax(1))
    close(strata.argmin(strata.tensor(x), 0), x.argmin(0))
    close(strata.argmax(strata.tensor(x)), x.argmax())


def test_shape_ops_against_numpy():
    s = strata.tensor(S)
    close(strata.reshape(s, 5, -1), S.reshape(5, -1))
    close(strata.reshape(s, (12, 5)), S.reshape(12, 5))
    close(strata.transpose(s, 0, 2), S.transpose(2, 1, 0))
    close(strata.transpose(s), S.T)
    close(strata.permute(s, 1, 2, 0), S.transpose(1, 2, 0))
    close(strata.flip(s, (0, 2)), np.flip(S, (0, 2)))
    close(s.flip([-2]), np.flip(S, -2))
    close(strata.unsqueeze(s, 1), S[:, None])
    close(strata.squeeze(strata.unsqueeze(s, 0)), S)
    close(strata.flatten(s, 1), S.reshape(3, 20))
    close(strata.broadcast_to(strata.tensor(S[:, :1]), (3, 4, 5)), np.broadcast_to(S[:, :1], (3, 4, 5)))
    close(strata.expand(strata.tensor(S[:1]), 3, -1, -1), np.broadcast_to(S[:1], (3, 4, 5)))
    close(strata.cat([s, s * 2], 1), np.concatenate([S, S * 2], 1))
    close(strata.concatenate([s, s], axis=2), np.concatenate([S, S], 2))
    close(strata.stack([s, s + 1], -1), np.stack([S, S + 1], -1))
    close(strata.split(s, 2, 1), np.split(S, 2, 1))
    close(strata.chunk(s, 3, 0), np.split(S, 3, 0))
    close(strata.pad(s, [0, 1, 2], [1, 0, 0], 9.0), np.pad(S, [(0, 1), (1, 0), (2, 0)], constant_values=9))


def test_gathers_and_scatters_against_torch():
    t = torch.tensor(S)
    idx = torch.tensor([2, 0, 2])
    close(strata.index_select(strata.tensor(S), 0, idx.numpy()), torch.index_select(t, 0, idx))
    along = torch.tensor(rng(3).integers(0, 5, (3, 4, 2)))
    close(strata.take_along_dim(strata.tensor(S), along.numpy(), 2), torch.take_along_dim(t, along, 2))
    src = torch.tensor(rng(4).standard_normal((3, 4, 3)).astype(np.float32))
    close(strata.index_add(strata.tensor(S), 2, np.array([0, 4, 0]), strata.tensor(src.numpy()), 2.0),
          t.index_add(2, torch.tensor([0, 4, 0]), src, alpha=2.0), rtol=1e-6)
    close(strata.one_hot(np.array([1, 0, 3]), 4), F.one_hot(torch.tensor([1, 0, 3]), 4))
    x = strata.tensor(S)
    start = [strata.tensor(1), strata.tensor(2), strata.tensor(3)]
    close(strata.dynamic_slice(x, start, [2, 2, 2]), S[1:3, 2:4, 3:5])
    expected = S.copy()
    expected[1:3, 2:4, 3:5] = 0
    close(strata.dynamic_update_slice(x, strata.zeros(2, 2, 2), start), expected)


def test_matmul_shapes_as_torch():
    for a_shape, b_shape in [((4,), (4,)), ((3, 4), (4,)), ((4,), (4, 2)), ((2, 3, 4), (4, 5)),
                             ((2, 1, 3, 4), (5, 4, 2))]:
        a = rng(5).standard_normal(a_shape).astype(np.float32)
        b = rng(6).standard_normal(b_shape).astype(np.float32)
        close(strata.matmul(strata.tensor(a), strata.tensor(b)), torch.matmul(torch.tensor(a), torch.tensor(b)),
              rtol=1e-5, atol=1e-5)


def test_nn_functions_against_torch():
    t = torch.tensor(S)
    close(strata.softmax(strata.tensor(S), -1), torch.softmax(t, -1), rtol=1e-6, atol=1e-7)
    close(strata.log_softmax(strata.tensor(S), 1), torch.log_softmax(t, 1), rtol=1e-5, atol=1e-6)
    close(strata.gelu(strata.tensor(S)), F.gelu(t), rtol=1e-5, atol=1e-6)
    close(strata.gelu(strata.tensor(S), approximate="tanh"), F.gelu(t, approximate="tanh"), rtol=1e-5, atol=1e-6)
    w = rng(7).standard_normal((6, 5)).astype(np.float32)
    b = rng(8).standard_normal(6).astype(np.float32)
    close(strata.linear(strata.tensor(S), strata.tensor(w), strata.tensor(b)),
          F.linear(t, torch.tensor(w), torch.tensor(b)), rtol=1e-5, atol=1e-5)
    g = rng(9).standard_normal(5).astype(np.float32)
    close(strata.layer_norm(strata.tensor(S), strata.tensor(g), strata.tensor(g)),
          F.layer_norm(t, (5,), torch.tensor(g), torch.tensor(g)), rtol=1e-4, atol=1e-5)
    rms = t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + 1e-6) * torch.tensor(g)  # Hugging Face's
    close(strata.rms_norm(strata.tensor(S), strata.tensor(g)), rms, rtol=1e-5, atol=1e-6)
    logits = S.reshape(12, 5)
    target = np.array([0, 4, -100, 2, 1, 1, 3, -100, 0, 0, 2, 4])
    for reduction in ["mean", "sum", "none"]:
        close(strata.cross_entropy(strata.tensor(logits), target, reduction=reduction),
              F.cross_entropy(torch.tensor(logits), torch.tensor(target), reduction=reduction),
              rtol=1e-5, atol=1e-6)
    close(strata.mse_loss(strata.tensor(S), np.zeros_like(S)), F.mse_loss(t, torch.zeros_like(t)), rtol=1e-6)
    q = rng(10).standard_normal((2, 4, 6, 8)).astype(np.float32)
    k = rng(11).standard_normal((2, 2, 6, 8)).astype(np.float32)
    v = rng(12).standard_normal((2, 2, 6, 8)).astype(np.float32)
    tk, tv = (torch.tensor(z).repeat_interleave(2, dim=1) for z in (k, v))
    ref = F.scaled_dot_product_attention(torch.tensor(q), tk, tv, is_causal=True) \
        if hasattr(F, "scaled_dot_product_attention") else None
    if ref is None:  # torch 1.13: the attention written out
        scores = torch.tensor(q) @ tk.transpose(-1, -2) / np.sqrt(8)
        scores = scores.masked_fill(torch.triu(torch.ones(6, 6, dtype=torch.bool), 1), float("-inf"))
        ref = torch.softmax(scores, -1) @ tv
    close(strata.scaled_dot_product_attention(strata.tensor(q), strata.tensor(k), strata.tensor(v)),
          ref, rtol=1e-5, atol=1e-5)
    # [B, S, H, D] in and out (JAX's layout): the same attention transposed.
    bshd = [np.ascontiguousarray(z.transpose(0, 2, 1, 3)) for z in (q, k, v)]
    close(strata.scaled_dot_product_attention(*map(strata.tensor, bshd), layout="bshd"),
          ref.transpose(1, 2), rtol=1e-5, atol=1e-5)
    with pytest.raises(strata.Error, match="layout must be"):
        strata.scaled_dot_product_attention(*map(strata.tensor, bshd), layout="sbhd")


def test_creation_and_random_keys():
    close(strata.zeros(2, 3), np.zeros((2, 3)))
    close(strata.ones((2,), dtype=strata.int32), np.ones(2, np.int32))
    close(strata.full((2, 2), 7.0), np.full((2, 2), 7.0, np.float32))
    close(strata.arange(5), np.arange(5))
    close(strata.arange(1.0, 2.0, 0.25), np.arange(1.0, 2.0, 0.25, dtype=np.float32))
    close(strata.eye(3), np.eye(3, dtype=np.float32))
    close(strata.zeros_like(strata.tensor(S)), np.zeros_like(S))
    key = strata.random_key(42)
    u = strata.uniform(key, (1000,), -1.0, 1.0).numpy()
    assert -1 <= u.min() and u.max() < 1 and abs(u.mean()) < 0.1
    np.testing.assert_array_equal(u, strata.uniform(key, (1000,), -1.0, 1.0).numpy())
    k1, k2 = strata.split_key(key, 2)
    assert not np.array_equal(strata.normal(k1, (8,)).numpy(), strata.normal(k2, (8,)).numpy())
    n = strata.normal(k1, (20000,), 1.0, 2.0).numpy()
    assert abs(n.mean() - 1) < 0.1 and abs(n.std() - 2) < 0.1


def test_shape_errors_are_value_errors_naming_the_op():
    with pytest.raises(ValueError, match=r"\[add\]"):
        strata.ones(2, 3) + strata.ones(4)
    with pytest.raises(strata.Error, match=r"\[reshape\]"):
        strata.reshape(strata.ones(2, 3), 4, 2)
    with pytest.raises(TypeError):
        strata.exp("not a tensor")
    with pytest.raises(strata.Error, match=r"\[cat\]|\[concat\]"):
        strata.cat([strata.ones(2, 3), strata.ones(2, 4)], 0)


def test_constant_and_scalar_take_integers_exactly_and_check_their_range():
    big = 2**53 + 1  # not a double
    for make in (strata.constant, strata.scalar):
        assert int(make(big, strata.int64).numpy()) == big
        assert int((make(-7, strata.int32) + strata.from_numpy(np.array([1], np.int32))).numpy()[0]) \
            == -6
        with pytest.raises(strata.Error, match="does not fit in uint8"):
            make(300, strata.uint8)
    # A constant is part of the program; a scalar is its parameter.
    x = strata.from_numpy(np.array([1.0, 2.0], np.float32))
    assert "constant(2.5)" in strata.hlo_text(x * strata.constant(2.5))
    assert "constant(2.5)" not in strata.hlo_text(x * strata.scalar(2.5))
