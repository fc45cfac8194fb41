"""Random well-typed HLO programs run in XLA:CPU and in strata and compared (issue 47).

random_hlo.py writes each program from a seed, as HLO text: elementwise chains
(arithmetic; transcendentals with their inputs kept in their domains; compare,
select, clamp; converts between f32, f64, bf16, f16, s32 and pred; integer and
bit ops), broadcasts, reshapes, transposes, slices, concatenates, pads,
reverses, iotas, array constants, dynamic-slice and dynamic-update-slice,
reductions (add / max / min, and / or, argmax as a variadic reduce) over
random dims, reduce-window, dots with random batch and contracting dims,
convolutions with random dim_labels, padding, dilations and groups, gathers
and scatters, sorts, bitcast-convert, while loops (a counter and tensor
carries, a fixed trip count) and conditionals (a predicate or a branch
index), tuples as roots. Each runs in XLA:CPU (jaxlib, in a worker process
started again when XLA aborts) and with `strata run` on the same inputs.

Tolerances (random_values.py). Every value carries an interval and a bound
on its absolute rounding error, propagated op by op: an op adds
eps * |result| times its cost (1 for + - * /, 4 for a transcendental,
2 sqrt(n) for a sum or dot of n terms in f32 / f64 and n in bf16 / f16), and
a Lipschitz factor carries the operands' errors through; eps = 2^-23 (f32),
2^-52 (f64), 2^-8 (bf16), 2^-10 (f16). An output must satisfy
|strata - XLA| <= 4 * its bound (TOLERANCE_FACTOR). Values that only moved,
were compared, selected, converted, took a max / min, or are integers or
pred have a bound of 0 and must be bit-equal. Discontinuous ops (compare,
floor, ceil, round, sign, remainder, float -> integer convert, sort keys,
select's predicate) take only such exact operands, so a last-bit difference
upstream never flips a branch. XLA runs with
--xla_allow_excess_precision=false: it rounds bf16 / f16 after every op, as
the HLO says.

A mismatch, a strata crash (a signal), a strata error on a module XLA runs,
or a timeout is a finding. Before a mismatch counts, XLA runs the module
again without its algebraic simplifier and constant folding: where strata
then agrees, XLA's simplifier changed the answer (docs/hlo.md lists the
cases) and the program is dropped. A finding is minimized (the root cut to
the failing output, then moved to the first instruction that already fails
so; each instruction, last first, replaced by a parameter holding XLA's
value for it, while the finding stays the same) and, with
--keep DIR, written as DIR/NAME.hlo + DIR/NAME.safetensors (inputs and XLA's
expected.K) with an entry in DIR/cases.json, which
python/tests/test_xla_random.py replays. Modules XLA rejects or dies on are
counted and dropped.

Run in the peers' environment (scripts/install-peers.sh):
    $(scripts/install-peers.sh | tail -1) tests/xla_corpus/random_programs.py \\
        --seconds 600 --seed 1 --keep tests/xla_corpus/random
    ... --seed 1 --show 17      prints program 17 of seed 1
"""
import argparse
import collections
import copy
import json
import multiprocessing
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np

# XLA rounds bf16 / f16 after every op, as the HLO says (set before jax starts, in the worker)
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                           " --xla_allow_excess_precision=false").strip()
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

from random_hlo import Generator, dead_code, inputs_for, tolerances  # noqa: E402

# Ops strata does not run yet (each a finding, listed in docs/hlo.md): left out of the
# programs unless --all-ops, so that they do not hide other findings.
NOT_IN_STRATA = ()


# ---- running: XLA in a worker process, strata as a command --------------------------------
def xla_worker(conn):
    import jax
    from strata_in_xla import _jax, jaxlib, xla_bridge, xla_client  # noqa: F401  (x64 on)
    backend = xla_bridge.get_backend("cpu")
    devices = xla_client.DeviceList(tuple(backend.devices()[:1]))
    while True:
        try:
            request = conn.recv()
        except EOFError:
            return
        text, args = request[:2]
        try:
            module = jaxlib.hlo.hlo_module_from_text(text)
            stablehlo = _jax.mlir.hlo_to_stablehlo(module.as_serialized_hlo_module_proto())
            options = xla_client.CompileOptions()
            if len(request) > 2:
                options.executable_build_options.debug_options.xla_disable_hlo_passes = request[2]
            exe = backend.compile_and_load(stablehlo, devices, options)
            outs = [np.asarray(o) for o in exe.execute([jax.device_put(a) for a in args])]
            conn.send(("ok", outs))
        except Exception as e:  # noqa: BLE001  what XLA rejects
            conn.send(("reject", " ".join(str(e).split())[:300] or type(e).__name__))


class Xla:
    def __init__(self):
        self.ctx = multiprocessing.get_context("spawn")
        self.proc = None

    def start(self):
        self.conn, child = self.ctx.Pipe()
        self.proc = self.ctx.Process(target=xla_worker, args=(child,), daemon=True)
        self.proc.start()
        child.close()

    def run(self, text, args, disabled_passes="", timeout=120):
        """("ok", outputs) | ("reject", message) | ("crash", message)."""
        if self.proc is None or not self.proc.is_alive():
            self.start()
        try:
            self.conn.send((text, args, disabled_passes))
            if not self.conn.poll(timeout):
                raise TimeoutError
            return self.conn.recv()
        except (EOFError, OSError, TimeoutError) as e:
            self.proc.join(5)
            code = self.proc.exitcode  # -8: SIGFPE (XLA folded an integer x / 0)
            self.proc.kill()
            self.proc.join()
            self.proc = None
            return "crash", f"XLA worker died (exit {code}, {type(e).__name__})"

    def close(self):
        if self.proc is not None:
            self.proc.kill()
            self.proc.join()


def leaf_order(name):
    return [int(p) if p.isdigit() else -1 for p in name.split(".")[1:]]


def run_strata(strata, text, inputs, work, timeout=60):
    """("ok", outputs) | ("crash" | "error" | "timeout", message)."""
    from safetensors.numpy import load_file, save_file
    hlo, inp, out = (os.path.join(work, n) for n in ("p.hlo", "in.safetensors", "out.safetensors"))
    open(hlo, "w").write(text)
    save_file({k: np.array(v, order="C") for k, v in inputs.items()}, inp)
    if os.path.exists(out):
        os.remove(out)
    for wait in range(60):  # strata may be being rebuilt: wait for the binary
        try:
            run = subprocess.run([strata, "run", hlo, "--inputs", inp, "--output", out, "--quiet"],
                                 capture_output=True, text=True, timeout=timeout)
            break
        except subprocess.TimeoutExpired:
            return "timeout", f"no answer in {timeout} s"
        except OSError:
            time.sleep(10)
    else:
        raise SystemExit(f"{strata} cannot be run")
    if run.returncode < 0:
        return "crash", f"signal {-run.returncode}: {run.stderr.strip()[-300:]}"
    if run.returncode != 0:
        return "error", run.stderr.strip()[-300:]
    got = load_file(out)
    return "ok", [got[n] for n in sorted(got, key=leaf_order)]


def compare(got, want, tols):
    """None, or what differs (the first output that does)."""
    if len(got) != len(want):
        return f"{len(got)} outputs, XLA has {len(want)}"
    for k, (g, w, t) in enumerate(zip(got, want, tols)):
        if g.shape != w.shape or g.dtype != w.dtype:
            return f"output {k}: {g.dtype}{list(g.shape)}, XLA gives {w.dtype}{list(w.shape)}"
        if t is None:
            continue
        g64, w64 = g.astype(np.float64), w.astype(np.float64)
        bad = ~((np.abs(g64 - w64) <= t) | (np.isnan(g64) & np.isnan(w64)) | (g64 == w64))
        if bad.any():
            at = tuple(int(i) for i in np.argwhere(bad)[0])
            return (f"output {k} ({w.dtype}{list(w.shape)}): {int(bad.sum())} of {w.size} differ "
                    f"beyond {t:.3g}; at {list(at)} strata {g64[at]!r} XLA {w64[at]!r}")
    return None


def error_ratio(got, want, tols):
    worst = 0.0
    for g, w, t in zip(got, want, tols):
        if t and g.shape == w.shape and g.size:
            d = np.abs(g.astype(np.float64) - w.astype(np.float64))
            d = d[np.isfinite(d)]
            if d.size:
                worst = max(worst, float(d.max()) / t)
    return worst


SIMPLIFIER = "algsimp,constant_folding"  # XLA's passes a second opinion runs without


class Runner:
    def __init__(self, strata):
        self.strata, self.xla, self.work = strata, Xla(), tempfile.mkdtemp(prefix="random_hlo_")
        self.counts = collections.Counter()

    def check(self, program, inputs, tols=None):
        """(kind, detail, xla outputs): kind ok | mismatch | crash | error | timeout |
        xla-reject | xla-crash | xla-simplifier (XLA's simplifier changed the answer)."""
        text = program.text()
        params = [i for i in program.entry.instrs if i.opcode == "parameter"]
        params.sort(key=lambda i: int(i.literal))
        args = [inputs[p.name] for p in params]
        status, xla = self.xla.run(text, args)
        if status == "crash":  # a CHECK in XLA's simplifier: try without it
            status, xla = self.xla.run(text, args, SIMPLIFIER)
            if status == "ok":
                self.counts["XLA crashed, ran without its simplifier"] += 1
        if status != "ok":
            return "xla-" + status, xla, None
        tols = tolerances(program) if tols is None else tols
        status, got = run_strata(self.strata, text, inputs, self.work)
        if status != "ok":
            return status, got, xla
        diff = compare(got, xla, tols)
        if diff is not None:
            # XLA's algebraic simplifier and constant folding are wrong in a few corners
            # (docs/hlo.md): strata agreeing with XLA without them is not a finding
            status, plain = self.xla.run(text, args, SIMPLIFIER)
            if status == "ok" and compare(got, plain, tols) is None:
                return "xla-simplifier", diff, plain
            return "mismatch", diff, xla
        return "ok", error_ratio(got, xla, tols), xla


# ---- minimizing and keeping -------------------------------------------------------------
def signature(kind, detail):
    if kind == "mismatch":
        return kind
    text = re.sub(r"/tmp/\S+: ", "", detail.splitlines()[-1] if detail else "")
    text = re.sub(r"[\w.\-]*\d[\w.\-]*", "#", text)
    return f"{kind}: {text[:120]}"


def clone(program):
    return copy.deepcopy(program)


def minimize(runner, program, inputs, kind, detail, budget=200):
    """A smaller program and inputs that fail the same way."""
    tols = tolerances(program)
    sig = signature(kind, detail)

    def same(p, inp, t):
        k, d, _ = runner.check(p, inp, t)
        return k == kind and signature(k, d) == sig

    tries = 0
    # the root: only the output that fails
    root = next(i for i in program.entry.instrs if i.name == program.entry.root)
    if root.opcode == "tuple" and len(root.operands) > 1:
        for k, o in enumerate(root.operands):
            p = clone(program)
            p.entry.root = o
            dead_code(p)
            tries += 1
            if same(p, inputs, [tols[k]]):
                program, tols = p, [tols[k]]
                break
    # the first instruction that fails so as the root (its own tolerance)
    for ins in list(program.entry.instrs):
        if ins.opcode == "parameter" or ins.info.elements is not None or tries >= budget:
            continue
        p = clone(program)
        p.entry.root = ins.name
        dead_code(p)
        drop_unused_parameters(p)
        renumber(p)
        tries += 1
        if same(p, inputs, tolerances(p)):
            program, tols = p, tolerances(p)
            break
    # each instruction, last first: a parameter holding XLA's value for it
    for name in [i.name for i in reversed(program.entry.instrs)]:
        ins = next((i for i in program.entry.instrs if i.name == name), None)
        if (tries >= budget or ins is None or ins.opcode in ("parameter", "constant") or
                ins.name == program.entry.root or ins.info.elements is not None):
            continue
        probe = clone(program)
        probe.entry.root = ins.name
        dead_code(probe)
        tries += 1
        status, value = runner.xla.run(probe.text(), [inputs[p.name] for p in sorted(
            (i for i in probe.entry.instrs if i.opcode == "parameter"),
            key=lambda i: int(i.literal))])
        if status != "ok":
            continue
        p = clone(program)
        cut = next(i for i in p.entry.instrs if i.name == ins.name)
        cut.opcode, cut.operands, cut.attrs, cut.calls = "parameter", [], "", []
        # parameters first, numbered in order
        p.entry.instrs.remove(cut)
        p.entry.instrs.insert(0, cut)
        dead_code(p)
        drop_unused_parameters(p)
        renumber(p)
        inp = {i.name: (value[0] if i.name == ins.name else inputs[i.name])
               for i in p.entry.instrs if i.opcode == "parameter"}
        if same(p, inp, tols):
            program, inputs = p, inp
    names = {i.name for i in program.entry.instrs if i.opcode == "parameter"}
    return program, {k: v for k, v in inputs.items() if k in names}, tols


def drop_unused_parameters(program):
    used = {o for i in program.entry.instrs for o in i.operands} | {program.entry.root}
    program.entry.instrs = [i for i in program.entry.instrs
                            if i.opcode != "parameter" or i.name in used]


def renumber(program):
    k = 0
    for i in program.entry.instrs:
        if i.opcode == "parameter":
            i.literal = str(k)
            k += 1


KEEP_PER_SIGNATURE = 3  # findings kept (minimized) per kind of finding and run


def save_case(path, program, inputs):
    from safetensors.numpy import save_file
    with open(path + ".hlo", "w") as f:
        f.write(program.text())
    save_file({k: np.array(v, order="C") for k, v in inputs.items()}, path + ".safetensors")


def keep(directory, name, program, inputs, expected, tols, note):
    """NAME.hlo, NAME.safetensors (inputs and expected.K) and NAME's entry in cases.json."""
    os.makedirs(directory, exist_ok=True)
    tensors = dict(inputs)
    for k, o in enumerate(expected):
        tensors[f"expected.{k}"] = o
    save_case(os.path.join(directory, name), program, tensors)
    index_path = os.path.join(directory, "cases.json")
    index = json.load(open(index_path)) if os.path.exists(index_path) else {"cases": []}
    index["cases"] = [c for c in index["cases"] if c["name"] != name]
    # rtol 0: the error bound is absolute; atol -1: an output the generator could not bound
    index["cases"].append({"name": name, "outputs": len(expected), "rtol": 0.0,
                           "atol": [t if t is not None else -1 for t in tols],
                           "expected_from": "XLA:CPU", "note": note})
    with open(index_path, "w") as f:
        json.dump(index, f, indent=1)
        f.write("\n")


# ---- the fuzzer --------------------------------------------------------------------------
def program_seed(seed, k):
    return seed * 1_000_003 + k


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float)
    ap.add_argument("--count", type=int)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--keep", help="directory for the findings (tests/xla_corpus/random)")
    ap.add_argument("--smoke", type=int, default=0,
                    help="also keep up to N passing programs that each add ops the kept lack")
    ap.add_argument("--show", type=int, help="print program K of --seed and stop")
    ap.add_argument("--strata", default=os.path.join(ROOT, "build", "strata"))
    ap.add_argument("--all-ops", action="store_true",
                    help=f"also the ops strata does not run yet ({', '.join(NOT_IN_STRATA)})")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args()
    leave_out = () if args.all_ops else NOT_IN_STRATA
    if args.show is not None:
        program = Generator(program_seed(args.seed, args.show), leave_out).generate()
        print(program.text())
        print("tolerances:", tolerances(program))
        return
    if args.seconds is None and args.count is None:
        args.count = 100
    runner = Runner(args.strata)
    counts, findings, reasons = collections.Counter(), collections.Counter(), collections.Counter()
    kept_signatures, smoke_ops = collections.Counter(), set()
    worst = 0.0
    start = time.time()
    k = 0
    try:
        while True:
            if args.count is not None and k >= args.count:
                break
            if args.seconds is not None and time.time() - start >= args.seconds:
                break
            seed = program_seed(args.seed, k)
            program = Generator(seed, leave_out).generate()
            inputs = inputs_for(program, seed)
            if any(t is None for t in tolerances(program)):
                counts["unsound (dropped)"] += 1
                k += 1
                continue
            kind, detail, xla = runner.check(program, inputs)
            counts[kind] += 1
            if kind == "ok":
                worst = max(worst, detail)
                small = (sum(v.size for v in inputs.values()) <= 4096 and
                         sum(len(c.instrs) for c in program.computations.values()) +
                         len(program.entry.instrs) <= 60)
                if args.keep and args.smoke > 0 and small:
                    new = program.opcodes() - smoke_ops
                    if len(new) >= 3 or (new and not smoke_ops):
                        smoke_ops |= program.opcodes()
                        args.smoke -= 1
                        keep(args.keep, f"smoke_s{args.seed}_p{k}", program, inputs, xla,
                             tolerances(program), "a passing program kept as a smoke "
                             "regression; covers " + ", ".join(sorted(new)))
            elif kind == "xla-simplifier":
                reasons["xla-simplifier: strata gives what XLA gives without " + SIMPLIFIER] += 1
                raw = os.path.join(runner.work, f"simplifier_s{args.seed}_p{k}")
                save_case(raw, program, inputs)
                print(f"[{time.time() - start:7.1f}s] program {k}: dropped, XLA's {SIMPLIFIER} "
                      f"change its answer ({detail[:150]}): {raw}.hlo", flush=True)
            elif kind.startswith("xla-"):
                reasons[f"{kind}: {detail[:150]}"] += 1
                print(f"[{time.time() - start:7.1f}s] program {k}: dropped, {kind}: {detail[:150]}",
                      flush=True)
            else:
                sig = signature(kind, detail)
                findings[sig] += 1
                print(f"[{time.time() - start:7.1f}s] program {k} (--seed {args.seed} --show {k}):"
                      f" {kind}: {detail[:300]}", flush=True)
                raw = os.path.join(runner.work, f"finding_s{args.seed}_p{k}")
                save_case(raw, program, inputs)
                print(f"    as generated: {raw}.hlo", flush=True)
                if args.keep and kept_signatures[sig] < KEEP_PER_SIGNATURE:
                    kept_signatures[sig] += 1
                    small, small_inputs, tols = minimize(runner, program, inputs, kind, detail)
                    k2, d2, xla2 = runner.check(small, small_inputs, tols)
                    name = f"{kind}_s{args.seed}_p{k}"
                    detail = re.sub(r"/tmp/\S+: ", "", d2) if isinstance(d2, str) else d2
                    keep(args.keep, name, small, small_inputs, xla2, tols, f"{k2}: {detail}"[:300])
                    print(f"    kept as {name} ({len(small.entry.instrs)} instructions)",
                          flush=True)
            if args.verbose:
                print(k, kind, flush=True)
            k += 1
    finally:
        runner.xla.close()
    seconds = time.time() - start
    print(f"\n{k} programs in {seconds:.0f} s (--seed {args.seed}); "
          f"largest |strata - XLA| / tolerance where one applies: {worst:.3g}")
    for kind, n in sorted(counts.items()):
        print(f"{n:7d}  {kind}")
    if findings:
        print("findings:")
        for sig, n in findings.most_common():
            print(f"{n:7d}  {sig}")
    if reasons:
        print("dropped (XLA):")
        for r, n in reasons.most_common():
            print(f"{n:7d}  {r}")
    for r, n in runner.counts.most_common():
        print(f"{n:7d}  {r}")


if __name__ == "__main__":
    main()
