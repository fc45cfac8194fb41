"""Shared helpers: the references are NumPy and PyTorch, never strata."""
import numpy as np
import pytest
import torch

import strata

torch.set_default_dtype(torch.float32)


def rng(seed=0):
    return np.random.default_rng(seed)


def close(actual, expected, rtol=1e-5, atol=1e-6):
    """Compares a strata value (Tensor, or a tuple/list/dict of them) with a
    NumPy or PyTorch reference of the same structure."""
    if isinstance(expected, dict):
        assert sorted(actual) == sorted(expected)
        for k in expected:
            close(actual[k], expected[k], rtol, atol)
        return
    if isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            close(a, e, rtol, atol)
        return
    if isinstance(expected, torch.Tensor):
        expected = expected.detach().numpy()
    expected = np.asarray(expected)
    assert isinstance(actual, strata.Tensor), type(actual)
    got = actual.numpy()
    assert got.shape == expected.shape, (got.shape, expected.shape)
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol)


@pytest.fixture
def metrics():
    strata.reset_metrics()
    return strata.metrics
