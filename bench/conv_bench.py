#!/usr/bin/python3
"""2-D convolution at ResNet-like shapes: strata against PyTorch (whose CPU
convolutions are oneDNN's), in one process, alternating rounds; each side's
best round counts.

  PYTHONPATH=build-bench/python /usr/bin/python3 bench/conv_bench.py [--rounds 5]

For each shape it times the forward (a convolution of f32 NCHW tensors) and
the forward plus backward (the gradients of sum(conv(x, w) * g) with respect
to x and w), and prints milliseconds, GFLOP/s (2 flops per multiply-add of
the forward; three times that for forward + backward) and strata / torch as
throughput ratios. torch runs with every core (torch.set_num_threads), in
NCHW and in channels_last, and its faster layout counts.
"""
import argparse
import os
import time

import numpy as np
import torch
import torch.nn.functional as F

import strata
import strata.nn.functional as SF

# (name, batch, channels in, channels out, size, kernel, stride, padding)
SHAPES = [
    ("stem 7x7/2", 2, 3, 64, 112, 7, 2, 3),
    ("3x3 64", 8, 64, 64, 56, 3, 1, 1),
    ("1x1 64->256", 8, 64, 256, 56, 1, 1, 0),
    ("3x3/2 128", 8, 128, 128, 56, 3, 2, 1),
    ("3x3 256", 8, 256, 256, 14, 3, 1, 1),
    ("3x3 512", 8, 512, 512, 7, 3, 1, 1),
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
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"mkldnn {torch.backends.mkldnn.is_available()}")
    print(f"{'shape':14} {'pass':8} {'strata ms':>10} {'torch ms':>9} {'layout':>13} "
          f"{'strata GF/s':>11} {'torch GF/s':>10} {'ratio':>6}")
    for name, n, c, o, size, k, stride, pad in SHAPES:
        rng = np.random.default_rng(0)
        x = rng.standard_normal((n, c, size, size)).astype(np.float32)
        w = (rng.standard_normal((o, c, k, k)) * 0.1).astype(np.float32)
        out = (size + 2 * pad - k) // stride + 1
        g = rng.standard_normal((n, o, out, out)).astype(np.float32)
        flops = 2.0 * n * o * out * out * c * k * k
        sx, sw, sg = strata.tensor(x), strata.tensor(w), strata.tensor(g)

        def s_forward():
            SF.conv2d(sx, sw, None, stride, pad).sync()

        def s_backward():
            grads = strata.grad(lambda a, b: (SF.conv2d(a, b, None, stride, pad) * sg).sum(),
                                argnums=(0, 1))(sx, sw)
            strata.sync(*grads)

        layouts = {}
        for layout in ("nchw", "channels_last"):
            fmt = torch.channels_last if layout == "channels_last" else torch.contiguous_format
            tx = torch.tensor(x).to(memory_format=fmt).requires_grad_()
            tw = torch.tensor(w).to(memory_format=fmt).requires_grad_()
            tg = torch.tensor(g).to(memory_format=fmt)

            def t_forward(tx=tx, tw=tw):
                with torch.no_grad():
                    F.conv2d(tx, tw, None, stride, pad)

            def t_backward(tx=tx, tw=tw, tg=tg):
                torch.autograd.grad((F.conv2d(tx, tw, None, stride, pad) * tg).sum(), (tx, tw))

            layouts[layout] = (t_forward, t_backward)
        best = {}
        for _ in range(args.rounds):
            for pass_name, s_fn, index in (("forward", s_forward, 0), ("fwd+bwd", s_backward, 1)):
                key = ("strata", pass_name)
                best[key] = min(best.get(key, 1e9), best_of(s_fn, args.reps))
                for layout, fns in layouts.items():
                    key = ("torch", pass_name, layout)
                    best[key] = min(best.get(key, 1e9), best_of(fns[index], args.reps))
        for pass_name, work in (("forward", flops), ("fwd+bwd", 3 * flops)):
            s = best[("strata", pass_name)]
            layout = min(layouts, key=lambda l: best[("torch", pass_name, l)])
            t = best[("torch", pass_name, layout)]
            print(f"{name:14} {pass_name:8} {s * 1e3:10.2f} {t * 1e3:9.2f} {layout:>13} "
                  f"{work / s / 1e9:11.1f} {work / t / 1e9:10.1f} {t / s:6.2f}")


if __name__ == "__main__":
    main()
