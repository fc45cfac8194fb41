#!/usr/bin/python3
"""Per-op cost from Python on tiny tensors: strata tracing an op (Python ->
C++ -> IR node) against PyTorch eager dispatching and running one, in one
process, alternating rounds; each side's best round counts.

  PYTHONPATH=build/python /usr/bin/python3 bench/python_overhead.py [--ops 2000] [--rounds 7]

Prints microseconds per op: strata trace only; strata trace + sync of the
cached program (the steady state of a training loop: hash the graph, find
the program, run it); torch eager with 1 thread (its best for tiny tensors).
"""
import argparse
import time

import numpy as np
import torch

import strata


def chain(lib_x, n):
    y = lib_x
    for _ in range(n):
        y = y * 1.0001 + lib_x  # two ops per iteration
    return y


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--size", type=int, default=8)
    args = ap.parse_args()
    torch.set_num_threads(1)
    n = args.ops // 2
    a = np.linspace(0, 1, args.size, dtype=np.float32)
    sx, tx = strata.tensor(a), torch.tensor(a)
    chain(sx, n).sync()  # compile once
    best = {"trace": 1e9, "trace+sync": 1e9, "torch": 1e9}
    for _ in range(args.rounds):
        t0 = time.perf_counter()
        y = chain(sx, n)
        t1 = time.perf_counter()
        y.sync()
        t2 = time.perf_counter()
        chain(tx, n)
        t3 = time.perf_counter()
        best["trace"] = min(best["trace"], (t1 - t0) / args.ops)
        best["trace+sync"] = min(best["trace+sync"], (t2 - t0) / args.ops)
        best["torch"] = min(best["torch"], (t3 - t2) / args.ops)
    np.testing.assert_allclose(y.numpy(), chain(tx, n).numpy(), rtol=1e-4)
    m = strata.metrics()
    print(f"ops per round {args.ops} on f32[{args.size}], best of {args.rounds} rounds; "
          f"strata compiles {m['compiles']}, cache hits {m['cache_hits']}")
    for k in ["trace", "trace+sync", "torch"]:
        print(f"{k:<12}{best[k] * 1e6:8.2f} us/op")
    print(f"torch eager / strata trace: {best['torch'] / best['trace']:.2f}x; "
          f"torch eager / strata trace+sync: {best['torch'] / best['trace+sync']:.2f}x")


if __name__ == "__main__":
    main()
