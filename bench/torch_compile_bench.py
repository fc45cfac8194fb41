"""The Llama training step of bench/ written as a Hugging Face model
(transformers' LlamaForCausalLM: hidden 512, 8 heads, 4 key/value heads, MLP
1536, vocab 4096, batch 4 x 256 tokens) under three PyTorch runners in one
run: eager, torch.compile(backend="inductor") and torch.compile(backend=
"strata"). A step is forward, loss, backward, gradient clipping and AdamW
(the optimizer step compiled too under the two compilers, as torch.compile
users write it). Each runner runs in a process of its own, so its peak
memory (max RSS) and its cold compile (the first step, less an eager step)
are its own.

    bench/torch_compile_bench.py [--layers 2 8] [--steps 5] [--json out.json]

Also measures the overhead of one call to a compiled graph (a tiny function,
strata against inductor), the figure the issue's 20 us goal is about.
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def child(runner, layers, steps, threads):
    import torch
    import transformers
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=4096, hidden_size=512, intermediate_size=1536, num_hidden_layers=layers,
        num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=256,
        rms_norm_eps=1e-5, tie_word_embeddings=False)
    model = transformers.LlamaForCausalLM(cfg).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1)
    ids = torch.randint(0, 4096, (4, 256), generator=torch.Generator().manual_seed(1))
    if runner == "eager":
        forward, opt_step = model, opt.step
    else:
        forward = torch.compile(model, backend=runner)

        @torch.compile(backend=runner)
        def opt_step():
            opt.step()

    def step():
        opt.zero_grad(set_to_none=True)
        loss = forward(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt_step()
        return loss.item()

    t0 = time.perf_counter()
    first_loss = step()
    first = time.perf_counter() - t0
    strata_compile_s = None
    if runner == "strata":
        import strata
        strata_compile_s = strata.metrics()["lower_s"] + strata.metrics()["compile_s"]
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        loss = step()
        times.append(time.perf_counter() - t0)
    best = min(times)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # MiB
    print(json.dumps({"runner": runner, "layers": layers, "first_step_s": first,
                      "step_s": best, "tokens_per_s": 4 * 256 / best, "peak_rss_mib": rss,
                      "loss_first": first_loss, "loss_last": loss,
                      "strata_compile_s": strata_compile_s}))


def call_overhead(runner, threads):
    import torch
    torch.set_num_threads(threads)
    f = torch.compile(lambda x, y: x * y + 1, backend=runner)
    x, y = torch.ones(8), torch.ones(8)
    for _ in range(50):
        f(x, y)
    n = 2000
    t0 = time.perf_counter()
    for _ in range(n):
        f(x, y)
    per_call = (time.perf_counter() - t0) / n
    eager = torch.ones(8)
    t0 = time.perf_counter()
    for _ in range(n):
        eager = x * y + 1
    per_eager = (time.perf_counter() - t0) / n
    print(json.dumps({"runner": runner, "call_us": per_call * 1e6, "eager_us": per_eager * 1e6}))


def run(args):
    out = subprocess.run([sys.executable, __file__] + args, capture_output=True, text=True,
                         timeout=3600)
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr else "failed",
                "args": args}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, nargs="*", default=[2, 8])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--runners", nargs="*", default=["eager", "inductor", "strata"])
    parser.add_argument("--json")
    parser.add_argument("--child", nargs=2)
    parser.add_argument("--overhead")
    a = parser.parse_args()
    if a.child:
        child(a.child[0], int(a.child[1]), a.steps, a.threads)
        return
    if a.overhead:
        call_overhead(a.overhead, a.threads)
        return
    results = []
    for layers in a.layers:
        rows = [run(["--child", r, str(layers), "--steps", str(a.steps), "--threads",
                     str(a.threads)]) for r in a.runners]
        eager = next((r for r in rows if r.get("runner") == "eager"), None)
        print(f"\n{layers} layers, batch 4 x 256, {a.threads} threads")
        print(f"{'runner':10} {'tokens/s':>9} {'step s':>8} {'vs eager':>9} {'compile s':>10} "
              f"{'peak MiB':>9} {'mem/eager':>9} {'loss':>15}")
        for r in rows:
            if "error" in r:
                print(f"{r['args'][1]:10} failed: {r['error']}")
                continue
            compile_s = r["first_step_s"] - (eager["step_s"] if eager else 0)
            r["compile_s"] = compile_s
            print(f"{r['runner']:10} {r['tokens_per_s']:9.0f} {r['step_s']:8.3f} "
                  f"{(eager['step_s'] / r['step_s']) if eager else 0:9.2f} {compile_s:10.1f} "
                  f"{r['peak_rss_mib']:9.0f} "
                  f"{(r['peak_rss_mib'] / eager['peak_rss_mib']) if eager else 0:9.2f} "
                  f"{r['loss_first']:7.4f}>{r['loss_last']:.4f}")
        results += rows
    print("\nOverhead of one call to a compiled x * y + 1 (8 floats):")
    for runner in [r for r in a.runners if r != "eager"]:
        r = run(["--overhead", runner, "--threads", str(a.threads)])
        results.append(r)
        if "error" in r:
            print(f"  {runner}: failed: {r['error']}")
        else:
            print(f"  {runner:9} {r['call_us']:7.1f} us (eager ops: {r['eager_us']:.1f} us)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
