"""Sorting against PyTorch: torch.sort, argsort and topk (values, indices and
gradients, NaNs and ties included) and torch.scatter_add."""
import numpy as np
import pytest
import torch

import strata
from conftest import close, rng


def _with_ties(shape, seed):
    return np.round(rng(seed).standard_normal(shape) * 2).astype(np.float32)


@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("descending", [False, True])
def test_sort_matches_torch_stable_sort(dim, descending):
    x = _with_ties((4, 5, 6), 1)
    values, indices = strata.sort(strata.tensor(x), dim, descending, stable=True)
    ref = torch.sort(torch.tensor(x), dim=dim, descending=descending, stable=True)
    close(values, ref.values)
    np.testing.assert_array_equal(indices.numpy(), ref.indices.numpy())
    assert indices.dtype == strata.int64
    np.testing.assert_array_equal(
        strata.argsort(strata.tensor(x), dim, descending, stable=True).numpy(),
        torch.sort(torch.tensor(x), dim=dim, descending=descending, stable=True).indices.numpy())


def test_sort_puts_nans_where_torch_does():
    x = np.array([2, np.nan, -0.0, -1, -np.nan, 0.0, 5, np.inf, -np.inf, 2], np.float32)
    with np.errstate(invalid="ignore"):
        x[4] = np.float32(0) * np.float32(np.inf)  # x86's NaN, sign bit set
    for descending in (False, True):
        got = strata.tensor(x).sort(descending=descending, stable=True)
        ref = torch.tensor(x).sort(dim=-1, descending=descending, stable=True)
        np.testing.assert_array_equal(got.indices.numpy(), ref.indices.numpy())
        np.testing.assert_array_equal(got.values.numpy(), ref.values.numpy())


@pytest.mark.parametrize("largest", [True, False])
def test_topk_values_indices_and_gradient(largest):
    x = rng(2).standard_normal((3, 10)).astype(np.float32)
    weights = rng(3).standard_normal((3, 4)).astype(np.float32)
    tx = torch.tensor(x, requires_grad=True)
    ref = torch.topk(tx, 4, 1, largest)
    (ref.values * torch.tensor(weights)).sum().backward()

    def f(x):
        top = strata.topk(x, 4, 1, largest)
        return (top.values * strata.tensor(weights)).sum(), top

    (_, (values, indices)), grad = strata.value_and_grad(f, has_aux=True)(strata.tensor(x))
    close(values, ref.values)
    np.testing.assert_array_equal(indices.numpy(), ref.indices.numpy())
    close(grad, tx.grad)


def test_sort_gradient_matches_torch():
    x = rng(4).standard_normal((5, 7)).astype(np.float64)
    weights = rng(5).standard_normal((5, 7))
    tx = torch.tensor(x, requires_grad=True)
    (torch.sort(tx, dim=0, descending=True).values ** 2 * torch.tensor(weights)).sum().backward()
    grad = strata.grad(
        lambda x: (x.sort(0, True).values ** 2 * strata.tensor(weights)).sum())(strata.tensor(x))
    close(grad, tx.grad, rtol=1e-12, atol=1e-12)


def test_integer_and_bool_sorts():
    x = rng(6).integers(-5, 5, (3, 8)).astype(np.int32)
    got = strata.tensor(x).sort(1, stable=True)
    ref = torch.tensor(x).sort(dim=1, stable=True)
    np.testing.assert_array_equal(got.values.numpy(), ref.values.numpy())
    np.testing.assert_array_equal(got.indices.numpy(), ref.indices.numpy())
    b = np.array([True, False, True, False])
    np.testing.assert_array_equal(
        strata.argsort(strata.tensor(b), stable=True).numpy(),
        torch.sort(torch.tensor(b), stable=True).indices.numpy())


def test_scatter_add_matches_torch_with_its_gradient():
    x = rng(7).standard_normal((3, 5)).astype(np.float32)
    src = rng(8).standard_normal((2, 5)).astype(np.float32)
    index = rng(9).integers(0, 3, (2, 5))
    tx = torch.tensor(x, requires_grad=True)
    tsrc = torch.tensor(src, requires_grad=True)
    ref = torch.scatter_add(tx, 0, torch.tensor(index), tsrc)
    (ref * ref).sum().backward()

    def f(x, s):
        y = strata.scatter_add(x, 0, strata.tensor(index), s)
        return (y * y).sum(), y

    (_, y), grads = strata.value_and_grad(f, argnums=(0, 1), has_aux=True)(
        strata.tensor(x), strata.tensor(src))
    close(y, ref)
    close(grads, (tx.grad, tsrc.grad))
    # A src larger than the index: only the part the index covers is added.
    big = rng(10).standard_normal((4, 6)).astype(np.float32)
    close(strata.scatter_add(strata.tensor(x), 1, strata.tensor(index), strata.tensor(big)),
          torch.scatter_add(torch.tensor(x), 1, torch.tensor(index), torch.tensor(big)))


def test_bad_sort_arguments_raise_strata_errors():
    x = strata.zeros(2, 3)
    with pytest.raises(strata.Error, match=r"\[topk\] k = 4 is out of range"):
        strata.topk(x, 4)
    with pytest.raises(strata.Error, match=r"\[sort\] dimension 2 out of range"):
        strata.sort(x, 2)
    with pytest.raises(strata.Error, match=r"index out of range|\[scatter_add\]"):
        strata.scatter_add(x, 1, strata.tensor(np.array([[0, 5]])), strata.ones(1, 2)).numpy()


@pytest.mark.parametrize("name", ["cumsum", "cumprod", "logcumsumexp"])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cumulative_values_and_gradients_match_torch(name, dim):
    x = rng(10).standard_normal((5, 37, 3))
    if name == "cumprod":
        x[1, 5, :] = 0.0  # a zero: torch's gradient through it is exact, so must ours be
    weights = rng(11).standard_normal(x.shape)
    tx = torch.tensor(x, requires_grad=True)
    ref = getattr(torch, name)(tx, dim)
    (ref * torch.tensor(weights)).sum().backward()

    def f(x):
        y = getattr(strata, name)(x, dim)
        return (y * strata.tensor(weights)).sum(), y

    (_, y), grad = strata.value_and_grad(f, has_aux=True)(strata.tensor(x))
    close(y, ref, rtol=1e-10, atol=1e-10)
    close(grad, tx.grad, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("name", ["cummax", "cummin"])
def test_running_extremes_match_torch_with_ties_and_nans(name):
    x = np.round(rng(12).standard_normal((4, 33)) * 2).astype(np.float32)
    x[2, 7] = np.nan
    x[2, 20] = np.nan
    got = getattr(strata, name)(strata.tensor(x), 1)
    ref = getattr(torch, name)(torch.tensor(x), 1)
    np.testing.assert_array_equal(got.values.numpy(), ref.values.numpy())
    np.testing.assert_array_equal(got.indices.numpy(), ref.indices.numpy())
    # The gradient, on the rows without NaN (a NaN's cotangent is NaN in both).
    clean = x[[0, 1, 3]]
    weights = rng(13).standard_normal(clean.shape).astype(np.float32)
    tx = torch.tensor(clean, requires_grad=True)
    (getattr(torch, name)(tx, 1).values * torch.tensor(weights)).sum().backward()
    grad = strata.grad(lambda x: (getattr(strata, name)(x, 1).values * strata.tensor(weights)).sum())(
        strata.tensor(clean))
    close(grad, tx.grad)


def test_cumulative_dtypes_follow_torch():
    for x in (np.array([[1, 2, 3], [4, 5, 6]], np.int32), np.array([True, False, True])):
        for name in ("cumsum", "cumprod"):
            got = getattr(strata, name)(strata.tensor(x), -1)
            ref = getattr(torch, name)(torch.tensor(x), -1)
            assert got.dtype == strata.int64
            np.testing.assert_array_equal(got.numpy(), ref.numpy())
    got = strata.cummax(strata.tensor(np.array([3, 1, 3, 5, 2], np.int64)), 0)
    ref = torch.cummax(torch.tensor([3, 1, 3, 5, 2]), 0)
    np.testing.assert_array_equal(got.values.numpy(), ref.values.numpy())
    np.testing.assert_array_equal(got.indices.numpy(), ref.indices.numpy())
    with pytest.raises(strata.Error, match=r"\[logcumsumexp\] needs a floating-point tensor"):
        strata.logcumsumexp(strata.tensor(np.array([1, 2])), 0)
    with pytest.raises(strata.Error, match=r"\[cumsum\] dimension 3 out of range"):
        strata.cumsum(strata.zeros(2, 3), 3)
