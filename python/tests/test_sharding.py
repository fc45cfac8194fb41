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


# ---- where results live: sharding_of on results and gradients (issue 48) ---------------------
# Each plan shards an MLP's batch and weights as data parallel, FSDP, tensor
# parallel and FSDP + TP do; after the step every gradient says where it lives,
# the same before the sync (what the partitioner will do) and after, the
# partition report lists it, and the values are the unsharded math's.
def _plans(n):
    if n == 2:
        mesh = strata.Mesh([0, 1], (2,), ("data",))
        tp_mesh = strata.Mesh([0, 1], (2,), ("model",))
        return {
            "dp": (mesh, ("data", None), None, None),
            "fsdp": (mesh, ("data", None), ("data", None), ("data", None)),
            "tp": (tp_mesh, None, (None, "model"), ("model", None)),
        }
    mesh = strata.Mesh([0, 1, 2, 3], (2, 2), ("data", "model"))
    flat = strata.Mesh([0, 1, 2, 3], (4,), ("data",))
    return {
        "dp": (flat, ("data", None), None, None),
        "fsdp": (flat, ("data", None), ("data", None), ("data", None)),
        "tp": (strata.Mesh([0, 1, 2, 3], (4,), ("model",)), None, (None, "model"), ("model", None)),
        "fsdp+tp": (mesh, ("data", None), ("data", "model"), ("model", "data")),
    }


@pytest.mark.parametrize("n", [2, 4])
def test_every_gradient_of_every_plan_says_where_it_lives(n):
    x = rng(1).standard_normal((8, 16)).astype(np.float32)
    w1 = rng(2).standard_normal((16, 32)).astype(np.float32) * 0.3
    w2 = rng(3).standard_normal((32, 4)).astype(np.float32) * 0.3
    h = np.tanh(x @ w1)
    y = h @ w2
    dy = 2 * y / y.size
    want = {"g1": x.T @ ((dy @ w2.T) * (1 - h ** 2)), "g2": h.T @ dy}
    for name, (mesh, sx, s1, s2) in _plans(n).items():
        def marked(a, spec):
            t = strata.tensor(a)
            return t if spec is None else strata.mark_sharding(t, mesh, spec)

        tx, t1, t2 = marked(x, sx), marked(w1, s1), marked(w2, s2)

        def loss(w1, w2):
            return ((strata.tanh(tx @ w1) @ w2) ** 2).mean()

        value, (g1, g2) = strata.value_and_grad(loss, argnums=(0, 1))(t1, t2)
        before = [strata.sharding_of(t) for t in (value, g1, g2)]
        report = strata.partition_report(value, g1, g2)
        strata.sync(value, g1, g2)
        after = [strata.sharding_of(t) for t in (value, g1, g2)]
        assert None not in after, (name, after)
        assert before == after, (name, before, after)
        for i, layout in enumerate(after):
            assert f"result {i}: {layout}" in report, (name, layout, report)
            assert layout.endswith(f"on {mesh!r}"), (name, layout)
        hlo = strata.hlo_sharding_of(g1)
        assert hlo.startswith("{") and ("devices=" in hlo or hlo == "{replicated}"), hlo
        # data parallel: replicated weights, replicated gradients; tensor parallel: each
        # gradient split as its weight. FSDP: the batch's sum over 'data' leaves the
        # gradient replicated (an all-reduce, as XLA's propagation does without a
        # constraint); reshard asks for the weight's split.
        split = {"dp": (None, None), "tp": (s1, s2), "fsdp": (None, None),
                 "fsdp+tp": ((None, "model"), ("model", None))}[name]
        for g, spec in zip((g1, g2), split):
            spec = spec or (None, None)
            text = "(" + ", ".join("None" if a is None else repr(a) for a in spec) + ")"
            assert strata.sharding_of(g) == f"{text} on {mesh!r}", (name, strata.sharding_of(g))
        if name == "fsdp":
            r1 = strata.reshard(g1, mesh, s1)
            assert strata.sharding_of(r1) == strata.sharding_of(t1)
            close(r1 * 1, want["g1"], rtol=1e-4, atol=1e-6)
        close(value, (y ** 2).mean(), rtol=1e-5)
        close(g1, want["g1"], rtol=1e-4, atol=1e-6)
        close(g2, want["g2"], rtol=1e-4, atol=1e-6)


def _hlo_tiles(text):
    """XLA's sharding text -> {tile coordinates: [devices]} (worked out from the text)."""
    import re
    if text == "{replicated}":
        return None
    m = re.match(r"\{devices=\[([\d,]+)\]([\d,]+)( last_tile_dim_replicate)?\}", text)
    dims = [int(v) for v in m.group(1).split(",")]
    devices = [int(v) for v in m.group(2).split(",")]
    tiles = dims[:-1] if m.group(3) else dims
    repeat = dims[-1] if m.group(3) else 1
    out = {}
    for k, d in enumerate(devices):
        index, coords = k // repeat, []
        for n in reversed(tiles):
            coords.append(index % n)
            index //= n
        out.setdefault(tuple(reversed(coords)), []).append(d)
    return out


@pytest.mark.parametrize("spec", [("data", None), (None, "model"), ("data", "model"),
                                  ("model", "data"), (("data", "model"), None), (None, None)])
def test_visualize_sharding_draws_the_blocks_xla_sharding_names(spec, capsys):
    mesh = strata.Mesh([0, 1, 2, 3], (2, 2), ("data", "model"))
    x = strata.mark_sharding(strata.tensor(np.zeros((4, 8), np.float32)), mesh, spec)
    text = strata.debug.visualize_sharding(x)
    assert capsys.readouterr().out.strip() == text.strip()
    tiles = _hlo_tiles(strata.hlo_sharding_of(x))
    if tiles is None:
        assert "rows 0:4  devices 0,1,2,3" in text
        return
    n_rows = 1 + max(t[0] for t in tiles)
    n_cols = 1 + max(t[1] for t in tiles)
    lines = text.splitlines()[2:]  # past the title and the column header
    assert len(lines) == n_rows
    for (r, c), devices in tiles.items():
        word = "device " if len(devices) == 1 else "devices "
        cells = lines[r].split("  ")
        cells = [v.strip() for v in cells if v.strip()]
        assert cells[0] == f"rows {r * 4 // n_rows}:{(r + 1) * 4 // n_rows}"
        assert cells[1 + c] == word + ",".join(str(d) for d in sorted(devices)), (text, tiles)
    assert n_cols == len(text.splitlines()[1].split("cols")) - 1


def test_an_unsharded_pending_tensor_has_no_sharding_and_compiles_nothing():
    strata.reset_metrics()
    t = strata.tensor(np.ones((4, 4), np.float32)) * 2
    assert strata.sharding_of(t) is None and strata.hlo_sharding_of(t) is None
    assert strata.metrics()["compiles"] == 0
