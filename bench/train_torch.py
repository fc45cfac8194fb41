#!/usr/bin/python3
"""The PyTorch-eager peer of bench/train_step_bench.cc: one full training step
(forward, backward, torch.optim.AdamW) of the Llama bench config (the model of
bench/llama_torch.py), timed over a few steps after a warm-up step; reports
the median step time and the process's peak RSS. Run one layer count per
process so the peak is that configuration's.

Usage: train_torch.py --threads N --layers L [--steps 3]
Prints: "train <layers> <median ms> <peak RSS MiB>".
"""
import argparse
import os
import resource
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_torch import Model, V, B, S  # noqa: E402
from torch_blas import require_optimized_blas  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--layers", type=int, required=True)
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    require_optimized_blas()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    ids = torch.randint(0, V, (B, S))
    labels = torch.randint(0, V, (B, S))
    model = Model(args.layers)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step():
        optimizer.zero_grad(set_to_none=True)
        logits = model(ids)
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, V), labels[:, 1:].reshape(-1))
        loss.backward()
        optimizer.step()
        return loss.item()

    step()  # warm-up: allocates AdamW's state
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        step()
        times.append((time.perf_counter() - t0) * 1e3)
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"train {args.layers} {statistics.median(times):.1f} {peak_mib:.0f}", flush=True)


if __name__ == "__main__":
    main()
