#!/usr/bin/env python3
"""strata's Llama training step beside JAX / XLA:CPU's, in one run (issue 47).

What it measures, per layer count (--layers, default 2 8 32), each
configuration in a process of its own so its peak RSS is its own:

* strata: build/train_step_bench, the C++ Google Benchmark of one full step
  (forward, loss, gradients, AdamW) with buffer donation, filtered to
  BM_TrainStep/<layers>/<mode>/ for each --strata-modes (1: apply_layers
  saving each layer's input, 2: also saving its matrix products, 3: the
  products without batch dims, 0: unrolled layers). tokens/s is its counter
  (the mean of its 3 timed steps; the fastest step's sync is in the JSON as
  best_sync_tokens_per_s). Run under STRATA_TRACE (no slower within the
  noise), whose "sync" spans give each step's time: cold compile = the first
  step's sync (trace, lower, compile, run) minus the fastest warm step's.
* jax: the same model and step written here in jax.numpy / lax, jitted once
  with the weights and AdamW moments donated, in two forms: "scan" (the
  layers as one lax.scan over stacked per-layer weights; its backward keeps
  every layer's residuals, no remat) and "unrolled" (a Python loop over the
  layers); optionally "scan-remat" (--jax-forms), the scan whose backward
  recomputes each layer from its input (jax.checkpoint), as strata's mode 1
  keeps only the layers' inputs. Cold compile = the first call (trace,
  lower, compile, first run) minus the fastest warm step; tokens/s from the
  fastest of --steps warm steps (the median is in the JSON). Weights are
  drawn by NumPy, so nothing but the step is compiled.
* peak MiB: the child process's max RSS (wait4's ru_maxrss), the same
  measure for both runners. The JAX process's includes the Python
  interpreter and the imported jax/jaxlib (its RSS after import is in the
  JSON as baseline_mib).

The model (bench/llama_bench_config.h, src/nn/llama.cc): Llama with vocab
4096, hidden 512, 8 heads of 64, 4 key/value heads (GQA), SwiGLU MLP 1536,
RMSNorm (eps 1e-6), rotary embeddings (theta 1e4, rotate-half), causal
attention, untied lm_head, no biases, weights ~ N(0, 0.02) and norms 1, f32.
Batch 4 x 256 tokens from the bench's hash ((i * 2654435761 + salt) % vocab,
salt 3 for the ids and 4 for the labels); loss = mean cross-entropy of
position t against label t + 1. AdamW as torch's (lr 1e-4, betas 0.9 and
0.999, eps 1e-8, decoupled weight decay 1e-2 on every weight); no gradient
clipping (the bench does not clip).

JAX settings on this 2-core CPU: XLA:CPU's defaults, whose intra-op thread
pool already has one thread per core (the JAX child uses ~1.6 cores); no
fast-math (it would change the numbers). On the 2-layer step neither
--xla_cpu_experimental_onednn_custom_call=true nor
--xla_cpu_multi_thread_eigen=false moved tokens/s beyond the machine's noise
(2107 and 2011 against 2036), so none is set. XLA_FLAGS from the
environment is passed through to the JAX child (--xla-flags adds more).
The persistent compilation cache is off (JAX's default), so every compile is
cold. OPENBLAS_CORETYPE is left alone (neither runner uses OpenBLAS).

Usage (the peers' venv comes from scripts/install-peers.sh, whose last line
is its interpreter; the script runs JAX children under that interpreter,
--jax-python to choose another):

  py=$(scripts/install-peers.sh | tail -1)
  $py bench/peers.py --check                    # is the JAX model right?
  $py bench/peers.py --layers 2 --steps 3       # a smoke run
  $py bench/peers.py --json out.json            # 2, 8 and 32 layers
  $py bench/peers.py --layers 8 --strata-modes 1,2 --jax-forms scan

--check runs the JAX step on a tiny configuration (vocab 4096, hidden 64):
the initial loss must be within 0.05 of log(4096) = 8.318 and fall by more
than 1 over 8 steps (lr 1e-2), the three forms must agree, a changed last
token must move only the last position's logits; then 2 layers of the bench
configuration against bench/llama_torch.py's model (Debian's torch,
--torch-python) from the same weights: loss, gradients and one AdamW update.

Ratios in the table are against the best JAX form of that layer count (the
fastest; for memory and compile, that same form): speed = tokens/s over its,
memory and compile = peak MiB and cold compile s over its (lower is better).
"""
import argparse
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH_CONFIG = dict(vocab=4096, hidden=512, heads=8, kv_heads=4, inter=1536, batch=4, seq=256)
# A tiny configuration for --check (the vocab stays, so the initial loss is
# about log(4096)).
TINY_CONFIG = dict(vocab=4096, hidden=64, heads=4, kv_heads=2, inter=128, batch=2, seq=32)
ADAMW = dict(lr=1e-4, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=1e-2)
RMS_EPS, ROPE_THETA = 1e-6, 10000.0
STRATA_MODES = {0: "unrolled", 1: "apply_layers, save carries", 2: "apply_layers, save dots",
                3: "apply_layers, save dots w/o batch dims"}


# ----------------------------------------------------------------------------
# The JAX model and training step (imported only in the JAX child).

def jax_modules():
    import jax
    import jax.numpy as jnp
    from jax import lax
    return jax, jnp, lax


def bench_tokens(cfg, salt):
    """The bench's deterministic ids: (i * 2654435761 + salt) % vocab."""
    import numpy as np
    i = np.arange(cfg["batch"] * cfg["seq"], dtype=np.uint64)
    ids = (i * np.uint64(2654435761) + np.uint64(salt)) % np.uint64(cfg["vocab"])
    return ids.astype(np.int32).reshape(cfg["batch"], cfg["seq"])


def init_params(cfg, layers, seed, stacked):
    """Weights ~ N(0, 0.02) stored [in, out], norms 1, drawn on the host by
    NumPy (no JAX ops to compile before the step). The layer weights are
    stacked [layers, ...] for the scan form, a list of per-layer dicts for
    the unrolled form (the same values either way)."""
    _, jnp, _ = jax_modules()
    import numpy as np
    rng = np.random.default_rng(seed)
    h, v, i = cfg["hidden"], cfg["vocab"], cfg["inter"]
    d = h // cfg["heads"]
    shapes = {"wq": (h, cfg["heads"] * d), "wk": (h, cfg["kv_heads"] * d),
              "wv": (h, cfg["kv_heads"] * d), "wo": (cfg["heads"] * d, h),
              "w_gate": (h, i), "w_up": (h, i), "w_down": (i, h)}
    normal = lambda shape: rng.standard_normal(shape, dtype=np.float32) * np.float32(0.02)
    stack = {name: normal((layers,) + shape) for name, shape in shapes.items()}
    stack["ln1"] = np.ones((layers, h), np.float32)
    stack["ln2"] = np.ones((layers, h), np.float32)
    params = {"embed": jnp.asarray(normal((v, h))), "norm": jnp.ones((h,), jnp.float32),
              "lm_head": jnp.asarray(normal((h, v)))}
    params["layers"] = ({name: jnp.asarray(w) for name, w in stack.items()} if stacked else
                        [{name: jnp.asarray(w[l]) for name, w in stack.items()}
                         for l in range(layers)])
    return params


def rms_norm(x, w):
    _, jnp, lax = jax_modules()
    return x * lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + RMS_EPS) * w


def rotary_tables(seq, d):
    """cos and sin [seq, d] of Hugging Face's rotate-half rotary embedding."""
    _, jnp, _ = jax_modules()
    inv_freq = ROPE_THETA ** (-jnp.arange(0, d // 2, dtype=jnp.float32) * 2 / d)
    freqs = jnp.arange(seq, dtype=jnp.float32)[:, None] * inv_freq[None, :]
    emb = jnp.concatenate([freqs, freqs], axis=-1)
    return jnp.cos(emb), jnp.sin(emb)


def apply_rotary(x, cos, sin):
    """x [B, S, n, D]: x * cos + rotate_half(x) * sin."""
    _, jnp, _ = jax_modules()
    half = x.shape[-1] // 2
    rotated = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos[:, None, :] + rotated * sin[:, None, :]


def decoder_layer(cfg, p, x, cos, sin):
    """One Llama decoder layer on x [B, S, H]."""
    jax, jnp, _ = jax_modules()
    b, s, h = x.shape
    nh, nkv = cfg["heads"], cfg["kv_heads"]
    d, g = h // nh, nh // nkv
    a = rms_norm(x, p["ln1"])
    q = apply_rotary((a @ p["wq"]).reshape(b, s, nh, d), cos, sin)
    k = apply_rotary((a @ p["wk"]).reshape(b, s, nkv, d), cos, sin)
    v = (a @ p["wv"]).reshape(b, s, nkv, d)
    # GQA: query head j*g + r reads key/value head j.
    q = q.reshape(b, s, nkv, g, d)
    scores = jnp.einsum("bqjrd,bkjd->bjrqk", q, k) / math.sqrt(d)
    causal = jnp.tril(jnp.ones((s, s), dtype=bool))
    scores = jnp.where(causal, scores, -jnp.inf)
    att = jnp.einsum("bjrqk,bkjd->bqjrd", jax.nn.softmax(scores, axis=-1), v)
    x = x + att.reshape(b, s, h) @ p["wo"]
    m = rms_norm(x, p["ln2"])
    return x + (jax.nn.silu(m @ p["w_gate"]) * (m @ p["w_up"])) @ p["w_down"]


def forward_loss(cfg, form, params, ids, labels):
    """Mean cross-entropy of position t's logits against labels[t + 1]."""
    jax, jnp, lax = jax_modules()
    x = params["embed"][ids]
    cos, sin = rotary_tables(ids.shape[1], cfg["hidden"] // cfg["heads"])
    if form in ("scan", "scan-remat"):
        body = lambda x, p: (decoder_layer(cfg, p, x, cos, sin), None)
        if form == "scan-remat":  # backward recomputes each layer from its input
            body = jax.checkpoint(body, prevent_cse=False)
        x, _ = lax.scan(body, x, params["layers"])
    else:
        for p in params["layers"]:
            x = decoder_layer(cfg, p, x, cos, sin)
    logits = rms_norm(x, params["norm"])[:, :-1] @ params["lm_head"]
    logp = jax.nn.log_softmax(logits, axis=-1)
    picked = jnp.take_along_axis(logp, labels[:, 1:, None], axis=-1)
    return -jnp.mean(picked)


def make_step(cfg, form, adamw):
    """The jitted step: (params, m, v, t, ids, labels) -> (params, m, v, loss);
    params, m and v are donated (updated in place, as strata's step)."""
    jax, jnp, _ = jax_modules()
    b1, b2, eps, lr, wd = (adamw[k] for k in ("beta1", "beta2", "eps", "lr", "weight_decay"))

    def step(params, m, v, t, ids, labels):
        loss, grads = jax.value_and_grad(
            lambda p: forward_loss(cfg, form, p, ids, labels))(params)
        # torch.optim.AdamW's update; t (the step, from 1) is an argument, so
        # the bias corrections never recompile.
        c1, c2 = 1 - b1 ** t, 1 - b2 ** t
        m = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, m, grads)
        v = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g * g, v, grads)
        params = jax.tree.map(
            lambda p, m, v: p * (1 - lr * wd) - (lr / c1) * m / (jnp.sqrt(v) / jnp.sqrt(c2) + eps),
            params, m, v)
        return params, m, v, loss

    return jax.jit(step, donate_argnums=(0, 1, 2))


def max_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def jax_child(args):
    """One JAX configuration: prints a JSON line with its times."""
    baseline = max_rss_mib()
    jax, jnp, _ = jax_modules()
    baseline = max(baseline, max_rss_mib())  # after importing jax
    cfg, layers = BENCH_CONFIG, args.layers[0]
    params = init_params(cfg, layers, 2, stacked=args.form != "unrolled")
    m = jax.tree.map(jnp.zeros_like, params)
    v = jax.tree.map(jnp.zeros_like, params)
    ids, labels = jnp.asarray(bench_tokens(cfg, 3)), jnp.asarray(bench_tokens(cfg, 4))
    jax.block_until_ready((params, m, v))
    after_init = max_rss_mib()
    step = make_step(cfg, args.form, ADAMW)
    times, losses, after_first = [], [], None
    for t in range(1, args.steps + 2):  # the first call compiles
        t0 = time.perf_counter()
        params, m, v, loss = step(params, m, v, jnp.float32(t), ids, labels)
        jax.block_until_ready((params, m, v, loss))
        times.append(time.perf_counter() - t0)
        losses.append(float(loss))
        after_first = after_first or max_rss_mib()
    warm = times[1:]
    tokens = cfg["batch"] * cfg["seq"]
    print(json.dumps({
        "first_call_s": times[0], "cold_compile_s": times[0] - min(warm),
        "best_step_s": min(warm), "median_step_s": statistics.median(warm),
        "tokens_per_s": tokens / min(warm), "median_tokens_per_s": tokens / statistics.median(warm),
        "losses": losses, "baseline_mib": baseline, "after_init_mib": after_init,
        "after_first_call_mib": after_first, "self_peak_mib": max_rss_mib(),
        "jax": jax.__version__, "devices": str(jax.devices()),
    }), flush=True)


# ----------------------------------------------------------------------------
# --check: the JAX model on a tiny configuration.

def check(args):
    jax, jnp, _ = jax_modules()
    import numpy as np
    cfg, layers = TINY_CONFIG, 2
    ids, labels = jnp.asarray(bench_tokens(cfg, 3)), jnp.asarray(bench_tokens(cfg, 4))
    ok, log_v = True, math.log(cfg["vocab"])
    print(f"tiny config {cfg}, {layers} layers; log(vocab) = {log_v:.4f}")
    curves = {}
    for form in ("scan", "scan-remat", "unrolled"):
        params = init_params(cfg, layers, 0, stacked=form != "unrolled")
        m = jax.tree.map(jnp.zeros_like, params)
        v = jax.tree.map(jnp.zeros_like, params)
        # A larger learning rate than the bench's so a few steps move the loss.
        step = make_step(cfg, form, dict(ADAMW, lr=1e-2))
        losses = []
        for t in range(1, args.check_steps + 1):
            params, m, v, loss = step(params, m, v, jnp.float32(t), ids, labels)
            losses.append(float(loss))
        curves[form] = losses
        print(f"  {form:<9} loss per step: " + " ".join(f"{x:.4f}" for x in losses))
        init_ok = abs(losses[0] - log_v) < 0.05
        falls = losses[-1] < losses[0] - 1.0 and all(np.isfinite(losses))
        print(f"    initial loss within 0.05 of log(vocab): {init_ok}; "
              f"falls by > 1 over {len(losses)} steps: {falls}")
        ok &= init_ok and falls
    same = all(np.allclose(curves[f], curves["unrolled"], rtol=1e-4, atol=1e-4) for f in curves)
    print(f"  the three forms' losses agree (1e-4): {same}")
    ok &= same
    # Causality: changing the last token must not change earlier positions'
    # loss terms; the first position's logits must not see later tokens.
    params = init_params(cfg, layers, 0, stacked=True)

    def per_position(ids):
        x = params["embed"][ids]
        cos, sin = rotary_tables(ids.shape[1], cfg["hidden"] // cfg["heads"])
        for l in range(layers):
            x = decoder_layer(cfg, jax.tree.map(lambda w: w[l], params["layers"]), x, cos, sin)
        return rms_norm(x, params["norm"]) @ params["lm_head"]

    a = per_position(ids)
    b = per_position(ids.at[:, -1].set((ids[:, -1] + 1) % cfg["vocab"]))
    causal = bool(jnp.allclose(a[:, :-1], b[:, :-1], atol=1e-6)) and not bool(
        jnp.allclose(a[:, -1], b[:, -1], atol=1e-6))
    print(f"  causal (a changed last token moves only the last position's logits): {causal}")
    ok &= causal
    if args.torch_python and os.path.exists(args.torch_python):
        ok &= check_against_torch(args)
    else:
        print(f"  (no {args.torch_python}: the comparison with bench/llama_torch.py is skipped)")
    print("check: " + ("ok" if ok else "FAILED"))
    return 0 if ok else 1


# The torch side of check_against_torch, run by --torch-python: loads the
# JAX weights into bench/llama_torch.py's Model (its own Llama, written
# apart from this one), takes one step as bench/train_torch.py does
# (loss, backward, torch.optim.AdamW lr 1e-4) and saves the loss, the
# gradients and the new weights.
TORCH_STEP = r"""
import sys
import numpy as np
import torch
import torch.nn.functional as F
sys.path.insert(0, sys.argv[1])
import llama_torch
data = dict(np.load(sys.argv[2]))
layers = int(data["layers"])
torch.manual_seed(0)
model = llama_torch.Model(layers)
names = ["ln1", "wq", "wk", "wv", "wo", "ln2", "w_gate", "w_up", "w_down"]
order = [("embed", False), ("norm", False), ("lm_head", True)]
order += [(f"{l}.{n}", n not in ("ln1", "ln2")) for l in range(layers) for n in names]
slots = [model.embed, model.norm, model.lm_head] + list(model.layers)
with torch.no_grad():
    for (name, transposed), p in zip(order, slots):
        w = torch.from_numpy(data["p." + name])
        p.copy_(w.T if transposed else w)
ids = torch.from_numpy(data["ids"]).long()
labels = torch.from_numpy(data["labels"]).long()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
logits = model(ids)
V = llama_torch.V
loss = F.cross_entropy(logits[:, :-1].reshape(-1, V), labels[:, 1:].reshape(-1))
loss.backward()
out = {"loss": np.float32(loss.item())}
for (name, transposed), p in zip(order, slots):
    g = p.grad.T if transposed else p.grad
    out["g." + name] = g.detach().numpy().copy()
opt.step()
for (name, transposed), p in zip(order, slots):
    out["p." + name] = (p.T if transposed else p).detach().numpy().copy()
np.savez(sys.argv[3], **out)
"""


def check_against_torch(args):
    """The bench config's step (2 layers, the bench's batch and AdamW) in JAX
    against bench/llama_torch.py's model under torch: same loss, gradients
    and updated weights from the same initial weights."""
    jax, jnp, _ = jax_modules()
    import numpy as np
    cfg, layers = BENCH_CONFIG, 2
    ids, labels = bench_tokens(cfg, 3), bench_tokens(cfg, 4)
    params = init_params(cfg, layers, 1, stacked=False)
    flat = lambda tree: {"embed": tree["embed"], "norm": tree["norm"], "lm_head": tree["lm_head"],
                         **{f"{l}.{n}": w for l, lp in enumerate(tree["layers"])
                            for n, w in lp.items()}}
    start = {k: np.asarray(w) for k, w in flat(params).items()}
    grads = jax.jit(jax.grad(lambda p: forward_loss(cfg, "unrolled", p, ids, labels)))(params)
    grads = {k: np.asarray(g) for k, g in flat(grads).items()}
    m = jax.tree.map(jnp.zeros_like, params)
    v = jax.tree.map(jnp.zeros_like, params)
    step = make_step(cfg, "unrolled", ADAMW)
    new, _, _, loss = step(params, m, v, jnp.float32(1), jnp.asarray(ids), jnp.asarray(labels))
    new = {k: np.asarray(w) for k, w in flat(new).items()}
    with tempfile.TemporaryDirectory() as tmp:
        inp, out = os.path.join(tmp, "in.npz"), os.path.join(tmp, "out.npz")
        np.savez(inp, layers=layers, ids=ids, labels=labels,
                 **{"p." + k: w for k, w in start.items()})
        subprocess.run([args.torch_python, "-c", TORCH_STEP, os.path.join(ROOT, "bench"), inp, out],
                       check=True, env=dict(os.environ, OMP_NUM_THREADS="2"))
        ref = dict(np.load(out))
    rel = lambda a, b: float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))
    loss_err = abs(float(loss) - float(ref["loss"]))
    grad_err = max(rel(grads[k], ref["g." + k]) for k in grads)
    # The first AdamW step moves each weight by about lr * g / (|g| + eps):
    # where |g| is near eps, tiny gradient differences show, so compare the
    # updates' relative L2 error per weight rather than the worst element.
    step_err = max(rel(new[k] - start[k], ref["p." + k] - start[k]) for k in new)
    ok = loss_err < 1e-4 and grad_err < 1e-3 and step_err < 1e-2
    print(f"  against bench/llama_torch.py under torch ({layers} layers of the bench config, "
          f"same weights): loss {float(loss):.6f} vs {float(ref['loss']):.6f} (|diff| {loss_err:.1e}); "
          f"worst gradient relative L2 error {grad_err:.1e}; worst AdamW update relative L2 "
          f"error {step_err:.1e}: {ok}")
    return ok


# ----------------------------------------------------------------------------
# The parent: runs every configuration in its own process and prints the table.

def run_child(cmd, env=None):
    """Runs cmd to completion; returns (stdout, its max RSS in MiB, wall s)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, cwd=ROOT)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{stderr[-3000:]}")
    return stdout, usage.ru_maxrss / 1024, wall


def run_jax(args, layers, form):
    env = dict(os.environ)
    if args.xla_flags:
        env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " " + args.xla_flags).strip()
    env.setdefault("JAX_PLATFORMS", "cpu")
    cmd = [args.jax_python, os.path.abspath(__file__), "--child", "--form", form,
           "--layers", str(layers), "--steps", str(args.steps)]
    stdout, peak, wall = run_child(cmd, env)
    r = json.loads(stdout.strip().splitlines()[-1])
    r.update(runner=f"jax {form}", peak_mib=peak, process_wall_s=wall)
    return r


def sync_spans(trace_path):
    """The durations (s) of the trace's "sync" spans on the main thread, in order."""
    with open(trace_path) as f:
        d = json.load(f)
    events = d["traceEvents"] if isinstance(d, dict) else d
    syncs = sorted((e for e in events if e.get("ph") == "X" and e.get("cat") == "sync"),
                   key=lambda e: e["ts"])
    return [e["dur"] / 1e6 for e in syncs]


def run_strata(args, layers, mode):
    with tempfile.TemporaryDirectory() as tmp:
        trace = os.path.join(tmp, "trace.json")
        env = dict(os.environ, STRATA_TRACE=trace)
        cmd = [args.strata_bench, f"--benchmark_filter=^BM_TrainStep/{layers}/{mode}/",
               "--benchmark_format=json"]
        stdout, peak, wall = run_child(cmd, env)
        rec = [b for b in json.loads(stdout)["benchmarks"] if b["name"].startswith("BM_TrainStep/")]
        if len(rec) != 1:
            raise RuntimeError(f"expected one benchmark from {cmd}, got {len(rec)}")
        rec = rec[0]
        syncs = sync_spans(trace)
    # The last `iterations` syncs are the timed steps, the one before them the
    # first (compiling) step; the syncs before that initialize the weights.
    n = int(rec["iterations"])
    if len(syncs) < n + 1:
        raise RuntimeError(f"strata's trace holds {len(syncs)} syncs, expected > {n}")
    warm, first = syncs[-n:], syncs[-n - 1]
    return {"runner": f"strata {STRATA_MODES.get(mode, mode)}", "mode": mode,
            "tokens_per_s": rec["tokens_per_s"], "step_s": rec["real_time"] / 1e3,
            "cold_compile_s": first - min(warm), "first_step_sync_s": first,
            "best_sync_tokens_per_s": BENCH_CONFIG["batch"] * BENCH_CONFIG["seq"] / min(warm),
            "warm_step_syncs_s": warm, "peak_mib": peak, "self_peak_mib": rec["peak_rss_mib"],
            "process_wall_s": wall, "name": rec["name"]}


def cpu_info():
    """The CPU's model name, family/model and flags from /proc/cpuinfo."""
    info = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key in ("model name", "cpu family", "model", "flags") and key not in info:
                    info[key] = value.strip()
    except OSError:
        pass
    info["cores"] = os.cpu_count()
    return info


def print_table(layers, rows):
    jax_rows = [r for r in rows if r["runner"].startswith("jax")]
    best = max(jax_rows, key=lambda r: r["tokens_per_s"]) if jax_rows else None
    print(f"\n{layers} layers (batch 4 x 256 tokens); ratios against {best['runner'] if best else '-'}")
    print(f"  {'runner':<40}{'tokens/s':>10}{'peak MiB':>10}{'compile s':>11}"
          f"{'speed':>8}{'memory':>8}{'compile':>9}")
    for r in rows:
        line = (f"  {r['runner']:<40}{r['tokens_per_s']:>10.0f}{r['peak_mib']:>10.0f}"
                f"{r['cold_compile_s']:>11.2f}")
        if best:
            r["ratios"] = {"speed": r["tokens_per_s"] / best["tokens_per_s"],
                           "memory": r["peak_mib"] / best["peak_mib"],
                           "compile": r["cold_compile_s"] / best["cold_compile_s"]}
            line += "".join(f"{r['ratios'][k]:>{w}.2f}"
                            for k, w in (("speed", 8), ("memory", 8), ("compile", 9)))
        print(line, flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, nargs="+", default=[2, 8, 32])
    ap.add_argument("--steps", type=int, default=3, help="warm JAX steps (strata times 3)")
    ap.add_argument("--jax-forms", default="scan,unrolled",
                    help="scan, unrolled, scan-remat (scan saving only each layer's input)")
    ap.add_argument("--strata-modes", default="1,2,0",
                    help="BM_TrainStep modes: 1 save carries, 2 save dots, 3 unbatched dots, "
                         "0 unrolled")
    ap.add_argument("--jax-python", default=os.path.expanduser(
        os.path.join(os.environ.get("STRATA_PEERS_VENV", "~/.cache/strata/peers-venv"),
                     "bin", "python")))
    ap.add_argument("--strata-bench", default=os.path.join(ROOT, "build", "train_step_bench"))
    ap.add_argument("--xla-flags", default="", help="added to XLA_FLAGS in the JAX children")
    ap.add_argument("--json", help="write every result here")
    ap.add_argument("--check", action="store_true", help="check the JAX model on a tiny config")
    ap.add_argument("--check-steps", type=int, default=8)
    ap.add_argument("--torch-python", default="/usr/bin/python3",
                    help="an interpreter with torch for --check's comparison")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--form", choices=["scan", "scan-remat", "unrolled"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return jax_child(args)
    if args.check:
        return check(args)

    cpu = cpu_info()
    print(f"CPU: {cpu.get('model name', '?')} (family {cpu.get('cpu family', '?')}, "
          f"model {cpu.get('model', '?')}), {cpu['cores']} cores")
    print(f"flags: {cpu.get('flags', '?')}")
    print(f"XLA_FLAGS: {(os.environ.get('XLA_FLAGS', '') + ' ' + args.xla_flags).strip() or '(none)'}",
          flush=True)
    results = {"cpu": cpu, "platform": platform.platform(), "steps": args.steps,
               "config": BENCH_CONFIG, "adamw": ADAMW, "layers": {}}
    for layers in args.layers:
        rows = []
        for mode in (int(x) for x in args.strata_modes.split(",") if x):
            rows.append(run_strata(args, layers, mode))
        for form in (x for x in args.jax_forms.split(",") if x):
            rows.append(run_jax(args, layers, form))
        print_table(layers, rows)
        results["layers"][str(layers)] = rows
    print("\nspeed = tokens/s over the best JAX form's; memory = peak RSS over its; "
          "compile = cold compile over its")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
