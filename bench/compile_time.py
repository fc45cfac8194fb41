#!/usr/bin/env python3
"""Compile time against graph size (issue 50): long elementwise chains.

  /root/.cache/strata/venv/bin/python bench/compile_time.py [--json out.json]

1. HLO text through the CLI: a module of N instructions, `p0 = f32[64]
   parameter(0)`, `p1 = f32[64] parameter(1)`, then N - 2 ops alternating
   add / multiply / subtract of the previous value with p1, ROOT the last.
   Timed: the wall clock of `strata run prog.hlo --inputs in.safetensors
   --output out.safetensors --quiet` (process start, parse, compile, run,
   write), best of 2 for N <= 50k, one run above. One size is run again
   under STRATA_TRACE to split the time by span.
2. Python: `x = x + y` / `x = x * y` alternating n times on f32[64], each n
   in a fresh interpreter; timed: the loop (tracing the ops) and the first
   `x.sync()` (lower, compile, run) separately. Best of 2 for n <= 50k.
3. Every result is checked against the chain computed by NumPy in float64
   from the same f32 inputs: max |got - ref| / max(|ref|, 1) must be at most
   max(1e-5, N * 2^-24) (f32 rounding here is biased, so it grows with N).
   p1 is 1 + O(1/N) per element, so the result depends on every add and
   subtract (a dropped one moves it by O(1)) and on the product of all the
   multiplies (e^-2 .. e^2 across the 64 elements).

Goals (issue 50): a 200k-instruction chain in < 10 s; time(20k) / time(5k)
<= 5 (linear would be 4).
"""
import argparse
import collections
import json
import os
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HLO_SIZES = [1000, 5000, 10000, 20000, 50000, 100000, 200000]
PY_SIZES = [1000, 5000, 20000, 50000, 100000]
OPS = ["add", "multiply", "subtract"]
WIDTH = 64


# ----------------------------------------------------------------------------
# safetensors by hand: 8-byte little-endian header length, JSON header, bytes.

def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, a in tensors.items():
        a = np.ascontiguousarray(a, dtype=np.float32)
        header[name] = {"dtype": "F32", "shape": list(a.shape),
                        "data_offsets": [offset, offset + a.nbytes]}
        blobs.append(a.tobytes())
        offset += a.nbytes
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", info
        lo, hi = info["data_offsets"]
        out[name] = np.frombuffer(data[8 + n + lo:8 + n + hi],
                                  dtype=np.float32).reshape(info["shape"])
    return out


# ----------------------------------------------------------------------------
# The programs, their inputs and their values.

def inputs(steps):
    """p0 in [0.5, 1.5]; p1 = 1 + [-2, 2] / steps, so p1^steps spans e^-2..e^2."""
    p0 = np.linspace(0.5, 1.5, WIDTH).astype(np.float32)
    p1 = (1 + np.linspace(-2, 2, WIDTH) / max(1, steps)).astype(np.float32)
    return p0, p1


def hlo_text(n):
    lines = ["HloModule chain_%d" % n, "", "ENTRY main {",
             "  p0 = f32[%d] parameter(0)" % WIDTH,
             "  p1 = f32[%d] parameter(1)" % WIDTH]
    prev = "p0"
    for i in range(n - 2):
        name = "a%d" % (i + 1)
        root = "ROOT " if i == n - 3 else ""
        lines.append("  %s%s = f32[%d] %s(%s, p1)" % (root, name, WIDTH, OPS[i % 3], prev))
        prev = name
    lines.append("}")
    return "\n".join(lines) + "\n"


def hlo_reference(p0, p1, n):
    x, y = p0.astype(np.float64), p1.astype(np.float64)
    for i in range(n - 2):
        r = i % 3
        x = x + y if r == 0 else (x * y if r == 1 else x - y)
    return x


def py_reference(p0, p1, n):
    x, y = p0.astype(np.float64), p1.astype(np.float64)
    for i in range(n):
        x = x + y if i % 2 == 0 else x * y
    return x


def check(got, ref, n):
    err = float(np.max(np.abs(got.astype(np.float64) - ref) / np.maximum(np.abs(ref), 1.0)))
    tol = max(1e-5, n * 2.0 ** -24)
    return err, tol, bool(np.all(np.isfinite(got)) and err <= tol)


# ----------------------------------------------------------------------------
# Traces: Chrome trace-event JSON; "dur" in µs.

def trace_split(path, wall):
    with open(path) as f:
        d = json.load(f)
    events = d["traceEvents"] if isinstance(d, dict) else d
    spans = [e for e in events if e.get("ph") == "X"]
    by_name = collections.defaultdict(lambda: [0.0, 0])
    for e in spans:
        key = "%s: %s" % (e.get("cat", ""), e["name"])
        by_name[key][0] += e["dur"] / 1e6
        by_name[key][1] += 1
    # Top level: spans no other span of the same thread encloses.
    top = collections.defaultdict(float)
    by_tid = collections.defaultdict(list)
    for e in spans:
        by_tid[(e.get("pid"), e.get("tid"))].append(e)
    for evs in by_tid.values():
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        end = -1.0
        for e in evs:
            if e["ts"] >= end:
                top[e.get("cat", "")] += e["dur"] / 1e6
                end = e["ts"] + e["dur"]
    covered = sum(top.values())
    return {
        "spans": {k: {"s": round(v[0], 4), "count": v[1]}
                  for k, v in sorted(by_name.items(), key=lambda kv: -kv[1][0])},
        "top_level_by_category": {k: round(v, 4) for k, v in top.items()},
        "wall_s": round(wall, 4) if wall is not None else None,
        "outside_spans_s": round(wall - covered, 4) if wall is not None else None,
    }


# ----------------------------------------------------------------------------
# 1. The CLI.

def run_cli(strata, prog, inp, out, timeout, env=None):
    cmd = [strata, "run", prog, "--inputs", inp, "--output", out, "--quiet"]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    t = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError("exit %d: %s" % (p.returncode, p.stderr.strip()[-500:]))
    return t


def bench_hlo(args, work):
    rows = []
    for n in args.sizes:
        d = os.path.join(work, "hlo_%d" % n)
        os.makedirs(d, exist_ok=True)
        prog, inp, out = (os.path.join(d, f) for f in ("prog.hlo", "in.safetensors", "out.safetensors"))
        p0, p1 = inputs((n - 2) // 3)
        with open(prog, "w") as f:
            f.write(hlo_text(n))
        write_safetensors(inp, {"p0": p0, "p1": p1})
        ref = hlo_reference(p0, p1, n)
        reps = 2 if n <= 50000 else 1
        row = {"n": n, "runs_s": [], "ok": False}
        try:
            for _ in range(reps):
                if os.path.exists(out):
                    os.remove(out)
                row["runs_s"].append(run_cli(args.strata, prog, inp, out, args.timeout))
                got = read_safetensors(out)["output"]
                row["err"], row["tol"], ok = check(got, ref, n)
                if not ok:
                    row["error"] = "wrong value: max rel err %.3g > %.3g" % (row["err"], row["tol"])
                    break
            else:
                row["ok"] = True
        except subprocess.TimeoutExpired:
            row["error"] = "timed out after %g s" % args.timeout
        except Exception as e:  # noqa: BLE001  report and go on to the next size
            row["error"] = str(e)
        row["best_s"] = min(row["runs_s"]) if row["runs_s"] else None
        rows.append(row)
        print_row("hlo", row, flush=True)
    return rows


def trace_hlo(args, work, n):
    d = os.path.join(work, "hlo_%d" % n)
    prog, inp, out = (os.path.join(d, f) for f in ("prog.hlo", "in.safetensors", "out.safetensors"))
    path = os.path.join(work, "trace_hlo_%d.json" % n)
    env = dict(os.environ, STRATA_TRACE=path)
    wall = run_cli(args.strata, prog, inp, out, args.timeout, env=env)
    split = trace_split(path, wall)
    split["n"] = n
    return split


# ----------------------------------------------------------------------------
# 2. Python, each size in a fresh interpreter (this script with --py-child).

def py_child(n):
    import strata
    p0, p1 = inputs(n // 2)
    x, y = strata.tensor(p0), strata.tensor(p1)
    t0 = time.perf_counter()
    for i in range(n):
        x = x + y if i % 2 == 0 else x * y
    t1 = time.perf_counter()
    x.sync()
    t2 = time.perf_counter()
    got = np.array(x.numpy())
    err, tol, ok = check(got, py_reference(p0, p1, n), n)
    m = strata.metrics()
    print(json.dumps({"trace_s": t1 - t0, "sync_s": t2 - t1, "err": err, "tol": tol, "ok": ok,
                      "compiles": m.get("compiles")}))


def run_py(args, n, env_extra=None):
    env = dict(os.environ)
    env["PYTHONPATH"] = args.pythonpath + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(env_extra or {})
    p = subprocess.run([args.python, os.path.abspath(__file__), "--py-child", str(n)],
                       capture_output=True, text=True, timeout=args.timeout, env=env)
    if p.returncode != 0:
        raise RuntimeError("exit %d: %s" % (p.returncode, p.stderr.strip()[-500:]))
    return json.loads(p.stdout.strip().splitlines()[-1])


def bench_py(args):
    rows = []
    for n in args.py_sizes:
        reps = 2 if n <= 50000 else 1
        row = {"n": n, "runs": [], "ok": False}
        try:
            for _ in range(reps):
                r = run_py(args, n)
                row["runs"].append(r)
                row["err"], row["tol"] = r["err"], r["tol"]
                if not r["ok"]:
                    row["error"] = "wrong value: max rel err %.3g > %.3g" % (r["err"], r["tol"])
                    break
            else:
                row["ok"] = True
        except subprocess.TimeoutExpired:
            row["error"] = "timed out after %g s" % args.timeout
        except Exception as e:  # noqa: BLE001
            row["error"] = str(e)
        if row["runs"]:
            row["trace_s"] = min(r["trace_s"] for r in row["runs"])
            row["sync_s"] = min(r["sync_s"] for r in row["runs"])
        rows.append(row)
        print_row("py", row, flush=True)
    return rows


def trace_py(args, work, n):
    path = os.path.join(work, "trace_py_%d.json" % n)
    r = run_py(args, n, {"STRATA_TRACE": path})
    split = trace_split(path, None)
    split.update({"n": n, "trace_s": r["trace_s"], "sync_s": r["sync_s"]})
    return split


# ----------------------------------------------------------------------------

def print_row(kind, row, flush=False):
    status = "ok" if row["ok"] else "FAIL: " + row.get("error", "")
    err = "%.1e" % row["err"] if "err" in row else "-"
    if kind == "hlo":
        runs = ", ".join("%.3f" % t for t in row["runs_s"]) or "-"
        best = "%.3f" % row["best_s"] if row["best_s"] is not None else "-"
        print("hlo %7d  best %9s s  runs [%s]  err %s  %s" % (row["n"], best, runs, err, status),
              flush=flush)
    else:
        tr = "%.3f" % row["trace_s"] if "trace_s" in row else "-"
        sy = "%.3f" % row["sync_s"] if "sync_s" in row else "-"
        print("py  %7d  trace %8s s  first sync %8s s  err %s  %s" % (row["n"], tr, sy, err, status),
              flush=flush)


def print_split(title, split):
    print("\n%s" % title)
    for k, v in split["top_level_by_category"].items():
        print("  top level %-24s %8.3f s" % (k, v))
    if split.get("outside_spans_s") is not None:
        print("  outside any span (start, parse, I/O) %8.3f s of %.3f s wall"
              % (split["outside_spans_s"], split["wall_s"]))
    for k, v in list(split["spans"].items())[:12]:
        print("  %-36s %8.3f s  (%d)" % (k, v["s"], v["count"]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--strata", default=os.path.join(ROOT, "build", "strata"))
    ap.add_argument("--python", default="/root/.cache/strata/venv/bin/python"
                    if os.path.exists("/root/.cache/strata/venv/bin/python") else sys.executable)
    ap.add_argument("--pythonpath", default=os.path.join(ROOT, "build", "python"))
    ap.add_argument("--sizes", type=lambda s: [int(v) for v in s.split(",")], default=HLO_SIZES,
                    help="HLO instruction counts, comma separated")
    ap.add_argument("--py-sizes", type=lambda s: [int(v) for v in s.split(",")], default=PY_SIZES,
                    help="Python op counts, comma separated (empty list: --py-sizes=0 skips)")
    ap.add_argument("--trace-size", type=int, default=None,
                    help="HLO size to rerun under STRATA_TRACE (default: the largest that ran)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per process")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--py-child", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.py_child is not None:
        py_child(args.py_child)
        return 0
    args.py_sizes = [n for n in args.py_sizes if n > 0]

    res = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "load_before": os.getloadavg()}
    with tempfile.TemporaryDirectory(prefix="strata_compile_time_") as work:
        res["hlo"] = bench_hlo(args, work)
        ran = [r["n"] for r in res["hlo"] if r["ok"]]
        tn = args.trace_size or (max(ran) if ran else None)
        if tn:
            res["hlo_trace"] = trace_hlo(args, work, tn)
        res["python"] = bench_py(args)
        py_ran = [r["n"] for r in res["python"] if r["ok"]]
        if py_ran:
            res["python_trace"] = trace_py(args, work, max(py_ran))
    res["load_after"] = os.getloadavg()

    best = {r["n"]: r["best_s"] for r in res["hlo"] if r["ok"]}
    res["goals"] = {
        "ratio_20k_5k": best[20000] / best[5000] if 20000 in best and 5000 in best else None,
        "time_200k_s": best.get(200000),
    }
    res["goals"]["met"] = (res["goals"]["ratio_20k_5k"] is not None and res["goals"]["ratio_20k_5k"] <= 5
                           and res["goals"]["time_200k_s"] is not None and res["goals"]["time_200k_s"] < 10)

    print("\n| N | CLI best (s) | s per 1k | Python n | trace (s) | first sync (s) |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    py = {r["n"]: r for r in res["python"]}
    for n in sorted(set(best) | set(r["n"] for r in res["hlo"]) | set(py)):
        h = next((r for r in res["hlo"] if r["n"] == n), None)
        c = ("%.3f" % h["best_s"] if h and h["ok"] else ("FAIL" if h else "")), \
            ("%.4f" % (h["best_s"] / n * 1000) if h and h["ok"] else "")
        p = py.get(n)
        pc = (("%.3f" % p["trace_s"], "%.3f" % p["sync_s"]) if p and p["ok"] else
              (("FAIL", "FAIL") if p else ("", "")))
        print("| %d | %s | %s | %s | %s | %s |" % (n, c[0], c[1], n if p else "", pc[0], pc[1]))
    g = res["goals"]
    print("\ntime(20k) / time(5k) = %s (goal <= 5); time(200k) = %s s (goal < 10): %s"
          % ("%.2f" % g["ratio_20k_5k"] if g["ratio_20k_5k"] else "-",
             "%.3f" % g["time_200k_s"] if g["time_200k_s"] else "-",
             "met" if g["met"] else "NOT met"))
    if "hlo_trace" in res:
        print_split("CLI, N = %d, under STRATA_TRACE:" % res["hlo_trace"]["n"], res["hlo_trace"])
    if "python_trace" in res:
        t = res["python_trace"]
        print_split("Python, n = %d, under STRATA_TRACE (trace %.3f s, first sync %.3f s):"
                    % (t["n"], t["trace_s"], t["sync_s"]), t)
    print("\nload average before %s, after %s" % (
        " ".join("%.2f" % v for v in res["load_before"]), " ".join("%.2f" % v for v in res["load_after"])))
    failed = [r for r in res["hlo"] + res["python"] if not r["ok"]]
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
