#!/usr/bin/env python3
"""Weak scaling of `strata train`'s FSDP+TP Llama step over MPI processes (issue 48).

Each data replica keeps its own batch (--batch-per-replica sequences), so
the work per replica is fixed while processes are added:

  1 process : mesh data=1,model=1   batch B
  2 processes: mesh data=2,model=1  batch 2B   (FSDP across processes)
  4 processes: mesh data=2,model=2  batch 2B   (FSDP x tensor parallel)

One participant (device) per process, all on this host over shared memory
(Open MPI's vader). Every process records a Chrome trace (STRATA_TRACE);
from process 0's the script takes, over the steps after the first, the
steps' wall time and the time its partition spends inside collective
kernels (all-gather, all-reduce, reduce-scatter, all-to-all,
collective-permute: waiting for the others included). Prints one line per
configuration: tokens/s (the run's own figure after the first step) in all
and per process, the step time and the collectives' share of it.

  python3 bench/spmd_scaling.py [--build build] [--steps 12] [model flags...]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

# Kernels during which the partition waits for the others: the synchronous
# collectives, and the asynchronous pairs' -start (hand-off) and -done (wait).
COLLECTIVES = {"all-gather", "all-reduce", "reduce-scatter", "all-to-all", "collective-permute",
               "all-gather-start", "all-gather-done", "all-reduce-start", "all-reduce-done"}


def run(build, processes, mesh, batch, steps, model, out, overlap=True):
    trace = os.path.join(out, "trace.json")
    env = dict(os.environ, STRATA_TRACE=trace, OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               STRATA_OVERLAP_COLLECTIVES="1" if overlap else "0")
    command = [os.path.join(build, "strata"), "train", "--corpus", "data/corpus.txt",
               "--steps", str(steps), "--eval-every", "0", "--sample-tokens", "0",
               "--checkpoint-every", "0", "--batch", str(batch), "--mesh", mesh,
               "--sharding", "fsdp+tp", "--out", os.path.join(out, "run")] + model
    if processes > 1:
        command = ["mpirun", "--oversubscribe", "--bind-to", "none", "--mca", "btl",
                   "self,vader", "-np", str(processes), "-x", "STRATA_TRACE", "-x",
                   "STRATA_OVERLAP_COLLECTIVES"] + command
    printed = subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout
    rate = re.search(r"\(([\d.]+)k tok/s after the first step\)", printed)
    path = trace if processes == 1 else os.path.join(out, "trace.rank0.json")
    with open(path) as f:
        events = json.load(f)
    events = events["traceEvents"] if isinstance(events, dict) else events
    # The steps after the first (which compiles): their wall time on the
    # main thread, and the collective kernels inside them on the partition's.
    steps_after = [e for e in events if e.get("cat") == "train" and e["name"] != "step 1"]
    start = min(e["ts"] for e in steps_after)
    step_us = sum(e["dur"] for e in steps_after)
    collective_us = sum(e["dur"] for e in events if e.get("cat") == "kernel"
                        and e.get("name") in COLLECTIVES and e["ts"] >= start)
    # The started collectives' own time, on the run's collective thread.
    in_flight_us = sum(e["dur"] for e in events if e.get("cat") == "collective"
                       and e["ts"] >= start)
    return {"tokens_per_s": float(rate.group(1)) * 1e3 if rate else float("nan"),
            "step_us": step_us, "collective_us": collective_us, "in_flight_us": in_flight_us}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--batch-per-replica", type=int, default=4)
    parser.add_argument("--overlap", choices=["on", "off", "both"], default="on",
                        help="STRATA_OVERLAP_COLLECTIVES for the runs (both: each "
                        "configuration twice, off then on)")
    parser.add_argument("--processes", default="1,2,4",
                        help="which of the 1-, 2- and 4-process configurations to run")
    args, model = parser.parse_known_args()
    if not model:
        model = ["--hidden", "256", "--num-layers", "4", "--heads", "8", "--kv-heads", "4",
                 "--intermediate", "768", "--seq", "128"]
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    b = args.batch_per_replica
    configurations = [(1, "data=1,model=1", b), (2, "data=2,model=1", 2 * b),
                      (4, "data=2,model=2", 2 * b)]
    print(f"model {' '.join(model)}; {args.steps} steps; {b} sequences per data replica")
    wanted = {int(p) for p in args.processes.split(",")}
    overlaps = {"on": [True], "off": [False], "both": [False, True]}[args.overlap]
    # "waiting" is the partition's time in collective kernels (for a pair:
    # handing off and waiting at the -done); "in flight" the started
    # collectives' time on the collective thread, which the program's
    # kernels run beside.
    print(f"{'processes':>9} {'mesh':>16} {'batch':>5} {'overlap':>7} {'tok/s':>9} "
          f"{'per process':>11} {'step ms':>9} {'waiting ms/step':>15} {'share':>6} "
          f"{'in flight ms/step':>17}")
    for processes, mesh, batch in configurations:
        if processes not in wanted:
            continue
        for overlap in overlaps:
            with tempfile.TemporaryDirectory() as out:
                r = run(args.build, processes, mesh, batch, args.steps, model, out, overlap)
            steps = args.steps - 1
            share = r["collective_us"] / r["step_us"]
            print(f"{processes:>9} {mesh:>16} {batch:>5} {'on' if overlap else 'off':>7} "
                  f"{r['tokens_per_s']:>9.0f} {r['tokens_per_s'] / processes:>11.0f} "
                  f"{r['step_us'] / steps / 1e3:>9.1f} {r['collective_us'] / steps / 1e3:>15.1f} "
                  f"{share:>6.1%} {r['in_flight_us'] / steps / 1e3:>17.1f}")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
