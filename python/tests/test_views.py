"""Views: the same program run on strata and on eager torch must leave every
tensor it holds with the same values (writes through x[0], x.T, reshape,
chunk, ... reach the base and every other view of it, as in torch)."""
import gc

import numpy as np
import pytest
import torch

import strata
from strata import _views


def grid(lib, rows=3, cols=4, dtype="float32"):
    return lib.tensor(np.arange(rows * cols, dtype=dtype).reshape(rows, cols))


# Each program returns the tensors whose values must agree.
def write_through_row_of_row(lib):
    x = grid(lib)
    x[0][1] = 99
    return [x]


def write_through_transpose(lib):
    x = grid(lib)
    x.T[0] = 5
    return [x]


def base_write_reaches_view(lib):
    x = grid(lib)
    row = x[1]
    col = x[:, 2]
    x[1, 2] = -7
    return [x, row, col]


def view_add_in_place(lib):
    x = grid(lib)
    v = x[:, 1]
    v += 1
    v *= 3
    return [x, v]


def sibling_views_follow(lib):
    x = grid(lib)
    a = x[1:]
    b = a[0]
    c = x[1]
    t = x.T
    b[0] = 42
    return [x, a, b, c, t]


def reshape_view(lib):
    x = lib.tensor(np.arange(12, dtype="float32"))
    m = x.reshape(3, 4)
    m[1, 1] = -1
    v = x.view(2, 6)
    x[0] = 100
    return [x, m, v]


def strided_slices(lib):
    x = grid(lib, 5, 6)
    x[::2, 1::2] = 0
    v = x[1::3]
    v[:, ::4] = -1
    return [x, v]


def strided_slice_of_transpose(lib):
    x = grid(lib, 4, 5)
    x.T[1::2, ::3] = -3
    return [x]


def chunk_and_split(lib):
    x = grid(lib, 4, 3)
    a, b = x.chunk(2)
    a += 10
    p, q, r = x.split(1, 1)
    r.copy_(lib.tensor(np.full((4, 1), 0.5, dtype="float32")))
    return [x, a, b, p, q, r]


def permute_view(lib):
    x = lib.tensor(np.arange(24, dtype="float32").reshape(2, 3, 4))
    p = x.permute(2, 0, 1)
    p[0] = 1
    p[1, 1] += 5
    return [x, p]


def squeeze_unsqueeze_flatten(lib):
    x = grid(lib)
    u = x.unsqueeze(0)
    u[0, 2, 3] = -2
    s = u.squeeze(0)
    s[0, 0] = -9
    f = x.flatten()
    f[5] = 55
    return [x, u, s, f]


def reshape_of_transpose_copies(lib):
    x = grid(lib)
    y = x.T.reshape(-1)
    y[0] = 123
    return [x, y]


def tensor_index_copies(lib):
    x = grid(lib)
    y = x[[0, 2]]
    y[0] = 77
    return [x, y]


def detach_shares(lib):
    x = grid(lib)
    d = x.detach()
    d[1] = 8
    return [x, d]


def integer_in_place_operators(lib):
    x = grid(lib, 3, 4, "int64")
    r = x[1]
    r //= 2
    c = x[:, 0]
    c %= 3
    x[2] **= 2
    return [x, r, c]


def iterate_and_write(lib):
    x = grid(lib)
    for row in x:
        row *= 2
    return [x]


def scalar_view_in_place(lib):
    x = grid(lib)
    x[1, 2] += 1
    x[0][3] -= 10
    return [x]


def clone_is_apart(lib):
    x = grid(lib)
    c = x.clone()
    c[0] = 1
    x[1] = 2
    return [x, c]


def copy_into_base(lib):
    x = grid(lib)
    v = x[1:, 1:]
    t = v.T
    x.copy_(lib.tensor(np.ones((3, 4), dtype="float32")))
    v[0, 0] = 3
    return [x, v, t]


def mT_view(lib):
    x = lib.tensor(np.arange(24, dtype="float32").reshape(2, 3, 4))
    m = x.mT
    m[1, 2] = -4
    return [x, m]


def none_and_ellipsis(lib):
    x = lib.tensor(np.arange(24, dtype="float32").reshape(2, 3, 4))
    v = x[None, ..., 1]
    v[0, 1] = 6
    return [x, v]


PROGRAMS = [
    write_through_row_of_row, write_through_transpose, base_write_reaches_view,
    view_add_in_place, sibling_views_follow, reshape_view, strided_slices,
    strided_slice_of_transpose, chunk_and_split, permute_view, squeeze_unsqueeze_flatten,
    reshape_of_transpose_copies, tensor_index_copies, detach_shares, integer_in_place_operators,
    iterate_and_write, scalar_view_in_place, clone_is_apart, copy_into_base, mT_view,
    none_and_ellipsis,
]


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.__name__)
def test_the_program_leaves_what_torch_leaves(program):
    expected = [t.numpy() for t in program(torch)]
    got = [np.asarray(t) for t in program(strata)]
    assert len(got) == len(expected)
    for i, (g, e) in enumerate(zip(got, expected)):
        assert g.shape == e.shape, f"tensor {i}"
        np.testing.assert_array_equal(g, e, err_msg=f"tensor {i}")


def test_a_write_through_an_expanded_view_is_an_error_and_changes_nothing():
    x = strata.tensor(np.arange(3, dtype="float32"))
    e = x.expand(2, 3)
    with pytest.raises(strata.Error, match=r"expanded view.*\(2, 3\).*\(3,\)"):
        e[0, 0] = 5
    with pytest.raises(strata.Error, match="expanded view"):
        e += 1
    # torch refuses the same write
    t = torch.arange(3.0).expand(2, 3)
    with pytest.raises(RuntimeError):
        t.add_(1)
    np.testing.assert_array_equal(np.asarray(x), [0, 1, 2])
    np.testing.assert_array_equal(np.asarray(e), [[0, 1, 2], [0, 1, 2]])
    # its base stays writable, and the expanded view follows it
    x[1] = 7
    np.testing.assert_array_equal(np.asarray(e), [[0, 7, 2], [0, 7, 2]])


def test_gradients_flow_through_clone_and_views():
    for lib in (torch, strata):
        x = lib.tensor(np.array([[1.0, 2.0], [3.0, 4.0]], dtype="float32"), requires_grad=True)
        loss = (x.clone() * 2).sum() + (x.T[0] * x[:, 0]).sum()
        loss.backward()
        if lib is torch:
            expected = x.grad.numpy()
        else:
            got = np.asarray(x.grad)
    # d/dx of 2 sum(x) + sum(x[:, 0]^2): 2 everywhere, plus 2 x in column 0
    np.testing.assert_allclose(got, expected)
    np.testing.assert_allclose(got, [[4.0, 2.0], [8.0, 2.0]])


def test_views_that_die_leave_no_links():
    x = grid(strata)
    before = (len(_views._links), len(_views._children))
    views = [x[i] for i in range(3)] + [x.T, x.reshape(12), x[:, 1]]
    views[0][0] = 1
    assert len(_views._links) == before[0] + len(views)
    del views
    gc.collect()
    assert (len(_views._links), len(_views._children)) == before


def test_a_view_keeps_its_base_alive():
    v = grid(strata)[1]
    gc.collect()
    v[0] = -1  # the base is still there to take the write
    np.testing.assert_array_equal(np.asarray(v), [-1, 5, 6, 7])


# ---- random chains of views, each written through, against torch ----------------------------
from hypothesis import given, settings, strategies as st  # noqa: E402


@st.composite
def view_chains(draw):
    """A shape, then up to four view steps, each valid for the shape it gets."""
    shape = draw(st.lists(st.integers(1, 4), min_size=1, max_size=3))
    steps, dims = [], list(shape)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["int", "slice", "T", "permute", "unsqueeze", "reshape",
                                     "split_dim", "merge_dims", "squeeze", "expand"]))
        if kind in ("int", "slice") and dims:
            d = draw(st.integers(0, len(dims) - 1))
            if kind == "int":
                i = draw(st.integers(-dims[d], dims[d] - 1))
                steps.append(("int", d, i))
                dims.pop(d)
            else:
                start = draw(st.integers(0, dims[d] - 1))
                step = draw(st.integers(1, 3))
                steps.append(("slice", d, start, step))
                dims[d] = len(range(start, dims[d], step))
        elif kind == "T" and len(dims) == 2:
            steps.append(("T",))
            dims.reverse()
        elif kind == "permute" and dims:
            order = draw(st.permutations(range(len(dims))))
            steps.append(("permute", tuple(order)))
            dims = [dims[o] for o in order]
        elif kind == "unsqueeze":
            d = draw(st.integers(0, len(dims)))
            steps.append(("unsqueeze", d))
            dims.insert(d, 1)
        elif kind == "reshape":
            steps.append(("reshape", (-1,)))
            dims = [int(np.prod(dims))]
        elif kind == "split_dim" and dims:
            d = draw(st.integers(0, len(dims) - 1))
            a = draw(st.sampled_from([f for f in range(1, dims[d] + 1) if dims[d] % f == 0]))
            dims = dims[:d] + [a, dims[d] // a] + dims[d + 1:]
            steps.append(("reshape", tuple(dims)))
        elif kind == "merge_dims" and len(dims) >= 2:
            d = draw(st.integers(0, len(dims) - 2))
            dims = dims[:d] + [dims[d] * dims[d + 1]] + dims[d + 2:]
            steps.append(("reshape", tuple(dims)))
        elif kind == "squeeze" and 1 in dims:
            d = dims.index(1)
            steps.append(("squeeze", d))
            dims.pop(d)
        elif kind == "expand" and 1 in dims:
            d = dims.index(1)
            dims = list(dims)
            dims[d] = 3
            steps.append(("expand", tuple(dims)))
    write = draw(st.sampled_from(["setitem", "iadd", "copy"]))
    return shape, steps, write


def _apply(x, step):
    kind = step[0]
    if kind == "int":
        return x[(slice(None),) * step[1] + (step[2],)]
    if kind == "slice":
        return x[(slice(None),) * step[1] + (slice(step[2], None, step[3]),)]
    if kind == "T":
        return x.T
    if kind == "permute":
        return x.permute(*step[1])
    if kind == "unsqueeze":
        return x.unsqueeze(step[1])
    if kind == "squeeze":
        return x.squeeze(step[1])
    if kind == "expand":
        return x.expand(*step[1])
    return x.reshape(*step[1])


def _run_chain(lib, shape, steps, write):
    base = lib.tensor(np.arange(int(np.prod(shape)), dtype="float32").reshape(shape))
    chain = [base]
    for step in steps:
        chain.append(_apply(chain[-1], step))
    last = chain[-1]
    if any(step[0] == "expand" for step in steps):
        # strata refuses every write through an expanded view, torch some (by op and
        # strides): both write to a clone, whose reads of the base still count
        last = chain[-1] = last.clone()
    if write == "setitem":
        last[...] = -1
    elif write == "iadd":
        last += 100
    else:
        last.copy_(lib.tensor(np.full(tuple(last.shape), 7, dtype="float32")))
    base[(0,) * len(shape)] = 1000  # and a write to the base, which every view sees
    return chain


@settings(max_examples=150, deadline=None)
@given(view_chains())
def test_any_chain_of_views_writes_through_as_torch(chain):
    shape, steps, write = chain
    expected = _run_chain(torch, shape, steps, write)
    got = _run_chain(strata, shape, steps, write)
    for i, (g, e) in enumerate(zip(got, expected)):
        # torch's reshape of a strided view copies: the same rule decides both
        np.testing.assert_array_equal(np.asarray(g), e.numpy(), err_msg=f"step {i} of {steps}")
