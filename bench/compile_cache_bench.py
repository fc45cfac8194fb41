"""Cold and warm starts with the persistent compile cache (STRATA_CACHE_DIR):
the first training step of the bench/ Llama as a Hugging Face model under
torch.compile(backend="strata") (bench/torch_compile_bench.py's child), and
of `strata train`'s own step, each run in a fresh process twice against one
empty cache directory. The first run compiles and writes the cache; the
second reads it. What remains of the warm start is Dynamo's and
AOTAutograd's tracing (torch) or strata's tracing and lowering (C++).

    bench/compile_cache_bench.py [--layers 2 8] [--json out.json]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def torch_first_step(layers, cache_dir):
    env = dict(os.environ, STRATA_CACHE_DIR=cache_dir)
    out = subprocess.run([sys.executable, os.path.join(HERE, "torch_compile_bench.py"), "--child",
                          "strata", str(layers), "--steps", "1"],
                         capture_output=True, text=True, env=env, timeout=3600)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    r = json.loads(out.stdout.strip().splitlines()[-1])
    return r["first_step_s"], r["step_s"], r["strata_compile_s"]


def train_first_step(layers, cache_dir):
    """Seconds from start to the end of step 1 of `strata train` (one step)."""
    env = dict(os.environ, STRATA_CACHE_DIR=cache_dir)
    with tempfile.TemporaryDirectory() as out_dir:
        t0 = time.perf_counter()
        out = subprocess.run([os.path.join(ROOT, "build", "strata"), "train", "--num-layers",
                              str(layers), "--layers", "unrolled", "--steps", "1",
                              "--eval-every", "0", "--checkpoint-every", "0",
                              "--sample-tokens", "0", "--out", out_dir, "--quiet"],
                             capture_output=True, text=True, env=env, timeout=3600)
        elapsed = time.perf_counter() - t0
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    return elapsed


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, nargs="*", default=[2, 8])
    parser.add_argument("--json")
    a = parser.parse_args()
    rows = []
    for layers in a.layers:
        with tempfile.TemporaryDirectory() as cache:
            cold, step, cold_strata = torch_first_step(layers, cache)
            entries = len([f for f in os.listdir(cache) if re.fullmatch(r"[0-9a-f]{32}\.hlo", f)])
            warm, _, warm_strata = torch_first_step(layers, cache)
        rows.append({"what": "torch.compile HF Llama", "layers": layers, "cold_s": cold,
                     "warm_s": warm, "step_s": step, "entries": entries,
                     "strata_cold_s": cold_strata, "strata_warm_s": warm_strata})
        with tempfile.TemporaryDirectory() as cache:
            cold = train_first_step(layers, cache)
            warm = train_first_step(layers, cache)
        rows.append({"what": "strata train (unrolled)", "layers": layers, "cold_s": cold,
                     "warm_s": warm})
    print(f"{'what':26} {'layers':>6} {'cold s':>8} {'warm s':>8} {'warm/cold':>9} "
          f"{'strata lower+compile s: cold':>29} {'warm':>6}")
    for r in rows:
        strata_part = (f"{r['strata_cold_s']:29.2f} {r['strata_warm_s']:6.2f}"
                       if "strata_cold_s" in r else "")
        print(f"{r['what']:26} {r['layers']:6} {r['cold_s']:8.2f} {r['warm_s']:8.2f} "
              f"{r['warm_s'] / r['cold_s']:9.2f} {strata_part}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
