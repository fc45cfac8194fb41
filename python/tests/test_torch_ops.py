"""Every ATen op strata lowers, against eager PyTorch, in the style of PyTorch's
OpInfo tests: sampled inputs per dtype (f32, bf16, integers, bool where the op
takes them), forward values and, for floating inputs, gradients. Each sample
goes through AOTAutograd with strata's compilers (no Dynamo), and must run
entirely on strata (no op may fall back to eager PyTorch). The last test
checks that the samples reached every op in the lowering table."""
import functools
import math

import pytest
import torch
import torch.nn.functional as F
from torch._functorch.aot_autograd import aot_function

import strata
import strata.torch
from strata.torch import _backend, _lowerings

aten = torch.ops.aten
SEEN = set()  # ATen op names the samples reached (for the coverage test)


def strata_function(fn):
    return aot_function(
        fn,
        fw_compiler=functools.partial(_backend.compile_aten, kind="forward"),
        bw_compiler=functools.partial(_backend.compile_aten, kind="backward"),
        inference_compiler=functools.partial(_backend.compile_aten, kind="inference"),
        decompositions=_backend.decompositions())


@pytest.fixture(autouse=True)
def whole_graphs_on_strata():
    """Every graph a test makes runs on strata whole (no op falls back to eager
    PyTorch); the ops they hold count towards the coverage test."""
    before = len(_backend.REPORTS)
    yield
    for r in _backend.REPORTS[before:]:
        SEEN.update(r.ops)
        assert not r.fallbacks, f"ops fell back to eager PyTorch: {dict(r.fallbacks)}"


def run_on_strata(fn, *args):
    before = len(_backend.REPORTS)
    out = strata_function(fn)(*args)
    assert len(_backend.REPORTS) > before, "nothing was compiled"
    return out


def tolerance(dtype):
    return {torch.bfloat16: (2e-2, 2e-2), torch.float16: (2e-3, 2e-3)}.get(dtype, (2e-5, 2e-5))


def assert_close(got, want, dtype=torch.float32):
    if isinstance(want, (tuple, list)):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert_close(g, w, dtype)
        return
    if not isinstance(want, torch.Tensor):
        assert got == want
        return
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    if want.dtype in (torch.bool, torch.int64, torch.int32, torch.uint8, torch.int8):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    else:
        rtol, atol = tolerance(dtype)
        torch.testing.assert_close(got, want, rtol=rtol, atol=atol, equal_nan=True)


FLOATS = (torch.float32, torch.bfloat16)
INTS = (torch.int64, torch.int32)


def make(shape, dtype, low=-2.0, high=2.0, seed=0):
    g = torch.Generator().manual_seed(seed + 7 * len(shape))
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype in INTS or dtype == torch.uint8:
        return torch.randint(int(max(low, 0 if dtype == torch.uint8 else low)), int(high) + 3,
                             shape, generator=g, dtype=dtype)
    return (torch.rand(shape, generator=g) * (high - low) + low).to(dtype)


class Case:
    def __init__(self, name, fn, shapes, dtypes=FLOATS, grad=True, low=-2.0, high=2.0,
                 extra=None):
        self.name, self.fn, self.shapes, self.dtypes = name, fn, shapes, dtypes
        self.grad, self.low, self.high, self.extra = grad, low, high, extra or (lambda: ())


def elementwise(name, fn, dtypes=FLOATS, low=-2.0, high=2.0, grad=True, shapes=((3, 5),)):
    return Case(name, fn, shapes, dtypes, grad, low, high)


CASES = [
    # unary
    elementwise("abs", torch.abs, FLOATS + INTS),
    elementwise("neg", torch.neg, FLOATS + INTS),
    elementwise("exp", torch.exp),
    elementwise("log", torch.log, low=0.1),
    elementwise("log1p", torch.log1p, low=-0.5),
    elementwise("expm1", torch.expm1),
    elementwise("tanh", torch.tanh),
    elementwise("sigmoid", torch.sigmoid),
    elementwise("sqrt", torch.sqrt, low=0.1),
    elementwise("rsqrt", torch.rsqrt, low=0.1),
    elementwise("sin", torch.sin),
    elementwise("cos", torch.cos),
    elementwise("erf", torch.erf),
    elementwise("floor", torch.floor, grad=False),
    elementwise("ceil", torch.ceil, grad=False),
    elementwise("sign", torch.sign, FLOATS + INTS, grad=False),
    elementwise("relu", torch.relu, FLOATS + INTS),
    elementwise("silu", F.silu),
    elementwise("gelu", F.gelu),
    elementwise("gelu_tanh", lambda x: F.gelu(x, approximate="tanh")),
    elementwise("reciprocal", torch.reciprocal, low=0.5),
    elementwise("logical_not", torch.logical_not, (torch.bool, torch.float32, torch.int64),
                grad=False),
    elementwise("bitwise_not", torch.bitwise_not, (torch.bool, torch.int64), grad=False),
    elementwise("isnan_isinf", lambda x: torch.isnan(x / (x - x)) | torch.isinf(1 / (x - x)),
                grad=False),
    elementwise("hardtanh", F.hardtanh),
    elementwise("tan", torch.tan, low=-1.2, high=1.2),
    elementwise("atan", torch.atan, low=-4, high=4),
    elementwise("asin", torch.asin, low=-0.95, high=0.95),
    elementwise("acos", torch.acos, low=-0.95, high=0.95),
    elementwise("sinh_cosh", lambda x: torch.sinh(x) + torch.cosh(x) * 2),
    elementwise("asinh", torch.asinh, low=-20, high=20),
    elementwise("acosh", torch.acosh, low=1.1, high=5),
    elementwise("atanh", torch.atanh, low=-0.9, high=0.9),
    elementwise("log2_log10", lambda x: torch.log2(x) + torch.log10(x) * 3, low=0.1),
    elementwise("trunc", torch.trunc, grad=False, low=-5, high=5),
    elementwise("round", lambda x: torch.round(x * 2), grad=False, low=-5, high=5),
    elementwise("round_halves", lambda x: torch.round(torch.floor(x * 4) / 2), grad=False,
                low=-5, high=5),
    elementwise("elu", F.elu),
    elementwise("leaky_relu", lambda x: F.leaky_relu(x, 0.2)),
    elementwise("fill", lambda x: x.clone().fill_(3.0) * x),
    elementwise("clamp", lambda x: torch.clamp(x, -0.5, 0.7), FLOATS + INTS),
    elementwise("clamp_min", lambda x: torch.clamp_min(x, 0.2)),
    elementwise("pow_scalar", lambda x: x ** 3),
    elementwise("pow_half", lambda x: x ** 0.5, low=0.1),
    elementwise("rpow", lambda x: 2.0 ** x),
    elementwise("tanh_grad", lambda x: torch.tanh(x) * 2),
    # binary
    Case("add", lambda a, b: a + b * 2, ((3, 5), (5,)), FLOATS + INTS),
    Case("add_alpha", lambda a, b: torch.add(a, b, alpha=3), ((3, 5), (3, 5)), FLOATS + INTS),
    Case("sub", lambda a, b: a - b, ((3, 5), (3, 1)), FLOATS + INTS),
    Case("rsub", lambda a: 1 - a, ((3, 5),), FLOATS + INTS),
    Case("mul", lambda a, b: a * b, ((3, 5), (3, 5)), FLOATS + INTS),
    Case("div", lambda a, b: a / b, ((3, 5), (3, 5)), FLOATS, low=0.5),
    Case("div_ints", lambda a, b: a / b, ((3, 5), (3, 5)), INTS, grad=False, low=1),
    Case("floor_divide", lambda a, b: torch.div(a, b, rounding_mode="floor"), ((4, 5), (4, 5)),
         (torch.float32, torch.int64), grad=False, low=1),
    Case("trunc_divide", lambda a, b: torch.div(a - 3, b, rounding_mode="trunc"),
         ((4, 5), (4, 5)), (torch.float32, torch.int64), grad=False, low=1),
    Case("remainder", lambda a, b: torch.remainder(a, b), ((4, 5), (4, 5)),
         (torch.float32, torch.int64), grad=False, low=1),
    Case("fmod", lambda a, b: torch.fmod(a - 3, b), ((4, 5), (4, 5)),
         (torch.float32, torch.int64), grad=False, low=1),
    Case("maximum", torch.maximum, ((3, 5), (3, 5)), FLOATS + INTS),
    Case("minimum", torch.minimum, ((3, 5), (3, 5)), FLOATS + INTS),
    Case("pow_tensor", lambda a, b: a ** b, ((3, 5), (3, 5)), (torch.float32,), low=0.5),
    Case("compare", lambda a, b: torch.stack([a == b, a != b, a < b, a <= b, a > b, a >= b]),
         ((3, 5), (3, 5)), FLOATS + INTS, grad=False),
    Case("compare_scalar", lambda a: torch.stack([a == 1, a != 1, a < 1, a > 0]),
         ((3, 5),), FLOATS + INTS, grad=False),
    Case("logical", lambda a, b: torch.stack([torch.logical_and(a, b), torch.logical_or(a, b),
                                              torch.logical_xor(a, b)]),
         ((3, 5), (3, 5)), (torch.bool, torch.float32), grad=False),
    Case("bitwise", lambda a, b: torch.stack([a & b, a | b, a ^ b]), ((3, 5), (3, 5)),
         (torch.int64, torch.int32, torch.bool), grad=False),
    Case("where", lambda c, a, b: torch.where(c > 0, a, b), ((3, 5), (3, 5), (5,)), FLOATS),
    Case("where_scalar", lambda c, a: torch.where(c > 0, a, 0.5), ((3, 5), (3, 5)), FLOATS),
    Case("masked_fill", lambda a: a.masked_fill(a > 0.5, -1.0), ((3, 5),), FLOATS),
    # reductions
    Case("sum", lambda x: x.sum(dim=1), ((3, 5),), FLOATS + INTS + (torch.bool,)),
    Case("sum_all", lambda x: x.sum(), ((3, 5),), FLOATS + INTS),
    Case("sum_keepdim", lambda x: x.sum(dim=(0, 2), keepdim=True), ((2, 3, 4),)),
    Case("mean", lambda x: x.mean(dim=-1), ((3, 5),)),
    Case("mean_all", lambda x: x.mean(), ((3, 5),)),
    Case("amax", lambda x: x.amax(dim=1), ((3, 5),), FLOATS + INTS),
    Case("amin", lambda x: x.amin(dim=(0, 1)), ((3, 5),), FLOATS + INTS),
    Case("max_dim", lambda x: x.max(dim=1), ((3, 5),), FLOATS + INTS),
    Case("min_dim", lambda x: x.min(dim=0, keepdim=True), ((3, 5),), FLOATS + INTS),
    Case("max_all", lambda x: x.max(), ((3, 5),), FLOATS + INTS),
    Case("argmax", lambda x: torch.stack([x.argmax(), x.argmin()]), ((3, 5),),
         FLOATS + INTS, grad=False),
    Case("argmax_dim", lambda x: x.argmax(dim=1), ((3, 5),), FLOATS + INTS, grad=False),
    Case("var", lambda x: torch.var(x, dim=1), ((3, 5),), (torch.float32,)),
    Case("var_mean", lambda x: torch.var_mean(x, dim=0, correction=0), ((3, 5),),
         (torch.float32,)),
    Case("any_all", lambda x: torch.stack([(x > 1).any(dim=1), (x > -1).all(dim=1)]),
         ((3, 5),), FLOATS, grad=False),
    Case("prod", lambda x: x.prod(dim=1), ((3, 5),), (torch.float32,)),
    Case("cumsum", lambda x: x.cumsum(dim=1), ((3, 5),), FLOATS + INTS),
    Case("sort", lambda x: torch.sort(x, dim=1, descending=True), ((3, 5),), FLOATS + INTS),
    # (Which of equal elements topk picks is unspecified: compare what it picks.)
    Case("topk", lambda x: (torch.topk(x, 2, dim=0).values,
                            x.gather(0, torch.topk(x, 2, dim=0).indices)), ((4, 5),),
         FLOATS + INTS),
    Case("cumprod", lambda x: x.cumprod(dim=0), ((3, 5),), (torch.float32,)),
    # linear algebra
    Case("mm", lambda a, b: a @ b, ((3, 4), (4, 5))),
    Case("bmm", torch.bmm, ((2, 3, 4), (2, 4, 5))),
    Case("matmul_4d", lambda a, b: a @ b, ((2, 2, 3, 4), (2, 2, 4, 5))),
    Case("addmm", lambda c, a, b: torch.addmm(c, a, b, beta=0.5, alpha=2.0),
         ((5,), (3, 4), (4, 5))),
    Case("linear", lambda x, w, b: F.linear(x, w, b), ((2, 3, 4), (5, 4), (5,))),
    Case("baddbmm", lambda c, a, b: torch.baddbmm(c, a, b), ((2, 3, 5), (2, 3, 4), (2, 4, 5))),
    Case("dot", torch.dot, ((6,), (6,))),
    # shapes
    Case("view", lambda x: x.view(5, 3).t() * 2, ((3, 5),), FLOATS + INTS),
    Case("reshape", lambda x: x.reshape(-1).reshape(5, 3), ((3, 5),)),
    Case("permute", lambda x: x.permute(2, 0, 1), ((2, 3, 4),), FLOATS + INTS),
    Case("transpose", lambda x: x.transpose(0, 2) * 1, ((2, 3, 4),)),
    Case("expand", lambda x: x.expand(4, 3, 5) * 1, ((3, 1),)),
    Case("squeeze_unsqueeze", lambda x: x.squeeze(1).unsqueeze(0) * 2, ((3, 1, 5),)),
    Case("squeeze_all", lambda x: x.squeeze() * 2, ((1, 3, 1, 5),)),
    Case("cat", lambda a, b: torch.cat([a, b, a], dim=1), ((3, 2), (3, 4)), FLOATS + INTS),
    Case("stack", lambda a, b: torch.stack([a, b], dim=1), ((3, 2), (3, 2))),
    Case("slice", lambda x: x[1:, ::2] * 1, ((4, 6),), FLOATS + INTS),
    Case("slice_negative", lambda x: x[-3:-1] * 1, ((5, 2),)),
    Case("select", lambda x: x[2] + x[:, -1].sum(), ((4, 6),)),
    Case("split", lambda x: [t * (i + 1) for i, t in enumerate(x.split(2, dim=1))], ((3, 5),)),
    Case("split_sizes", lambda x: [t * 2 for t in x.split([1, 4], dim=1)], ((3, 5),)),
    Case("unbind", lambda x: [t * 2 for t in x.unbind(0)], ((3, 5),)),
    Case("chunk", lambda x: [t * 2 for t in x.chunk(3, dim=0)], ((6, 2),)),
    Case("flip", lambda x: x.flip(0, 1) * 1, ((3, 5),), FLOATS + INTS),
    Case("roll", lambda x: torch.roll(x, shifts=(1, -2), dims=(0, 1)) * 1, ((3, 5),)),
    Case("pad", lambda x: F.pad(x, (1, 2, 0, 1), value=0.5), ((3, 5),)),
    Case("pad_negative", lambda x: F.pad(x, (-1, 2)), ((3, 5),)),
    Case("repeat", lambda x: x.repeat(2, 1, 3), ((3, 2),)),
    Case("tril_triu", lambda x: torch.tril(x, -1) + torch.triu(x, 1) * 2, ((4, 5),)),
    Case("diagonal", lambda x: torch.diagonal(x, 1) * 2 + torch.diagonal(x, -1, 0, 1).sum(),
         ((4, 5),)),
    Case("diagonal_3d", lambda x: torch.diagonal(x, 0, 1, 2) * 2, ((2, 3, 4),)),
    Case("flatten", lambda x: torch.flatten(x, 1) * 2, ((2, 3, 4),)),
    Case("contiguous_clone", lambda x: x.t().contiguous().clone() * 2, ((3, 5),)),
    # gathers and scatters
    Case("index_select", lambda x: x.index_select(0, torch.tensor([2, 0, 2])), ((4, 3),),
         FLOATS + INTS),
    Case("gather", lambda x: torch.gather(x, 1, torch.tensor([[0, 2], [1, 1], [3, 0]])),
         ((3, 4),), FLOATS + INTS),
    Case("scatter_add", lambda x, s: x.scatter_add(1, torch.tensor([[0, 0, 2], [1, 3, 3]]), s),
         ((2, 4), (2, 3))),
    Case("scatter", lambda x, s: x.scatter(1, torch.tensor([[0, 1], [3, 2]]), s),
         ((2, 4), (2, 2))),
    Case("scatter_value", lambda x: x.scatter(0, torch.tensor([[1, 0, 2]]), 5.0), ((3, 3),)),
    # one element per row (nll_loss's gradient): a compare with the positions
    Case("scatter_one_per_row", lambda x: x.scatter(1, torch.tensor([[2], [0], [3]]), -1.0),
         ((3, 4),), FLOATS + INTS),
    Case("scatter_one_per_row_src", lambda x, s: x.scatter(1, torch.tensor([[2], [0], [3]]), s),
         ((3, 4), (3, 1))),
    # a larger src is read at the index's positions (torch's own backward refuses it)
    Case("scatter_one_per_row_wide_src", lambda x, s: x.scatter(1, torch.tensor([[2], [0], [3]]),
                                                                s), ((3, 4), (4, 2)), grad=False),
    Case("index_add", lambda x, s: x.index_add(0, torch.tensor([0, 2, 0]), s), ((3, 2), (3, 2))),
    Case("embedding", lambda w: F.embedding(torch.tensor([[1, 3], [0, 1]]), w), ((4, 3),)),
    Case("one_hot", lambda x: F.one_hot(torch.tensor([[2, 0], [1, 2]]), 3) * x, ((2, 2, 3),)),
    # what the backend puts in F.one_hot's place in Dynamo's graph (its range check kept)
    Case("strata_one_hot", lambda x: torch.ops.strata.one_hot(torch.tensor([[2, 0], [1, 2]]), 3)
         * x, ((2, 2, 3),)),
    Case("embedding_padding", lambda w: F.embedding(torch.tensor([[1, 3], [0, 1]]), w,
                                                    padding_idx=1), ((4, 3),)),
    Case("index_tensor", lambda x: x[torch.tensor([2, -1, 0])], ((4, 3),), FLOATS + INTS),
    Case("index_two", lambda x: x[torch.tensor([0, 2]), torch.tensor([1, 0])], ((3, 4),)),
    Case("index_middle", lambda x: x[:, torch.tensor([[2, 0], [1, 1]])], ((2, 3, 4),)),
    Case("index_put_acc", lambda x, v: torch.index_put(x, (torch.tensor([0, 2, 0]),), v, True),
         ((3, 2), (3, 2))),
    Case("index_put", lambda x, v: torch.index_put(x, (torch.tensor([2, 0]),), v), ((3, 2), (2,))),
    Case("index_put_two", lambda x, v: x.index_put((torch.tensor([0, 1]), torch.tensor([1, 3])),
                                                   v, True), ((2, 4, 3), (2, 3))),
    Case("slice_scatter", lambda x, s: torch.slice_scatter(x, s, 1, 1, 5, 2), ((3, 6), (3, 2))),
    # unit steps: a middle, a head, a tail (negative bounds), the whole, on an inner dim
    Case("slice_scatter_unit", lambda x, s: torch.slice_scatter(x, s, 1, 2, 5), ((3, 6), (3, 3)),
         FLOATS + INTS),
    Case("slice_scatter_head", lambda x, s: torch.slice_scatter(x, s, 0, None, 2), ((4, 3), (2, 3))),
    Case("slice_scatter_tail", lambda x, s: torch.slice_scatter(x, s, -1, -3), ((2, 3, 5), (2, 3, 3))),
    Case("slice_scatter_whole", lambda x, s: torch.slice_scatter(x, s, 1), ((2, 4), (2, 4))),
    # what a slice's gradient is: the slice put into zeros
    Case("slice_backward", lambda x: (x[..., 1:3] * 2).sum() + x[..., 2:].pow(2).sum(),
         ((2, 3, 4),)),
    Case("select_scatter", lambda x, s: torch.select_scatter(x, s, 0, 1), ((3, 4), (4,))),
    # creation (scaled by an input so the graph has one)
    Case("full", lambda x: x + torch.full((3, 5), 2.5), ((3, 5),)),
    Case("zeros_ones", lambda x: x * torch.ones(3, 5) + torch.zeros(5), ((3, 5),)),
    Case("like", lambda x: torch.zeros_like(x) + torch.ones_like(x) * x + torch.full_like(x, 2),
         ((3, 5),)),
    Case("new", lambda x: x.new_zeros(3, 5) + x.new_ones(5) + x.new_full((5,), 3.0) + x,
         ((3, 5),)),
    Case("empty_filled", lambda x: torch.empty(3, 5).fill_(1.5) * x, ((3, 5),)),
    Case("empty_strided", lambda x: torch.empty_strided((3, 5), (5, 1)).fill_(2.0) * x
         + x.new_empty_strided((3, 5), (5, 1)).fill_(1.0), ((3, 5),)),
    Case("arange", lambda x: x * torch.arange(5) + torch.arange(1, 10, 2) * 0.5, ((3, 5),)),
    Case("arange_float", lambda x: x * torch.arange(0.0, 2.5, 0.5), ((5,),)),
    Case("scalar_tensor", lambda x: x * torch.tensor(3.0), ((3, 5),)),
    Case("to_dtype", lambda x: (x.to(torch.float64) * 2).to(torch.float32) + x.to(torch.int64),
         ((3, 5),), (torch.float32,), grad=False),
    Case("prims_convert", lambda x: torch.ops.prims.convert_element_type(x, torch.float64) * 2,
         ((3, 5),), (torch.float32,), grad=False),
    Case("to_bf16", lambda x: x.to(torch.bfloat16).to(torch.float32) * x, ((3, 5),),
         (torch.float32,)),
    # neural network ops
    Case("softmax", lambda x: torch.softmax(x, dim=-1), ((3, 5),)),
    Case("log_softmax", lambda x: torch.log_softmax(x, dim=0), ((3, 5),)),
    Case("layer_norm", lambda x, w, b: F.layer_norm(x, (5,), w, b), ((2, 3, 5), (5,), (5,)),
         (torch.float32,)),
    Case("layer_norm_2d", lambda x: F.layer_norm(x, (3, 5)), ((2, 3, 5),), (torch.float32,)),
    Case("batch_norm_train", lambda x, w, b: F.batch_norm(
        x, torch.zeros(3), torch.ones(3), w, b, training=True), ((4, 3, 5, 5), (3,), (3,)),
        (torch.float32,)),
    Case("batch_norm_no_stats", lambda x: F.batch_norm(x, None, None, training=True),
         ((4, 3, 5),), (torch.float32,)),
    Case("batch_norm_eval", lambda x, w, b: F.batch_norm(
        x, torch.full((3,), 0.1), torch.full((3,), 2.0), w, b, training=False),
        ((4, 3, 5, 5), (3,), (3,)), (torch.float32,)),
    Case("group_norm", lambda x, w, b: F.group_norm(x, 2, w, b), ((2, 4, 3, 3), (4,), (4,)),
         (torch.float32,)),
    Case("conv2d", lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1),
         ((2, 3, 8, 8), (4, 3, 3, 3), (4,)), (torch.float32,)),
    Case("conv2d_groups", lambda x, w: F.conv2d(x, w, padding=(1, 0), dilation=2, groups=2),
         ((1, 4, 7, 7), (6, 2, 3, 3)), (torch.float32,)),
    Case("conv1d", lambda x, w: F.conv1d(x, w, padding=2), ((2, 3, 9), (4, 3, 5)),
         (torch.float32,)),
    Case("max_pool2d", lambda x: F.max_pool2d(x, 2), ((2, 3, 6, 6),), (torch.float32,)),
    Case("max_pool3d", lambda x: F.max_pool3d(x, 2), ((1, 2, 4, 4, 4),), (torch.float32,)),
    Case("avg_pool3d", lambda x: F.avg_pool3d(x, 2), ((1, 2, 4, 4, 4),), (torch.float32,)),
    Case("max_pool2d_stride", lambda x: F.max_pool2d(x, 3, stride=2, padding=1),
         ((1, 2, 7, 7),), (torch.float32,)),
    Case("avg_pool2d", lambda x: F.avg_pool2d(x, 2, stride=1, padding=1), ((2, 3, 6, 6),),
         (torch.float32,)),
    Case("adaptive_avg_pool2d", lambda x: F.adaptive_avg_pool2d(x, (2, 3)), ((2, 3, 4, 6),),
         (torch.float32,)),
    Case("cross_entropy", lambda x: F.cross_entropy(x, torch.tensor([1, 0, 4])), ((3, 5),),
         (torch.float32,)),
    Case("cross_entropy_ignore", lambda x: F.cross_entropy(
        x, torch.tensor([1, -100, 4, 2]), reduction="sum"), ((4, 5),), (torch.float32,)),
    Case("nll_none", lambda x: F.nll_loss(F.log_softmax(x, 1), torch.tensor([1, 0, 2]),
                                          reduction="none"), ((3, 5),), (torch.float32,)),
    Case("mse", lambda a, b: F.mse_loss(a, b), ((3, 5), (3, 5)), (torch.float32,)),
    Case("sdpa", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
         ((2, 2, 5, 4), (2, 2, 5, 4), (2, 2, 5, 4)), (torch.float32,)),
    Case("sdpa_mask", lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
         ((1, 2, 4, 4), (1, 2, 6, 4), (1, 2, 6, 4), (4, 6)), (torch.float32,)),
    Case("sdpa_scale", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, scale=0.3),
         ((1, 2, 4, 4), (1, 2, 6, 4), (1, 2, 6, 4)), (torch.float32,)),
    # Equal lengths and no mask: strata's fused kernel, each way.
    Case("sdpa_fused", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, scale=0.4),
         ((2, 3, 7, 8), (2, 3, 7, 8), (2, 3, 7, 8)), (torch.float32, torch.bfloat16)),
    Case("sdpa_fused_causal", lambda q, k, v: F.scaled_dot_product_attention(q, k, v,
                                                                             is_causal=True),
         ((1, 4, 9, 16), (1, 4, 9, 16), (1, 4, 9, 16)), (torch.float32, torch.bfloat16)),
    # Hugging Face's masks (an additive [B, 1, S, S] of 0 and the dtype's min, a padded key
    # masked), a bool one and a [S, S] one: the fused kernel with its mask, each way.
    Case("sdpa_fused_hf_mask", lambda q, k, v: F.scaled_dot_product_attention(
        q, k, v, attn_mask=_hf_mask(q.dtype), enable_gqa=True),
         ((2, 4, 9, 16), (2, 2, 9, 16), (2, 2, 9, 16)),
         (torch.float32, torch.bfloat16)),
    Case("sdpa_fused_bool_mask", lambda q, k, v: F.scaled_dot_product_attention(
        q, k, v, attn_mask=_hf_mask(torch.float32) == 0), ((2, 3, 9, 8), (2, 3, 9, 8),
                                                            (2, 3, 9, 8)), (torch.float32,)),
    Case("sdpa_fused_2d_mask", lambda q, k, v: F.scaled_dot_product_attention(
        q, k, v, attn_mask=_hf_mask(torch.float32)[0, 0] * 0.01, is_causal=False),
         ((1, 2, 9, 8), (1, 2, 9, 8), (1, 2, 9, 8)), (torch.float32,)),
]


def _hf_mask(dtype, batch=2, seq=9):
    """Hugging Face's 4-d attention mask: causal, and batch 1's key 0 padded."""
    keep = torch.ones(seq, seq).tril().bool().expand(batch, 1, seq, seq).clone()
    keep[1, :, :, 0] = False
    keep[1, :, 0, 0] = True  # every row sees a key
    return torch.zeros(batch, 1, seq, seq, dtype=dtype).masked_fill(~keep, torch.finfo(dtype).min)


def sample_inputs(case, dtype):
    return [make(s, dtype, case.low, case.high, seed=i) for i, s in enumerate(case.shapes)]


@pytest.mark.parametrize("case,dtype", [(c, d) for c in CASES for d in c.dtypes],
                         ids=lambda v: v.name if isinstance(v, Case) else str(v).split(".")[-1])
def test_forward_matches_eager(case, dtype):
    inputs = sample_inputs(case, dtype)
    want = case.fn(*inputs)
    got = run_on_strata(case.fn, *inputs)
    assert_close(got, want, dtype)


def _loss(out):
    outs = out if isinstance(out, (tuple, list)) else [out]
    total = 0
    for i, o in enumerate(outs):
        if isinstance(o, torch.Tensor) and o.is_floating_point():
            total = total + (o * (i + 1) * torch.linspace(-1, 1, o.numel()).reshape(o.shape)).sum()
    return total


@pytest.mark.parametrize("case", [c for c in CASES if c.grad], ids=lambda c: c.name)
def test_gradient_matches_eager(case):
    inputs = sample_inputs(case, torch.float32)
    ours = [x.clone().requires_grad_() for x in inputs]
    theirs = [x.clone().requires_grad_() for x in inputs]
    _loss(run_on_strata(case.fn, *ours)).backward()
    _loss(case.fn(*theirs)).backward()
    for a, b in zip(ours, theirs):
        assert (a.grad is None) == (b.grad is None)
        if b.grad is not None:
            torch.testing.assert_close(a.grad, b.grad, rtol=2e-5, atol=2e-5)


def test_dropout_keeps_torchs_distribution_and_scale():
    # torch's bits are not reproduced (strata draws its own), its law is.
    torch.manual_seed(0)
    x = torch.ones(200, 500)
    y = run_on_strata(lambda v: F.dropout(v, 0.3, training=True), x)
    kept = (y != 0).float().mean().item()
    assert abs(kept - 0.7) < 0.01, kept
    assert torch.allclose(y[y != 0], torch.full_like(y[y != 0], 1 / 0.7))
    # Two calls draw two masks; the same seed draws the same ones.
    torch.manual_seed(1)
    f = strata_function(lambda v: F.dropout(v, 0.5, training=True))
    a, b = f(x), f(x)
    assert not torch.equal(a, b)
    torch.manual_seed(1)
    assert torch.equal(f(x), a)


@pytest.mark.parametrize("like", [True, False])
def test_random_ops_follow_torchs_laws(like):
    torch.manual_seed(0)
    if like:
        fn = lambda x: (torch.rand_like(x), torch.randn_like(x))  # noqa: E731
    else:
        fn = lambda x: (torch.rand(400, 500) + x * 0, torch.randn(400, 500) + x * 0)  # noqa: E731
    u, n = run_on_strata(fn, torch.ones(400, 500))
    assert 0 <= u.min().item() and u.max().item() < 1
    assert abs(u.mean().item() - 0.5) < 0.01 and abs(u.var().item() - 1 / 12) < 0.01
    assert abs(n.mean().item()) < 0.01 and abs(n.std().item() - 1) < 0.01


def test_an_index_out_of_range_is_an_error_not_a_number():
    with pytest.raises(strata.Error, match="out of range"):
        run_on_strata(lambda w, i: F.embedding(i, w), torch.ones(4, 3), torch.tensor([[1, 4]]))
    with pytest.raises(strata.Error, match="index 4 is out of range"):
        run_on_strata(lambda x, i: x.scatter(1, i, 1.0), torch.ones(2, 4), torch.tensor([[2], [4]]))
    with pytest.raises(strata.Error, match="index -1 is out of range"):
        run_on_strata(lambda x, i: x.scatter(1, i, 1.0), torch.ones(2, 4), torch.tensor([[-1], [0]]))


# Reached only by torch's own decompositions or other lowerings' callers, not
# by a sample of their own.
NOT_SAMPLED = {
    "aten.sym_size", "aten.sym_numel", "aten.sym_stride", "aten._assert_tensor_metadata",
    "aten._assert_async", "aten.copy",
    # torch.export's functional variants of the view ops (AOTAutograd emits the views)
    "aten.permute_copy", "aten.select_copy", "aten.slice_copy", "aten.split_copy",
    "aten.view_copy",
}


def _packet(name):
    return ".".join(name.split(".")[:2])


def test_the_samples_reach_every_lowered_op():
    reached = {_packet(name) for name in SEEN}
    # Entries for ops torch's core decompositions remove before strata sees
    # them stay in the table for a torch without that decomposition.
    decomposed = {_packet(str(op)) for op in _backend.decompositions()}
    missing = sorted({_packet(name) for name in _lowerings.lowered_ops()}
                     - reached - NOT_SAMPLED - decomposed)
    # Every op in the table is either sampled above or named here with a reason.
    assert not missing, f"lowered ATen ops no sample reached: {missing}"


def test_attention_of_equal_lengths_runs_the_fused_kernel_each_way(tmp_path):
    """No [B, H, S, S] scores: both graphs call strata.attention(_grad)."""
    q, k, v = (make((1, 2, 8, 4), torch.float32, -1, 1, seed=i).requires_grad_()
               for i in range(3))
    saved = strata.config()["dump_dir"]
    try:
        strata.set_config(dump_dir=str(tmp_path))
        fn = torch.compile(lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=True),
                           backend="strata")
        fn(q, k, v).sum().backward()
    finally:
        strata.set_config(dump_dir=saved)
    text = "".join(p.read_text() for p in tmp_path.glob("*.hlo.txt"))
    assert 'custom_call_target="strata.attention"' in text
    assert 'custom_call_target="strata.attention_grad"' in text
    assert "f32[1,2,8,8]" not in text  # the scores never exist
