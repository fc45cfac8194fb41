"""Writes the XLA corpus: JAX functions lowered to HLO text (unoptimized, as
jax.jit(f).lower(...).as_text(dialect="hlo"), and XLA:CPU's optimized
module, .compile().as_text()), with their inputs and XLA's outputs; and
HLO modules written here for XLA's ops JAX does not write (linear algebra,
batch norms, map, asynchronous collectives, three-fry bits, the client
library's custom calls), with XLA:CPU's outputs for them (or, for the custom
calls only XLA's tests expand, those of the JAX function each stands for).
python/tests/test_xla_corpus.py runs every module in strata and compares.

Run in the peers' environment (scripts/install-peers.sh):
    $(scripts/install-peers.sh | tail -1) tests/xla_corpus/generate.py
It rewrites tests/xla_corpus/cases/ and cases.json (what each case is, its
family and its tolerance). Inputs are drawn from a generator seeded by the
case's name, so a rerun writes the same files.
"""
import json
import os
import re
import sys
import zlib

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from safetensors.numpy import save_file

jax.config.update("jax_enable_x64", False)

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = []

# Tolerances by family: (rtol, atol) for f32; bf16 and f16 use their own.
TOLERANCE = {
    "elementwise": (1e-5, 1e-6), "transcendental": (2e-5, 1e-6), "reduction": (1e-5, 1e-5),
    "dot": (1e-4, 1e-5), "convolution": (1e-4, 1e-5), "reduce_window": (1e-5, 1e-6),
    "sort": (0, 0), "gather_scatter": (1e-6, 1e-6), "dynamic_slice": (0, 0),
    "control": (1e-5, 1e-6), "data_movement": (0, 0), "bits": (0, 0), "convert": (0, 0),
    "linalg": (1e-4, 1e-5), "special": (2e-4, 1e-6),
}
HALF_TOLERANCE = {"bfloat16": (1e-2, 1e-2), "float16": (2e-3, 2e-3)}


def case(name, family, *args):
    """Registers fn(*inputs); args are (shape, dtype[, (low, high)]) of each input."""
    def register(fn):
        CASES.append((name, family, fn, args))
        return fn
    return register


def draw(name, shape, dtype, bounds):
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    if dtype == "bool":
        return rng.random(shape) > 0.5
    low, high = bounds or ((-3, 3) if "float" in dtype else (-10, 10))
    if dtype == "float64":
        return rng.uniform(low, high, shape)
    if "float" in dtype:
        return rng.uniform(low, high, shape).astype(np.float32).astype(jnp.dtype(dtype))
    return rng.integers(low, high, shape).astype(dtype)


# ---- elementwise --------------------------------------------------------------------------
F = ((4, 5), "float32")
P = ((4, 5), "float32", (0.1, 4.0))  # positive
U = ((4, 5), "float32", (-0.9, 0.9))  # inside (-1, 1)
_UNARY = [
        ("exp", jnp.exp, F), ("log", jnp.log, P), ("log1p", jnp.log1p, U), ("expm1", jnp.expm1, F),
        ("tanh", jnp.tanh, F), ("logistic", jax.nn.sigmoid, F), ("sin", jnp.sin, F),
        ("cos", jnp.cos, F), ("tan", jnp.tan, U), ("sqrt", jnp.sqrt, P), ("rsqrt", lax.rsqrt, P),
        ("cbrt", jnp.cbrt, F), ("abs", jnp.abs, F), ("sign", jnp.sign, F),
        ("floor", jnp.floor, F), ("ceil", jnp.ceil, F), ("round", jnp.round, F),
        ("round_away", lax.round, F), ("neg", jnp.negative, F), ("erf", jax.scipy.special.erf, F),
        ("erf_inv", jax.scipy.special.erfinv, U), ("atan", jnp.arctan, F), ("asin", jnp.arcsin, U),
        ("acos", jnp.arccos, U), ("sinh", jnp.sinh, F), ("cosh", jnp.cosh, F),
        ("asinh", jnp.arcsinh, F), ("acosh", jnp.arccosh, ((4, 5), "float32", (1.1, 4.0))),
        ("atanh", jnp.arctanh, U), ("lgamma", jax.scipy.special.gammaln, P),
        ("digamma", jax.scipy.special.digamma, P), ("is_finite", jnp.isfinite, F),
        ("gelu", jax.nn.gelu, F), ("softplus", jax.nn.softplus, F), ("silu", jax.nn.silu, F),
        ("relu", jax.nn.relu, F), ("square", jnp.square, F), ("reciprocal", jnp.reciprocal, P),
]
for _name, _fn, _arg in _UNARY:
    family = "elementwise" if _name in ("abs", "sign", "floor", "ceil", "round", "round_away",
                                        "neg", "relu", "square", "is_finite") else "transcendental"
    case(f"unary_{_name}", family, _arg)(_fn)

# the same in half precision: XLA:CPU computes them in f32 and rounds, as strata does
for _name, _fn, _arg in list(_UNARY):
    for _dtype in ("bfloat16", "float16"):
        if _dtype == "float16" and _name in ("lgamma", "digamma", "erf_inv", "acosh"):
            continue
        case(f"unary_{_name}_{_dtype}", "transcendental", (_arg[0], _dtype) + tuple(_arg[2:]))(_fn)

for _name, _fn in [("add", jnp.add), ("sub", jnp.subtract), ("mul", jnp.multiply),
                   ("div", jnp.divide), ("max", jnp.maximum), ("min", jnp.minimum),
                   ("atan2", jnp.arctan2), ("rem", jnp.fmod), ("pow", None),
                   ("nextafter", jnp.nextafter)]:
    if _name == "pow":
        case("binary_pow", "transcendental", P, F)(jnp.power)
    else:
        case(f"binary_{_name}", "transcendental" if _name == "atan2" else "elementwise", F,
             ((4, 5), "float32", (0.5, 3.0)) if _name in ("div", "rem") else F)(_fn)

for _dtype in ("bfloat16", "float16"):
    _a = ((8, 16), _dtype)
    case(f"half_chain_{_dtype}", "transcendental", _a, _a)(
        lambda x, y: jnp.tanh(x * y + 1) - jnp.exp(-x))
    case(f"half_sum_{_dtype}", "reduction", _a)(lambda x: jnp.sum(x, axis=1))
    case(f"half_dot_{_dtype}", "dot", ((8, 16), _dtype), ((16, 4), _dtype))(jnp.matmul)

for _name, _fn in [("add", jnp.add), ("sub", jnp.subtract), ("mul", jnp.multiply),
                   ("max", jnp.maximum), ("min", jnp.minimum), ("div", jnp.divide)]:
    for _dtype in ("bfloat16", "float16"):
        case(f"binary_{_name}_{_dtype}", "elementwise", ((4, 5), _dtype),
             ((4, 5), _dtype, (0.5, 3.0)))(_fn)

for _name, _fn in [("sum", jnp.sum), ("max", jnp.max), ("min", jnp.min)]:
    for _dtype in ("int32", "int8", "uint8", "bfloat16"):
        case(f"reduce_{_name}_{_dtype}", "bits" if "int" in _dtype else "reduction",
             ((3, 4, 5), _dtype, (0, 20)) if "int" in _dtype else ((3, 4, 5), _dtype))(
            lambda x, f=_fn: (f(x, axis=1), f(x, axis=(0, 2))))

for _name, _spec, _shapes in [("mm", "ij,jk->ik", ((6, 8), (8, 5))),
                              ("bmm", "bij,bjk->bik", ((3, 6, 8), (3, 8, 5))),
                              ("mm_nt", "ij,kj->ik", ((6, 8), (5, 8)))]:
    for _dtype in ("bfloat16", "float16"):
        case(f"dot_{_name}_{_dtype}", "dot", *[(s_, _dtype) for s_ in _shapes])(
            lambda a, b, spec=_spec: jnp.einsum(spec, a, b))

for _dtype in ("int32", "uint8", "int8"):
    _a, _b = ((4, 6), _dtype, (0, 100)), ((4, 6), _dtype, (1, 7))
    case(f"int_arith_{_dtype}", "bits", _a, _b)(lambda x, y: x * y + x - y)
    case(f"int_div_rem_{_dtype}", "bits", _a, _b)(lambda x, y: (x // y, x % y))
    case(f"int_bits_{_dtype}", "bits", _a, _b)(lambda x, y: (x & y, x | y, x ^ y, ~x))
    case(f"int_shift_{_dtype}", "bits", _a, ((4, 6), _dtype, (0, 5)))(
        lambda x, y: (lax.shift_left(x, y), lax.shift_right_logical(x, y),
                      lax.shift_right_arithmetic(x, y)))
    case(f"int_minmax_clamp_{_dtype}", "bits", _a, _b)(
        lambda x, y: (jnp.maximum(x, y), jnp.minimum(x, y), jnp.clip(x, 3, 50)))
case("int_signed_div", "bits", ((4, 6), "int32", (-50, 50)), ((4, 6), "int32", (1, 7)))(
    lambda x, y: (lax.div(x, y), lax.rem(x, y), lax.div(x, -y), x // y, x % -y))
case("popcnt_clz", "bits", ((4, 6), "int32", (0, 1 << 30)))(
    lambda x: (lax.population_count(x), lax.clz(x)))

case("compare_select", "elementwise", F, F)(
    lambda x, y: (jnp.where(x > y, x, y * 2), x == y, x != y, x < y, x <= y, x >= y))
case("pred_logic", "bits", ((4, 5), "bool"), ((4, 5), "bool"))(
    lambda a, b: (a & b, a | b, a ^ b, ~a))
case("clamp", "elementwise", F)(lambda x: lax.clamp(-1.0, x, 1.5))
case("nan_inf", "elementwise", F)(
    lambda x: (jnp.log(x), jnp.sqrt(x), x / 0.0, jnp.isnan(jnp.log(x))))

for _src, _dst in [("float32", "int32"), ("float32", "bfloat16"), ("float32", "float16"),
                   ("int32", "float32"), ("float32", "uint8"), ("int32", "int8"),
                   ("float32", "bool"), ("bool", "float32"), ("bfloat16", "float32")]:
    _bounds = (0, 200) if _dst == "uint8" else None
    case(f"convert_{_src}_to_{_dst}", "convert", ((4, 5), _src, _bounds) if _bounds else
         ((4, 5), _src))(lambda x, d=_dst: x.astype(d))
case("bitcast_f32_s32", "bits", F)(lambda x: lax.bitcast_convert_type(x, jnp.int32))

# ---- reductions ---------------------------------------------------------------------------
R = ((3, 4, 5), "float32")
for _name, _fn in [("sum", jnp.sum), ("max", jnp.max), ("min", jnp.min), ("prod", jnp.prod),
                   ("mean", jnp.mean)]:
    for _axis in (0, 1, 2, (0, 2), None):
        case(f"reduce_{_name}_{_axis}".replace(" ", ""), "reduction",
             ((3, 4, 5), "float32", (0.5, 1.5)) if _name == "prod" else R)(
            lambda x, f=_fn, a=_axis: f(x, axis=a))
case("reduce_argmax", "reduction", R)(lambda x: (jnp.argmax(x, axis=1), jnp.argmin(x, axis=2)))
case("reduce_all_any", "bits", ((3, 4, 5), "bool"))(
    lambda x: (jnp.all(x, axis=1), jnp.any(x, axis=(0, 2))))
case("reduce_int_sum", "bits", ((3, 4, 5), "int32"))(lambda x: (jnp.sum(x, 1), jnp.max(x, 0)))
case("logsumexp", "reduction", R)(lambda x: jax.nn.logsumexp(x, axis=-1))
case("softmax", "reduction", R)(lambda x: jax.nn.softmax(x, axis=-1))
case("cumsum", "reduction", R)(lambda x: (jnp.cumsum(x, axis=1), jnp.cumsum(x, axis=2)))
case("cumprod_cummax", "reduction", ((3, 4, 5), "float32", (0.5, 1.5)))(
    lambda x: (jnp.cumprod(x, axis=2), lax.cummax(x, axis=1)))
case("norm", "reduction", R)(lambda x: jnp.linalg.norm(x, axis=-1))

# ---- dot_general in all dimension layouts -------------------------------------------------
for _name, _spec, _shapes in [
        ("mm", "ij,jk->ik", ((6, 8), (8, 5))), ("mm_tn", "ji,jk->ik", ((8, 6), (8, 5))),
        ("mm_nt", "ij,kj->ik", ((6, 8), (5, 8))), ("mm_tt", "ji,kj->ik", ((8, 6), (5, 8))),
        ("matvec", "ij,j->i", ((6, 8), (8,))), ("vecvec", "i,i->", ((8,), (8,))),
        ("bmm", "bij,bjk->bik", ((3, 6, 8), (3, 8, 5))),
        ("bmm_mid", "ibj,jbk->bik", ((6, 3, 8), (8, 3, 5))),
        ("attention_scores", "bhqd,bhkd->bhqk", ((2, 3, 4, 8), (2, 3, 6, 8))),
        ("two_contract", "ijk,jkl->il", ((4, 3, 5), (3, 5, 6))),
        ("outer", "i,j->ij", ((6,), (5,))), ("batch_outer", "bi,bj->bij", ((3, 6), (3, 5)))]:
    case(f"dot_{_name}", "dot", *[(s, "float32") for s in _shapes])(
        lambda a, b, spec=_spec: jnp.einsum(spec, a, b))
case("dot_int", "bits", ((4, 6), "int32"), ((6, 3), "int32"))(jnp.matmul)
case("dot_precision_highest", "dot", ((6, 8), "float32"), ((8, 5), "float32"))(
    lambda a, b: jnp.matmul(a, b, precision=lax.Precision.HIGHEST))

# ---- convolution --------------------------------------------------------------------------
for _name, _kw, _lhs, _rhs in [
        ("basic", {}, (1, 3, 8, 8), (4, 3, 3, 3)),
        ("pad_same", {"padding": "SAME"}, (2, 3, 7, 7), (4, 3, 3, 3)),
        ("stride", {"window_strides": (2, 2), "padding": ((1, 1), (1, 1))}, (1, 2, 9, 9),
         (3, 2, 3, 3)),
        ("dilated", {"rhs_dilation": (2, 2)}, (1, 2, 9, 9), (3, 2, 3, 3)),
        ("lhs_dilated", {"lhs_dilation": (2, 2), "padding": ((1, 1), (1, 1))}, (1, 2, 5, 5),
         (3, 2, 3, 3)),
        ("groups", {"feature_group_count": 2}, (1, 4, 6, 6), (6, 2, 3, 3)),
        ("depthwise", {"feature_group_count": 4}, (1, 4, 6, 6), (4, 1, 3, 3)),
        ("conv1d", {"padding": ((2, 1),)}, (2, 3, 10), (4, 3, 4))]:
    def _conv(x, w, kw=_kw, rank=len(_lhs) - 2):
        kw = dict(kw)
        kw.setdefault("window_strides", (1,) * rank)
        kw.setdefault("padding", "VALID")
        return lax.conv_general_dilated(x, w, **kw)
    case(f"conv_{_name}", "convolution", (_lhs, "float32"), (_rhs, "float32"))(_conv)
case("conv_nhwc", "convolution", ((1, 8, 8, 3), "float32"), ((3, 3, 3, 4), "float32"))(
    lambda x, w: lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                          dimension_numbers=("NHWC", "HWIO", "NHWC")))

# ---- reduce_window ------------------------------------------------------------------------
W = ((2, 3, 8, 8), "float32")
case("max_pool", "reduce_window", W)(
    lambda x: lax.reduce_window(x, -jnp.inf, lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID"))
case("avg_pool_pad", "reduce_window", W)(
    lambda x: lax.reduce_window(x, 0.0, lax.add, (1, 1, 3, 3), (1, 1, 2, 2), "SAME") / 9)
case("window_dilated", "reduce_window", W)(
    lambda x: lax.reduce_window(x, -jnp.inf, lax.max, (1, 1, 2, 2), (1, 1, 1, 1), "VALID",
                                window_dilation=(1, 1, 2, 2)))
case("window_min_int", "reduce_window", ((2, 8, 8), "int32"))(
    lambda x: lax.reduce_window(x, jnp.iinfo(jnp.int32).max, lax.min, (1, 3, 2), (1, 2, 2),
                                "VALID"))

# ---- sort / top_k -------------------------------------------------------------------------
case("sort", "sort", ((4, 9), "float32"))(lambda x: (jnp.sort(x, axis=1), jnp.sort(x, axis=0)))
case("argsort", "sort", ((4, 9), "float32"))(lambda x: jnp.argsort(x, axis=-1, stable=True))
case("sort_int_desc", "sort", ((4, 9), "int32"))(lambda x: -jnp.sort(-x, axis=-1))
case("sort_two_keys", "sort", ((12,), "int32", (0, 3)), ((12,), "float32"))(
    lambda k, v: lax.sort((k, v), num_keys=1))
case("top_k", "sort", ((4, 9), "float32"))(lambda x: lax.top_k(x, 3))

# ---- gather / scatter ---------------------------------------------------------------------
G = ((6, 5), "float32")
I = ((4,), "int32", (0, 6))
case("take_rows", "gather_scatter", G, I)(lambda x, i: x[i])
case("take_cols", "gather_scatter", G, ((3,), "int32", (0, 5)))(lambda x, i: x[:, i])
case("take_along", "gather_scatter", G, ((6, 2), "int32", (0, 5)))(
    lambda x, i: jnp.take_along_axis(x, i, axis=1))
case("gather_2d_points", "gather_scatter", G, I, ((4,), "int32", (0, 5)))(
    lambda x, i, j: x[i, j])
case("gather_clamped", "gather_scatter", G, ((4,), "int32", (-3, 9)))(
    lambda x, i: jnp.take(x, i, axis=0, mode="clip"))
case("scatter_set", "gather_scatter", G, I, ((4, 5), "float32"))(
    lambda x, i, u: x.at[i].set(u))
case("scatter_add", "gather_scatter", G, I, ((4, 5), "float32"))(
    lambda x, i, u: x.at[i].add(u))
case("scatter_max", "gather_scatter", G, I, ((4, 5), "float32"))(
    lambda x, i, u: x.at[i].max(u))
case("scatter_points", "gather_scatter", G, I, ((4,), "int32", (0, 5)), ((4,), "float32"))(
    lambda x, i, j, u: x.at[i, j].add(u))
case("one_hot", "gather_scatter", ((5,), "int32", (0, 4)))(lambda i: jax.nn.one_hot(i, 4))
case("embedding_grad", "gather_scatter", G, I)(
    lambda w, i: jax.grad(lambda w: jnp.sum(w[i] ** 2))(w))

# ---- dynamic slices -----------------------------------------------------------------------
D = ((6, 8), "float32")
S = ((), "int32", (0, 4))
case("dynamic_slice", "dynamic_slice", D, S, S)(
    lambda x, i, j: lax.dynamic_slice(x, (i, j), (2, 3)))
case("dynamic_slice_clamped", "dynamic_slice", D, ((), "int32", (5, 9)))(
    lambda x, i: lax.dynamic_slice(x, (i, 0), (3, 8)))
case("dynamic_update_slice", "dynamic_slice", D, ((2, 3), "float32"), S, S)(
    lambda x, u, i, j: lax.dynamic_update_slice(x, u, (i, j)))
case("dynamic_index", "dynamic_slice", D, ((), "int32", (0, 6)))(lambda x, i: x[i])

# ---- control flow -------------------------------------------------------------------------
case("fori_loop", "control", ((4,), "float32"))(
    lambda x: lax.fori_loop(0, 5, lambda i, c: c * 0.9 + i, x))
case("while_loop", "control", ((), "float32", (1.0, 2.0)))(
    lambda x: lax.while_loop(lambda c: c[0] < 100.0, lambda c: (c[0] * 1.7, c[1] + 1),
                             (x, jnp.int32(0))))
case("scan_cumulative", "control", ((7, 3), "float32"))(
    lambda xs: lax.scan(lambda c, x: (c + x, c * x), jnp.zeros(3), xs))
case("scan_rnn", "control", ((5, 2, 4), "float32"), ((4, 4), "float32"))(
    lambda xs, w: lax.scan(lambda h, x: (jnp.tanh(h @ w + x), h.sum()), jnp.zeros((2, 4)),
                           xs))
case("scan_reverse", "control", ((6, 3), "float32"))(
    lambda xs: lax.scan(lambda c, x: (c * 0.5 + x, c), jnp.ones(3), xs, reverse=True))
case("scan_grad", "control", ((5, 3), "float32"), ((3, 3), "float32", (-0.5, 0.5)))(
    lambda xs, w: jax.grad(lambda w: lax.scan(lambda h, x: (jnp.tanh(h @ w + x), None),
                                              jnp.ones(3), xs)[0].sum())(w))
case("cond", "control", ((), "float32"), ((4,), "float32"))(
    lambda p, x: lax.cond(p > 0, lambda v: v * 2, lambda v: jnp.sin(v), x))
case("switch", "control", ((), "int32", (-1, 4)), ((4,), "float32"))(
    lambda i, x: lax.switch(i, [lambda v: v + 1, lambda v: v * v, lambda v: -v], x))
case("map", "control", ((4, 3), "float32"))(lambda xs: lax.map(lambda x: jnp.sum(x) * x, xs))

# ---- data movement ------------------------------------------------------------------------
M = ((2, 3, 4), "float32")
case("transpose", "data_movement", M)(lambda x: (jnp.transpose(x, (2, 0, 1)), x.T))
case("reshape_broadcast", "data_movement", M)(
    lambda x: (x.reshape(6, 4), jnp.broadcast_to(x[:, None], (2, 5, 3, 4))))
case("concatenate", "data_movement", M, M)(
    lambda a, b: (jnp.concatenate([a, b], axis=1), jnp.stack([a, b])))
case("pad", "data_movement", M)(
    lambda x: (jnp.pad(x, ((1, 0), (0, 2), (1, 1))), lax.pad(x, 0.0, ((0, 0, 0), (1, -1, 1),
                                                                       (0, 0, 0)))))
case("reverse_slice", "data_movement", M)(
    lambda x: (jnp.flip(x, axis=(0, 2)), x[:, 1:, ::2], x[..., ::-1]))
case("iota", "data_movement", ((3, 4), "float32"))(
    lambda x: x + jnp.arange(4) + lax.broadcasted_iota(jnp.float32, (3, 4), 0))
case("repeat_tile", "data_movement", ((2, 3), "float32"))(
    lambda x: (jnp.repeat(x, 2, axis=0), jnp.tile(x, (2, 2))))
case("triu_tril", "data_movement", ((5, 5), "float32"))(lambda x: (jnp.triu(x), jnp.tril(x, -1)))
for _dtype in ("int32", "bool", "bfloat16", "uint8"):
    _m = ((2, 3, 4), _dtype)
    case(f"move_{_dtype}", "data_movement", _m, _m)(
        lambda a, b: (jnp.transpose(a, (1, 2, 0)), jnp.concatenate([a, b], 2), a[:, ::-1, 1:],
                      jnp.where(jnp.arange(4) > 1, a, b), jnp.pad(a, ((0, 1), (1, 0), (0, 0)))))
    case(f"gather_scatter_{_dtype}", "gather_scatter", ((6, 4), _dtype), I)(
        lambda x, i: (x[i], x.at[i].set(x[0])))

# ---- small networks -----------------------------------------------------------------------
case("mlp_grad", "dot", ((4, 8), "float32"), ((8, 16), "float32", (-0.5, 0.5)),
     ((16, 2), "float32", (-0.5, 0.5)))(
    lambda x, w1, w2: jax.value_and_grad(
        lambda w1, w2: jnp.mean((jax.nn.relu(x @ w1) @ w2) ** 2), argnums=(0, 1))(w1, w2))
case("layer_norm", "reduction", ((4, 16), "float32"))(
    lambda x: (x - x.mean(-1, keepdims=True)) * lax.rsqrt(x.var(-1, keepdims=True) + 1e-5))
case("attention", "dot", ((1, 2, 6, 8), "float32"), ((1, 2, 6, 8), "float32"),
     ((1, 2, 6, 8), "float32"))(
    lambda q, k, v: jax.nn.dot_product_attention(q.transpose(0, 2, 1, 3), k.transpose(0, 2, 1, 3),
                                                 v.transpose(0, 2, 1, 3), is_causal=True))


# ---- XLA's ops JAX does not write: HLO written here --------------------------------------
HLO_CASES = []


def hlo_case(name, family, entry, *args, computations="", reference=None):
    """A module of `entry`'s lines (ROOT last) with `computations` before it; args as case's.
    XLA:CPU runs it for the expected outputs, or `reference` (a JAX function of the inputs)."""
    text = f"HloModule {name}\n\n{computations}ENTRY main {{\n{entry}}}\n"
    HLO_CASES.append((name, family, text, args, reference))


ADD = "add {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n\n"
for _t in ("f32", "f64"):
    for _lower in ("true", "false"):
        # a = m m^T + 4 I: symmetric positive definite.
        hlo_case(f"cholesky_{_t}_lower_{_lower}", "linalg", f"""  m = {_t}[3,4,4] parameter(0)
  mmt = {_t}[3,4,4] dot(m, m), lhs_batch_dims={{0}}, rhs_batch_dims={{0}}, lhs_contracting_dims={{2}}, rhs_contracting_dims={{2}}
  rows = s32[3,4,4] iota(), iota_dimension=1
  cols = s32[3,4,4] iota(), iota_dimension=2
  diagonal = pred[3,4,4] compare(rows, cols), direction=EQ
  four = {_t}[] constant(4)
  fours = {_t}[3,4,4] broadcast(four), dimensions={{}}
  zero = {_t}[] constant(0)
  zeros = {_t}[3,4,4] broadcast(zero), dimensions={{}}
  shift = {_t}[3,4,4] select(diagonal, fours, zeros)
  a = {_t}[3,4,4] add(mmt, shift)
  ROOT l = {_t}[3,4,4] cholesky(a), lower={_lower}
""", ((3, 4, 4), "float32" if _t == "f32" else "float64"))
for _left in ("true", "false"):
    for _lower in ("true", "false"):
        for _transpose in ("NO_TRANSPOSE", "TRANSPOSE"):
            _b = "2,4,3" if _left == "true" else "2,3,4"
            hlo_case(f"triangular_solve_{_left}_{_lower}_{_transpose.lower()}", "linalg",
                     f"""  a = f32[2,4,4] parameter(0)
  b = f32[{_b}] parameter(1)
  ROOT x = f32[{_b}] triangular-solve(a, b), left_side={_left}, lower={_lower}, unit_diagonal={"true" if _transpose == "TRANSPOSE" else "false"}, transpose_a={_transpose}
""", ((2, 4, 4), "float32", (1, 2)), (tuple(int(d) for d in _b.split(",")), "float32"))
for _f, _shape in ((1, (2, 3, 4, 4)), (3, (2, 4, 4, 3))):
    _x, _v = ",".join(map(str, _shape)), "3"
    _dims = (_shape, "float32")
    _vec, _pos = ((3,), "float32"), ((3,), "float32", (0.5, 2.0))
    hlo_case(f"batch_norm_training_f{_f}", "reduction", f"""  x = f32[{_x}] parameter(0)
  scale = f32[3] parameter(1)
  offset = f32[3] parameter(2)
  ROOT bn = (f32[{_x}], f32[3], f32[3]) batch-norm-training(x, scale, offset), epsilon=0.001, feature_index={_f}
""", _dims, _vec, _vec)
    hlo_case(f"batch_norm_inference_f{_f}", "reduction", f"""  x = f32[{_x}] parameter(0)
  scale = f32[3] parameter(1)
  offset = f32[3] parameter(2)
  mean = f32[3] parameter(3)
  variance = f32[3] parameter(4)
  ROOT bn = f32[{_x}] batch-norm-inference(x, scale, offset, mean, variance), epsilon=0.001, feature_index={_f}
""", _dims, _vec, _vec, _vec, _pos)
    hlo_case(f"batch_norm_grad_f{_f}", "reduction", f"""  x = f32[{_x}] parameter(0)
  scale = f32[3] parameter(1)
  mean = f32[3] parameter(2)
  variance = f32[3] parameter(3)
  dy = f32[{_x}] parameter(4)
  ROOT g = (f32[{_x}], f32[3], f32[3]) batch-norm-grad(x, scale, mean, variance, dy), epsilon=0.001, feature_index={_f}
""", _dims, _vec, _vec, _pos, _dims)
hlo_case("map_two_operands", "transcendental", """  x = f32[4,5] parameter(0)
  y = f32[4,5] parameter(1)
  ROOT m = f32[4,5] map(x, y), dimensions={0,1}, to_apply=f
""", F, F, computations="""f {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ab = f32[] multiply(a, b)
  s = f32[] sine(a)
  ROOT r = f32[] add(ab, s)
}

""")
hlo_case("async_collectives", "control", """  x = f32[4,2] parameter(0)
  ars = f32[4,2] all-reduce-start(x), replica_groups={}, to_apply=add
  ard = f32[4,2] all-reduce-done(ars)
  ags = (f32[4,2], f32[4,2]) all-gather-start(ard), replica_groups={}, dimensions={0}
  agd = f32[4,2] all-gather-done(ags)
  cps = (f32[4,2], f32[4,2], u32[], u32[]) collective-permute-start(agd), source_target_pairs={{0,0}}
  cpd = f32[4,2] collective-permute-done(cps)
  ROOT r = f32[4,2] multiply(cpd, x)
""", ((4, 2), "float32"), computations=ADD)
hlo_case("copy_start_done", "data_movement", """  x = f32[4,2] parameter(0)
  cs = (f32[4,2], f32[4,2], u32[]) copy-start(x)
  ROOT cd = f32[4,2] copy-done(cs)
""", ((4, 2), "float32"), reference=lambda x: x)  # XLA:CPU does not run copy-start
for _bits in ("u32[5]", "u32[2,3]", "u32[3,3]", "u64[4]", "u32[]"):
    _label = _bits.replace("[", "_").replace("]", "").replace(",", "x")
    hlo_case(f"three_fry_{_label}", "bits", f"""  k = u64[2] parameter(0)
  ROOT r = (u64[2], {_bits}) rng-bit-generator(k), algorithm=rng_three_fry
""", ((2,), "uint64", (0, 1 << 62)))
# XLA's client-library calls (custom calls only XLA's own tests expand): against the JAX
# function each stands for.
_MATH = [
    ("Acos", jnp.arccos, U), ("Asin", jnp.arcsin, U), ("Atan", jnp.arctan, F),
    ("Asinh", jnp.arcsinh, F), ("Acosh", jnp.arccosh, ((4, 5), "float32", (1.0, 5.0))),
    ("Cosh", jnp.cosh, F),
]
for _name, _fn, _arg in _MATH:
    hlo_case(f"xla_builder_{_name.lower()}", "transcendental", f"""  x = f32[4,5] parameter(0)
  ROOT r = f32[4,5] custom-call(x), custom_call_target="xla_builder.math.{_name}"
""", _arg, reference=_fn)
hlo_case("xla_builder_nextafter", "elementwise", """  x = f32[4,5] parameter(0)
  y = f32[4,5] parameter(1)
  ROOT r = f32[4,5] custom-call(x, y), custom_call_target="xla_builder.math.NextAfter"
""", F, F, reference=jnp.nextafter)
_SPECIAL = [
    ("Polygamma", lambda n, x: lax.polygamma(jnp.floor(n), x),
     [((4, 5), "float32", (0, 4)), ((4, 5), "float32", (0.2, 6.0))], "n = floor(n)"),
    ("RegularizedIncompleteBeta", jax.scipy.special.betainc,
     [P, P, ((4, 5), "float32", (0.01, 0.99))], None),
    ("IgammaGradA", lax.igamma_grad_a, [P, P], None),
    ("RandomGammaGrad", lax.random_gamma_grad, [P, P], None),
]
for _name, _fn, _args, _floor in _SPECIAL:
    _params = "".join(f"  p{i} = f32[4,5] parameter({i})\n" for i in range(len(_args)))
    _operands = ", ".join(f"p{i}" for i in range(len(_args)))
    if _floor:  # polygamma's order: a whole number
        _params += "  n = f32[4,5] floor(p0)\n"
        _operands = "n" + _operands[2:]
    hlo_case(f"xla_builder_{_name.lower()}", "special", _params +
             f"  ROOT r = f32[4,5] custom-call({_operands}), "
             f"custom_call_target=\"xla_builder.math.{_name}\"\n", *_args, reference=_fn)
hlo_case("xla_builder_matrix_diagonal", "data_movement", """  x = f32[2,3,5] parameter(0)
  ROOT d = f32[2,3] custom-call(x), custom_call_target="xla_builder.matrix.GetMatrixDiagonalViaGather"
""", ((2, 3, 5), "float32"), reference=lambda x: jnp.diagonal(x, axis1=-2, axis2=-1))
hlo_case("xla_builder_einsum", "dot", """  a = f32[2,3,4] parameter(0)
  b = f32[2,4,5] parameter(1)
  ROOT p = f32[3,5,2] custom-call(a, b), custom_call_target="xla_builder.matrix.Einsum", backend_config="bij,bjk->ikb"
""", ((2, 3, 4), "float32"), ((2, 4, 5), "float32"),
         reference=lambda a, b: jnp.einsum("bij,bjk->ikb", a, b))


def run_in_xla(text, args):
    """XLA:CPU's outputs for HLO text (parsed, compiled and run by jaxlib)."""
    import jax._src.lib as jaxlib
    from jax._src import xla_bridge
    from jax._src.lib import _jax, xla_client
    backend = xla_bridge.get_backend("cpu")
    devices = xla_client.DeviceList(tuple(backend.devices()[:1]))
    module = jaxlib.hlo.hlo_module_from_text(text)
    stablehlo = _jax.mlir.hlo_to_stablehlo(module.as_serialized_hlo_module_proto())
    exe = backend.compile_and_load(stablehlo, devices, xla_client.CompileOptions())
    return [np.asarray(o) for o in exe.execute([jax.device_put(a) for a in args])]


# ---- writing ------------------------------------------------------------------------------
def parameter_names(text):
    """The entry computation's parameter names in parameter order."""
    entry = text[text.index("\nENTRY"):]
    found = {}
    for m in re.finditer(r"^\s*%?([\w.\-]+) = [^\n]*? parameter\((\d+)\)", entry, re.M):
        found.setdefault(int(m.group(2)), m.group(1))
    return [found[i] for i in range(len(found))]


def main():
    out_dir = os.path.join(HERE, "cases")
    os.makedirs(out_dir, exist_ok=True)
    for f in os.listdir(out_dir):
        os.remove(os.path.join(out_dir, f))
    index = []
    for name, family, fn, specs in CASES:
        args = [draw(f"{name}.{i}", s[0], s[1], s[2] if len(s) > 2 else None)
                for i, s in enumerate(specs)]
        jitted = jax.jit(fn)
        lowered = jitted.lower(*args)
        text = lowered.as_text(dialect="hlo")
        optimized = lowered.compile().as_text()
        outs = jax.tree_util.tree_leaves(jitted(*args))
        tensors = {}
        for names in (parameter_names(text), parameter_names(optimized)):
            if len(names) != len(args):
                raise SystemExit(f"{name}: {len(names)} parameters in the HLO, {len(args)} args")
            for n, a in zip(names, args):
                tensors[n] = np.asarray(a)
        for k, o in enumerate(outs):
            tensors[f"expected.{k}"] = np.asarray(o)
        with open(os.path.join(out_dir, f"{name}.hlo"), "w") as f:
            f.write(text)
        with open(os.path.join(out_dir, f"{name}.opt.hlo"), "w") as f:
            f.write(optimized)
        save_file({k: np.array(v, order="C") for k, v in tensors.items()},
                  os.path.join(out_dir, f"{name}.safetensors"))
        dtypes = {str(np.asarray(a).dtype) for a in args}
        rtol, atol = TOLERANCE[family]
        for d in ("bfloat16", "float16"):
            if d in dtypes:
                rtol, atol = HALF_TOLERANCE[d]
        index.append({"name": name, "family": family, "outputs": len(outs), "rtol": rtol,
                      "atol": atol})
    jax.config.update("jax_enable_x64", True)  # u64 states reach XLA as they are
    for name, family, text, specs, reference in HLO_CASES:
        args = [draw(f"{name}.{i}", s[0], s[1], s[2] if len(s) > 2 else None)
                for i, s in enumerate(specs)]
        if reference is None:
            outs = run_in_xla(text, args)
        else:
            outs = [np.asarray(o) for o in jax.tree_util.tree_leaves(reference(*args))]
        tensors = dict(zip(parameter_names(text), (np.asarray(a) for a in args)))
        for k, o in enumerate(outs):
            tensors[f"expected.{k}"] = o
        with open(os.path.join(out_dir, f"{name}.hlo"), "w") as f:
            f.write(text)
        save_file({k: np.array(v, order="C") for k, v in tensors.items()},
                  os.path.join(out_dir, f"{name}.safetensors"))
        rtol, atol = TOLERANCE[family]
        index.append({"name": name, "family": family, "outputs": len(outs), "rtol": rtol,
                      "atol": atol, "variants": ["hlo"]})
    jax.config.update("jax_enable_x64", False)
    with open(os.path.join(HERE, "cases.json"), "w") as f:
        json.dump({"jax": jax.__version__, "cases": index}, f, indent=1)
        f.write("\n")
    print(f"{len(index)} cases written to {out_dir} (jax {jax.__version__})", file=sys.stderr)


if __name__ == "__main__":
    main()
