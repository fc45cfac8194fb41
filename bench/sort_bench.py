#!/usr/bin/python3
"""sort, topk and the cumulative ops: strata against PyTorch, in one
process, alternating rounds; each side's best round counts.

  PYTHONPATH=build/python /usr/bin/python3 bench/sort_bench.py [--rounds 5]

Each case times the forward op on an f32 tensor (synced, so strata's time
includes running its compiled program; the compile itself is the warm-up),
and the forward plus the gradient of sum(op(x) * g) for the differentiable
ones. torch runs with every core (torch.set_num_threads). Prints
milliseconds and strata / torch as a throughput ratio (> 1: strata faster).
"""
import argparse
import os
import time

import numpy as np
import torch

import strata

# (name, shape, dim, strata op, torch op)
CASES = [
    ("sort rows", (256, 4096), -1,
     lambda x: strata.sort(x, -1).values, lambda x: torch.sort(x, -1).values),
    ("sort columns", (4096, 256), 0,
     lambda x: strata.sort(x, 0).values, lambda x: torch.sort(x, 0).values),
    ("argsort rows", (256, 4096), -1,
     lambda x: strata.argsort(x, -1), lambda x: torch.argsort(x, -1)),
    ("topk 8 of 32000", (64, 32000), -1,
     lambda x: strata.topk(x, 8).values, lambda x: torch.topk(x, 8).values),
    ("cumsum rows", (256, 4096), -1,
     lambda x: strata.cumsum(x, -1), lambda x: torch.cumsum(x, -1)),
    ("cumsum columns", (4096, 256), 0,
     lambda x: strata.cumsum(x, 0), lambda x: torch.cumsum(x, 0)),
    ("logcumsumexp", (256, 4096), -1,
     lambda x: strata.logcumsumexp(x, -1), lambda x: torch.logcumsumexp(x, -1)),
    ("cummax", (256, 4096), -1,
     lambda x: strata.cummax(x, -1).values, lambda x: torch.cummax(x, -1).values),
]


def best_of(fn, reps):
    fn()  # warm-up (strata compiles here)
    best = 1e9
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(os.cpu_count())
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"{'case':18} {'pass':8} {'strata ms':>10} {'torch ms':>9} {'ratio':>6}")
    for name, shape, dim, s_op, t_op in CASES:
        rng = np.random.default_rng(0)
        x = rng.standard_normal(shape).astype(np.float32)
        sx, tx = strata.tensor(x), torch.tensor(x)
        out_shape = tuple(s_op(sx).shape)
        g = rng.standard_normal(out_shape).astype(np.float32)
        sg, tg = strata.tensor(g), torch.tensor(g)
        differentiable = not name.startswith("argsort")

        def s_forward():
            s_op(sx).sync()

        def t_forward():
            with torch.no_grad():
                t_op(tx)

        def s_backward():
            strata.grad(lambda a: (s_op(a) * sg).sum())(sx).sync()

        txg = tx.clone().requires_grad_()

        def t_backward():
            torch.autograd.grad((t_op(txg) * tg).sum(), (txg,))

        passes = [("forward", s_forward, t_forward)]
        if differentiable:
            passes.append(("fwd+bwd", s_backward, t_backward))
        best = {}
        for _ in range(args.rounds):
            for pass_name, s_fn, t_fn in passes:
                for side, fn in (("strata", s_fn), ("torch", t_fn)):
                    best[side, pass_name] = min(best.get((side, pass_name), 1e9),
                                                best_of(fn, args.reps))
        for pass_name, _, _ in passes:
            s, t = best["strata", pass_name], best["torch", pass_name]
            print(f"{name:18} {pass_name:8} {s * 1e3:10.2f} {t * 1e3:9.2f} {t / s:6.2f}")


if __name__ == "__main__":
    main()
