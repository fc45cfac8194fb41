"""The Llama training step of bench/ written as a Hugging Face model
(transformers' LlamaForCausalLM: hidden 512, 8 heads, 4 key/value heads, MLP
1536, vocab 4096, batch 4 x 256 tokens) under four PyTorch runners in one
run: eager, torch.compile(backend="inductor"), torch.compile(backend=
"strata") and torch_xla (PyTorch/XLA on XLA:CPU, PJRT_DEVICE=CPU). A step is
forward, loss, backward, gradient clipping and AdamW (the optimizer step
compiled too under the two compilers, as torch.compile users write it). Each
runner runs in a process of its own, so its peak memory (max RSS) and its
cold compile (the first step, less an eager step) are its own.

torch_xla needs torch 2.9.0 exactly, so its process runs under an interpreter
of its own (--xla-python; default the one scripts/install-torch-xla.sh
makes). It runs the step as its users do, the model and the optimizer on
torch_xla.device(), in two modes, each in its own process: "lazy", the
classic lazy-tensor loop (the whole step traced, torch_xla.sync() after the
optimizer step, the loss read after it), and "openxla", the model under
torch.compile(backend="openxla") with the gradient clipping and the optimizer
step traced lazily up to the same sync. The row is the faster mode's; the
lines under the table give both, XLA's own compile count and time, and each
row's losses against eager's.

    bench/torch_compile_bench.py [--layers 2 8] [--steps 5] [--json out.json]
        [--runners eager inductor strata torch_xla] [--xla-python PATH]
        [--xla-modes lazy openxla]

Also measures the overhead of one call to a compiled graph (a tiny function,
strata against inductor), the figure the issue's 20 us goal is about.
"""
import argparse
import json
import os
import re
import resource
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
XLA_MODES = ("lazy", "openxla")


def default_xla_python():
    """The interpreter scripts/install-torch-xla.sh makes (it prints it last)."""
    home = os.environ.get("HOME") or os.path.expanduser("~")
    venv = os.environ.get("STRATA_TORCH_XLA_VENV",
                          os.path.join(home, ".cache", "strata", "torch-xla-venv"))
    return os.path.join(venv, "bin", "python")


def build(layers, threads):
    import torch
    import transformers
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=4096, hidden_size=512, intermediate_size=1536, num_hidden_layers=layers,
        num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=256,
        rms_norm_eps=1e-5, tie_word_embeddings=False)
    model = transformers.LlamaForCausalLM(cfg).train()
    ids = torch.randint(0, 4096, (4, 256), generator=torch.Generator().manual_seed(1))
    return model, ids


def xla_child(mode, layers, steps, threads):
    """torch_xla's step on XLA:CPU: the same model init (built on the CPU from
    the same seed, then moved) and the same batch as the other runners."""
    os.environ.setdefault("PJRT_DEVICE", "CPU")
    import torch
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.debug.metrics as met
    model, ids = build(layers, threads)
    device = torch_xla.device()
    model = model.to(device)
    ids = ids.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1)
    forward = model if mode == "lazy" else torch.compile(model, backend="openxla")

    def step():
        opt.zero_grad(set_to_none=True)
        loss = forward(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        torch_xla.sync()
        return loss.item()

    times, losses = [], []
    for _ in range(steps + 1):
        t0 = time.perf_counter()
        losses.append(step())
        times.append(time.perf_counter() - t0)
    xm.wait_device_ops()
    compile_ns = met.metric_data("CompileTime") or (0, 0)
    best = min(times[1:])
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # MiB
    print(json.dumps({"runner": "torch_xla", "mode": mode, "layers": layers,
                      "first_step_s": times[0], "step_s": best, "step_times_s": times,
                      "tokens_per_s": 4 * 256 / best, "peak_rss_mib": rss,
                      "loss_first": losses[0], "loss_last": losses[-1],
                      "xla_compiles": compile_ns[0], "xla_compile_s": compile_ns[1] / 1e9,
                      "versions": {"torch": torch.__version__,
                                   "torch_xla": torch_xla.__version__},
                      "xla_flags": os.environ.get("XLA_FLAGS", "")}))


def child(runner, layers, steps, threads):
    import torch
    model, ids = build(layers, threads)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1)
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


def xla_call_overhead(threads):
    """torch_xla's cost of one call of x * y + 1 on 8 floats: under
    torch.compile(backend="openxla") (the cached graph launched, the result a
    device handle; 2000 calls then one wait, so per call is launch throughput),
    and in lazy mode, traced and synced per call (torch_xla.sync() hashes the
    trace, finds the compiled graph and runs it)."""
    os.environ.setdefault("PJRT_DEVICE", "CPU")
    import torch
    import torch_xla
    import torch_xla.core.xla_model as xm
    torch.set_num_threads(threads)
    dev = torch_xla.device()
    x, y = torch.ones(8, device=dev), torch.ones(8, device=dev)
    f = torch.compile(lambda x, y: x * y + 1, backend="openxla")
    n = 2000
    per = {}
    for name in ("openxla", "lazy"):
        def call():
            if name == "openxla":
                return f(x, y)
            z = x * y + 1
            torch_xla.sync()
            return z
        for _ in range(50):
            call()
        xm.wait_device_ops()
        t0 = time.perf_counter()
        for _ in range(n):
            z = call()
        xm.wait_device_ops()
        per[name] = (time.perf_counter() - t0) / n
        assert z.cpu().tolist() == [2.0] * 8
    cx, cy = torch.ones(8), torch.ones(8)
    t0 = time.perf_counter()
    for _ in range(n):
        cx * cy + 1
    per_eager = (time.perf_counter() - t0) / n
    print(json.dumps({"runner": "torch_xla", "call_us": per["openxla"] * 1e6,
                      "lazy_call_us": per["lazy"] * 1e6, "eager_us": per_eager * 1e6}))


def error_line(stderr):
    """The line of a child's stderr that says why it failed: its last line
    that is not one of XLA's own log lines (glog: "W0000 00:00:...")."""
    lines = [l.strip() for l in (stderr or "").strip().splitlines() if l.strip()]
    said = [l for l in lines if not re.match(r"^[IWEF]\d{4} \d\d:\d\d:\d\d", l)]
    return (said or lines or ["failed"])[-1]


def run(args, python=None, env=None):
    python = python or sys.executable
    if not os.path.exists(python):
        return {"error": f"no interpreter {python}", "args": args}
    try:
        out = subprocess.run([python, __file__] + args, capture_output=True, text=True,
                             timeout=3600, env=env)
    except subprocess.TimeoutExpired:
        return {"error": "timed out after 3600 s", "args": args}
    if out.returncode != 0:
        why = error_line(out.stderr)
        if out.returncode < 0:
            why = f"killed by signal {-out.returncode}: {why}"
        return {"error": why, "args": args}
    return json.loads(out.stdout.strip().splitlines()[-1])


def xla_env():
    """The torch_xla child's environment: XLA:CPU through PJRT, and none of
    the test environment's PYTHONPATH (build/python is strata's module, built
    for the other venv's torch)."""
    env = dict(os.environ, PJRT_DEVICE="CPU")
    env.pop("PYTHONPATH", None)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    return env


def missing_xla_python(python):
    return (f"no torch_xla interpreter at {python} "
            "(run scripts/install-torch-xla.sh, or pass --xla-python)")


def run_xla(layers, a):
    """torch_xla's row: each mode in a process of its own, the faster kept."""
    args = ["--child", "torch_xla", str(layers)]
    if not os.path.exists(a.xla_python):
        return {"error": missing_xla_python(a.xla_python), "args": args}
    modes = {}
    for mode in a.xla_modes:
        modes[mode] = run(["--child", f"torch_xla:{mode}", str(layers), "--steps",
                           str(a.steps), "--threads", str(a.threads)],
                          python=a.xla_python, env=xla_env())
    ok = [r for r in modes.values() if "error" not in r]
    if not ok:
        return {"error": "; ".join(f"{m}: {r['error']}" for m, r in modes.items()),
                "args": args, "modes": modes}
    row = dict(min(ok, key=lambda r: r["step_s"]))
    row["modes"] = modes
    return row


def print_xla_modes(row):
    """The lines under the table for torch_xla: each mode's steady step, its
    first steps (the first two compile: AdamW's state is made in the first, so
    the second step is a graph of its own), XLA's compile count and time."""
    for mode, r in row["modes"].items():
        what = {"lazy": "lazy tensors + torch_xla.sync()",
                "openxla": 'torch.compile(backend="openxla") + torch_xla.sync()'}[mode]
        if "error" in r:
            print(f"  torch_xla {mode:8} ({what}): failed: {r['error']}")
            continue
        kept = " <- the row (the faster)" if r["mode"] == row["mode"] and len(row["modes"]) > 1 \
            else ""
        first = ", ".join(f"{t:.2f}" for t in r["step_times_s"][:3])
        print(f"  torch_xla {mode:8} ({what}): {r['step_s']:.3f} s/step, "
              f"{r['tokens_per_s']:.0f} tokens/s; steps 1-3 {first} s; "
              f"XLA compiled {r['xla_compiles']} graphs in {r['xla_compile_s']:.1f} s; "
              f"peak {r['peak_rss_mib']:.0f} MiB{kept}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, nargs="*", default=[2, 8])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--runners", nargs="*",
                        default=["eager", "inductor", "strata", "torch_xla"])
    parser.add_argument("--xla-python", default=default_xla_python(),
                        help="the torch_xla environment's interpreter "
                             "(default: the one scripts/install-torch-xla.sh makes)")
    parser.add_argument("--xla-modes", nargs="*", default=list(XLA_MODES), choices=XLA_MODES,
                        help="torch_xla's modes to run; the row is the faster")
    parser.add_argument("--json")
    parser.add_argument("--child", nargs=2)
    parser.add_argument("--overhead")
    a = parser.parse_args()
    if a.child:
        if a.child[0].startswith("torch_xla:"):
            xla_child(a.child[0].split(":", 1)[1], int(a.child[1]), a.steps, a.threads)
        else:
            child(a.child[0], int(a.child[1]), a.steps, a.threads)
        return
    if a.overhead:
        if a.overhead == "torch_xla":
            xla_call_overhead(a.threads)
        else:
            call_overhead(a.overhead, a.threads)
        return
    results = []
    for layers in a.layers:
        rows = [run_xla(layers, a) if r == "torch_xla" else
                run(["--child", r, str(layers), "--steps", str(a.steps), "--threads",
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
        for r in rows:
            if "modes" in r and "error" not in r:
                print_xla_modes(r)
        if eager and "error" not in eager:
            diffs = [f"{r['runner']} {r['loss_first'] - eager['loss_first']:+.1e} "
                     f"{r['loss_last'] - eager['loss_last']:+.1e}"
                     for r in rows if "error" not in r and r is not eager]
            if diffs:
                print("loss - eager's (first, last): " + ", ".join(diffs))
        results += rows
    print("\nOverhead of one call to a compiled x * y + 1 (8 floats):")
    for runner in [r for r in a.runners if r != "eager"]:
        if runner == "torch_xla" and not os.path.exists(a.xla_python):
            r = {"error": missing_xla_python(a.xla_python), "args": ["--overhead", runner]}
        elif runner == "torch_xla":
            r = run(["--overhead", runner, "--threads", str(a.threads)],
                    python=a.xla_python, env=xla_env())
        else:
            r = run(["--overhead", runner, "--threads", str(a.threads)])
        results.append(r)
        if "error" in r:
            print(f"  {runner}: failed: {r['error']}")
        else:
            extra = (f", lazy trace + torch_xla.sync(): {r['lazy_call_us']:.1f} us"
                     if "lazy_call_us" in r else "")
            print(f"  {runner:9} {r['call_us']:7.1f} us (eager ops: {r['eager_us']:.1f} us"
                  f"{extra})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
