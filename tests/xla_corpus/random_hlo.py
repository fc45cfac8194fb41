"""A seeded generator of random well-typed HLO programs, written as HLO text (issue 47).

Generator(seed).generate() gives a Program: a module of helper computations and an entry
whose instructions are drawn at random over a pool of values (elementwise chains,
data movement, reductions, dots, convolutions, gathers and scatters, sorts, loops and
conditionals); inputs_for(program, seed) draws its inputs. Every value carries an Info
(random_values.py): operands are kept in their ops' domains and below overflow, and
discontinuous ops see only exact operands. random_programs.py runs the programs.
"""
import collections
import itertools
import math
import random

import numpy as np

from random_values import (BINARY_FLOAT, BINARY_INT, BINARY_PRED, EPS, FLOATS, INT_MAX, INT_MIN,
                           LIMIT, UNARY_FLOAT, UNARY_INT, Info, abs_info, add_info, clamp_info,
                           dot_info, exact_only, fmt, hull, max_info, mul_info, negate_info,
                           sum_info, tanh_info, type_str)

TOLERANCE_FACTOR = 4.0  # an output may differ from XLA's by this times its error bound
MAX_ELEMENTS = 4096
DIM_SIZES = (1, 2, 3, 4, 5, 6, 7, 8, 12, 16)
# sizes around vector widths and loop tiles, where remainders are handled
BIG_DIM_SIZES = (9, 15, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 257)


# ---- programs ----------------------------------------------------------------------------
class Instr:
    __slots__ = ("name", "info", "opcode", "operands", "attrs", "literal", "rule", "calls")

    def __init__(self, name, info, opcode, operands=(), attrs="", literal=None, rule=None,
                 calls=()):
        self.name, self.info, self.opcode = name, info, opcode
        self.operands, self.attrs, self.literal = list(operands), attrs, literal
        self.rule, self.calls = rule, list(calls)

    def text(self):
        args = self.literal if self.literal is not None else ", ".join(self.operands)
        return f"{self.name} = {type_str(self.info)} {self.opcode}({args}){self.attrs}"


class Computation:
    def __init__(self, name, entry=False):
        self.name, self.entry = name, entry
        self.instrs = []
        self.root = None

    def text(self):
        head = f"ENTRY {self.name}" if self.entry else self.name
        lines = [("  ROOT " if i.name == self.root else "  ") + i.text() for i in self.instrs]
        return head + " {\n" + "\n".join(lines) + "\n}\n"

    def evaluate(self, param_infos):
        """Infos of every instruction again from the parameters' (a loop's next trip)."""
        infos = {}
        for ins in self.instrs:
            if ins.opcode == "parameter":
                infos[ins.name] = param_infos[int(ins.literal)]
            else:
                infos[ins.name] = ins.rule([infos[o] for o in ins.operands])
        return infos


class Program:
    """A module: helper computations (in definition order) and the entry."""

    def __init__(self):
        self.computations = collections.OrderedDict()
        self.entry = None
        self.input_modes = {}  # parameter name -> how its values are drawn

    def text(self):
        parts = ["HloModule random\n"]
        parts += [c.text() for c in self.computations.values()]
        parts.append(self.entry.text())
        return "\n".join(parts)

    def opcodes(self):
        return {i.opcode for c in list(self.computations.values()) + [self.entry]
                for i in c.instrs}


class Builder:
    """Writes one computation, drawing ops at random over a pool of its values."""

    def __init__(self, gen, comp, depth=0):
        self.gen, self.comp, self.depth = gen, comp, depth
        self.rng = gen.rng
        self.info = {}
        self.pool = []  # names of array values usable as operands
        self.variable = set()  # values that depend on a parameter: XLA cannot fold them

    # -- emitting
    def emit(self, opcode, rule, operands=(), attrs="", literal=None, calls=(), hint="v",
             pool=True):
        name = self.gen.fresh(hint)
        info = rule([self.info[o] for o in operands])
        self.comp.instrs.append(Instr(name, info, opcode, operands, attrs, literal, rule, calls))
        self.info[name] = info
        if any(o in self.variable for o in operands):
            self.variable.add(name)
        if pool and info.elements is None:
            self.pool.append(name)
        return name

    def parameter(self, info, mode=None):
        index = sum(1 for i in self.comp.instrs if i.opcode == "parameter")
        name = self.gen.fresh("p")
        self.comp.instrs.insert(index, Instr(name, info, "parameter", literal=str(index)))
        self.info[name] = info
        self.variable.add(name)
        if info.elements is None:
            self.pool.append(name)
        if mode is not None:
            self.gen.program.input_modes[name] = mode
        return name

    def constant(self, value, dtype):
        info = Info(dtype, (), value, value)
        return self.emit("constant", lambda _: info, literal=fmt(value, dtype), hint="k",
                         pool=False)

    def array_constant(self, dtype, shape):
        """A constant written as a literal: {{1, 2}, {3, 4}}."""
        count = math.prod(shape)
        if dtype == "pred":
            values = [self.rng.random() < 0.5 for _ in range(count)]
        elif dtype == "s32":
            values = [self.rng.randint(-9, 9) for _ in range(count)]
        else:
            values = [self.rng.randint(-16, 16) / 4 for _ in range(count)]

        def nest(vals, dims):
            if not dims:
                return fmt(vals[0], dtype)
            step = len(vals) // dims[0]
            return "{" + ", ".join(nest(vals[k * step:(k + 1) * step], dims[1:])
                                   for k in range(dims[0])) + "}"
        info = Info(dtype, shape, min(values), max(values))
        return self.emit("constant", lambda _: info.like(), literal=nest(values, list(shape)),
                         hint="k")

    def splat(self, value, dtype, shape):
        c = self.constant(value, dtype)
        if not shape:
            return c
        return self.broadcast_to(c, shape, ())

    def broadcast_to(self, x, shape, dims):
        return self.emit("broadcast", lambda i: i[0].like(shape=shape), [x],
                         f", dimensions={{{','.join(map(str, dims))}}}")

    def unary(self, opcode, x, rule, dtype=None):
        if dtype is None:
            return self.emit(opcode, lambda i: rule(i[0]), [x])
        return self.emit(opcode, lambda i: rule(i[0]).like(dtype=dtype), [x])

    def binary(self, opcode, a, b, rule):
        return self.emit(opcode, lambda i: rule(i[0], i[1]), [a, b])

    # -- choosing operands
    def choose(self, ok, recent=0.6, empty=False):
        """A pool value that is ok, mostly a recent one; one with no elements only if empty."""
        names = [n for n in self.pool if ok(self.info[n]) and (empty or self.info[n].size > 0)]
        if not names:
            return None
        if self.rng.random() < recent:
            return names[-1 - min(int(self.rng.expovariate(0.7)), len(names) - 1)]
        return self.rng.choice(names)

    def operand(self, dtype, shape, exact=False):
        """A value of this type: one in the pool, or one made from one (convert, broadcast,
        reshape), or a new parameter (entry) / constant or iota (elsewhere)."""
        shape = tuple(shape)

        def fits(i):
            return i.dtype == dtype and i.shape == shape and (i.exact or not exact)
        r = self.rng.random()
        name = self.choose(fits, empty=True)
        if name is not None and r < 0.75:
            return name
        for attempt in self.rng.sample(range(4), 4):
            if attempt == 0:
                src = self.choose(lambda i: i.shape == shape and i.dtype != dtype and
                                  (i.exact or not exact) and convertible(i, dtype), empty=True)
                if src is not None:
                    return self.convert(src, dtype)
            elif attempt == 1:
                src = self.choose(lambda i: i.dtype == dtype and len(i.shape) < len(shape) and
                                  (i.exact or not exact) and embed(i.shape, shape, self.rng),
                                  empty=True)
                if src is not None:
                    return self.broadcast_to(src, shape, embed(self.info[src].shape, shape, self.rng))
            elif attempt == 2:
                src = self.choose(lambda i: i.dtype == dtype and i.size == math.prod(shape) and
                                  i.shape != shape and (i.exact or not exact), empty=True)
                if src is not None:
                    return self.emit("reshape", lambda i: i[0].like(shape=shape), [src])
            elif name is not None:
                return name
        return self.fresh_value(dtype, shape)

    def fresh_value(self, dtype, shape):
        if self.comp.entry and self.gen.params < 8 and self.rng.random() < 0.9:
            return self.gen.new_parameter(self, dtype, shape)
        if 0 < math.prod(shape) <= 48 and self.rng.random() < 0.5:
            return self.array_constant(dtype, shape)
        if dtype != "pred" and shape and self.rng.random() < 0.5:
            return self.iota(dtype, shape)
        value = {"pred": self.rng.random() < 0.5, "s32": self.rng.randint(-3, 5)}.get(
            dtype, self.rng.choice((0.5, -1.25, 2.0, 0.75)))
        return self.splat(value, dtype, shape)

    def convert(self, x, dtype):
        src = self.info[x].dtype

        def rule(i):
            i = i[0]
            if dtype == "pred":
                return Info("pred", i.shape, err=exact_only([i]))
            if dtype == "s32":
                if src == "pred":
                    return i.like(dtype="s32", lo=0, hi=1)
                lo, hi = math.trunc(i.lo), math.trunc(i.hi)
                return i.like(dtype="s32", lo=max(lo, INT_MIN), hi=min(hi, INT_MAX),
                              err=exact_only([i]))
            out = i.like(dtype=dtype)
            if src in EPS and not i.exact and EPS[dtype] > EPS[src]:
                out.err += EPS[dtype] * out.bound  # a last-bit difference may round apart
            return out
        return self.emit("convert", rule, [x])

    # -- guards that keep operands in an op's domain
    def positive(self, x, m=None, exact=False):
        """x kept >= m: |x| + m, or max(|x|, m) (which stays exact)."""
        i = self.info[x]
        m = m or self.rng.choice((0.25, 0.5, 1.0))
        if i.lo >= m:
            return x
        a = self.unary("abs", x, abs_info)
        if exact or self.rng.random() < 0.3:
            return self.binary("maximum", a, self.splat(m, i.dtype, i.shape), max_info)
        return self.binary("add", a, self.splat(m, i.dtype, i.shape), add_info)

    def bounded(self, x, b):
        i = self.info[x]
        if i.bound <= b:
            return x
        if self.rng.random() < 0.5:
            k = math.ceil(math.log2(i.bound / b))
            return self.binary("multiply", x, self.splat(2.0 ** -k, i.dtype, i.shape), mul_info)
        lo, hi = self.constant(-b, i.dtype), self.constant(b, i.dtype)
        return self.emit("clamp", lambda v: clamp_info(v[1], v[0], v[2]), [lo, x, hi])

    def keep_small(self, x):
        i = self.info[x]
        if i.dtype in LIMIT and i.bound > LIMIT[i.dtype]:
            if self.rng.random() < 0.5:
                return self.unary("tanh", x, tanh_info)
            return self.bounded(x, self.rng.choice((1.0, 4.0, 30.0)))
        return x

    # -- the ops
    def op_unary(self):
        x = self.choose(lambda i: i.elements is None and i.dtype != "pred", empty=True)
        if x is None:
            return None
        i = self.info[x]
        if i.dtype == "s32":
            op = self.rng.choice(list(UNARY_INT))
            if op == "count-leading-zeros" and i.lo < 0:
                # XLA folds the clz of a negative constant to -32 (its runtime gives 0)
                k = self.rng.randint(1, 4)
                x = self.binary("shift-right-logical", x, self.splat(k, "s32", i.shape),
                                lambda a, b: a.like(lo=0, hi=2 ** (32 - k) - 1))
            return self.unary(op, x, UNARY_INT[op])
        if self.rng.random() < 0.04:
            return self.unary("is-finite", x, lambda v: Info("pred", v.shape), dtype="pred")
        op = self.rng.choice(list(UNARY_FLOAT))
        rule, domain = UNARY_FLOAT[op]
        if domain == "exact" and not i.exact:
            x = self.operand(i.dtype, i.shape, exact=True)
        elif domain == "positive":
            x = self.positive(x, 1.0 if op == "rsqrt" else None)
        elif domain and domain.startswith("bounded"):
            x = self.bounded(x, float(domain.split(":")[1]))
        return self.keep_small(self.unary(op, x, rule))

    def op_binary(self):
        a = self.choose(lambda i: True, empty=True)
        if a is None:
            return None
        i = self.info[a]
        if i.dtype == "pred":
            op = self.rng.choice(BINARY_PRED)
            b = self.operand("pred", i.shape)
            return self.binary(op, a, b, lambda x, y: x.like(err=max(x.err, y.err)))
        if i.dtype == "s32":
            op = self.rng.choice(list(BINARY_INT))
            b = self.operand("s32", i.shape)
            if op == "power":  # XLA's simplifier rewrites x / power(b, c) as x * power(b, -c),
                # which for integers is x * 0: the fuzzer then asks XLA without it
                lo, hi = self.constant(0, "s32"), self.constant(4, "s32")
                b = self.emit("clamp", lambda v: clamp_info(v[1], v[0], v[2]), [lo, b, hi])
            if (op in ("divide", "remainder") and a not in self.variable and
                    b not in self.variable):
                # XLA dies of SIGFPE where it folds an integer x / 0 or INT_MIN / -1 (its
                # runtime gives -1 and INT_MIN): keep one operand a parameter's
                b = self.gen.new_parameter(self, "s32", i.shape) if self.comp.entry else None
                if b is None:
                    return None
            return self.binary(op, a, b, BINARY_INT[op])
        op = self.rng.choice(list(BINARY_FLOAT))
        rule, domain = BINARY_FLOAT[op]
        if domain == "exact divisor":
            a = self.operand(i.dtype, i.shape, exact=True) if not i.exact else a
            b = self.operand(i.dtype, i.shape, exact=True)
            b = self.positive(b, exact=True)
            if self.rng.random() < 0.3:
                b = self.unary("negate", b, negate_info)
        else:
            b = self.operand(i.dtype, i.shape)
        if domain == "divisor":
            b = self.positive(b) if self.rng.random() < 0.7 else self.negate_positive(b)
        elif domain == "positive rhs":
            b = self.positive(b)
        elif domain == "power":
            a = self.bounded(self.positive(a, 0.5), 8.0)
            b = self.bounded(b, 3.0)
            if self.info[a].lo < 0.5:  # clamp or scaling moved it: keep the base away from 0
                a = self.positive(a, 0.5)
        if self.rng.random() < 0.5:  # either order, where the op allows it
            if domain is None:
                a, b = b, a
        return self.keep_small(self.binary(op, a, b, rule))

    def negate_positive(self, b):
        return self.unary("negate", self.positive(b), negate_info)

    def op_compare_select(self):
        x = self.choose(lambda i: i.exact and i.dtype != "pred", empty=True) or self.choose(lambda i: True)
        if x is None:
            return None
        i = self.info[x]
        if not i.exact:
            x = self.operand(i.dtype, i.shape, exact=True)
        y = self.operand(i.dtype, i.shape, exact=True)
        direction = self.rng.choice(("EQ", "NE", "LT", "LE", "GT", "GE"))
        if i.dtype == "pred":
            direction = self.rng.choice(("EQ", "NE"))
        kind = ""
        if i.dtype in FLOATS and self.rng.random() < 0.2:
            kind = ", type=TOTALORDER"  # -0 < +0
        p = self.emit("compare", lambda v: Info("pred", v[0].shape, err=exact_only(v)), [x, y],
                      f", direction={direction}{kind}")
        if self.rng.random() < 0.3:
            return p
        a = self.choose(lambda j: j.shape == i.shape and j.dtype != "pred", empty=True) or x
        t = self.info[a].dtype
        b = self.operand(t, i.shape)
        return self.emit("select", lambda v: hull([v[1], v[2]]).like(
            err=max(v[1].err, v[2].err) if v[0].exact else math.inf), [p, a, b])

    def op_convert(self):
        x = self.choose(lambda i: True, empty=True)
        if x is None:
            return None
        i = self.info[x]
        targets = [d for d in FLOATS + ("s32", "pred") if d != i.dtype and convertible(i, d)]
        if not targets:
            return None
        d = self.rng.choice(targets)
        if d in ("s32", "pred") and i.dtype in FLOATS and not i.exact:
            x = self.operand(i.dtype, i.shape, exact=True)
        return self.keep_small(self.convert(x, d))

    def op_broadcast(self):
        x = self.choose(lambda i: len(i.shape) < 4, empty=True)
        if x is None:
            return None
        i = self.info[x]
        rank = self.rng.randint(len(i.shape) + 1, min(4, len(i.shape) + 2))
        dims = sorted(self.rng.sample(range(rank), len(i.shape)))
        shape = [self.gen.dim() for _ in range(rank)]
        for d, n in zip(dims, i.shape):
            shape[d] = n
        if math.prod(shape) > MAX_ELEMENTS:
            return None
        return self.broadcast_to(x, tuple(shape), dims)

    def op_reshape(self):
        x = self.choose(lambda i: i.size > 1)
        if x is None:
            return None
        shape = random_shape_with(self.info[x].size, self.rng)
        return self.emit("reshape", lambda v: v[0].like(shape=shape), [x])

    def op_transpose(self):
        x = self.choose(lambda i: len(i.shape) >= 2, empty=True)
        if x is None:
            return None
        s = self.info[x].shape
        perm = self.rng.sample(range(len(s)), len(s))
        shape = tuple(s[p] for p in perm)
        return self.emit("transpose", lambda v: v[0].like(shape=shape), [x],
                         f", dimensions={{{','.join(map(str, perm))}}}")

    def op_slice(self):
        x = self.choose(lambda i: len(i.shape) >= 1 and i.size > 1)
        if x is None:
            return None
        parts, shape = [], []
        for n in self.info[x].shape:
            start = self.rng.randint(0, n - 1)
            limit = self.rng.randint(start + 1, n)
            stride = self.rng.choice((1, 1, 1, 2, 3))
            parts.append(f"[{start}:{limit}:{stride}]")
            shape.append(-(-(limit - start) // stride))
        return self.emit("slice", lambda v: v[0].like(shape=tuple(shape)), [x],
                         f", slice={{{', '.join(parts)}}}")

    def op_concatenate(self):
        x = self.choose(lambda i: len(i.shape) >= 1, empty=True)
        if x is None:
            return None
        i = self.info[x]
        d = self.rng.randrange(len(i.shape))
        operands, total = [x], i.shape[d]
        for _ in range(self.rng.randint(1, 2)):
            n = self.rng.randint(1, 5)
            shape = i.shape[:d] + (n,) + i.shape[d + 1:]
            if math.prod(shape) + math.prod(i.shape[:d] + (total,) + i.shape[d + 1:]) > MAX_ELEMENTS:
                break
            operands.append(self.operand(i.dtype, shape))
            total += n
        self.rng.shuffle(operands)
        out = i.shape[:d] + (total,) + i.shape[d + 1:]
        return self.emit("concatenate", lambda v: hull(v).like(shape=out), operands,
                         f", dimensions={{{d}}}")

    def op_pad(self):
        x = self.choose(lambda i: len(i.shape) >= 1)
        if x is None:
            return None
        i = self.info[x]
        parts, shape = [], []
        for n in i.shape:
            interior = self.rng.choice((0, 0, 0, 1, 2))
            full = n + (n - 1) * interior
            lo = self.rng.randint(-min(2, full - 1), 3)
            hi = self.rng.randint(-min(2, full + lo - 1), 3)
            parts.append(f"{lo}_{hi}" + (f"_{interior}" if interior else ""))
            shape.append(full + lo + hi)
        if math.prod(shape) > MAX_ELEMENTS or min(shape) < 1:
            return None
        value = self.operand(i.dtype, ())
        out = tuple(shape)
        return self.emit("pad", lambda v: hull(v).like(shape=out), [x, value],
                         f", padding={'x'.join(parts)}")

    def op_reverse(self):
        x = self.choose(lambda i: len(i.shape) >= 1, empty=True)
        if x is None:
            return None
        s = self.info[x].shape
        dims = sorted(self.rng.sample(range(len(s)), self.rng.randint(1, len(s))))
        return self.emit("reverse", lambda v: v[0].like(), [x],
                         f", dimensions={{{','.join(map(str, dims))}}}")

    def iota(self, dtype=None, shape=None):
        if shape is None:
            shape = self.gen.random_shape(min_rank=1)
        dtype = dtype or self.rng.choice(("s32", "s32", "f32", "bf16", "f64", "f16"))
        d = self.rng.randrange(len(shape))
        n = shape[d]
        return self.emit("iota", lambda _: Info(dtype, shape, 0, n - 1), [],
                         f", iota_dimension={d}", literal="")

    def op_iota(self):
        return self.iota()

    def op_clamp(self):
        x = self.choose(lambda i: i.dtype != "pred", empty=True)
        if x is None:
            return None
        i = self.info[x]
        a, b = sorted(self.rng.uniform(i.lo, i.hi) for _ in range(2))
        if i.dtype == "s32":
            a, b = math.floor(a), math.ceil(b)
        elif i.dtype == "bf16":
            a, b = math.floor(a * 4) / 4, math.ceil(b * 4) / 4
        else:
            a, b = round(a, 3), round(b, 3)
        if self.rng.random() < 0.5:
            lo, hi = self.constant(a, i.dtype), self.constant(b, i.dtype)
        else:
            lo, hi = self.splat(a, i.dtype, i.shape), self.splat(b, i.dtype, i.shape)
        return self.emit("clamp", lambda v: clamp_info(v[1], v[0], v[2]), [lo, x, hi])

    def op_reduce(self):
        x = self.choose(lambda i: len(i.shape) >= 1 and i.size != 1, empty=True)
        if x is None:
            return None
        i = self.info[x]
        dims = sorted(self.rng.sample(range(len(i.shape)), self.rng.randint(1, len(i.shape))))
        n = math.prod(i.shape[d] for d in dims)
        out = tuple(s for d, s in enumerate(i.shape) if d not in dims)
        if i.dtype == "pred":
            kind = self.rng.choice(("and", "or"))
            init = self.constant(kind == "and", "pred")
            rule = lambda v: Info("pred", out, err=v[0].err)  # noqa: E731
        else:
            kind = self.rng.choice(("add", "add", "maximum", "minimum"))
            if n == 0:  # an empty max / min is its init, +-inf: only sums
                kind = "add"
            if kind == "add":
                init = self.constant(0, i.dtype)
                rule = lambda v: sum_info(v[0], n, out)  # noqa: E731
            else:
                big = {"s32": INT_MAX}.get(i.dtype, math.inf)
                value = big if kind == "minimum" else (-big - 1 if i.dtype == "s32" else -big)
                # only the identity: XLA folds a reduce over size-1 dims to a reshape and
                # drops any other init value
                init = self.constant(value, i.dtype)
                rule = lambda v: v[0].like(shape=out)  # noqa: E731
        comp = self.gen.scalar_computation(kind, i.dtype)
        dim_text = ",".join(map(str, dims))
        return self.keep_small(self.emit("reduce", rule, [x, init],
                                         f", dimensions={{{dim_text}}}, to_apply={comp}",
                                         calls=[comp]))

    def op_dot(self):
        a = self.choose(lambda i: i.dtype in ("f32", "f64", "bf16", "s32") and 1 <= len(i.shape) <= 3, empty=True)
        if a is None:
            return None
        i = self.info[a]
        rank = len(i.shape)
        roles = [self.rng.choice(("batch", "contract", "contract", "free")) for _ in range(rank)]
        if i.dtype == "s32" and self.rng.random() < 0.7:
            return None
        lhs_batch = [d for d in range(rank) if roles[d] == "batch"]
        lhs_contract = [d for d in range(rank) if roles[d] == "contract"]
        lhs_free = [d for d in range(rank) if roles[d] == "free"]
        rhs_free_sizes = [self.gen.dim() for _ in range(self.rng.randint(0, 2))]
        # the rhs: batch dims, contracting dims and free dims in a random order
        items = [("b", k) for k in range(len(lhs_batch))] + [("c", k) for k in range(len(lhs_contract))] + \
            [("f", k) for k in range(len(rhs_free_sizes))]
        self.rng.shuffle(items)
        rhs_shape = []
        rhs_batch, rhs_contract = [0] * len(lhs_batch), [0] * len(lhs_contract)
        for pos, (kind, k) in enumerate(items):
            if kind == "b":
                rhs_batch[k] = pos
                rhs_shape.append(i.shape[lhs_batch[k]])
            elif kind == "c":
                rhs_contract[k] = pos
                rhs_shape.append(i.shape[lhs_contract[k]])
            else:
                rhs_shape.append(rhs_free_sizes[k])
        rhs_free = [rhs_free_sizes[k] for kind, k in items if kind == "f"]  # in the rhs's order
        out = tuple([i.shape[d] for d in lhs_batch] + [i.shape[d] for d in lhs_free] + rhs_free)
        if math.prod(out) > MAX_ELEMENTS or math.prod(rhs_shape) > MAX_ELEMENTS or len(rhs_shape) > 4:
            return None
        b = self.operand(i.dtype, rhs_shape)
        n = math.prod(i.shape[d] for d in lhs_contract)
        result = i.dtype
        if i.dtype == "bf16" and self.rng.random() < 0.1:
            result = "f32"  # XLA:CPU's library dot refuses some (bf16 x bf16 = f32)
        attrs = ""
        if lhs_batch:
            attrs += f", lhs_batch_dims={{{','.join(map(str, lhs_batch))}}}"
        if lhs_contract:
            attrs += f", lhs_contracting_dims={{{','.join(map(str, lhs_contract))}}}"
        if rhs_batch:
            attrs += f", rhs_batch_dims={{{','.join(map(str, rhs_batch))}}}"
        if rhs_contract:
            attrs += f", rhs_contracting_dims={{{','.join(map(str, rhs_contract))}}}"
        return self.keep_small(self.emit("dot", lambda v: dot_info(v[0], v[1], n, out, result),
                                         [a, b], attrs))

    def index(self, hi):
        """An exact s32 scalar, mostly in [-1, hi + 1] (XLA clamps start indices)."""
        r = self.rng.random()
        s = self.choose(lambda i: i.dtype == "s32" and i.shape == () and i.exact)
        if s is not None and r < 0.4:
            return s
        if r < 0.7:
            return self.constant(self.rng.randint(-1, hi + 1), "s32")
        src = self.choose(lambda i: i.dtype == "s32" and i.exact and i.size >= 1)
        if src is None:
            return self.constant(self.rng.randint(0, hi), "s32")
        shape = self.info[src].shape
        start = [self.rng.randrange(n) for n in shape]
        sl = self.emit("slice", lambda v: v[0].like(shape=(1,) * len(shape)), [src],
                       ", slice={" + ", ".join(f"[{s}:{s + 1}:1]" for s in start) + "}")
        return self.emit("reshape", lambda v: v[0].like(shape=()), [sl])

    def in_range(self, index, hi):
        i = self.info[index]
        if 0 <= i.lo and i.hi <= hi:
            return index
        return self.emit("clamp", lambda v: clamp_info(v[1], v[0], v[2]),
                         [self.constant(0, "s32"), index, self.constant(hi, "s32")])

    def op_dynamic_slice(self):
        x = self.choose(lambda i: len(i.shape) >= 1)
        if x is None:
            return None
        s = self.info[x].shape
        sizes = tuple(self.rng.randint(1, n) for n in s)
        # Start indices mostly in range: XLA folds dynamic-slice(dynamic-slice(x, a), b) to
        # dynamic-slice(x, a + b), and gather(dynamic-slice(x, a), i) to a gather from x, and
        # clamps only the result, so its numbers are wrong for a start index out of range
        # (the fuzzer then asks XLA without its simplifier).
        idx = [self.index(n - k) for n, k in zip(s, sizes)]
        if self.rng.random() < 0.7:
            idx = [self.in_range(j, n - k) for j, n, k in zip(idx, s, sizes)]
        return self.emit("dynamic-slice", lambda v: v[0].like(shape=sizes), [x] + idx,
                         f", dynamic_slice_sizes={{{','.join(map(str, sizes))}}}")

    def op_dynamic_update_slice(self):
        x = self.choose(lambda i: len(i.shape) >= 1)
        if x is None:
            return None
        i = self.info[x]
        sizes = tuple(self.rng.randint(1, n) for n in i.shape)
        u = self.operand(i.dtype, sizes)
        idx = [self.index(n - k) for n, k in zip(i.shape, sizes)]
        return self.emit("dynamic-update-slice", lambda v: hull(v[:2]), [x, u] + idx)

    def op_tuple(self):
        items = [n for n in (self.choose(lambda i: True, empty=True) for _ in range(self.rng.randint(1, 3)))
                 if n is not None]
        if not items:
            return None
        t = self.emit("tuple", lambda v: Info(None, (), elements=list(v)), items)
        k = self.rng.randrange(len(items))
        return self.emit("get-tuple-element", lambda v, k=k: v[0].elements[k], [t],
                         f", index={k}")

    def op_while(self):
        if self.depth >= 2:
            return None
        gen, rng = self.gen, self.rng
        trips = rng.choice((0, 1, 2, 3, 3, 4, 5))
        carries = [self.choose(lambda i: True, empty=True) for _ in range(rng.randint(1, 3))]
        carries = list(dict.fromkeys(c for c in carries if c is not None))
        if not carries:
            return None
        zero = self.constant(0, "s32")
        init_names = [zero] + carries
        init_infos = [self.info[n] for n in init_names]
        tuple_info = Info(None, (), elements=init_infos)
        t = self.emit("tuple", lambda v: Info(None, (), elements=list(v)), init_names)
        # condition: the counter below the trip count
        cond = Computation(gen.fresh_computation("cond"))
        cb = Builder(gen, cond, self.depth + 1)
        cp = cb.parameter(tuple_info)
        c = cb.emit("get-tuple-element", lambda v: v[0].elements[0], [cp], ", index=0")
        n = cb.constant(trips, "s32")
        cond.root = cb.emit("compare", lambda v: Info("pred", ()), [c, n], ", direction=LT")
        # body: counter + 1, each tensor carry through random ops, clamped back to its range
        body = Computation(gen.fresh_computation("body"))
        bb = Builder(gen, body, self.depth + 1)
        body_param_infos = [Info("s32", (), 0, max(trips - 1, 0))]
        for i in init_infos[1:]:
            j = i.like()
            if j.dtype in EPS:  # after a trip a float carry is no longer exact
                j.err = max(j.err, EPS[j.dtype] * max(j.bound, 1))
            body_param_infos.append(j)
        bp = bb.parameter(Info(None, (), elements=body_param_infos))
        gtes = [bb.emit("get-tuple-element", lambda v, k=k: v[0].elements[k], [bp], f", index={k}")
                for k in range(len(init_infos))]
        for _ in range(rng.randint(1, 6)):
            bb.random_op()
        new = [bb.binary("add", gtes[0], bb.constant(1, "s32"), BINARY_INT["add"])]
        for k, i in enumerate(init_infos[1:], start=1):
            v = bb.operand(i.dtype, i.shape)
            if i.dtype != "pred":
                lo, hi = bb.constant(i.lo, i.dtype), bb.constant(i.hi, i.dtype)
                v = bb.emit("clamp", lambda w: clamp_info(w[1], w[0], w[2]), [lo, v, hi])
            new.append(v)
        body.root = bb.emit("tuple", lambda v: Info(None, (), elements=list(v)), new)
        gen.add_computation(cond)
        gen.add_computation(body)

        def rule(v):
            infos = list(v[0].elements)
            for k in range(trips):
                trip = [Info("s32", (), k, k)] + infos[1:]
                out = body.evaluate([Info(None, (), elements=trip)])[body.root]
                infos = list(out.elements)
            infos[0] = Info("s32", (), trips, trips)
            return Info(None, (), elements=infos)
        w = self.emit("while", rule, [t], f", condition={cond.name}, body={body.name}",
                      calls=[cond.name, body.name])
        k = rng.randrange(1, len(init_infos))
        out = self.emit("get-tuple-element", lambda v, k=k: v[0].elements[k], [w], f", index={k}")
        if rng.random() < 0.5 and len(init_infos) > 2:
            k2 = rng.choice([j for j in range(1, len(init_infos)) if j != k])
            self.emit("get-tuple-element", lambda v, k=k2: v[0].elements[k], [w], f", index={k2}")
        return out

    def op_conditional(self):
        if self.depth >= 2:
            return None
        gen, rng = self.gen, self.rng
        result = self.choose(lambda i: True, empty=True)
        if result is None:
            return None
        r = self.info[result]
        branches = rng.choice((2, 2, 3, 4))
        if branches == 2 and rng.random() < 0.6:
            selector = self.operand("pred", (), exact=True)
        else:
            selector = self.index(branches - 1)
        operands, comps = [], []
        for b in range(branches):
            o = result if rng.random() < 0.5 else (self.choose(lambda i: True, empty=True) or result)
            if rng.random() < 0.25:  # a tuple operand
                o2 = self.choose(lambda i: True, empty=True) or result
                o = self.emit("tuple", lambda v: Info(None, (), elements=list(v)), [o, o2])
            operands.append(o)
            comp = Computation(gen.fresh_computation("branch"))
            cb = Builder(gen, comp, self.depth + 1)
            p = cb.parameter(self.info[o])
            if self.info[o].elements is not None:
                for k in range(len(self.info[o].elements)):
                    cb.emit("get-tuple-element", lambda v, k=k: v[0].elements[k], [p], f", index={k}")
            for _ in range(rng.randint(0, 4)):
                cb.random_op()
            comp.root = cb.operand(r.dtype, r.shape)
            gen.add_computation(comp)
            comps.append(comp)

        def rule(v):
            outs = [c.evaluate([x])[c.root] for c, x in zip(comps, v[1:])]
            out = hull(outs)
            out.err = max(o.err for o in outs) if v[0].exact else math.inf
            return out
        if branches == 2 and self.info[selector].dtype == "pred":
            attrs = f", true_computation={comps[0].name}, false_computation={comps[1].name}"
        else:
            attrs = f", branch_computations={{{', '.join(c.name for c in comps)}}}"
        return self.keep_small(self.emit("conditional", rule, [selector] + operands, attrs,
                                         calls=[c.name for c in comps]))

    def op_argmax(self):
        """A variadic reduce: (value, index) pairs, the largest (smallest) value and its
        first index, as JAX writes argmax."""
        x = self.choose(lambda i: i.dtype != "pred" and len(i.shape) >= 1 and i.exact)
        if x is None:
            return None
        i = self.info[x]
        d = self.rng.randrange(len(i.shape))
        dims = [d] if self.rng.random() < 0.8 else sorted(
            self.rng.sample(range(len(i.shape)), self.rng.randint(1, len(i.shape))))
        index = self.emit("iota", lambda _: Info("s32", i.shape, 0, i.shape[d] - 1), [],
                          f", iota_dimension={d}", literal="")
        direction = self.rng.choice(("GT", "LT"))
        big = math.inf if i.dtype in FLOATS else INT_MAX
        init = self.constant(-big if direction == "GT" else big, i.dtype) \
            if i.dtype in FLOATS else self.constant(INT_MIN if direction == "GT" else INT_MAX, "s32")
        init_index = self.constant(INT_MAX, "s32")  # never wins a tie
        comp = self.gen.argmax_computation(i.dtype, direction)
        out = tuple(n for k, n in enumerate(i.shape) if k not in dims)
        r = self.emit("reduce", lambda v: Info(None, (), elements=[
            v[0].like(shape=out), v[1].like(shape=out)]), [x, index, init, init_index],
            f", dimensions={{{','.join(map(str, dims))}}}, to_apply={comp}", calls=[comp])
        k = self.rng.choice((0, 1, 1))
        return self.emit("get-tuple-element", lambda v, k=k: v[0].elements[k], [r], f", index={k}")

    def op_reduce_window(self):
        x = self.choose(lambda i: len(i.shape) >= 1 and i.dtype != "pred")
        if x is None:
            return None
        i = self.info[x]
        kind = self.rng.choice(("add", "maximum", "minimum"))
        sizes, strides, pads, base, win, out = [], [], [], [], [], []
        for n in i.shape:
            size = self.rng.choice((1, 1, 2, 2, 3, 4))
            stride = self.rng.choice((1, 1, 2, 3))
            b = w = 1
            if kind == "add" and self.rng.random() < 0.2:
                b, w = self.rng.choice(((2, 1), (1, 2), (2, 2)))
            lo, hi = self.rng.randint(0, size - 1), self.rng.randint(0, size - 1)
            padded = lo + hi + (n - 1) * b + 1
            extent = (size - 1) * w + 1
            if padded < extent:
                hi += extent - padded
                if kind != "add" and hi >= size:
                    return None
                padded = extent
            sizes.append(size)
            strides.append(stride)
            pads.append(f"{lo}_{hi}")
            base.append(b)
            win.append(w)
            out.append((padded - extent) // stride + 1)
        if math.prod(out) > MAX_ELEMENTS:
            return None
        window = (f"size={'x'.join(map(str, sizes))} stride={'x'.join(map(str, strides))} "
                  f"pad={'x'.join(pads)}")
        if any(b > 1 for b in base):
            window += f" lhs_dilate={'x'.join(map(str, base))}"
        if any(w > 1 for w in win):
            window += f" rhs_dilate={'x'.join(map(str, win))}"
        n = math.prod(sizes)
        out = tuple(out)
        if kind == "add":
            init = self.constant(0, i.dtype)
            rule = lambda v: sum_info(v[0], n, out)  # noqa: E731
        else:
            big = math.inf if i.dtype in FLOATS else INT_MAX
            value = -big if kind == "maximum" else big
            if i.dtype == "s32" and kind == "maximum":
                value = INT_MIN
            init = self.constant(value, i.dtype)
            rule = lambda v: v[0].like(shape=out)  # noqa: E731
        comp = self.gen.scalar_computation(kind, i.dtype)
        return self.keep_small(self.emit("reduce-window", rule, [x, init],
                                         f", window={{{window}}}, to_apply={comp}", calls=[comp]))

    def op_sort(self):
        x = self.choose(lambda i: len(i.shape) >= 1 and i.exact)
        if x is None:
            return None
        i = self.info[x]
        d = self.rng.randrange(len(i.shape))
        operands = [x]
        for _ in range(self.rng.choice((0, 0, 1, 1, 2))):
            if self.rng.random() < 0.5:
                operands.append(self.emit("iota", lambda _: Info("s32", i.shape, 0, i.shape[d] - 1),
                                          [], f", iota_dimension={d}", literal=""))
            else:
                operands.append(self.operand(self.rng.choice(FLOATS + ("s32",)), i.shape))
        direction = ("LT", "GT", "EQ")[0 if i.dtype == "pred" else self.rng.randrange(2)]
        if i.dtype == "pred":
            direction = "LT"
        total = i.dtype in FLOATS and self.rng.random() < 0.3
        comp = self.gen.sort_computation([self.info[o].dtype for o in operands], direction, total)
        attrs = f", dimensions={{{d}}}, is_stable=true, to_apply={comp}"
        if len(operands) == 1:
            return self.emit("sort", lambda v: v[0].like(), operands, attrs, calls=[comp])
        s = self.emit("sort", lambda v: Info(None, (), elements=[o.like() for o in v]), operands,
                      attrs, calls=[comp])
        k = self.rng.randrange(len(operands))
        return self.emit("get-tuple-element", lambda v, k=k: v[0].elements[k], [s], f", index={k}")

    def indices(self, shape, hi):
        """Exact s32 start indices, mostly in [-1, hi + 1] (XLA clamps a gather's, and skips a
        scatter's window that does not fit)."""
        if self.comp.entry and self.gen.params < 8 and self.rng.random() < 0.7:
            return self.gen.new_parameter(self, "s32", shape, (-1, hi + 1))
        return self.operand("s32", shape, exact=True)

    def index_layout(self, m):
        """Batch dims, the indices' shape and index_vector_dim for m-element index vectors."""
        batch = [self.rng.choice((1, 2, 3, 4, 5, 7)) for _ in range(self.rng.choice((0, 1, 1, 2)))]
        if m == 1 and self.rng.random() < 0.3:  # implicit trailing index vector dim
            return batch, tuple(batch), len(batch)
        ivd = self.rng.randint(0, len(batch))
        return batch, tuple(batch[:ivd] + [m] + batch[ivd:]), ivd

    def op_gather(self):
        x = self.choose(lambda i: len(i.shape) >= 1)
        if x is None:
            return None
        s = self.info[x].shape
        r = len(s)
        start_map = self.rng.sample(range(r), self.rng.randint(1, r))
        collapsed = sorted(d for d in start_map if self.rng.random() < 0.6)
        sizes = [1 if d in collapsed else self.rng.randint(1, s[d]) for d in range(r)]
        batch, index_shape, ivd = self.index_layout(len(start_map))
        window = [sizes[d] for d in range(r) if d not in collapsed]
        out_rank = len(batch) + len(window)
        offset_dims = sorted(self.rng.sample(range(out_rank), len(window)))
        bi, wi, out = iter(batch), iter(window), []
        for pos in range(out_rank):
            out.append(next(wi) if pos in offset_dims else next(bi))
        out = tuple(out)
        if math.prod(out) > MAX_ELEMENTS:
            return None
        idx = self.indices(index_shape, max(s))
        attrs = (f", offset_dims={{{','.join(map(str, offset_dims))}}}"
                 f", collapsed_slice_dims={{{','.join(map(str, collapsed))}}}"
                 f", start_index_map={{{','.join(map(str, start_map))}}}"
                 f", index_vector_dim={ivd}, slice_sizes={{{','.join(map(str, sizes))}}}")
        return self.emit("gather", lambda v: v[0].like(shape=out), [x, idx], attrs)

    def op_scatter(self):
        x = self.choose(lambda i: len(i.shape) >= 1 and i.dtype != "pred")
        if x is None:
            return None
        i = self.info[x]
        s, r = i.shape, len(i.shape)
        dims_map = self.rng.sample(range(r), self.rng.randint(1, r))
        inserted = sorted(d for d in dims_map if self.rng.random() < 0.6)
        window = [self.rng.randint(1, s[d]) for d in range(r) if d not in inserted]
        batch, index_shape, ivd = self.index_layout(len(dims_map))
        rank = len(batch) + len(window)
        window_dims = sorted(self.rng.sample(range(rank), len(window)))
        bi, wi, updates_shape = iter(batch), iter(window), []
        for pos in range(rank):
            updates_shape.append(next(wi) if pos in window_dims else next(bi))
        if math.prod(updates_shape) > MAX_ELEMENTS:
            return None
        idx = self.indices(index_shape, max(s))
        updates = self.operand(i.dtype, updates_shape)
        kind = self.rng.choice(("add", "add", "maximum", "minimum"))
        n = math.prod(batch)
        comp = self.gen.scalar_computation(kind, i.dtype)

        def rule(v):
            x, u = v[0], v[2]
            if kind != "add":
                return hull([x, u.like(shape=x.shape)])
            total = sum_info(u.like(shape=x.shape), n, x.shape)
            out = add_info(x, total)
            return out
        attrs = (f", update_window_dims={{{','.join(map(str, window_dims))}}}"
                 f", inserted_window_dims={{{','.join(map(str, inserted))}}}"
                 f", scatter_dims_to_operand_dims={{{','.join(map(str, dims_map))}}}"
                 f", index_vector_dim={ivd}, to_apply={comp}")
        return self.keep_small(self.emit("scatter", rule, [x, idx, updates], attrs,
                                         calls=[comp]))

    def op_convolution(self):
        """A convolution with random dim_labels, padding, strides, dilations and groups."""
        x = self.choose(lambda i: i.dtype in ("f32", "f64", "bf16") and len(i.shape) in (3, 4))
        if x is None:
            return None
        i = self.info[x]
        rng, ns = self.rng, len(i.shape) - 2
        spatial = "".join(map(str, range(ns)))
        lhs_labels = "".join(rng.sample("bf" + spatial, ns + 2))
        rhs_labels = "".join(rng.sample("io" + spatial, ns + 2))
        out_labels = "".join(rng.sample("bf" + spatial, ns + 2))
        size = dict(zip(lhs_labels, i.shape))
        c = size["f"]
        groups = rng.choice([g for g in (1, 2, 3, 4) if c % g == 0])
        per_group = rng.choice((1, 2, 3))
        kernel, window, out = {}, [], {"b": size["b"], "f": groups * per_group}
        for d in spatial:
            k = rng.choice((1, 2, 3))
            stride, lhs_dilate, rhs_dilate = rng.choice((1, 1, 2)), rng.choice((1, 1, 2)), \
                rng.choice((1, 1, 2))
            lo, hi = rng.randint(0, 2), rng.randint(0, 2)
            padded = (size[d] - 1) * lhs_dilate + 1 + lo + hi
            extent = (k - 1) * rhs_dilate + 1
            if padded < extent:
                hi += extent - padded
                padded = extent
            kernel[d] = k
            out[d] = (padded - extent) // stride + 1
            window.append((k, stride, f"{lo}_{hi}", lhs_dilate, rhs_dilate))
        rhs_shape = [{"i": c // groups, "o": groups * per_group}.get(l, kernel.get(l)) for l in rhs_labels]
        out_shape = tuple(out[l] for l in out_labels)
        if math.prod(out_shape) > MAX_ELEMENTS or math.prod(rhs_shape) > MAX_ELEMENTS:
            return None
        w = self.operand(i.dtype, rhs_shape)
        text = "size=" + "x".join(str(k) for k, *_ in window)
        text += " stride=" + "x".join(str(s) for _, s, *_ in window)
        text += " pad=" + "x".join(p for _, _, p, *_ in window)
        text += " lhs_dilate=" + "x".join(str(d) for *_, d, _ in window)
        text += " rhs_dilate=" + "x".join(str(d) for *_, d in window)
        n = math.prod(kernel.values()) * (c // groups)
        attrs = (f", window={{{text}}}, dim_labels={lhs_labels}_{rhs_labels}->{out_labels}"
                 f", feature_group_count={groups}")
        return self.keep_small(self.emit("convolution", lambda v: dot_info(v[0], v[1], n, out_shape,
                                                                      v[0].dtype), [x, w], attrs))

    def op_bits(self):
        """bitcast-convert f32 -> s32, reduce-precision, copy."""
        r = self.rng.random()
        if "reduce-precision" in self.gen.leave_out and 0.4 <= r < 0.8:
            r = 0.9
        if r < 0.4:
            x = self.choose(lambda i: i.dtype == "f32" and i.exact)
            if x is None:
                return None
            return self.emit("bitcast-convert", lambda v: Info("s32", v[0].shape, INT_MIN, INT_MAX,
                                                               err=exact_only(v)), [x])
        if r < 0.8:
            x = self.choose(lambda i: i.dtype in ("f32", "f64", "bf16", "f16"))
            if x is None:
                return None
            e, m = self.rng.choice(((5, 10), (8, 7), (8, 23), (6, 3), (11, 20), (5, 2)))
            if self.info[x].dtype == "f32":
                m = min(m, 23)
                e = min(e, 8)

            def rule(v, m=m):
                out = v[0].like()
                if not out.exact:
                    out.err += 2.0 ** -m * out.bound
                return out
            return self.emit("reduce-precision", rule, [x],
                             f", exponent_bits={e}, mantissa_bits={m}")
        x = self.choose(lambda i: True, empty=True)
        if x is None:
            return None
        return self.emit("copy", lambda v: v[0].like(), [x])

    OPS = {"unary": 12, "binary": 16, "compare_select": 6, "convert": 5, "broadcast": 5,
           "reshape": 4, "transpose": 4, "slice": 4, "concatenate": 3, "pad": 3, "reverse": 2,
           "reduce": 8, "dot": 5, "iota": 1, "clamp": 3, "dynamic_slice": 3,
           "dynamic_update_slice": 3, "tuple": 1, "while": 3, "conditional": 2, "argmax": 2,
           "reduce_window": 3, "sort": 2, "bits": 2, "gather": 3, "scatter": 3,
           "convolution": 3}

    def random_op(self):
        names, weights = zip(*self.OPS.items())
        op = self.rng.choices(names, weights)[0]
        return getattr(self, "op_" + op)()


def convertible(info, dtype):
    if info.elements is not None:
        return False
    if dtype == "f16" and info.bound > 60000:  # would overflow to inf
        return False
    if dtype in ("s32", "pred") and info.dtype in FLOATS:
        return info.exact
    return True


def embed(small, big, rng):
    """Increasing dims of big that carry small's dims (broadcast), or None."""
    options = [c for c in itertools.combinations(range(len(big)), len(small))
               if all(big[d] == s for d, s in zip(c, small))]
    return rng.choice(options) if options else None


def random_shape_with(n, rng):
    """A shape of n elements: n split into 1-4 factors, 1s sprinkled in."""
    factors = []
    m = n
    p = 2
    while m > 1:
        while m % p == 0:
            factors.append(p)
            m //= p
        p += 1
    rng.shuffle(factors)
    rank = rng.randint(1, 4)
    dims = [1] * rank
    for f in factors:
        dims[rng.randrange(rank)] *= f
    return tuple(dims)


class Generator:
    """One random program from one seed."""

    def __init__(self, seed, leave_out=()):
        self.rng = random.Random(seed)
        self.leave_out = set(leave_out)
        self.program = Program()
        self.counter = 0
        self.params = 0
        self.scalar_comps = {}
        # a few shapes this program's parameters mostly share, so elementwise ops meet
        self.themes = [self.random_shape() for _ in range(self.rng.randint(1, 3))]
        if self.themes[0] and self.rng.random() < 0.03:  # an empty array
            shape = list(self.themes[0])
            shape[self.rng.randrange(len(shape))] = 0
            self.themes[0] = tuple(shape)

    def fresh(self, hint):
        self.counter += 1
        return f"{hint}{self.counter}"

    def fresh_computation(self, hint):
        self.counter += 1
        return f"{hint}_{self.counter}"

    def add_computation(self, comp):
        self.program.computations[comp.name] = comp

    def dim(self):
        if self.rng.random() < 0.12:
            return self.rng.choice(BIG_DIM_SIZES)
        return self.rng.choice(DIM_SIZES)

    def random_shape(self, min_rank=0):
        while True:
            rank = self.rng.choices((0, 1, 2, 3, 4), (1, 3, 4, 3, 1))[0]
            rank = max(rank, min_rank)
            shape = tuple(self.dim() for _ in range(rank))
            if math.prod(shape) <= MAX_ELEMENTS:
                return shape

    def new_parameter(self, builder, dtype, shape, interval=None):
        self.params += 1
        if interval is not None:
            return builder.parameter(Info(dtype, shape, *interval), "integers")
        if dtype in FLOATS:
            mode = self.rng.choice(("uniform", "uniform", "integers", "halves"))
            lo, hi = self.rng.choice(((-2.0, 2.0), (-4.0, 4.0), (-1.0, 1.0), (0.5, 3.0)))
            info = Info(dtype, shape, lo, hi)
        elif dtype == "s32":
            mode = "integers"
            lo, hi = self.rng.choice(((-5, 5), (0, 10), (-1000, 1000), (-3, 3), (INT_MIN, INT_MAX)))
            info = Info(dtype, shape, lo, hi)
        else:
            mode = "pred"
            info = Info("pred", shape)
        return builder.parameter(info, mode)

    def scalar_computation(self, kind, dtype):
        key = (kind, dtype)
        if key not in self.scalar_comps:
            name = f"{kind}_{dtype}"
            comp = Computation(name)
            comp.instrs = [Instr("a", Info(dtype, ()), "parameter", literal="0"),
                           Instr("b", Info(dtype, ()), "parameter", literal="1"),
                           Instr("r", Info(dtype, ()), kind, ["a", "b"])]
            comp.root = "r"
            self.add_computation(comp)
            self.scalar_comps[key] = name
        return self.scalar_comps[key]

    def argmax_computation(self, dtype, direction):
        key = ("argmax", dtype, direction)
        if key not in self.scalar_comps:
            name = f"arg{'max' if direction == 'GT' else 'min'}_{dtype}"
            s, i = Info(dtype, ()), Info("s32", ())
            comp = Computation(name)
            comp.instrs = [
                Instr("a", s, "parameter", literal="0"), Instr("i", i, "parameter", literal="1"),
                Instr("b", s, "parameter", literal="2"), Instr("j", i, "parameter", literal="3"),
                Instr("wins", Info("pred", ()), "compare", ["a", "b"], f", direction={direction}"),
                Instr("same", Info("pred", ()), "compare", ["a", "b"], ", direction=EQ"),
                Instr("first", Info("pred", ()), "compare", ["i", "j"], ", direction=LT"),
                Instr("tie", Info("pred", ()), "and", ["same", "first"]),
                Instr("pick", Info("pred", ()), "or", ["wins", "tie"]),
                Instr("value", s, "select", ["pick", "a", "b"]),
                Instr("index", i, "select", ["pick", "i", "j"]),
                Instr("r", Info(None, (), elements=[s, i]), "tuple", ["value", "index"])]
            comp.root = "r"
            self.add_computation(comp)
            self.scalar_comps[key] = name
        return self.scalar_comps[key]

    def sort_computation(self, dtypes, direction, total):
        key = ("sort", tuple(dtypes), direction, total)
        if key not in self.scalar_comps:
            name = self.fresh_computation("compare")
            comp = Computation(name)
            for k, d in enumerate(dtypes):
                comp.instrs += [Instr(f"x{k}", Info(d, ()), "parameter", literal=str(2 * k)),
                                Instr(f"y{k}", Info(d, ()), "parameter", literal=str(2 * k + 1))]
            kind = ", type=TOTALORDER" if total else ""
            comp.instrs.append(Instr("r", Info("pred", ()), "compare", ["x0", "y0"],
                                     f", direction={direction}{kind}"))
            comp.root = "r"
            self.add_computation(comp)
            self.scalar_comps[key] = name
        return self.scalar_comps[key]

    def generate(self):
        entry = Computation("main", entry=True)
        b = Builder(self, entry)
        for _ in range(self.rng.randint(1, 3)):
            dtype = self.rng.choices(("f32", "f64", "bf16", "f16", "s32", "pred"),
                                     (10, 2, 3, 1, 3, 1))[0]
            shape = self.rng.choice(self.themes) if self.rng.random() < 0.8 else self.random_shape()
            self.new_parameter(b, dtype, shape)
        for _ in range(self.rng.randint(3, 24)):
            b.random_op()
        used = {o for i in entry.instrs for o in i.operands}
        leaves = [n for n in b.pool if n not in used]
        outs = list(dict.fromkeys([b.pool[-1]] + self.rng.sample(leaves, min(len(leaves), 3))))
        outs = outs[:self.rng.randint(1, 4)]
        if self.rng.random() < 0.1:  # an output twice, or a parameter as it came
            outs.append(self.rng.choice(outs + [i.name for i in entry.instrs
                                                if i.opcode == "parameter" and i.info.elements is None]))
        if len(outs) == 1 and self.rng.random() < 0.3:
            entry.root = outs[0]
            self.program.entry = entry
            dead_code(self.program)
            return self.program
        entry.root = b.emit("tuple", lambda v: Info(None, (), elements=list(v)), outs, hint="out")
        self.program.entry = entry
        dead_code(self.program)
        return self.program


def dead_code(program):
    """Drops instructions the root does not need (parameters stay: they are the inputs)
    and computations no instruction calls."""
    comp = program.entry
    by_name = {i.name: i for i in comp.instrs}
    live, todo = set(), [comp.root]
    while todo:
        n = todo.pop()
        if n in live:
            continue
        live.add(n)
        todo += by_name[n].operands
    comp.instrs = [i for i in comp.instrs if i.name in live or i.opcode == "parameter"]
    called, todo = set(), [c for i in comp.instrs for c in i.calls]
    while todo:
        c = todo.pop()
        if c in called:
            continue
        called.add(c)
        todo += [d for i in program.computations[c].instrs for d in i.calls]
    program.computations = collections.OrderedDict(
        (k, v) for k, v in program.computations.items() if k in called)


def outputs_of(program):
    root = next(i for i in program.entry.instrs if i.name == program.entry.root)
    return root.info.elements if root.info.elements is not None else [root.info]


def leaves(info):
    if info.elements is None:
        return [info]
    return [leaf for e in info.elements for leaf in leaves(e)]


def tolerances(program):
    """Per output: the absolute difference allowed (0 = bit-equal), or None if unsound."""
    out = []
    for info in (leaf for o in outputs_of(program) for leaf in leaves(o)):
        if not math.isfinite(info.err):
            out.append(None)
        else:
            out.append(TOLERANCE_FACTOR * info.err)
    return out


# ---- inputs ------------------------------------------------------------------------------
def np_dtype(dtype):
    import ml_dtypes
    return {"f32": np.float32, "f64": np.float64, "bf16": ml_dtypes.bfloat16, "f16": np.float16,
            "s32": np.int32, "pred": np.bool_}[dtype]


def inputs_for(program, seed):
    rng = np.random.default_rng(seed)
    out = {}
    for ins in program.entry.instrs:
        if ins.opcode != "parameter":
            continue
        info, mode = ins.info, program.input_modes.get(ins.name, "given")
        shape = info.shape
        if mode == "given":
            continue
        if info.dtype == "pred":
            a = rng.random(shape) < 0.5
        elif info.dtype == "s32":
            a = rng.integers(int(info.lo), int(info.hi), shape, endpoint=True, dtype=np.int64)
        elif mode == "integers":
            a = rng.integers(math.ceil(info.lo), math.floor(info.hi), shape, endpoint=True)
        elif mode == "halves":
            a = rng.integers(math.ceil(info.lo * 2), math.floor(info.hi * 2), shape,
                             endpoint=True) / 2
        else:
            a = rng.uniform(info.lo, info.hi, shape)
        out[ins.name] = np.asarray(a).astype(np_dtype(info.dtype))
    return out
