#!/usr/bin/env bash
# strata vs PyTorch eager on the Llama bench config (issue 6), in one run:
# builds llama_bench (Release), runs strata's forward and forward+backward at
# 2 and 8 layers, then the PyTorch peer (bench/llama_torch.py, Debian's
# python3-torch) tuned as the issue asks — OPENBLAS_L2_SIZE unset and each
# OpenBLAS core type of CORETYPES tried in the peer's command only (unset
# lets OpenBLAS choose by cpuid; a type the CPU cannot run is skipped),
# OMP_WAIT_POLICY=passive, OPENBLAS_NUM_THREADS and torch threads 2, and
# again 1 — and prints the ratios against the best peer (the fastest core
# type and thread count per measurement).
#
#   bench/run_llama_bench.sh            # needs /usr/bin/python3 with torch
#   REPETITIONS=5 bench/run_llama_bench.sh
#   CORETYPES="unset Haswell" bench/run_llama_bench.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/torch_peer.sh
BUILD_DIR=${BUILD_DIR:-build-bench}
REPETITIONS=${REPETITIONS:-3}
CORETYPES=${CORETYPES:-unset SkylakeX Haswell}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF >/dev/null
ninja -C "$BUILD_DIR" llama_bench >/dev/null
out=$(mktemp -d)
"$BUILD_DIR/llama_bench" --benchmark_filter='BM_Forward' --benchmark_repetitions="$REPETITIONS" \
  --benchmark_report_aggregates_only=true --benchmark_format=csv 2>/dev/null >"$out/strata.csv"
for threads in 2 1; do
  for ct in $CORETYPES; do
    run_torch_peer "$out/torch$threads-$ct.txt" "$threads" "$ct" \
      /usr/bin/python3 bench/llama_torch.py --threads "$threads" --repeats "$REPETITIONS"
  done
done
/usr/bin/python3 - "$out" <<'PY'
import csv, sys, os
out = sys.argv[1]
strata = {}
for row in csv.reader(open(os.path.join(out, "strata.csv"))):
    if len(row) > 2 and row[0].endswith("_median"):
        name = row[0].split("/")
        kind = "forward" if name[0] == '"BM_Forward' or name[0] == "BM_Forward" else "forward_backward"
        strata[(kind, int(name[1]))] = float(row[2])
torch = {}  # per measurement and thread count, the fastest core type's ms
for t in (2, 1):
    for name in os.listdir(out):
        if not name.startswith(f"torch{t}-"):
            continue
        for line in open(os.path.join(out, name)):
            kind, layers, ms = line.split()
            slot = torch.setdefault((kind, int(layers)), {})
            slot[t] = min(slot.get(t, float("inf")), float(ms))
print(f"{'measurement':<26}{'strata ms':>10}{'torch 2t':>10}{'torch 1t':>10}{'strata/best':>13}")
for key in sorted(strata):
    best = min(torch[key].values())
    print(f"{key[0] + ' ' + str(key[1]) + ' layers':<26}{strata[key]:>10.1f}"
          f"{torch[key][2]:>10.1f}{torch[key][1]:>10.1f}{strata[key] / best:>13.2f}")
PY
rm -rf "$out"
