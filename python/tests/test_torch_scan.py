"""strata.torch.scan against the same loop written out in eager PyTorch: values and gradients
to init, xs and the tensors the body captures, for several lengths, in reverse, with
integer carries, without xs, with random numbers, nested, under torch.compile (and torch's
own scan op there); and its errors."""
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


def test_inside_torch_compile_the_scan_runs_and_gradients_flow():
    torch.manual_seed(2)
    cell = Cell()
    xs = torch.randn(5, 2, 5, requires_grad=True)

    def model(xs):
        init = {"h": torch.zeros(2, 5), "steps": torch.tensor(0)}
        carry, ys = st.scan(cell, init, xs * 2)
        return (carry["h"] + ys["out"].sum(0)).square().sum()

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


def test_a_scan_nested_without_xs_says_it_needs_them():
    with pytest.raises(strata.Error, match="inside another scan's body needs xs"):
        st.scan(lambda c, x: (st.scan(lambda c2, _: (c2 + 1, None), c, length=3)[0], None),
                torch.zeros(2), torch.zeros(4, 2))


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
