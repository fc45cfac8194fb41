#!/usr/bin/python3
"""Checks `strata lm` against Hugging Face's LlamaForCausalLM math in PyTorch.

transformers cannot be installed here (no PyPI), so the reference is its
modeling_llama forward written out in torch ops (float64), reading the same
Hugging Face directory (config.json + model.safetensors, parsed by hand: the
safetensors package is not installable either). strata's C++ code is not
involved in the reference.

Usage: scripts/check_llama_against_torch.py MODEL_DIR [--strata build/strata]
Prints the largest difference of the logits and exits 1 if it exceeds --tol.
Needs Debian's python3-torch (run with /usr/bin/python3).
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

import torch

DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
          "F64": torch.float64, "I64": torch.int64}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        raw = bytearray(data[base + begin: base + end])
        t = torch.frombuffer(raw, dtype=DTYPES[info["dtype"]]) if raw else torch.empty(0)
        out[name] = t.reshape(info["shape"])
    return out


def write_ids(path, name, ids):
    raw = struct.pack(f"<{len(ids) * len(ids[0])}q", *[v for row in ids for v in row])
    header = json.dumps({name: {"dtype": "I64", "shape": [len(ids), len(ids[0])],
                                "data_offsets": [0, len(raw)]}}).encode()
    header += b" " * (-len(header) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header + raw)


def reference_logits(model_dir, ids):
    """transformers' LlamaForCausalLM.forward (no cache, default rope), in float64."""
    c = json.load(open(os.path.join(model_dir, "config.json")))
    w = {k: v.double() for k, v in read_safetensors(os.path.join(model_dir, "model.safetensors")).items()}
    return llama_logits(c, w, ids)


def llama_logits(c, w, ids):
    """The same forward from a config dict and Hugging Face-named weights (any
    dtype; they may require grad: the python tests differentiate it)."""
    h, heads = c["hidden_size"], c["num_attention_heads"]
    kv = c.get("num_key_value_heads") or heads
    d = c.get("head_dim") or h // heads
    eps, theta = c.get("rms_norm_eps", 1e-6), c.get("rope_theta", 10000.0)
    b, s = ids.shape

    def rms_norm(x, weight):
        return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))

    def linear(x, name):
        y = x @ w[name + ".weight"].T
        return y + w[name + ".bias"] if name + ".bias" in w else y

    def rotate_half(x):
        return torch.cat((-x[..., d // 2:], x[..., : d // 2]), dim=-1)

    dtype = w["model.embed_tokens.weight"].dtype
    inv_freq = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    freqs = torch.outer(torch.arange(s, dtype=torch.float64), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos().to(dtype), emb.sin().to(dtype)
    mask = torch.full((s, s), float("-inf"), dtype=dtype).triu(1)
    x = w["model.embed_tokens.weight"][ids]
    for layer in range(c["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        a = rms_norm(x, w[p + "input_layernorm.weight"])
        q = linear(a, p + "self_attn.q_proj").view(b, s, heads, d).transpose(1, 2)
        k = linear(a, p + "self_attn.k_proj").view(b, s, kv, d).transpose(1, 2)
        v = linear(a, p + "self_attn.v_proj").view(b, s, kv, d).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(heads // kv, dim=1)
        v = v.repeat_interleave(heads // kv, dim=1)
        scores = q @ k.transpose(-1, -2) / d ** 0.5 + mask
        att = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, s, heads * d)
        x = x + linear(att, p + "self_attn.o_proj")
        m = rms_norm(x, w[p + "post_attention_layernorm.weight"])
        gate = linear(m, p + "mlp.gate_proj")
        x = x + linear(torch.nn.functional.silu(gate) * linear(m, p + "mlp.up_proj"), p + "mlp.down_proj")
    x = rms_norm(x, w["model.norm.weight"])
    head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
    return x @ head.T


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("model_dir")
    parser.add_argument("--strata", default="build/strata")
    parser.add_argument("--tol", type=float, default=1e-3)
    args = parser.parse_args()
    vocab = json.load(open(os.path.join(args.model_dir, "config.json")))["vocab_size"]
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (2, 24), generator=gen)
    with tempfile.TemporaryDirectory() as tmp:
        write_ids(os.path.join(tmp, "ids.safetensors"), "input_ids", ids.tolist())
        subprocess.run([args.strata, "lm", "--model", args.model_dir, "--tokens",
                        os.path.join(tmp, "ids.safetensors"), "--output",
                        os.path.join(tmp, "out.safetensors"), "--quiet"], check=True)
        got = read_safetensors(os.path.join(tmp, "out.safetensors"))["logits"].double()
    expected = reference_logits(args.model_dir, ids)
    diff = (got - expected).abs().max().item()
    scale = expected.abs().max().item()
    print(f"logits {tuple(got.shape)}: largest difference {diff:.3g} (largest logit {scale:.3g})")
    sys.exit(0 if diff <= args.tol * max(1.0, scale) else 1)


if __name__ == "__main__":
    main()
