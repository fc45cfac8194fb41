"""A Hugging Face Llama's training step with its decoder layers as one strata scan
(strata.torch.scan_layers) against the same model unrolled, as depth grows: the first step
(tracing and compiling included) and the steady step, eager PyTorch and torch.compile with
the strata backend beside, unrolled and over the scanned layers (one node of the graph; its
remat is "carries", the one torch's scan op keeps). One process, one run: the ratios compare like with like. A first
step's compile time is what it costs beyond a steady step.

    python bench/torch_scan_layers_bench.py [--depths 1,8,32] [--steps 3] [--remat carries]
"""
import argparse
import copy
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

import strata
import strata.torch as st


def model(depth, hidden, heads, kv_heads, mlp, vocab):
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=mlp,
                         num_hidden_layers=depth, num_attention_heads=heads,
                         num_key_value_heads=kv_heads, max_position_embeddings=1024,
                         attn_implementation="sdpa")
    return LlamaForCausalLM(config)


class _Tracing:
    """Seconds spent tracing scan bodies (make_fx of layer 0, with the alike-proof's recording
    riding on it), counted by wrapping strata.torch's body tracer. A layer the proof traces on
    its own (one whose read attributes differ from layer 0's; none in a Hugging Face model) is
    not counted."""

    seconds = 0.0

    @classmethod
    def install(cls):
        from strata.torch import _scan
        init = _scan._Body.__init__

        def timed(self, *args, **kwargs):
            start = time.perf_counter()
            try:
                init(self, *args, **kwargs)
            finally:
                cls.seconds += time.perf_counter() - start

        _scan._Body.__init__ = timed


def step_times(run, parameters, ids, steps):
    """(first step, median of the next `steps`, the first step's tracing of scan bodies and
    strata's lowering and compiling) in seconds: forward, backward, SGD update."""
    times = []
    strata.reset_metrics()
    _Tracing.seconds = 0.0
    for i in range(steps + 1):
        if i == 1:
            m = strata.metrics()
            compiled = m["lower_s"] + m["compile_s"] + _Tracing.seconds
        start = time.perf_counter()
        loss = run(ids, labels=ids, use_cache=False).loss
        loss.backward()
        with torch.no_grad():
            for p in parameters:
                p -= 1e-3 * p.grad
                p.grad = None
        times.append(time.perf_counter() - start)
    rest = sorted(times[1:])
    return times[0], rest[len(rest) // 2], compiled


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--depths", default="1,8,32")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--remat", default="carries", help="scan_layers' remat policy")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--kv-heads", type=int, default=4)
    parser.add_argument("--mlp", type=int, default=768)
    parser.add_argument("--vocab", type=int, default=4096)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq", type=int, default=128)
    args = parser.parse_args()
    _Tracing.install()
    torch.set_num_threads(torch.get_num_threads())
    ids = torch.randint(0, args.vocab, (args.batch, args.seq))
    print(f"hidden {args.hidden}, heads {args.heads}/{args.kv_heads}, mlp {args.mlp}, vocab "
          f"{args.vocab}, {args.batch} x {args.seq} tokens, {torch.get_num_threads()} threads, "
          f"remat {args.remat}")
    print("depth | scan_layers first / step (s) | eager step (s) | compiled unrolled first / "
          "step (s) | eager step / scan step | scan first / its 1-layer first | scan compile "
          "(first - step, s) / its 1-layer one | scan: trace + lower + compile (s) | compiled "
          "unrolled compile (first - step, s) | compiled scan_layers first / step (s) | its "
          "compile (first - step, s) / its 1-layer one | compiled scan step / compiled unrolled")
    base = base_compiled = None
    for depth in [int(d) for d in args.depths.split(",")]:
        eager = model(depth, args.hidden, args.heads, args.kv_heads, args.mlp, args.vocab)
        scanned = copy.deepcopy(eager)
        scanned.model.layers = st.scan_layers(scanned.model.layers, remat=args.remat)
        compiled_model = copy.deepcopy(eager)
        torch._dynamo.reset()
        compiled = torch.compile(compiled_model, backend="strata")
        s_first, s_step, s_strata = step_times(scanned, list(scanned.parameters()), ids,
                                               args.steps)
        _, e_step, _ = step_times(eager, list(eager.parameters()), ids, args.steps)
        c_first, c_step, _ = step_times(compiled, list(compiled_model.parameters()), ids,
                                        args.steps)
        scanned_compiled_model = copy.deepcopy(eager)
        scanned_compiled_model.model.layers = st.scan_layers(scanned_compiled_model.model.layers)
        torch._dynamo.reset()
        scanned_compiled = torch.compile(scanned_compiled_model, backend="strata")
        sc_first, sc_step, _ = step_times(scanned_compiled,
                                          list(scanned_compiled_model.parameters()), ids,
                                          args.steps)
        sc_compile = sc_first - sc_step
        base_compiled = base_compiled or sc_compile
        # What the first step costs beyond a steady one: tracing, proving the layers alike,
        # lowering and compiling (the first step's own run grows with depth; this should not).
        s_compile, c_compile = s_first - s_step, c_first - c_step
        base = base or (s_first, s_compile)
        print(f"{depth:5d} | {s_first:7.2f} / {s_step:6.3f} | {e_step:6.3f} | {c_first:7.2f} / "
              f"{c_step:6.3f} | {e_step / s_step:5.2f}x | {s_first / base[0]:5.2f}x | "
              f"{s_compile:5.2f} / {s_compile / base[1]:4.2f}x | {s_strata:5.2f} | "
              f"{c_compile:6.2f} | {sc_first:7.2f} / {sc_step:6.3f} | {sc_compile:5.2f} / "
              f"{sc_compile / base_compiled:4.2f}x | {c_step / sc_step:5.2f}x", flush=True)


if __name__ == "__main__":
    main()
