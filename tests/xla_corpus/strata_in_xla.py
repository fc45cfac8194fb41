"""The other way round: the HLO text strata writes (STRATA_DUMP_DIR) parses in
XLA (jaxlib's hlo_module_from_text), and where XLA:CPU compiles it, XLA and
strata (`strata run`) give the same numbers on the same random inputs.

Run in the peers' environment (scripts/install-peers.sh) on a directory of
dumps, e.g. after
    STRATA_DUMP_DIR=/tmp/dumps pytest python/tests/test_ops.py ...
    $(scripts/install-peers.sh | tail -1) tests/xla_corpus/strata_in_xla.py /tmp/dumps
It prints how many modules parse, compile and agree, and every one that
does not with the reason. XLA itself aborts on some modules (a CHECK in its
verifier): the modules run in a worker process that is started again past
the one that killed it, and that module is counted as an XLA crash.
"""
import argparse
import collections
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import zlib

import jax
import jax._src.lib as jaxlib
import numpy as np
from jax._src import xla_bridge
from jax._src.lib import _jax, xla_client
from safetensors.numpy import load_file, save_file

jax.config.update("jax_enable_x64", True)  # strata's s64 / f64 parameters stay 64-bit

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DTYPES = {"f32": np.float32, "f64": np.float64, "s32": np.int32, "s64": np.int64,
          "u8": np.uint8, "s8": np.int8, "pred": np.bool_, "u32": np.uint32, "u64": np.uint64,
          "s16": np.int16, "u16": np.uint16, "f16": np.float16, "bf16": jax.numpy.bfloat16}


def parameters(text):
    """(name, dtype, dims) of the entry computation's parameters, in order."""
    entry = text[text.index("\nENTRY"):]
    found = {}
    for m in re.finditer(r"^\s*%?([\w.\-]+) = (\w+)\[([\d,]*)\](?:\{[^}]*\})? parameter\((\d+)\)",
                         entry, re.M):
        dims = [int(d) for d in m.group(3).split(",") if d]
        found[int(m.group(4))] = (m.group(1), m.group(2), dims)
    return [found[i] for i in range(len(found))]


def inputs_for(path, params):
    rng = np.random.default_rng(zlib.crc32(path.encode()))
    out = []
    for _, dtype, dims in params:
        if dtype not in DTYPES:
            raise KeyError(dtype)
        t = DTYPES[dtype]
        if t == np.bool_:
            out.append(rng.random(dims) > 0.5)
        elif t is jax.numpy.bfloat16 or np.issubdtype(t, np.floating):
            out.append(rng.uniform(-1, 1, dims).astype(t))
        else:  # small, so that indices fall inside small arrays
            out.append(rng.integers(0, 3, dims).astype(t))
    return out


def check(path, backend, devices, strata, work):
    """(outcome, reason) of one module."""
    kind = "optimized" if path.endswith(".optimized.hlo.txt") else "lowered"
    text = open(path).read()
    try:
        module = jaxlib.hlo.hlo_module_from_text(text)
    except Exception as e:  # noqa: BLE001  XLA's parser: any error is a finding
        return kind + " parse fails", f"{kind}: XLA does not parse: {str(e).splitlines()[0][:120]}"
    try:
        params = parameters(text)
        args_ = inputs_for(path, params)
        stablehlo = _jax.mlir.hlo_to_stablehlo(module.as_serialized_hlo_module_proto())
        exe = backend.compile_and_load(stablehlo, devices, xla_client.CompileOptions())
        want = [np.asarray(o) for o in exe.execute([jax.device_put(a) for a in args_])]
    except Exception as e:  # noqa: BLE001  what XLA:CPU cannot compile or run
        return kind + " XLA cannot run", f"{kind}: XLA cannot run: {str(e).splitlines()[0][:120]}"
    inp, out = os.path.join(work, "in.safetensors"), os.path.join(work, "out.safetensors")
    save_file({n: np.array(a, order="C") for (n, _, _), a in zip(params, args_)}, inp)
    run = subprocess.run([strata, "run", path, "--inputs", inp, "--output", out, "--quiet"],
                         capture_output=True, text=True, timeout=120)
    if run.returncode != 0:
        return kind + " strata error", f"{kind}: strata: {run.stderr.strip()[-160:]}"
    got = load_file(out)
    names = sorted(got, key=lambda n: [int(p) if p.isdigit() else -1 for p in n.split(".")[1:]])
    ok = len(names) == len(want)
    for n, w in zip(names, want):
        g = got[n]
        ok = ok and g.shape == w.shape and np.allclose(
            g.astype(np.float64), w.astype(np.float64), rtol=1e-4, atol=1e-5, equal_nan=True)
    if ok:
        return kind + " agree", None
    return kind + " differ", f"{kind}: values differ: {os.path.basename(path)}"


def worker(paths_file, start, strata, results):
    backend = xla_bridge.get_backend("cpu")
    devices = xla_client.DeviceList(tuple(backend.devices()[:1]))
    work = tempfile.mkdtemp()
    paths = open(paths_file).read().split("\n")
    with open(results, "a") as out:
        for i in range(start, len(paths)):
            out.write(json.dumps({"i": i, "started": True}) + "\n")
            out.flush()
            outcome, reason = check(paths[i], backend, devices, strata, work)
            out.write(json.dumps({"i": i, "outcome": outcome, "reason": reason}) + "\n")
            out.flush()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dumps", nargs="?")
    ap.add_argument("--strata", default=os.path.join(ROOT, "build", "strata"))
    ap.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker[0], int(args.worker[1]), args.strata, args.worker[2])
        return
    paths = sorted(p for p in glob.glob(os.path.join(args.dumps, "*.hlo.txt"))
                   if not p.endswith(".optimized.hlo.txt"))
    paths += sorted(glob.glob(os.path.join(args.dumps, "*.optimized.hlo.txt")))
    work = tempfile.mkdtemp()
    paths_file, results = os.path.join(work, "paths"), os.path.join(work, "results")
    open(paths_file, "w").write("\n".join(paths))
    counts, reasons = collections.Counter(), collections.Counter()
    start = 0
    while start < len(paths):
        open(results, "w").close()
        subprocess.run([sys.executable, __file__, "--strata", args.strata, "--worker",
                        paths_file, str(start), results], stderr=subprocess.DEVNULL)
        last_started = start
        for line in open(results):
            r = json.loads(line)
            if r.get("started"):
                last_started = r["i"]
                continue
            counts[r["outcome"]] += 1
            if r["reason"]:
                reasons[r["reason"]] += 1
            start = r["i"] + 1
        if start <= last_started:  # the worker died in this module
            kind = "optimized" if paths[last_started].endswith(".optimized.hlo.txt") else "lowered"
            counts[kind + " XLA crashes"] += 1
            reasons[f"{kind}: XLA aborts (a CHECK): {os.path.basename(paths[last_started])}"] += 1
            start = last_started + 1
    for k in sorted(counts):
        print(f"{counts[k]:5d}  {k}")
    for r, n in reasons.most_common():
        print(f"{n:5d}  {r}")


if __name__ == "__main__":
    main()
