"""Every row of the opcode table (include/strata/hlo/opcode.h) as Python sees it: a row whose
api column names an op has that op in `strata`, and every op a row generates gives torch's
values, dtype and gradient (on floats and, promoted as torch promotes, on integers). A row
added without a reference below fails here, naming it."""
import numpy as np
import pytest
import torch

import strata

ROWS = strata._strata._opcode_rows()
NAMED = [r for r in ROWS if r["api"]]
GENERATED = [r for r in ROWS if r["generated"]]


def _cbrt(x):
    return torch.sign(x) * torch.abs(x) ** (1 / 3)


# The torch function each generated op must agree with (an independent reference).
TORCH = {
    "abs": torch.abs, "exp": torch.exp, "expm1": torch.expm1, "log": torch.log,
    "log1p": torch.log1p, "tanh": torch.tanh, "sigmoid": torch.sigmoid, "sqrt": torch.sqrt,
    "rsqrt": torch.rsqrt, "sin": torch.sin, "cos": torch.cos, "erf": torch.erf, "tan": torch.tan,
    "cbrt": _cbrt, "maximum": torch.maximum, "minimum": torch.minimum, "atan2": torch.atan2,
}
# Inputs inside every op's domain (log, sqrt, ... want positives; tan stays off its poles).
POSITIVE = np.array([0.3, 0.9, 1.7, 2.4, 0.05, 1.1], np.float32)
SIGNED = np.array([-1.2, -0.4, 0.25, 0.8, 1.3, -0.05], np.float32)
NEEDS_POSITIVE = {"log", "log1p", "sqrt", "rsqrt"}


def _inputs(row):
    x = POSITIVE if row["api"] in NEEDS_POSITIVE else SIGNED
    return [x] if row["kind"] == "unary" else [x, POSITIVE[::-1].copy()]


def test_the_table_is_read_whole():
    assert len(ROWS) > 80
    assert {r["kind"] for r in ROWS} == {"unary", "binary", "other"}
    assert {"tan", "cbrt", "exp", "maximum"} <= {r["api"] for r in GENERATED}


@pytest.mark.parametrize("row", NAMED, ids=lambda r: r["name"])
def test_every_named_row_has_its_python_op(row):
    assert callable(getattr(strata, row["api"], None)), f"strata.{row['api']} missing"


@pytest.mark.parametrize("row", GENERATED, ids=lambda r: r["name"])
def test_every_generated_op_gives_torchs_values_and_gradient(row):
    name = row["api"]
    assert name in TORCH, f"no torch reference for the generated op {name}: add one"
    ref = TORCH[name]
    inputs = _inputs(row)
    got = getattr(strata, name)(*[strata.tensor(a) for a in inputs])
    want = ref(*[torch.tensor(a) for a in inputs])
    assert got.dtype == strata.float32
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=2e-6, atol=1e-6)
    if row["kind"] == "unary":  # the same op as a method, as in torch
        np.testing.assert_allclose(getattr(strata.tensor(inputs[0]), name)().numpy(),
                                   want.numpy(), rtol=2e-6, atol=1e-6)
    if not row["floats"]:
        return
    weights = np.linspace(-1.0, 1.5, inputs[0].size, dtype=np.float32)
    leaves = [torch.tensor(a, requires_grad=True) for a in inputs]
    (ref(*leaves) * torch.tensor(weights)).sum().backward()
    grads = strata.grad(lambda *xs: (getattr(strata, name)(*xs) * strata.tensor(weights)).sum(),
                        argnums=tuple(range(len(inputs))))(*[strata.tensor(a) for a in inputs])
    for g, leaf in zip(grads, leaves):
        np.testing.assert_allclose(g.numpy(), leaf.grad.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("row", GENERATED, ids=lambda r: r["name"])
def test_every_generated_op_promotes_integers_as_torch(row):
    name = row["api"]
    ints = [np.array([1, 2, 3, 4], np.int32)] * (1 if row["kind"] == "unary" else 2)
    got = getattr(strata, name)(*[strata.tensor(a) for a in ints])
    if name == "cbrt":  # torch has no cbrt: the promotion rule, worked out by hand
        np.testing.assert_allclose(got.numpy(), np.cbrt(ints[0].astype(np.float32)), rtol=1e-6)
        assert got.dtype == strata.float32
        return
    want = TORCH[name](*[torch.tensor(a) for a in ints])
    assert got.dtype == getattr(strata, str(want.dtype).removeprefix("torch.")), got.dtype
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)
