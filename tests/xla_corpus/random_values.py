"""The values of random_hlo's programs: each value's type, an interval every element lies
in, and a bound on how far two correct implementations may differ on it (0: bit for bit).
One rule per op computes them from the operands'; random_programs.py turns the bound into
the tolerance.

The bound: an op adds eps * |result| times its cost (1 for + - * /, 4 ulps for a
transcendental, 2 sqrt(n) for a sum of n terms in f32 / f64 and n in bf16 / f16), and a
Lipschitz factor carries the operands' bounds through. Discontinuous ops (compare, floor,
round, sign, remainder, float -> integer convert) take only exact operands; their rules
give an infinite bound otherwise, and such an output is not compared.
"""
import math

EPS = {"f32": 2.0 ** -23, "f64": 2.0 ** -52, "bf16": 2.0 ** -8, "f16": 2.0 ** -10}
FLOATS = ("f32", "f64", "bf16", "f16")
LIMIT = {"f32": 1e4, "f64": 1e4, "bf16": 1e3, "f16": 1e3}  # float values stay below this
INT_MIN, INT_MAX = -2 ** 31, 2 ** 31 - 1
TRANSCENDENTAL_ULPS = 4.0


# ---- values: type, interval, error bound -------------------------------------------------
class Info:
    """A value's type and what the generator knows of it: every element lies in [lo, hi],
    and two correct implementations differ by at most err (0: they agree bit for bit)."""
    __slots__ = ("dtype", "shape", "lo", "hi", "err", "elements")

    def __init__(self, dtype, shape, lo=0.0, hi=0.0, err=0.0, elements=None):
        self.dtype, self.shape, self.elements = dtype, tuple(shape), elements
        if dtype == "pred":
            lo, hi = 0, 1
        elif dtype == "s32" and (lo < INT_MIN or hi > INT_MAX):
            lo, hi = INT_MIN, INT_MAX  # wrapped
        self.lo, self.hi, self.err = lo, hi, err

    @property
    def bound(self):
        return max(abs(self.lo), abs(self.hi))

    @property
    def exact(self):
        return self.err == 0

    @property
    def size(self):
        return math.prod(self.shape)

    def like(self, lo=None, hi=None, err=None, dtype=None, shape=None):
        return Info(dtype or self.dtype, self.shape if shape is None else shape,
                    self.lo if lo is None else lo, self.hi if hi is None else hi,
                    self.err if err is None else err)


def type_str(info):
    if info.elements is not None:
        return "(" + ", ".join(type_str(e) for e in info.elements) + ")"
    return f"{info.dtype}[{','.join(map(str, info.shape))}]"


def carried(e, factor):
    """An error e carried through an op with Lipschitz constant factor."""
    return 0.0 if e == 0 else e * factor


def rounded(info, cost=1.0):
    """info after an op that rounds its result (to be safe, as if inexact)."""
    if info.dtype not in EPS:
        return info
    info.err += cost * EPS[info.dtype] * max(info.bound, 1e-30)
    return info


def hull(infos):
    out = infos[0].like(lo=min(i.lo for i in infos), hi=max(i.hi for i in infos),
                        err=max(i.err for i in infos))
    return out


def exact_only(infos):
    """0 if every operand is exact; a discontinuous op of inexact operands is unsound."""
    return 0.0 if all(i.exact for i in infos) else math.inf


def fmt(x, dtype):
    if dtype == "pred":
        return "true" if x else "false"
    if dtype == "s32":
        return str(int(x))
    if x == math.inf:
        return "inf"
    if x == -math.inf:
        return "-inf"
    return repr(float(x))


# Elementwise ops: name -> (rule, domain). Domain: None, "positive", "bounded:B",
# "exact" (discontinuous: operands must be exact).
def exp_info(x):
    lo, hi = math.exp(x.lo), math.exp(x.hi)
    return rounded(x.like(lo=lo, hi=hi, err=carried(x.err, hi)), TRANSCENDENTAL_ULPS)


def expm1_info(x):
    lo, hi = math.expm1(x.lo), math.expm1(x.hi)
    return rounded(x.like(lo=lo, hi=hi, err=carried(x.err, math.exp(x.hi))), TRANSCENDENTAL_ULPS)


def log_info(x):
    out = x.like(lo=math.log(x.lo), hi=math.log(x.hi), err=carried(x.err, 1 / x.lo))
    out.err += TRANSCENDENTAL_ULPS * EPS[x.dtype] * max(out.bound, 1)
    return out


def log1p_info(x):
    out = x.like(lo=math.log1p(x.lo), hi=math.log1p(x.hi), err=carried(x.err, 1 / (1 + x.lo)))
    out.err += TRANSCENDENTAL_ULPS * EPS[x.dtype] * max(out.bound, 1)
    return out


def sqrt_info(x):
    return rounded(x.like(lo=math.sqrt(x.lo), hi=math.sqrt(x.hi),
                          err=carried(x.err, 0.5 / math.sqrt(x.lo))), 2)


def rsqrt_info(x):
    return rounded(x.like(lo=x.hi ** -0.5, hi=x.lo ** -0.5, err=carried(x.err, 0.5 * x.lo ** -1.5)),
                   TRANSCENDENTAL_ULPS)


def cbrt_info(x):
    c = lambda v: math.copysign(abs(v) ** (1 / 3), v)  # noqa: E731
    return rounded(x.like(lo=c(x.lo), hi=c(x.hi), err=carried(x.err, x.lo ** (-2 / 3) / 3)),
                   TRANSCENDENTAL_ULPS)


def bounded_unary_info(x, lo, hi, lipschitz):
    """A transcendental into [lo, hi]; its own error grows with |x| (argument reduction)."""
    out = x.like(lo=lo, hi=hi, err=carried(x.err, lipschitz))
    out.err += TRANSCENDENTAL_ULPS * EPS[x.dtype] * (1 + lipschitz * x.bound)
    return out


def tanh_info(x):
    return bounded_unary_info(x, math.tanh(x.lo), math.tanh(x.hi), 1)


def logistic_info(x):
    s = lambda v: 0.5 + 0.5 * math.tanh(v / 2)  # noqa: E731
    return bounded_unary_info(x, s(x.lo), s(x.hi), 0.25)


def erf_info(x):
    return bounded_unary_info(x, math.erf(x.lo), math.erf(x.hi), 1.13)


def sincos_info(x):
    return bounded_unary_info(x, -1, 1, 1)


def tan_info(x):
    return bounded_unary_info(x, math.tan(x.lo), math.tan(x.hi), 1 / math.cos(x.bound) ** 2)


def negate_info(x):
    if x.dtype == "s32" and x.lo == INT_MIN:
        return x.like(lo=INT_MIN, hi=INT_MAX)
    return x.like(lo=-x.hi, hi=-x.lo)


def abs_info(x):
    if x.dtype == "s32" and x.lo == INT_MIN:
        return x.like(lo=INT_MIN, hi=INT_MAX)
    lo = 0 if x.lo <= 0 <= x.hi else min(abs(x.lo), abs(x.hi))
    return x.like(lo=lo, hi=x.bound)


def exact_unary_info(lo_fn, hi_fn):
    def rule(x):
        return x.like(lo=lo_fn(x), hi=hi_fn(x), err=exact_only([x]))
    return rule


UNARY_FLOAT = {
    "negate": (negate_info, None), "abs": (abs_info, None),
    "exponential": (exp_info, "bounded:8"), "exponential-minus-one": (expm1_info, "bounded:8"),
    "log": (log_info, "positive"), "log-plus-one": (log1p_info, "positive"),
    "sqrt": (sqrt_info, "positive"), "rsqrt": (rsqrt_info, "positive"), "cbrt": (cbrt_info, "positive"),
    "tanh": (tanh_info, None), "logistic": (logistic_info, None), "erf": (erf_info, None),
    "sine": (sincos_info, "bounded:64"), "cosine": (sincos_info, "bounded:64"),
    "tan": (tan_info, "bounded:1.2"),
    "floor": (exact_unary_info(lambda x: math.floor(x.lo), lambda x: math.floor(x.hi)), "exact"),
    "ceil": (exact_unary_info(lambda x: math.ceil(x.lo), lambda x: math.ceil(x.hi)), "exact"),
    "round-nearest-even": (exact_unary_info(lambda x: round(x.lo), lambda x: round(x.hi)), "exact"),
    "round-nearest-afz": (exact_unary_info(lambda x: math.floor(x.lo + 0.5) - 1,
                                       lambda x: math.ceil(x.hi - 0.5) + 1), "exact"),
    "sign": (exact_unary_info(lambda x: -1, lambda x: 1), "exact"),
}
TRANSCENDENTAL = {"exponential", "exponential-minus-one", "log", "log-plus-one", "sqrt", "rsqrt",
                  "cbrt", "tanh", "logistic", "erf", "sine", "cosine", "tan"}


def int_full_info(x):
    return x.like(lo=INT_MIN, hi=INT_MAX)


UNARY_INT = {
    "negate": negate_info, "abs": abs_info,
    "not": lambda x: x.like(lo=-x.hi - 1, hi=-x.lo - 1),
    "sign": lambda x: x.like(lo=-1, hi=1),
    "popcnt": lambda x: x.like(lo=0, hi=32), "count-leading-zeros": lambda x: x.like(lo=0, hi=32),
}


def add_info(a, b):
    return rounded(a.like(lo=a.lo + b.lo, hi=a.hi + b.hi, err=a.err + b.err))


def sub_info(a, b):
    return rounded(a.like(lo=a.lo - b.hi, hi=a.hi - b.lo, err=a.err + b.err))


def mul_info(a, b):
    p = [a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi]
    return rounded(a.like(lo=min(p), hi=max(p),
                          err=carried(a.err, b.bound) + carried(b.err, a.bound)))


def div_info(a, b):  # b keeps away from 0: |b| >= m
    m = min(abs(b.lo), abs(b.hi)) if b.lo * b.hi > 0 else 1e-30
    q = [a.lo / b.lo, a.lo / b.hi, a.hi / b.lo, a.hi / b.hi]
    return rounded(a.like(lo=min(q), hi=max(q),
                          err=carried(a.err, 1 / m) + carried(b.err, a.bound / m ** 2)))


def max_info(a, b):
    return a.like(lo=max(a.lo, b.lo), hi=max(a.hi, b.hi), err=max(a.err, b.err))


def min_info(a, b):
    return a.like(lo=min(a.lo, b.lo), hi=min(a.hi, b.hi), err=max(a.err, b.err))


def pow_info(a, b):  # a in [m, M] with m > 0, |b| <= 3
    c = [a.lo ** b.lo, a.lo ** b.hi, a.hi ** b.lo, a.hi ** b.hi]
    hi = max(c)
    la = abs(b.bound) * max(a.lo ** (b.lo - 1), a.hi ** (b.hi - 1), a.lo ** (b.hi - 1),
                           a.hi ** (b.lo - 1))
    lb = max(abs(math.log(a.lo)), abs(math.log(a.hi))) * hi
    out = a.like(lo=min(c), hi=hi, err=carried(a.err, la) + carried(b.err, lb))
    out.err += TRANSCENDENTAL_ULPS * EPS[a.dtype] * hi * (1 + lb)
    return out


def rem_info(a, b):  # exact operands, |b| >= m
    return a.like(lo=-min(a.bound, b.bound), hi=min(a.bound, b.bound), err=exact_only([a, b]))


def atan2_info(a, b):  # b >= m > 0
    out = a.like(lo=-math.pi / 2, hi=math.pi / 2, err=carried(a.err + b.err, 1 / b.lo))
    out.err += TRANSCENDENTAL_ULPS * EPS[a.dtype] * (2 + (a.bound + b.bound) / b.lo)
    return out


BINARY_FLOAT = {"add": (add_info, None), "subtract": (sub_info, None), "multiply": (mul_info, None),
                "divide": (div_info, "divisor"), "maximum": (max_info, None), "minimum": (min_info, None),
                "power": (pow_info, "power"), "remainder": (rem_info, "exact divisor"),
                "atan2": (atan2_info, "positive rhs")}


def int_arith_info(fn):
    def rule(a, b):
        c = [fn(x, y) for x in (a.lo, a.hi) for y in (b.lo, b.hi)]
        return a.like(lo=min(c), hi=max(c))
    return rule


def int_bits_info(a, b):
    if a.lo >= 0 and b.lo >= 0:
        return a.like(lo=0, hi=2 ** max(int(a.hi), int(b.hi), 1).bit_length() - 1)
    return int_full_info(a)


BINARY_INT = {
    "add": int_arith_info(lambda x, y: x + y), "subtract": int_arith_info(lambda x, y: x - y),
    "multiply": int_arith_info(lambda x, y: x * y), "maximum": max_info, "minimum": min_info,
    "divide": lambda a, b: a.like(lo=-a.bound - 1, hi=a.bound + 1),
    "remainder": lambda a, b: a.like(lo=-a.bound, hi=a.bound),
    "and": int_bits_info, "or": int_bits_info, "xor": int_bits_info,
    "shift-left": lambda a, b: int_full_info(a),
    "shift-right-arithmetic": lambda a, b: a.like(lo=min(a.lo, 0), hi=max(a.hi, 0)),
    "shift-right-logical": lambda a, b: int_full_info(a) if a.lo < 0 else a.like(lo=0),
    "power": lambda a, b: int_full_info(a),
}
BINARY_PRED = ("and", "or", "xor")


def clamp_info(x, lo, hi):
    return x.like(lo=min(max(x.lo, lo.lo), hi.hi), hi=max(min(x.hi, hi.hi), lo.lo),
                  err=max(x.err, lo.err, hi.err))


def sum_info(x, n, out):
    """A sum of n terms: bf16 sums may round at every step, f32 / f64 ones in any order."""
    cost = n if x.dtype == "bf16" else 2 * math.sqrt(n)
    info = x.like(shape=out, lo=n * min(x.lo, 0), hi=n * max(x.hi, 0), err=n * x.err)
    if x.dtype in EPS:
        info.err += cost * EPS[x.dtype] * n * x.bound
    return info


def dot_info(a, b, n, out, dtype):
    term = Info(a.dtype, (), *(lambda p: (min(p), max(p)))(
        [a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi]),
        err=carried(a.err, b.bound) + carried(b.err, a.bound))
    info = sum_info(term, max(n, 1), out).like(dtype=dtype)
    if dtype == "bf16" or a.dtype == "bf16":  # XLA:CPU may accumulate in f32 and round once
        info.err += EPS["bf16"] * info.bound
    return info
