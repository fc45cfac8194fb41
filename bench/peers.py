#!/usr/bin/env python3
"""strata's Llama training step beside JAX's and PyTorch inductor's, in one run (issue 47).

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
* inductor: bench/llama_torch.py's Model (the same Llama, its weights
  stored [out, in]) under PyTorch 2.x, run by --inductor-python (default the
  test environment of scripts/install-python.sh, torch 2.9.1; without it the
  row says why). The step as torch.compile users write it: zero_grad, the
  loss (the model and its cross-entropy, one function under
  torch.compile(backend="inductor")), backward, and torch.optim.AdamW's
  step under a torch.compile of its own: two Dynamo graphs (torch's
  optimizer breaks the graph around its step on purpose). The model's
  `self.layers[9 * l: 9 * l + 9]` slices a ParameterList through
  slice.indices, which Dynamo does not trace: those breaks cut the forward
  into a graph per layer (990 against 3030 tokens/s at 2 layers, one run
  each on the shared machine), so the child indexes the same parameters one
  by one (traceable_layers; eager is untouched). Its logits include the last
  position's, which the loss drops (1/256 more of lm_head's product than
  the others compute). --inductor-modes: "default" (no mode) and/or
  "max-autotune-no-cudagraphs", each a row; "default" alone unless told, as
  it was the faster here (2 layers: 3027 against 2985 tokens/s, compile 19
  against 26 s; 8 layers, under another engineer's builds: 309 against 234;
  max-autotune tried only ATen's bmm against its own, and kept ATen's).
  torch.set_num_threads(cores);
  a fresh TORCHINDUCTOR_CACHE_DIR per child, so every compile is cold (its
  C++ kernels built by g++). Cold compile and tokens/s as JAX's; both
  graphs compile in the first step (the JSON's graphs_after_step).
* peak MiB: the child process's max RSS (wait4's ru_maxrss), the same
  measure for every runner. The JAX process's includes the Python
  interpreter and the imported jax/jaxlib, the inductor process's torch
  (~620 MiB; the RSS after import is in the JSON as baseline_mib);
  ru_maxrss of a process that reaped children is the largest of it and
  them, and inductor's compile workers (children_peak_mib) stay below it.

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
cold. OPENBLAS_CORETYPE is left alone (no runner uses OpenBLAS; torch's
wheel has MKL).

--avx2 caps every runner to AVX2 for the run (the table's header says so):
* strata: STRATA_ISA=avx2.
* inductor: ATEN_CPU_CAPABILITY=avx2 (ATen's own kernels; inductor picks
  its vector ISA from it, and cpp.simdlen=256 says so again:
  cpu_vec_isa.pick_vec_isa() reports avx2); its C++ kernels compiled for
  -march=x86-64-v3 in place of its -march=native, under which g++ still put
  AVX-512 instructions (57 at 2 layers) into the AVX2 kernels. The line
  under the table counts the AVX-512 instructions (zmm, xmm/ymm 16-31, mask
  registers) in the compiled kernels: 0 when capped. MKL_ENABLE_INSTRUCTIONS
  =AVX2 for MKL, which runs its matrix products (extern mm and bmm): MKL's
  verbose mode names no ISA on this AMD CPU, so that cap is unverified.
  ONEDNN_MAX_CPU_ISA=AVX2 for oneDNN.
* jax: --xla_cpu_max_isa=AVX2 in XLA_FLAGS (jaxlib 0.10.2 has it; XLA's
  LLVM code for the 2-layer step then holds no zmm instruction, 660 before.
  A value it does not know only warns; an unknown flag aborts). XLA:CPU runs
  the dots in YNNPACK fusions, and YNNPACK picks its kernels from cpuid
  whatever that flag says, so --xla_cpu_experimental_ynn_fusion_type= (none)
  too: the dots run on XLA's Eigen, built for AVX into jaxlib (the 2-layer
  scan: 1894 tokens/s with YNNPACK, 1874 without, within the noise).
  ONEDNN_MAX_CPU_ISA=AVX2 (jaxlib links oneDNN; XLA:CPU does not use it by
  default).

Usage (the peers' venv comes from scripts/install-peers.sh, whose last line
is its interpreter; the script runs JAX children under that interpreter,
--jax-python to choose another):

  py=$(scripts/install-peers.sh | tail -1)
  $py bench/peers.py --check                    # are the JAX and inductor models right?
  $py bench/peers.py --layers 2 --steps 3       # a smoke run
  $py bench/peers.py --json out.json            # 2, 8 and 32 layers
  $py bench/peers.py --layers 8 --strata-modes 1,2 --jax-forms scan
  $py bench/peers.py --layers 2 --avx2          # every runner capped to AVX2
  $py bench/peers.py --peers inductor --strata-modes '' \
      --inductor-modes default,max-autotune-no-cudagraphs   # inductor alone

--check runs the JAX step on a tiny configuration (vocab 4096, hidden 64):
the initial loss must be within 0.05 of log(4096) = 8.318 and fall by more
than 1 over 8 steps (lr 1e-2), the three forms must agree, a changed last
token must move only the last position's logits; then 2 layers of the bench
configuration against bench/llama_torch.py's model (Debian's torch,
--torch-python) from the same weights: loss, gradients and one AdamW update;
then, from those weights again, the inductor step of each --inductor-modes
against eager torch 2.x (torch_train_step both) over --steps steps in one
process: every step's loss within 1e-4 of eager's (it prints the difference
and f32's epsilon; 3.8e-6 at 2 layers, relative 4.9e-7), the weights'
change within 1e-2 relative L2, two Dynamo graphs, and eager's first loss
within 1e-4 of JAX's.

Ratios in the table are against the fastest peer of that layer count (the
fastest of JAX's forms and inductor's modes; for memory and compile, that
same row): speed = tokens/s over its, memory and compile = peak MiB and cold
compile s over its (lower is better).
"""
import argparse
import json
import math
import os
import platform
import re
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


def step_summary(cfg, times):
    """A child's timing fields from its step times (the first compiles): cold
    compile = first call less the fastest warm step; tokens/s from the fastest
    (and the median)."""
    warm = times[1:]
    tokens = cfg["batch"] * cfg["seq"]
    return {"first_call_s": times[0], "cold_compile_s": times[0] - min(warm),
            "best_step_s": min(warm), "median_step_s": statistics.median(warm),
            "tokens_per_s": tokens / min(warm),
            "median_tokens_per_s": tokens / statistics.median(warm)}


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
    print(json.dumps({
        **step_summary(cfg, times), "losses": losses, "baseline_mib": baseline,
        "after_init_mib": after_init, "after_first_call_mib": after_first,
        "self_peak_mib": max_rss_mib(), "jax": jax.__version__, "devices": str(jax.devices()),
    }), flush=True)


# ----------------------------------------------------------------------------
# The inductor peer: bench/llama_torch.py's Model under torch.compile, run by
# --inductor-python (torch 2.x). Only the inductor children import torch.

INDUCTOR_MODES = ("default", "max-autotune-no-cudagraphs")
LAYER_WEIGHTS = ["ln1", "wq", "wk", "wv", "wo", "ln2", "w_gate", "w_up", "w_down"]


def torch_llama():
    """torch, torch.nn.functional and bench/llama_torch.py (its Model holds
    the bench configuration's sizes as module constants)."""
    import torch
    import torch.nn.functional as F
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import llama_torch
    sizes = (llama_torch.V, llama_torch.H, llama_torch.HEADS, llama_torch.KV, llama_torch.I,
             llama_torch.B, llama_torch.S)
    assert sizes == tuple(BENCH_CONFIG[k] for k in
                          ("vocab", "hidden", "heads", "kv_heads", "inter", "batch", "seq")), sizes
    return torch, F, llama_torch


def torch_slots(model):
    """(name, transposed, parameter) for every weight of a llama_torch Model,
    named as the JAX model's; transposed: torch stores it [out, in] where the
    JAX model stores [in, out]."""
    names = [("embed", False), ("norm", False), ("lm_head", True)]
    names += [(f"{l}.{n}", n not in ("ln1", "ln2")) for l in range(model.n) for n in LAYER_WEIGHTS]
    params = [model.embed, model.norm, model.lm_head] + list(model.layers)
    return [(name, transposed, p) for (name, transposed), p in zip(names, params)]


def traceable_layers(torch, model):
    """Lets Dynamo trace llama_torch's `self.layers[9 * l: 9 * l + 9]`:
    ParameterList's slice goes through slice.indices, a builtin Dynamo does
    not trace, and each such graph break would cut the compiled forward into
    pieces (one graph per layer, rotate_half recompiled per head count). The
    same parameters, sliced by index. Nothing changes for eager."""
    class Layers(torch.nn.ParameterList):
        def __getitem__(self, idx):
            if isinstance(idx, slice):
                return [self[i] for i in range(len(self))[idx]]
            return super().__getitem__(idx)

    model.layers.__class__ = Layers
    return model


def torch_train_step(torch, F, llama_torch, model, mode):
    """The step as torch users write it: zero_grad, the loss (the model and
    its cross-entropy), backward, torch.optim.AdamW's step (ADAMW, no
    clipping). mode "eager", or an inductor mode: the loss function and the
    optimizer's step each under torch.compile(backend="inductor", mode=...)
    ("default": no mode). Returns step(ids, labels) -> the loss."""
    opt = torch.optim.AdamW(model.parameters(), lr=ADAMW["lr"],
                            betas=(ADAMW["beta1"], ADAMW["beta2"]), eps=ADAMW["eps"],
                            weight_decay=ADAMW["weight_decay"])
    vocab = llama_torch.V

    def forward_loss(ids, labels):
        logits = model(ids)
        return F.cross_entropy(logits[:, :-1].reshape(-1, vocab), labels[:, 1:].reshape(-1))

    if mode == "eager":
        loss_fn, opt_step = forward_loss, opt.step
    else:
        traceable_layers(torch, model)
        options = dict(backend="inductor", **({} if mode == "default" else {"mode": mode}))
        loss_fn = torch.compile(forward_loss, **options)

        @torch.compile(**options)
        def opt_step():
            opt.step()

    def step(ids, labels):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(ids, labels)
        loss.backward()
        opt_step()
        return loss.detach()

    return step


def inductor_isa(avx2):
    """The vector ISA inductor's C++ kernels are written for, as it reports
    it (cpu_vec_isa.pick_vec_isa()). Without cpp.simdlen it follows
    ATEN_CPU_CAPABILITY (the parent sets avx2 under --avx2); simdlen 256
    says the same explicitly."""
    from torch._inductor import config, cpp_builder, cpu_vec_isa
    if avx2:
        config.cpp.simdlen = 256
        # Its kernels are compiled with -march=native beside the ISA's own
        # flags, so GCC still emits AVX-512 (EVEX) instructions of its own in
        # AVX2 kernels: x86-64-v3 (AVX2, FMA, F16C, BMI) instead.
        optimization_cflags = cpp_builder._get_optimization_cflags

        def capped_cflags(*a, **kw):
            cflags, ldflags = optimization_cflags(*a, **kw)
            return ["march=x86-64-v3" if f == "march=native" else f for f in cflags], ldflags

        cpp_builder._get_optimization_cflags = capped_cflags
    return str(cpu_vec_isa.pick_vec_isa())


def inductor_child(args):
    """One inductor configuration: prints a JSON line with its times."""
    baseline = max_rss_mib()
    torch, F, llama_torch = torch_llama()
    from torch._dynamo.utils import counters
    baseline = max(baseline, max_rss_mib())  # after importing torch
    torch.set_num_threads(os.cpu_count())
    vec_isa = inductor_isa(args.avx2)
    cfg, layers = BENCH_CONFIG, args.layers[0]
    torch.manual_seed(2)
    model = llama_torch.Model(layers)
    ids = torch.from_numpy(bench_tokens(cfg, 3)).long()
    labels = torch.from_numpy(bench_tokens(cfg, 4)).long()
    after_init = max_rss_mib()
    step = torch_train_step(torch, F, llama_torch, model, args.inductor_mode)
    times, losses, graphs, after_first = [], [], [], None
    for _ in range(args.steps + 1):  # the first call compiles
        t0 = time.perf_counter()
        loss = step(ids, labels)
        times.append(time.perf_counter() - t0)
        losses.append(float(loss))
        graphs.append(counters["stats"]["unique_graphs"])
        after_first = after_first or max_rss_mib()
    print(json.dumps({
        **step_summary(cfg, times), "step_s": times, "graphs_after_step": graphs,
        "losses": losses, "baseline_mib": baseline, "after_init_mib": after_init,
        "after_first_call_mib": after_first, "self_peak_mib": max_rss_mib(),
        "children_peak_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
        "torch": torch.__version__, "threads": torch.get_num_threads(),
        "aten_cpu_capability": torch.backends.cpu.get_cpu_capability(), "inductor_vec_isa": vec_isa,
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
    ok &= check_against_torch(args)
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
import peers
data = dict(np.load(sys.argv[2]))
layers = int(data["layers"])
torch.manual_seed(0)
model = llama_torch.Model(layers)
slots = peers.torch_slots(model)
order = [(name, transposed) for name, transposed, _ in slots]
slots = [p for _, _, p in slots]
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
    against bench/llama_torch.py's model under torch (--torch-python): same
    loss, gradients and updated weights from the same initial weights; then,
    from those weights again, the inductor step (--inductor-python) against
    eager torch in the same process."""
    have_torch = bool(args.torch_python) and os.path.exists(args.torch_python)
    have_inductor = "inductor" in args.peers and os.path.exists(args.inductor_python)
    if not have_torch:
        print(f"  (no {args.torch_python}: the comparison with bench/llama_torch.py is skipped)")
    if not have_inductor:
        print(f"  (no {args.inductor_python}: the inductor check is skipped; "
              "scripts/install-python.sh makes it)" if "inductor" in args.peers else
              "  (--peers without inductor: the inductor check is skipped)")
    if not (have_torch or have_inductor):
        return True
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
    rel = lambda a, b: float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        inp, out = os.path.join(tmp, "in.npz"), os.path.join(tmp, "out.npz")
        np.savez(inp, layers=layers, ids=ids, labels=labels,
                 **{"p." + k: w for k, w in start.items()})
        if have_torch:
            subprocess.run([args.torch_python, "-c", TORCH_STEP, os.path.join(ROOT, "bench"), inp,
                            out], check=True, env=dict(os.environ, OMP_NUM_THREADS="2"))
            ref = dict(np.load(out))
            loss_err = abs(float(loss) - float(ref["loss"]))
            grad_err = max(rel(grads[k], ref["g." + k]) for k in grads)
            # The first AdamW step moves each weight by about lr * g / (|g| + eps):
            # where |g| is near eps, tiny gradient differences show, so compare the
            # updates' relative L2 error per weight rather than the worst element.
            step_err = max(rel(new[k] - start[k], ref["p." + k] - start[k]) for k in new)
            torch_ok = loss_err < 1e-4 and grad_err < 1e-3 and step_err < 1e-2
            ref_loss = float(ref["loss"])
            print(f"  against bench/llama_torch.py under torch ({layers} layers of the bench "
                  f"config, same weights): loss {float(loss):.6f} vs {ref_loss:.6f} "
                  f"(|diff| {loss_err:.1e}); worst gradient relative L2 error {grad_err:.1e}; "
                  f"worst AdamW update relative L2 error {step_err:.1e}: {torch_ok}")
            ok &= torch_ok
        if have_inductor:
            ok &= check_inductor(args, inp, float(loss))
    return ok


def check_inductor(args, weights, jax_loss):
    """The inductor step from the weights in `weights` against eager torch
    (torch_train_step both, bench/llama_torch.py's model) for --steps steps."""
    import numpy as np
    modes = [m for m in args.inductor_modes.split(",") if m]
    cmd = [args.inductor_python, os.path.abspath(__file__), "--inductor-check", weights,
           "--steps", str(args.steps), "--inductor-modes", ",".join(modes)]
    with tempfile.TemporaryDirectory() as cache:
        env = child_env(args, "inductor", cache)
        try:
            stdout, _, wall = run_child(cmd + (["--avx2"] if args.avx2 else []), env)
        except RuntimeError as e:
            print(f"  inductor: FAILED ({last_line(str(e))})")
            return False
    r = json.loads(stdout.strip().splitlines()[-1])
    eager = r["eager_losses"]
    print(f"  inductor against eager torch {r['torch']} (same weights, {len(eager)} steps of "
          f"loss, backward, AdamW; {wall:.0f} s): eager losses "
          + " ".join(f"{x:.6f}" for x in eager)
          + f"; JAX's first loss {jax_loss:.6f} (|diff| {abs(jax_loss - eager[0]):.1e})")
    ok = abs(jax_loss - eager[0]) < 1e-4
    for mode in modes:
        m = r["modes"][mode]
        loss_err = max(abs(a - b) for a, b in zip(m["losses"], eager))
        rel_err = max(abs(a - b) / abs(b) for a, b in zip(m["losses"], eager))
        mode_ok = loss_err < 1e-4 and m["update_err"] < 1e-2 and m["graphs"] <= 2
        print(f"    inductor {mode}: losses " + " ".join(f"{x:.6f}" for x in m["losses"])
              + f"; worst |diff| from eager {loss_err:.1e} (relative {rel_err:.1e}, f32's "
              f"epsilon {np.finfo(np.float32).eps:.1e}); worst relative L2 error of the "
              f"weights' change over the steps {m['update_err']:.1e}; {m['graphs']} Dynamo "
              f"graphs (the loss with its backward; AdamW), vector ISA {m['vec_isa']}: {mode_ok}")
        ok &= mode_ok
    return ok


def inductor_check_child(args):
    """--inductor-check's child: eager torch, then each inductor mode, every
    one from the weights in args.inductor_check for --steps steps; prints a
    JSON line with the losses and how far the weights moved apart."""
    torch, F, llama_torch = torch_llama()
    import numpy as np
    from torch._dynamo.utils import counters
    torch.set_num_threads(os.cpu_count())
    vec_isa = inductor_isa(args.avx2)
    data = dict(np.load(args.inductor_check))
    layers = int(data["layers"])
    ids = torch.from_numpy(data["ids"]).long()
    labels = torch.from_numpy(data["labels"]).long()

    def run(mode):
        model = llama_torch.Model(layers)
        slots = torch_slots(model)
        with torch.no_grad():
            for name, transposed, p in slots:
                w = torch.from_numpy(data["p." + name])
                p.copy_(w.T if transposed else w)
        step = torch_train_step(torch, F, llama_torch, model, mode)
        graphs = counters["stats"]["unique_graphs"]
        losses = [float(step(ids, labels)) for _ in range(args.steps)]
        weights = {name: (p.T if t else p).detach().numpy().copy() for name, t, p in slots}
        return losses, weights, counters["stats"]["unique_graphs"] - graphs

    rel = lambda a, b: float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))
    eager_losses, eager, _ = run("eager")
    out = {"torch": torch.__version__, "eager_losses": eager_losses, "modes": {}}
    for mode in args.inductor_modes.split(","):
        losses, weights, graphs = run(mode)
        out["modes"][mode] = {
            "losses": losses, "graphs": graphs, "vec_isa": vec_isa,
            "update_err": max(rel(weights[k] - data["p." + k], eager[k] - data["p." + k])
                              for k in eager)}
    print(json.dumps(out), flush=True)


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


# --avx2: what caps each runner to AVX2 (the variables go into its child's
# environment, the flags into the JAX child's XLA_FLAGS).
AVX2_ENV = {
    "strata": {"STRATA_ISA": "avx2"},
    # ATen's kernels and inductor's vector ISA (inductor_isa also compiles
    # its kernels for x86-64-v3), MKL's GEMMs (extern_kernels.mm/bmm),
    # oneDNN's primitives.
    "inductor": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
                 "ONEDNN_MAX_CPU_ISA": "AVX2"},
    # jaxlib links oneDNN too (off in XLA:CPU's defaults).
    "jax": {"ONEDNN_MAX_CPU_ISA": "AVX2"},
}
# XLA:CPU's LLVM code (xla_cpu_max_isa); YNNPACK, which runs the dots by
# default, picks its kernels by cpuid and ignores that flag, so its fusions
# go and the dots run on XLA's Eigen (built for AVX into jaxlib).
JAX_AVX2_FLAGS = "--xla_cpu_max_isa=AVX2 --xla_cpu_experimental_ynn_fusion_type="


def jax_xla_flags(args):
    """The JAX children's XLA_FLAGS: the environment's, --avx2's, --xla-flags'."""
    flags = [os.environ.get("XLA_FLAGS", ""), JAX_AVX2_FLAGS if args.avx2 else "", args.xla_flags]
    return " ".join(f for f in flags if f).strip()


def child_env(args, runner, inductor_cache=None):
    """A runner's child environment: this one's, with --avx2's caps."""
    env = dict(os.environ)
    if args.avx2:
        env.update(AVX2_ENV[runner])
    if runner == "jax":
        env["XLA_FLAGS"] = jax_xla_flags(args)
        env.setdefault("JAX_PLATFORMS", "cpu")
    if inductor_cache:
        # A cache of its own: every compile is cold, as JAX's and strata's.
        env["TORCHINDUCTOR_CACHE_DIR"] = inductor_cache
    return env


def last_line(text):
    lines = [l.strip() for l in text.strip().splitlines() if l.strip()]
    return lines[-1] if lines else text


def run_jax(args, layers, form):
    cmd = [args.jax_python, os.path.abspath(__file__), "--child", "--form", form,
           "--layers", str(layers), "--steps", str(args.steps)]
    stdout, peak, wall = run_child(cmd, child_env(args, "jax"))
    r = json.loads(stdout.strip().splitlines()[-1])
    r.update(runner=f"jax {form}", peak_mib=peak, process_wall_s=wall)
    return r


AVX512_ONLY = re.compile(r"%zmm|%[xy]mm(1[6-9]|2[0-9]|3[01])\b|%k[1-7]")


def kernel_avx512_instructions(cache):
    """(AVX-512 instructions, kernels) in the C++ kernels inductor compiled
    into `cache`: instructions on zmm registers, xmm/ymm 16-31 or mask
    registers, which AVX2 has not; its ISA probes (__avx*_chk_kernel) are
    not kernels. None where objdump is missing."""
    count, kernels = 0, 0
    for dirpath, _, files in os.walk(cache):
        for name in files:
            if not name.endswith(".so"):
                continue
            source = os.path.join(dirpath, name[:-3] + ".cpp")
            if os.path.exists(source):
                with open(source) as f:
                    if "_chk_kernel" in f.read():
                        continue
            try:
                text = subprocess.run(["objdump", "-d", "--no-show-raw-insn",
                                       os.path.join(dirpath, name)],
                                      capture_output=True, text=True, check=True).stdout
            except (OSError, subprocess.CalledProcessError):
                return None, kernels
            kernels += 1
            count += sum(1 for line in text.splitlines() if AVX512_ONLY.search(line))
    return count, kernels


def run_inductor(args, layers, mode):
    runner = f"inductor {mode}"
    if not os.path.exists(args.inductor_python):
        return {"runner": runner, "error": f"no {args.inductor_python} (scripts/install-python.sh "
                                           "makes it; --inductor-python for another)"}
    cmd = [args.inductor_python, os.path.abspath(__file__), "--inductor-child",
           "--inductor-mode", mode, "--layers", str(layers), "--steps", str(args.steps)]
    with tempfile.TemporaryDirectory() as cache:
        try:
            stdout, peak, wall = run_child(cmd + (["--avx2"] if args.avx2 else []),
                                           child_env(args, "inductor", cache))
        except RuntimeError as e:
            return {"runner": runner, "error": f"failed: {last_line(str(e))}"}
        avx512, kernels = kernel_avx512_instructions(cache)
    r = json.loads(stdout.strip().splitlines()[-1])
    r.update(runner=runner, mode=mode, peak_mib=peak, process_wall_s=wall,
             kernel_avx512_instructions=avx512, kernels=kernels)
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
        env = dict(child_env(args, "strata"), STRATA_TRACE=trace)
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


def print_table(layers, rows, capped):
    peers = [r for r in rows if r["runner"].startswith(("jax", "inductor")) and "error" not in r]
    best = max(peers, key=lambda r: r["tokens_per_s"]) if peers else None
    cap = ", every runner capped to AVX2" if capped else ""
    print(f"\n{layers} layers (batch 4 x 256 tokens{cap}); ratios against "
          f"{best['runner'] if best else '-'}")
    print(f"  {'runner':<40}{'tokens/s':>10}{'peak MiB':>10}{'compile s':>11}"
          f"{'speed':>8}{'memory':>8}{'compile':>9}")
    for r in rows:
        if "error" in r:
            print(f"  {r['runner']:<40}{r['error']}", flush=True)
            continue
        line = (f"  {r['runner']:<40}{r['tokens_per_s']:>10.0f}{r['peak_mib']:>10.0f}"
                f"{r['cold_compile_s']:>11.2f}")
        if best:
            r["ratios"] = {"speed": r["tokens_per_s"] / best["tokens_per_s"],
                           "memory": r["peak_mib"] / best["peak_mib"],
                           "compile": r["cold_compile_s"] / best["cold_compile_s"]}
            line += "".join(f"{r['ratios'][k]:>{w}.2f}"
                            for k, w in (("speed", 8), ("memory", 8), ("compile", 9)))
        print(line, flush=True)
    for r in rows:
        if r["runner"].startswith("inductor") and "error" not in r:
            avx512 = r["kernel_avx512_instructions"]
            print(f"  {r['runner']}: torch {r['torch']}, {r['threads']} threads, ATen's kernels "
                  f"{r['aten_cpu_capability']}, inductor's vector ISA {r['inductor_vec_isa']}; "
                  f"{'?' if avx512 is None else avx512} AVX-512 instructions in its {r['kernels']} "
                  f"compiled kernels", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, nargs="+", default=[2, 8, 32])
    ap.add_argument("--steps", type=int, default=3,
                    help="warm JAX and inductor steps (strata times 3)")
    ap.add_argument("--peers", default="jax,inductor",
                    help="the peers to run beside strata: jax, inductor (--strata-modes '' runs "
                         "no strata)")
    ap.add_argument("--jax-forms", default="scan,unrolled",
                    help="scan, unrolled, scan-remat (scan saving only each layer's input)")
    ap.add_argument("--strata-modes", default="1,2,0",
                    help="BM_TrainStep modes: 1 save carries, 2 save dots, 3 unbatched dots, "
                         "0 unrolled")
    ap.add_argument("--jax-python", default=os.path.expanduser(
        os.path.join(os.environ.get("STRATA_PEERS_VENV", "~/.cache/strata/peers-venv"),
                     "bin", "python")))
    ap.add_argument("--inductor-python", default=os.path.expanduser(
        os.path.join(os.environ.get("STRATA_VENV", "~/.cache/strata/venv"), "bin", "python")),
                    help="an interpreter with torch 2.x for the inductor peer (the test "
                         "environment of scripts/install-python.sh)")
    ap.add_argument("--inductor-modes", default="default",
                    help="torch.compile modes, each a row: default, max-autotune-no-cudagraphs")
    ap.add_argument("--avx2", action="store_true",
                    help="cap every runner to AVX2 (STRATA_ISA, ATEN_CPU_CAPABILITY, MKL's and "
                         "oneDNN's caps, inductor's vector ISA, --xla_cpu_max_isa)")
    ap.add_argument("--strata-bench", default=os.path.join(ROOT, "build", "train_step_bench"))
    ap.add_argument("--xla-flags", default="", help="added to XLA_FLAGS in the JAX children")
    ap.add_argument("--json", help="write every result here")
    ap.add_argument("--check", action="store_true", help="check the JAX model on a tiny config")
    ap.add_argument("--check-steps", type=int, default=8)
    ap.add_argument("--torch-python", default="/usr/bin/python3",
                    help="an interpreter with torch for --check's comparison")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--inductor-child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--inductor-mode", choices=INDUCTOR_MODES, help=argparse.SUPPRESS)
    ap.add_argument("--inductor-check", help=argparse.SUPPRESS)
    ap.add_argument("--form", choices=["scan", "scan-remat", "unrolled"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.peers = [x for x in args.peers.split(",") if x]
    for peer in args.peers:
        if peer not in ("jax", "inductor"):
            ap.error(f"--peers: unknown peer {peer!r} (jax, inductor)")
    for mode in (x for x in args.inductor_modes.split(",") if x):
        if mode not in INDUCTOR_MODES:
            ap.error(f"--inductor-modes: unknown mode {mode!r} ({', '.join(INDUCTOR_MODES)})")
    if args.child:
        return jax_child(args)
    if args.inductor_child:
        return inductor_child(args)
    if args.inductor_check:
        return inductor_check_child(args)
    if args.check:
        return check(args)

    cpu = cpu_info()
    print(f"CPU: {cpu.get('model name', '?')} (family {cpu.get('cpu family', '?')}, "
          f"model {cpu.get('model', '?')}), {cpu['cores']} cores")
    print(f"flags: {cpu.get('flags', '?')}")
    if "jax" in args.peers:
        print(f"XLA_FLAGS: {jax_xla_flags(args) or '(none)'}", flush=True)
    if args.avx2:
        caps = {"strata": "", "jax": f" and {JAX_AVX2_FLAGS}",
                "inductor": ", its kernels built for x86-64-v3"}
        print("capped to AVX2: " + "; ".join(
            f"{runner} " + " ".join(f"{k}={v}" for k, v in AVX2_ENV[runner].items()) + caps[runner]
            for runner in caps if runner in args.peers + (["strata"] if args.strata_modes else [])),
              flush=True)
    results = {"cpu": cpu, "platform": platform.platform(), "steps": args.steps,
               "config": BENCH_CONFIG, "adamw": ADAMW, "avx2": args.avx2,
               "peers": args.peers, "layers": {}}
    for layers in args.layers:
        rows = []
        for mode in (int(x) for x in args.strata_modes.split(",") if x):
            rows.append(run_strata(args, layers, mode))
        if "jax" in args.peers:
            for form in (x for x in args.jax_forms.split(",") if x):
                rows.append(run_jax(args, layers, form))
        if "inductor" in args.peers:
            for mode in (x for x in args.inductor_modes.split(",") if x):
                rows.append(run_inductor(args, layers, mode))
        print_table(layers, rows, args.avx2)
        results["layers"][str(layers)] = rows
    print("\nspeed = tokens/s over the fastest peer's (JAX's forms and inductor's modes); "
          "memory = peak RSS over its; compile = cold compile over its")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
