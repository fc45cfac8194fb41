#!/usr/bin/python3
"""The PyTorch-eager peer of bench/llama_bench.cc: the same Llama (Hugging
Face's LlamaForCausalLM math, written out here because transformers is not
installed), same config and batch, timing a forward pass (logits) and a
forward + backward (loss and every parameter's gradient).

Usage: llama_torch.py --threads N [--layers 2 8] [--repeats 5]
Prints one line per measurement: "<name> <layers> <median ms>".
"""
import argparse
import math
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

V, H, HEADS, KV, I, B, S = 4096, 512, 8, 4, 1536, 4, 256
D = H // HEADS


def rms_norm(x, w, eps=1e-6):
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w


def rotate_half(x):
    return torch.cat((-x[..., D // 2:], x[..., : D // 2]), dim=-1)


class Model(torch.nn.Module):
    def __init__(self, layers):
        super().__init__()
        init = lambda *shape: torch.nn.Parameter(torch.randn(*shape) * 0.02)
        self.embed = init(V, H)
        self.layers = torch.nn.ParameterList()
        self.shapes = []
        for _ in range(layers):
            for shape in [(H,), (HEADS * D, H), (KV * D, H), (KV * D, H), (H, HEADS * D), (H,),
                          (I, H), (I, H), (H, I)]:
                p = torch.nn.Parameter(torch.ones(shape)) if len(shape) == 1 else init(*shape)
                self.layers.append(p)
        self.n = layers
        self.norm = torch.nn.Parameter(torch.ones(H))
        self.lm_head = init(V, H)
        inv = 1.0 / (10000.0 ** (torch.arange(0, D, 2).float() / D))
        freqs = torch.outer(torch.arange(S).float(), inv)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.cos, self.sin = emb.cos(), emb.sin()

    def forward(self, ids):
        x = self.embed[ids]
        mask = torch.full((S, S), float("-inf")).triu(1)
        for l in range(self.n):
            ln1, wq, wk, wv, wo, ln2, wg, wu, wd = self.layers[9 * l: 9 * l + 9]
            a = rms_norm(x, ln1)
            q = (a @ wq.T).view(B, S, HEADS, D).transpose(1, 2)
            k = (a @ wk.T).view(B, S, KV, D).transpose(1, 2)
            v = (a @ wv.T).view(B, S, KV, D).transpose(1, 2)
            q = q * self.cos + rotate_half(q) * self.sin
            k = k * self.cos + rotate_half(k) * self.sin
            k = k.repeat_interleave(HEADS // KV, dim=1)
            v = v.repeat_interleave(HEADS // KV, dim=1)
            scores = (q @ k.transpose(2, 3)) / math.sqrt(D) + mask
            att = torch.softmax(scores.float(), dim=-1).to(q.dtype) @ v
            x = x + att.transpose(1, 2).reshape(B, S, H) @ wo.T
            m = rms_norm(x, ln2)
            x = x + (F.silu(m @ wg.T) * (m @ wu.T)) @ wd.T
        return rms_norm(x, self.norm) @ self.lm_head.T


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--layers", type=int, nargs="+", default=[2, 8])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from torch_blas import require_optimized_blas
    require_optimized_blas()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    ids = torch.randint(0, V, (B, S))
    labels = torch.randint(0, V, (B, S))
    for layers in args.layers:
        model = Model(layers)
        def forward():
            with torch.no_grad():
                model(ids)
        def train_step():
            model.zero_grad(set_to_none=True)
            logits = model(ids)
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, V), labels[:, 1:].reshape(-1))
            loss.backward()
        for name, fn in [("forward", forward), ("forward_backward", train_step)]:
            fn()  # warm-up
            times = []
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                fn()
                times.append((time.perf_counter() - t0) * 1e3)
            print(f"{name} {layers} {statistics.median(times):.1f}", flush=True)


if __name__ == "__main__":
    main()
