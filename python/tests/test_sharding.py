"""Mesh and mark_sharding from Python: sharded programs give the values of
the unsharded math (NumPy), and say what they communicate."""
import numpy as np
import pytest

import strata
from conftest import close, rng


def test_a_sharded_mlp_step_computes_the_unsharded_values():
    mesh = strata.Mesh([0, 1, 2, 3], (2, 2), ("data", "model"))
    assert repr(mesh) == "mesh[data=2,model=2]"
    x = rng(1).standard_normal((8, 16)).astype(np.float32)
    w1 = rng(2).standard_normal((16, 32)).astype(np.float32) * 0.3
    w2 = rng(3).standard_normal((32, 4)).astype(np.float32) * 0.3
    sx = strata.mark_sharding(strata.tensor(x), mesh, ("data", None))
    sw1 = strata.mark_sharding(strata.tensor(w1), mesh, (None, "model"))
    sw2 = strata.mark_sharding(strata.tensor(w2), mesh, (1, None))  # axis by index, as torch_xla
    assert strata.sharding_of(sx) == "('data', None) on mesh[data=2,model=2]"

    def loss(w1, w2):
        return ((strata.tanh(sx @ w1) @ w2) ** 2).mean()

    value, (g1, g2) = strata.value_and_grad(loss, argnums=(0, 1))(sw1, sw2)
    report = strata.partition_report(value, g1, g2)
    assert report is not None and "all-reduce" in report
    h = np.tanh(x @ w1)
    y = h @ w2
    close(value, (y ** 2).mean(), rtol=1e-5)
    dy = 2 * y / y.size
    close(g2, h.T @ dy, rtol=1e-4, atol=1e-6)
    close(g1, x.T @ ((dy @ w2.T) * (1 - h ** 2)), rtol=1e-4, atol=1e-6)
    assert strata.sharding_of(strata.clear_sharding(sx)) is None


def test_bad_specs_raise():
    mesh = strata.Mesh([0, 1], (2,), ("x",))
    with pytest.raises(strata.Error):
        strata.mark_sharding(strata.zeros(4, 4), mesh, ("x",))  # one entry for two dims
    with pytest.raises(strata.Error):
        strata.mark_sharding(strata.zeros(4, 4), mesh, ("y", None))
    with pytest.raises(strata.Error, match="out of range"):
        strata.mark_sharding(strata.zeros(4, 4), mesh, (3, None))
    with pytest.raises(TypeError):
        strata.mark_sharding(strata.zeros(4, 4), mesh, "x")
    with pytest.raises(strata.Error):
        strata.Mesh([0, 1, 2], (2, 2), ("a", "b"))
