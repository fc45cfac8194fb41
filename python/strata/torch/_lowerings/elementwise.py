"""Elementwise ATen ops, and the backward helpers some graphs keep."""
import math
import operator

import strata

from ._table import _fits, _tensor, aten, lower


# ---- elementwise ------------------------------------------------------------------------------

_UNARY = {
    aten.abs: strata.abs, aten.neg: strata.negative, aten.exp: strata.exp, aten.log: strata.log,
    aten.log1p: strata.log1p, aten.expm1: strata.expm1, aten.tanh: strata.tanh,
    aten.sigmoid: strata.sigmoid, aten.sqrt: strata.sqrt, aten.rsqrt: strata.rsqrt,
    aten.sin: strata.sin, aten.cos: strata.cos, aten.erf: strata.erf, aten.floor: strata.floor,
    aten.ceil: strata.ceil, aten.sign: strata.sign, aten.relu: strata.relu,
    aten.logical_not: strata.logical_not, aten.bitwise_not: strata.bitwise_not,
    aten.silu: strata.silu,
}
for _op, _fn in _UNARY.items():
    lower(_op)(lambda x, _fn=_fn: _fn(x))


@lower(aten.reciprocal)
def _reciprocal(x):
    return 1.0 / x


@lower(aten.sgn)
def _sgn(x):
    return strata.sign(x)


@lower(aten.gelu)
def _gelu(x, approximate="none"):
    return strata.gelu(x, approximate=approximate)


@lower(aten.isnan)
def _isnan(x):
    return strata.ne(x, x)


@lower(aten.isinf)
def _isinf(x):
    return strata.eq(strata.abs(x), math.inf)


def _binary(fn):
    def apply(a, b, *, alpha=None):
        if alpha is not None and alpha != 1:
            b = b * alpha
        if not isinstance(a, strata.Tensor):
            a = _tensor(a, b)
        return fn(a, b)
    return apply


lower(aten.add)(_binary(operator.add))
lower(aten.sub)(_binary(operator.sub))
lower(aten.rsub)(lambda a, b, alpha=1: _binary(operator.sub)(b, a * alpha if alpha != 1 else a))
lower(aten.mul)(_binary(operator.mul))
lower(aten.maximum)(_binary(strata.maximum))
lower(aten.minimum)(_binary(strata.minimum))
lower(aten.remainder)(_binary(strata.remainder))
lower(aten.pow.Tensor_Tensor, aten.pow.Tensor_Scalar)(_binary(strata.pow))
lower(aten.eq)(_binary(strata.eq))
lower(aten.ne)(_binary(strata.ne))
lower(aten.lt)(_binary(strata.lt))
lower(aten.le)(_binary(strata.le))
lower(aten.gt)(_binary(strata.gt))
lower(aten.ge)(_binary(strata.ge))
lower(aten.logical_and)(_binary(strata.logical_and))
lower(aten.logical_or)(_binary(strata.logical_or))
lower(aten.bitwise_and)(_binary(strata.bitwise_and))
lower(aten.bitwise_or)(_binary(strata.bitwise_or))
lower(aten.bitwise_xor)(_binary(strata.bitwise_xor))


@lower(aten.logical_xor)
def _logical_xor(a, b):
    return strata.ne(strata.astype(a, strata.bool), strata.astype(b, strata.bool))


@lower(aten.pow.Scalar)
def _pow_scalar(base, exponent):
    return strata.pow(strata.scalar(base, exponent.dtype if _fits(base, exponent.dtype) else None),
                      exponent)


@lower(aten.div.Tensor, aten.div.Scalar)
def _div(a, b):
    if not isinstance(a, strata.Tensor):
        a = strata.scalar(a)
    return a / b


@lower(aten.div.Tensor_mode, aten.div.Scalar_mode)
def _div_mode(a, b, *, rounding_mode=None):
    if not isinstance(a, strata.Tensor):
        a = strata.scalar(a)
    if rounding_mode is None:
        return a / b
    # Integers divide exactly in their dtype; a zero divisor raises at the
    # sync, as torch's ZeroDivisionError.
    return (strata.floor_divide if rounding_mode == "floor" else strata.trunc_divide)(
        a, _tensor(b, a))


@lower(aten.floor_divide)
def _floor_divide(a, b):
    return strata.floor_divide(a, _tensor(b, a))


@lower(aten.fmod)
def _fmod(a, b):
    # C's fmod: the sign of a (strata's remainder takes b's, as torch.remainder).
    r = strata.remainder(a, b)
    b_t = _tensor(b, a)
    fix = strata.logical_and(strata.ne(r, 0), strata.ne(strata.lt(r, 0), strata.lt(a, 0)))
    return strata.where(fix, r - b_t, r)


@lower(aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar)
def _where(condition, a, b):
    like = a if isinstance(a, strata.Tensor) else b if isinstance(b, strata.Tensor) else None
    if like is not None:
        a, b = _tensor(a, like), _tensor(b, like)
    else:
        a, b = strata.scalar(a), strata.scalar(b)
    return strata.where(condition, a, b)


@lower(aten.clamp)
def _clamp(x, min=None, max=None):  # noqa: A002  torch's names
    if isinstance(min, strata.Tensor) or isinstance(max, strata.Tensor):
        if min is not None:
            x = strata.maximum(x, _tensor(min, x))
        if max is not None:
            x = strata.minimum(x, _tensor(max, x))
        return x
    return strata.clamp(x, min, max)


@lower(aten.clamp_min)
def _clamp_min(x, min):  # noqa: A002
    return _clamp(x, min=min)


@lower(aten.clamp_max)
def _clamp_max(x, max):  # noqa: A002
    return _clamp(x, max=max)


@lower(aten.hardtanh)
def _hardtanh(x, min_val=-1.0, max_val=1.0):
    return strata.clamp(x, min_val, max_val)


@lower(aten.masked_fill.Scalar, aten.masked_fill.Tensor)
def _masked_fill(x, mask, value):
    return strata.where(mask, _tensor(value, x), x)


# ---- backward helpers that may reach the table undecomposed ------------------------------------

@lower(aten.threshold_backward)
def _threshold_backward(grad, x, threshold):
    return strata.where(x <= threshold, strata.zeros_like(grad), grad)


@lower(aten.tanh_backward)
def _tanh_backward(grad, y):
    return grad * (1 - y * y)


@lower(aten.sigmoid_backward)
def _sigmoid_backward(grad, y):
    return grad * y * (1 - y)


@lower(aten.gelu_backward)
def _gelu_backward(grad, x, approximate="none"):
    _, pullback = strata.vjp(lambda v: strata.gelu(v, approximate=approximate), x)
    return pullback(grad)[0]


@lower(aten.silu_backward)
def _silu_backward(grad, x):
    s = strata.sigmoid(x)
    return grad * s * (1 + x * (1 - s))


# ---- trigonometric, hyperbolic and rounding ops, composed --------------------------------------

@lower(aten.tan)
def _tan(x):
    return strata.tan(x)


@lower(aten.atan)
def _atan(x):
    return strata.atan2(x, strata.ones_like(x))


@lower(aten.asin)
def _asin(x):
    # atan2(x, sqrt(1 - x^2)): NaN outside [-1, 1], as torch.
    return strata.atan2(x, strata.sqrt(1 - x * x))


@lower(aten.acos)
def _acos(x):
    return strata.atan2(strata.sqrt(1 - x * x), x)


@lower(aten.sinh)
def _sinh(x):
    return (strata.exp(x) - strata.exp(-x)) * 0.5


@lower(aten.cosh)
def _cosh(x):
    return (strata.exp(x) + strata.exp(-x)) * 0.5


@lower(aten.asinh)
def _asinh(x):
    # sign(x) log(|x| + sqrt(x^2 + 1)): no cancellation for large negative x.
    a = strata.abs(x)
    return strata.sign(x) * strata.log(a + strata.sqrt(a * a + 1))


@lower(aten.acosh)
def _acosh(x):
    return strata.log(x + strata.sqrt(x * x - 1))


@lower(aten.atanh)
def _atanh(x):
    return (strata.log1p(x) - strata.log1p(-x)) * 0.5


@lower(aten.log2)
def _log2(x):
    return strata.log(x) * (1 / math.log(2))


@lower(aten.log10)
def _log10(x):
    return strata.log(x) * (1 / math.log(10))


@lower(aten.trunc)
def _trunc(x):
    return strata.where(x < 0, strata.ceil(x), strata.floor(x))


@lower(aten.round.default)
def _round(x):
    """Halves to even, as torch.round."""
    r = strata.floor(x + 0.5)
    tie_to_odd = strata.logical_and(strata.eq(r - x, 0.5), strata.ne(strata.remainder(r, 2.0), 0))
    return strata.where(tie_to_odd, r - 1, r)


@lower(aten.elu)
def _elu(x, alpha=1.0, scale=1.0, input_scale=1.0):
    return strata.where(x > 0, x * scale, strata.expm1(x * input_scale) * (alpha * scale))


@lower(aten.leaky_relu)
def _leaky_relu(x, negative_slope=0.01):
    return strata.where(x > 0, x, x * negative_slope)


@lower(aten.fill.Scalar)
def _fill(x, value):
    return strata.full(list(x.shape), value, dtype=x.dtype)
