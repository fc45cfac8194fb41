"""strata.torch.scan against the same loop written out in eager PyTorch: values and gradients
to init, xs and the tensors the body captures, for several lengths, in reverse, with
integer carries, without xs, with random numbers, nested, under torch.compile (one node of one
graph there, or a graph break that says why, and torch's own scan op there), the traced body
kept across calls; and its errors."""
import numpy as np
import pytest
import torch

import strata
import strata.torch as st

RTOL, ATOL = 1e-5, 1e-6


def python_scan(fn, init, xs, reverse=False, length=None):
    """The reference: jax.lax.scan's definition, written out."""
    n = length if xs is None else next(iter(torch.utils._pytree.tree_leaves(xs))).shape[0]
    carry, ys = init, []
    for i in (reversed(range(n)) if reverse else range(n)):
        x = None if xs is None else torch.utils._pytree.tree_map(lambda t: t[i], xs)
        carry, y = fn(carry, x)
        ys.append(y)
    if reverse:
        ys.reverse()
    if ys and ys[0] is not None:
        ys = torch.utils._pytree.tree_map(lambda *t: torch.stack(t), *ys)
    return carry, ys


def close(got, want):
    """Within 1e-5 of want, relative to its largest element (f32 sums in another order)."""
    want = want.detach().numpy()
    scale = float(np.abs(want).max()) if want.size else 0.0
    np.testing.assert_allclose(got.detach().numpy(), want, RTOL, ATOL + RTOL * scale)


def as_accurate(got, eager, exact):
    """got (strata, f32) is within 1e-5 of eager f32 torch relative to the largest element, or
    no further from the f64 loop than eager f32 is (a long recurrence amplifies rounding)."""
    got, eager = got.detach().double().numpy(), eager.detach().double().numpy()
    exact = exact.detach().numpy()
    scale = float(np.abs(exact).max()) if exact.size else 0.0
    if np.abs(got - eager).max(initial=0) <= ATOL + RTOL * scale:
        return
    assert np.abs(got - exact).max() <= 2 * np.abs(eager - exact).max() + ATOL


class Cell(torch.nn.Module):
    """A recurrent step with parameters the scan body captures."""

    def __init__(self, n=5):
        super().__init__()
        self.inp = torch.nn.Linear(n, n)
        self.rec = torch.nn.Linear(n, n, bias=False)
        self.norm = torch.nn.LayerNorm(n)

    def forward(self, carry, x):
        h = self.norm(torch.tanh(self.inp(x) + self.rec(carry["h"])))
        return {"h": h, "steps": carry["steps"] + 1}, {"out": h * 2, "mean": h.mean(-1)}


def leaves_with_grad(cell, init, xs):
    return [init["h"], xs] + list(cell.parameters())


def run_and_grad(scan_fn, cell, init, xs, reverse=False):
    carry, ys = scan_fn(cell, init, xs, reverse=reverse)
    weights = torch.linspace(-1, 1, ys["out"].numel()).reshape(ys["out"].shape)
    loss = carry["h"].sum() * 0.5 + (ys["out"] * weights).sum() + ys["mean"].sum()
    leaves = leaves_with_grad(cell, init, xs)
    grads = torch.autograd.grad(loss, leaves)
    return carry, ys, grads


@pytest.mark.parametrize("n", [0, 1, 7, 64])
@pytest.mark.parametrize("reverse", [False, True])
def test_values_and_gradients_match_the_written_out_loop(n, reverse):
    torch.manual_seed(n)
    cell = Cell()
    init = {"h": torch.randn(3, 5, requires_grad=True), "steps": torch.tensor(0)}
    xs = torch.randn(n, 3, 5, requires_grad=True)
    carry, ys, grads = run_and_grad(
        lambda f, i, x, reverse: st.scan(f, i, x, reverse=reverse), cell, init, xs, reverse)
    want_carry, want_ys, want_grads = run_and_grad(python_scan, cell, init, xs, reverse) \
        if n else (None, None, None)
    # The loop in f64 too: strata's error from it must be as small as eager f32's.
    cell64, init64 = Cell().double(), {"h": init["h"].detach().double().requires_grad_(),
                                       "steps": init["steps"]}
    cell64.load_state_dict({k: v.double() for k, v in cell.state_dict().items()})
    xs64 = xs.detach().double().requires_grad_()
    exact = run_and_grad(python_scan, cell64, init64, xs64, reverse) if n else None
    assert carry["steps"].dtype == torch.int64 and int(carry["steps"]) == n
    assert ys["out"].shape == (n, 3, 5) and ys["mean"].shape == (n, 3)
    if n == 0:  # nothing ran: the carry is init, the gradient to init is the loss's own
        close(carry["h"], init["h"])
        close(grads[0], torch.full((3, 5), 0.5))
        assert all(float(g.abs().sum()) == 0 for g in grads[1:])
        return
    as_accurate(carry["h"], want_carry["h"], exact[0]["h"])
    as_accurate(ys["out"], want_ys["out"], exact[1]["out"])
    as_accurate(ys["mean"], want_ys["mean"], exact[1]["mean"])
    for g, w, e in zip(grads, want_grads, exact[2]):
        as_accurate(g, w, e)


@pytest.mark.parametrize("remat", ["carries", "all", "dots", "dots_no_batch"])
def test_every_remat_policy_gives_the_same_gradients(remat):
    torch.manual_seed(1)
    cell = Cell()
    init = {"h": torch.randn(2, 5, requires_grad=True), "steps": torch.tensor(0)}
    xs = torch.randn(6, 2, 5, requires_grad=True)
    _, _, grads = run_and_grad(lambda f, i, x, reverse: st.scan(f, i, x, remat=remat),
                               cell, init, xs)
    _, _, want = run_and_grad(python_scan, cell, init, xs)
    for g, w in zip(grads, want):
        close(g, w)


def test_a_loop_without_xs_runs_length_steps_and_y_may_be_left_out():
    w = torch.tensor([[0.9, -0.2], [0.1, 0.8]], requires_grad=True)

    def step(c, x):
        assert x is None
        return c @ w, None

    init = torch.tensor([1.0, 2.0], requires_grad=True)
    carry, ys = st.scan(step, init, length=5)
    assert ys is None
    want = init
    for _ in range(5):
        want = want @ w
    close(carry, want)
    g = torch.autograd.grad(carry.sum(), [init, w])
    gw = torch.autograd.grad(want.sum(), [init, w])
    for a, b in zip(g, gw):
        close(a, b)


def test_only_what_needs_a_gradient_gets_one():
    xs = torch.randn(4, 3)
    init = torch.zeros(3, requires_grad=True)
    carry, ys = st.scan(lambda c, x: (c + x, c * x), init, xs)
    assert carry.requires_grad and ys.requires_grad
    (g,) = torch.autograd.grad(carry.sum() + ys.sum(), [init])
    want_c, want_y = python_scan(lambda c, x: (c + x, c * x), init, xs)
    (want,) = torch.autograd.grad(want_c.sum() + want_y.sum(), [init])
    close(g, want)
    with torch.no_grad():
        carry, _ = st.scan(lambda c, x: (c + x, c * x), init, xs)
    assert not carry.requires_grad


def test_dropout_in_the_body_draws_a_new_mask_every_step():
    torch.manual_seed(0)
    drop = torch.nn.Dropout(0.5)
    xs = torch.ones(8, 2000, requires_grad=True)
    _, ys = st.scan(lambda c, x: (c, drop(x)), torch.zeros(()), xs)
    kept = ys != 0
    assert set(torch.unique(ys).tolist()) <= {0.0, 2.0}  # torch's scaling by 1 / (1 - p)
    assert abs(kept.float().mean().item() - 0.5) < 0.02  # the same distribution as torch's
    assert not torch.equal(kept[0], kept[1])  # each step its own mask
    (g,) = torch.autograd.grad(ys.sum(), [xs])
    assert torch.equal(g, kept.float() * 2)  # the gradient goes through the kept elements
    drop.eval()
    _, ys = st.scan(lambda c, x: (c, drop(x)), torch.zeros(()), xs)
    close(ys, xs)


def test_inside_torch_compile_an_integer_carry_is_a_graph_break_that_runs_and_says_why():
    # Torch's scan op cannot be differentiated with an integer carry (the step count): the
    # call runs as its own strata loop between two graphs.
    torch.manual_seed(2)
    cell = Cell()
    xs = torch.randn(5, 2, 5, requires_grad=True)

    def model(xs):
        init = {"h": torch.zeros(2, 5), "steps": torch.tensor(0)}
        carry, ys = st.scan(cell, init, xs * 2)
        return (carry["h"] + ys["out"].sum(0)).square().sum()

    report = st.explain(model, xs)
    assert report.graph_breaks >= 1 and "an integer or bool carry or y" in str(report), report
    compiled = torch.compile(model, backend="strata")
    loss = compiled(xs)
    (g,) = torch.autograd.grad(loss, [xs])

    def reference(xs):
        init = {"h": torch.zeros(2, 5), "steps": torch.tensor(0)}
        carry, ys = python_scan(cell, init, xs * 2)
        return (carry["h"] + ys["out"].sum(0)).square().sum()

    want = reference(xs)
    (gw,) = torch.autograd.grad(want, [xs])
    close(loss, want)
    close(g, gw)


class FloatCell(Cell):
    """Cell without the step count: every carry and y is floating point."""

    def forward(self, carry, x):
        h = self.norm(torch.tanh(self.inp(x) + self.rec(carry["h"])))
        return {"h": h, "sum": carry["sum"] + h}, {"out": h * 2, "mean": h.mean(-1)}


def loss_of(carry, ys):
    weights = torch.linspace(-1, 1, ys["out"].numel()).reshape(ys["out"].shape)
    return (carry["h"].sum() * 0.5 + carry["sum"].square().sum() + (ys["out"] * weights).sum()
            + ys["mean"].sum())


def one_node_of_one_graph(report, steps):
    """Whether strata.torch.explain saw one Dynamo graph (its forward and backward), no graph
    break, and the loop as one scan node in each (none for one step: strata.torch.scan may run
    the first step before torch's scan op, when that op would drop its gradient)."""
    return (report.graph_breaks == 0 and not report.break_reasons
            and [g.kind for g in report.graphs] == ["forward", "backward"]
            and all(g.ops["scan"] in ((0, 1) if steps == 1 else (1,)) for g in report.graphs)
            and not any(g.fallbacks for g in report.graphs))


@pytest.mark.parametrize("n", [1, 7, 64])
@pytest.mark.parametrize("reverse", [False, True])
def test_under_torch_compile_the_scan_is_one_node_of_one_graph(n, reverse):
    torch.manual_seed(n)
    cell = FloatCell()
    init = {"h": torch.randn(3, 5, requires_grad=True), "sum": torch.zeros(3, 5)}
    xs = torch.randn(n, 3, 5, requires_grad=True)

    def model(init, xs):
        return st.scan(cell, init, xs, reverse=reverse)

    report = st.explain(lambda init, xs: loss_of(*model(init, xs)), init, xs)
    assert one_node_of_one_graph(report, n), report
    st.reset()
    leaves = [init["h"], xs] + list(cell.parameters())
    carry, ys = torch.compile(model, backend="strata")(init, xs)
    grads = torch.autograd.grad(loss_of(carry, ys), leaves)
    want_carry, want_ys = python_scan(cell, init, xs, reverse)
    want_grads = torch.autograd.grad(loss_of(want_carry, want_ys), leaves)
    for got, want in [(carry["h"], want_carry["h"]), (carry["sum"], want_carry["sum"]),
                      (ys["out"], want_ys["out"]), (ys["mean"], want_ys["mean"])]:
        close(got, want)
    for g, w in zip(grads, want_grads):
        close(g, w)


def test_under_torch_compile_length_alone_and_y_left_out_are_one_node_too():
    torch.manual_seed(6)
    w = torch.randn(3, 3, requires_grad=True)

    def step(c, x):
        assert x is None
        return {"h": torch.tanh(c["h"] @ w), "unused": None}, None

    def model(h):
        carry, ys = st.scan(step, {"h": h, "unused": None}, length=6)
        assert ys is None and carry["unused"] is None
        return carry["h"].square().sum()

    h = torch.randn(2, 3, requires_grad=True)
    report = st.explain(model, h)
    assert one_node_of_one_graph(report, 6), report
    st.reset()
    got = torch.compile(model, backend="strata")(h)
    want = python_scan(lambda c, x: step(c, None), {"h": h, "unused": None}, None,
                       length=6)[0]["h"].square().sum()
    close(got, want)
    for g, gw in zip(torch.autograd.grad(got, [h, w]), torch.autograd.grad(want, [h, w])):
        close(g, gw)


@pytest.mark.parametrize("case, reason", [
    ("remat", "a remat other than 'carries'"),
    ("no steps", "zero steps"),
    ("integer y", "an integer or bool carry or y"),
    ("dropout", "the body draws random numbers"),
])
def test_under_torch_compile_what_torchs_op_cannot_run_is_a_graph_break_that_says_why(
        case, reason):
    torch.manual_seed(7)
    w = torch.randn(4, 4, requires_grad=True)
    drop = torch.nn.Dropout(0.5)

    def step(c, x):
        h = torch.tanh(c @ w + (drop(x) if case == "dropout" else x))
        return h, ((x > 0).sum() if case == "integer y" else h.sin())

    def loss(carry, ys):
        return carry.square().sum() + (ys.sum() if case == "integer y" else ys.square().sum())

    def model(init, xs):
        return loss(*st.scan(step, init, xs, remat="dots" if case == "remat" else "carries"))

    init = torch.randn(2, 4, requires_grad=True)
    xs = torch.randn(0 if case == "no steps" else 5, 2, 4, requires_grad=True)
    report = st.explain(model, init, xs)
    assert report.graph_breaks >= 1 and reason in "\n".join(report.break_reasons), report
    st.reset()
    got = torch.compile(model, backend="strata")(init, xs)
    got_grads = torch.autograd.grad(got, [init, w])
    if case == "dropout":  # its masks are strata's draws: only check it ran, with gradients
        assert all(bool(torch.isfinite(g).all()) for g in got_grads)
        return
    # With no steps the carry is init and there is no y.
    want = loss(*python_scan(step, init, xs)) if xs.shape[0] else init.square().sum()
    close(got, want)
    for g, gw in zip(got_grads, torch.autograd.grad(want, [init, w], allow_unused=True)):
        close(g, gw if gw is not None else torch.zeros_like(g))


def test_under_torch_compile_symbolic_shapes_are_a_graph_break_that_runs():
    # Torch's scan op fails on symbolic sizes (dynamic=True, or Dynamo's own after a shape
    # changed): the call runs as its own strata loop, for each length.
    from torch._dynamo.utils import counters
    torch.manual_seed(13)
    w = torch.randn(4, 4, requires_grad=True)

    def step(c, x):
        return torch.tanh(c @ w + x), c.sin()

    def loss(carry, ys):
        return carry.square().sum() + ys.square().sum()

    st.reset()
    counters["graph_break"].clear()
    compiled = torch.compile(lambda init, xs: loss(*st.scan(step, init, xs)), backend="strata",
                             dynamic=True)
    for n in (3, 6):
        init, xs = torch.randn(2, 4, requires_grad=True), torch.randn(n, 2, 4)
        got = compiled(init, xs)
        want = loss(*python_scan(step, init, xs))
        close(got, want)
        for g, gw in zip(torch.autograd.grad(got, [init, w]), torch.autograd.grad(want, [init, w])):
            close(g, gw)
    assert any("a tensor of symbolic shape" in reason for reason in counters["graph_break"])


def test_under_torch_compile_a_carry_that_needs_a_gradient_late_is_a_graph_break():
    # s reads the old h: from zeros, s needs a gradient only from the second step on, which
    # torch's scan op would drop (it differentiates a carry only if its init requires grad).
    torch.manual_seed(8)
    w = torch.randn(3, 3, requires_grad=True)

    def step(c, x):
        return (torch.tanh(c[0] @ w + x), c[1] + c[0]), None

    def model(xs):
        (h, s), _ = st.scan(step, (torch.zeros(2, 3), torch.zeros(2, 3)), xs)
        return h.sum() + s.square().sum()

    xs = torch.randn(5, 2, 3)
    report = st.explain(model, xs)
    assert "needs a gradient only after its second step" in str(report), report
    st.reset()
    got = torch.compile(model, backend="strata")(xs)
    (h, s), _ = python_scan(step, (torch.zeros(2, 3), torch.zeros(2, 3)), xs)
    want = h.sum() + s.square().sum()
    close(got, want)
    close(torch.autograd.grad(got, [w])[0], torch.autograd.grad(want, [w])[0])


@pytest.mark.parametrize("outer, inner", [(1, 1), (4, 5), (3, 7)])
def test_a_scan_nested_in_a_body_matches_two_written_out_loops(outer, inner):
    # The inner scan is one node of the outer body, a While loop inside the outer one; values
    # and gradients (to init, xs and a weight only the inner body captures) as the two loops
    # written out give them; an integer y (a count) comes out of the inner loop too.
    torch.manual_seed(outer * 10 + inner)
    w = torch.randn(3, 3, requires_grad=True)

    def inner_step(c, x):
        return torch.tanh(c @ w + x), {"sum": c.sum(), "positive": (x > 0).sum()}

    def outer_step(c, row, scan_fn):
        c2, ys = scan_fn(inner_step, c, row)
        return c2 * 0.9, ys

    init = torch.randn(2, 3, requires_grad=True)
    xs = torch.randn(outer, inner, 2, 3, requires_grad=True)
    carry, ys = st.scan(lambda c, row: outer_step(c, row, st.scan), init, xs)
    want_carry, want_ys = python_scan(lambda c, row: outer_step(c, row, python_scan), init, xs)
    close(carry, want_carry)
    close(ys["sum"], want_ys["sum"])
    assert torch.equal(ys["positive"], want_ys["positive"])
    got = torch.autograd.grad(carry.square().sum() + ys["sum"].sum(), [init, xs, w])
    want = torch.autograd.grad(want_carry.square().sum() + want_ys["sum"].sum(), [init, xs, w])
    for g, gw in zip(got, want):
        close(g, gw)


def test_torchs_own_scan_under_torch_compile_is_one_strata_loop_forward_and_backward():
    from torch._higher_order_ops.scan import scan as torch_scan
    torch.manual_seed(3)
    w = torch.randn(4, 4, requires_grad=True)

    def model(init, xs):
        carry, ys = torch_scan(lambda c, x: (torch.tanh(c @ w + x), c.sin()), init, xs)
        return carry.square().sum() + ys.sum()

    init, xs = torch.randn(2, 4, requires_grad=True), torch.randn(6, 2, 4, requires_grad=True)
    strata.torch.reset()
    loss = torch.compile(model, backend="strata")(init, xs)
    got = torch.autograd.grad(loss, [init, xs, w])
    report = str(strata.torch.explain(model, init, xs))
    assert "0 Dynamo graph break(s), 0 op(s) run by eager PyTorch" in report, report
    assert "backward graph" in report and "scan" in report, report

    def reference(init, xs):
        carry, ys = python_scan(lambda c, x: (torch.tanh(c @ w + x), c.sin()), init, xs)
        return carry.square().sum() + ys.sum()

    want = reference(init, xs)
    close(loss, want)
    for g, gw in zip(got, torch.autograd.grad(want, [init, xs, w])):
        close(g, gw)


def test_under_torch_compile_a_nested_scan_is_one_node_too():
    torch.manual_seed(14)
    w = torch.randn(3, 3, requires_grad=True)

    def inner_step(c, x):
        return torch.tanh(c @ w + x), c.sum(-1)

    def outer_step(c, row, scan_fn):
        c2, ys = scan_fn(inner_step, c, row)
        return c2 * 0.9, ys

    def loss(carry, ys):
        return carry.square().sum() + ys.square().sum()

    def model(init, xs):
        return loss(*st.scan(lambda c, row: outer_step(c, row, st.scan), init, xs))

    init = torch.zeros(2, 3)  # no gradient: both loops start after their first step
    xs = torch.randn(4, 5, 2, 3, requires_grad=True)
    report = st.explain(model, init, xs)
    assert report.graph_breaks == 0 and not any(g.fallbacks for g in report.graphs), report
    st.reset()
    got = torch.compile(model, backend="strata")(init, xs)
    want = loss(*python_scan(lambda c, row: outer_step(c, row, python_scan), init, xs))
    close(got, want)
    for g, gw in zip(torch.autograd.grad(got, [xs, w]), torch.autograd.grad(want, [xs, w])):
        close(g, gw)


def test_a_scan_nested_without_xs_says_it_needs_them():
    with pytest.raises(strata.Error, match="inside another scan's body needs xs"):
        st.scan(lambda c, x: (st.scan(lambda c2, _: (c2 + 1, None), c, length=3)[0], None),
                torch.zeros(2), torch.zeros(4, 2))


# ---- the traced body, kept across calls -----------------------------------------------------

def count_traces(monkeypatch):
    """The bodies strata.torch.scan traces from now on (none kept from earlier tests)."""
    from strata.torch import _scan
    traced = []

    class Counting(_scan._Body):
        def __init__(self, fn, *rest, **kwargs):
            traced.append(fn)
            super().__init__(fn, *rest, **kwargs)

    monkeypatch.setattr(_scan, "_Body", Counting)
    monkeypatch.setattr(_scan, "_BODIES", {})
    return traced


def test_a_second_call_reuses_the_trace_and_reads_the_parameters_anew(monkeypatch):
    # An optimizer's step between the calls changes the parameters fn captures, in place: the
    # second call does not trace fn again, and computes with the new values.
    traced = count_traces(monkeypatch)
    torch.manual_seed(9)
    cell = Cell()
    opt = torch.optim.SGD(cell.parameters(), lr=0.5)
    xs = torch.randn(6, 2, 5, requires_grad=True)
    carries = []
    for _ in range(2):
        init = {"h": torch.zeros(2, 5, requires_grad=True), "steps": torch.tensor(0)}
        carry, ys, grads = run_and_grad(lambda f, i, x, reverse: st.scan(f, i, x), cell, init, xs)
        want_carry, want_ys, want_grads = run_and_grad(python_scan, cell, init, xs)
        close(carry["h"], want_carry["h"])
        close(ys["out"], want_ys["out"])
        for g, w in zip(grads, want_grads):
            close(g, w)
        carries.append(carry["h"].detach())
        for p, g in zip(cell.parameters(), grads[2:]):
            p.grad = g
        opt.step()
    assert len(traced) == 1
    assert not torch.allclose(carries[0], carries[1])  # the step changed what the loop computes


GAIN = 1.0  # a global a body reads


def scaled_step(c, x):
    return torch.tanh(c + x) * GAIN, c.sum()


def test_what_the_trace_read_changing_traces_again(monkeypatch):
    global GAIN
    traced = count_traces(monkeypatch)
    torch.manual_seed(10)
    w = torch.randn(3, 3)
    drop = torch.nn.Dropout(0.5)

    def check(fn, init, xs, traces):
        carry, ys = st.scan(fn, init, xs)
        want_carry, want_ys = python_scan(fn, init, xs)
        close(carry, want_carry)
        close(ys, want_ys)
        assert len(traced) == traces

    def step():  # a new function each call, of the same code, over the same w
        return lambda c, x: (torch.tanh(c @ w + x), c.sum())

    def dropped():
        return lambda c, x: (torch.tanh(c + drop(x)), c.sum())

    # Another number of steps: the same body.
    check(step(), torch.zeros(2, 3), torch.randn(4, 2, 3), 1)
    check(step(), torch.zeros(2, 3), torch.randn(7, 2, 3), 1)
    # Another shape; then w bound to another tensor.
    check(step(), torch.zeros(5, 3), torch.randn(4, 5, 3), 2)
    w = torch.randn(3, 3)
    check(step(), torch.zeros(5, 3), torch.randn(4, 5, 3), 3)
    # A module's mode (its dropout in eval mode draws nothing, so the loop can be compared).
    drop.eval()
    check(dropped(), torch.zeros(2, 3), torch.randn(3, 2, 3), 4)
    check(dropped(), torch.zeros(2, 3), torch.randn(3, 2, 3), 4)
    drop.train()
    st.scan(dropped(), torch.zeros(2, 3), torch.randn(3, 2, 3))
    assert len(traced) == 5
    # A global the body reads.
    check(scaled_step, torch.zeros(2, 3), torch.randn(3, 2, 3), 6)
    GAIN = 0.5
    try:
        check(scaled_step, torch.zeros(2, 3), torch.randn(3, 2, 3), 7)
    finally:
        GAIN = 1.0


class Slotted:
    """An object whose state is not in a __dict__: what it holds cannot be compared."""
    __slots__ = ("scale",)

    def __init__(self, scale):
        self.scale = scale


def test_a_body_that_reaches_what_cannot_be_compared_is_traced_every_call(monkeypatch):
    traced = count_traces(monkeypatch)
    holder = Slotted(2.0)
    xs = torch.randn(3, 2)
    for scale in (2.0, 3.0):
        holder.scale = scale
        carry, _ = st.scan(lambda c, x: (c + x * holder.scale, None), torch.zeros(2), xs)
        close(carry, xs.sum(0) * scale)
    assert len(traced) == 2


# ---- errors ---------------------------------------------------------------------------------

def test_a_carry_that_changes_shape_names_the_leaf_and_both_shapes():
    with pytest.raises(strata.Error, match=r"init\['h'\].*float32\[2, 3\].*float32\[3\]"):
        st.scan(lambda c, x: ({"h": c["h"] + x[:, None]}, None),
                {"h": torch.zeros(3)}, torch.zeros(4, 2))


def test_a_carry_that_changes_dtype_is_refused():
    with pytest.raises(strata.Error, match=r"init.*float64\[3\].*float32\[3\]"):
        st.scan(lambda c, x: (c.double(), None), torch.zeros(3), torch.zeros(4, 3))


def test_writing_into_a_tensor_outside_the_body_is_refused_and_changes_nothing():
    outside = torch.zeros(3)

    def step(c, x):
        outside.add_(x)
        return c, None

    with pytest.raises(strata.Error, match="side effect"):
        st.scan(step, torch.zeros(3), torch.ones(2, 3))
    assert torch.equal(outside, torch.zeros(3))


def test_writing_into_an_argument_is_refused():
    def step(c, x):
        c.add_(x)
        return c, None

    with pytest.raises(strata.Error, match="in place into its argument"):
        st.scan(step, torch.zeros(3), torch.ones(2, 3))


@pytest.mark.parametrize("call, message", [
    (lambda: st.scan(lambda c, x: c, torch.zeros(2), torch.zeros(3, 2)), r"\(carry, y\)"),
    (lambda: st.scan(lambda c, x: (c, None), torch.zeros(2), [torch.zeros(3), torch.zeros(4)]),
     "differ in length"),
    (lambda: st.scan(lambda c, x: (c, None), torch.zeros(2)), "give xs or length"),
    (lambda: st.scan(lambda c, x: (c, None), torch.zeros(2), torch.zeros(3), length=4),
     "length=4 but xs has 3"),
    (lambda: st.scan(lambda c, x: (c, None), torch.zeros(2), torch.zeros(())), "0-d"),
    (lambda: st.scan(lambda c, x: (c, None), torch.zeros(2), length=2, remat="some"), "remat"),
    (lambda: st.scan(lambda c, x: (c, 3.0), torch.zeros(2), length=2), "float in its y"),
])
def test_bad_calls_are_errors_that_say_what(call, message):
    with pytest.raises(strata.Error, match=message):
        call()


def test_a_leaf_that_is_not_a_tensor_is_a_type_error_naming_it():
    with pytest.raises(TypeError, match=r"init\[1\] is a float"):
        st.scan(lambda c, x: (c, None), (torch.zeros(2), 1.0), length=2)


def test_torchs_scan_whose_body_draws_random_numbers_runs_in_torch_not_a_crash():
    from torch._higher_order_ops.scan import scan as torch_scan

    def f(init, xs):
        def step(c, x):
            c = c + x * torch.rand_like(x)
            return c, c.clone()
        return torch_scan(step, init, xs)

    init, xs = torch.zeros(3), torch.ones(5, 3)
    carry, ys = torch.compile(f, backend="strata")(init, xs)
    # Each step adds a uniform draw in [0, 1): the running sums rise within [0, step).
    assert ys.shape == (5, 3)
    steps = torch.arange(1, 6, dtype=torch.float32)[:, None]
    assert bool(((ys >= 0) & (ys < steps)).all())
    assert bool((ys[1:] >= ys[:-1]).all())
    assert torch.equal(carry, ys[-1])
