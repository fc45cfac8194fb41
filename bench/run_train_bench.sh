#!/usr/bin/env bash
# Training-step throughput and peak memory, strata vs PyTorch eager (issue 7),
# in one run: for 2, 8 and 32 layers of the Llama bench config, strata's full
# step (bench/train_step_bench.cc, apply_layers saving each layer's input,
# then also its matrix products, then only its products without batch dims)
# each in its own process, then the
# peer (bench/train_torch.py, Debian's python3-torch) tuned as the issue asks
# — OPENBLAS_L2_SIZE unset and each OpenBLAS core type of CORETYPES tried in
# the peer's command only (OPENBLAS_CORETYPE unset lets OpenBLAS choose by
# cpuid; a type the CPU cannot run is skipped), OMP_WAIT_POLICY=passive,
# OPENBLAS_NUM_THREADS and torch threads 2, and again 1 — each in its own
# process; the peer refuses to run on Debian's reference BLAS. Then strata's
# mixed-precision step (--dtype bf16: BM_TrainStepBf16, saving carries and
# saving the unbatched products) against the same f32 peer. Prints tokens/s,
# peak RSS and the ratios against the fastest peer.
#
#   bench/run_train_bench.sh                 # needs /usr/bin/python3 with torch
#   LAYERS="2 8" bench/run_train_bench.sh
#   ROUNDS=2 bench/run_train_bench.sh        # repeat everything; each side's best counts
#   CORETYPES="unset Haswell" bench/run_train_bench.sh
#
# The machine is shared: one configuration's speed moves by tens of percent
# between minutes. ROUNDS > 1 runs the whole set again (strata and torch
# alike) and keeps each configuration's best round, torch's included.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/torch_peer.sh
BUILD_DIR=${BUILD_DIR:-build-bench}
LAYERS=${LAYERS:-2 8 32}
ROUNDS=${ROUNDS:-1}
CORETYPES=${CORETYPES:-unset SkylakeX Haswell}
# A build dir of its own is configured without the tests; an existing one
# (BUILD_DIR=build) keeps its configuration.
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF >/dev/null
fi
ninja -C "$BUILD_DIR" train_step_bench >/dev/null
out=$(mktemp -d)
for round in $(seq "$ROUNDS"); do
  for layers in $LAYERS; do
    for mode in 1 2 3; do  # apply_layers saving carries; matrix products; unbatched products
      "$BUILD_DIR/train_step_bench" --benchmark_filter="BM_TrainStep/$layers/$mode/" \
        --benchmark_format=csv 2>/dev/null >"$out/strata$layers-$mode-$round.csv"
    done
    for mode in 1 3; do  # the same in bf16 (modes 11 and 13 below)
      "$BUILD_DIR/train_step_bench" --benchmark_filter="BM_TrainStepBf16/$layers/$mode/" \
        --benchmark_format=csv 2>/dev/null >"$out/strata$layers-1$mode-$round.csv"
    done
    for threads in 2 1; do
      for ct in $CORETYPES; do
        run_torch_peer "$out/torch$layers-$threads-$ct-$round.txt" "$threads" "$ct" \
          /usr/bin/python3 bench/train_torch.py --threads "$threads" --layers "$layers"
      done
    done
  done
done
/usr/bin/python3 - "$out" "$ROUNDS" "$CORETYPES" $LAYERS <<'PY'
import csv, os, sys
out, rounds, coretypes = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()
layers = [int(x) for x in sys.argv[4:]]
tokens = 4 * 256
def strata_round(l, mode, r):
    rows = list(csv.reader(open(os.path.join(out, f"strata{l}-{mode}-{r}.csv"))))
    header = rows[[i for i, r in enumerate(rows) if r and r[0] == "name"][0]]
    rec = dict(zip(header, [r for r in rows if r and r[0].startswith("BM_TrainStep")][0]))
    return tokens / (float(rec["real_time"]) / 1e3), float(rec["peak_rss_mib"])
def strata(l, mode):  # the best round
    return max(strata_round(l, mode, r) for r in range(1, rounds + 1))
def torch_core(l, t, ct, r):
    path = os.path.join(out, f"torch{l}-{t}-{ct}-{r}.txt")
    if not os.path.exists(path):
        return None
    _, _, ms, mib = open(path).read().split()
    return tokens / (float(ms) / 1e3), float(mib)
def torch_round(l, t, r):  # the fastest core type
    runs = [x for x in (torch_core(l, t, ct, r) for ct in coretypes) if x]
    if not runs:
        sys.exit(f"error: torch ran under none of the core types {coretypes}")
    return max(runs)
print(f"{'layers':<7}{'torch 2t':>9}{'torch 1t':>9}{'torch MiB':>10}"
      f"{'carries tok/s':>14}{'MiB':>7}{'speed':>7}{'memory':>8}"
      f"{'dots tok/s':>11}{'MiB':>7}{'speed':>7}{'memory':>8}"
      f"{'no-batch tok/s':>15}{'MiB':>7}{'speed':>7}{'memory':>8}"
      f"{'bf16 carries':>13}{'MiB':>7}{'speed':>7}{'memory':>8}"
      f"{'bf16 no-batch':>14}{'MiB':>7}{'speed':>7}{'memory':>8}")
for l in layers:
    torch = {t: max(torch_round(l, t, r) for r in range(1, rounds + 1)) for t in (2, 1)}
    best = max(torch, key=lambda t: torch[t][0])
    line = f"{l:<7}{torch[2][0]:>9.0f}{torch[1][0]:>9.0f}{torch[best][1]:>10.0f}"
    for mode in (1, 2, 3, 11, 13):
        tps, mib = strata(l, mode)
        line += f"{tps:>14.0f}{mib:>7.0f}{tps / torch[best][0]:>7.2f}{mib / torch[best][1]:>8.2f}"
    print(line)
print("speed = strata tokens/s / the faster torch's; memory = strata peak RSS / that torch's")
print("torch's tokens/s per OpenBLAS core type (2 threads, each round):")
for l in layers:
    for ct in coretypes:
        runs = [torch_core(l, 2, ct, r) for r in range(1, rounds + 1)]
        print(f"  {l} layers, {ct}: " + " ".join(f"{x[0]:.0f}" if x else "-" for x in runs))
if rounds > 1:
    print("every round's tokens/s (torch 2t, torch 1t, carries, dots, no-batch, bf16 carries, "
          "bf16 no-batch):")
    for l in layers:
        for r in range(1, rounds + 1):
            vals = [torch_round(l, t, r)[0] for t in (2, 1)]
            vals += [strata_round(l, m, r)[0] for m in (1, 2, 3, 11, 13)]
            print(f"  {l} layers, round {r}: " + " ".join(f"{v:.0f}" for v in vals))
PY
rm -rf "$out"
