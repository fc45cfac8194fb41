#!/usr/bin/env bash
# Training-step throughput and peak memory, strata vs PyTorch eager (issue 7),
# in one run: for 2, 8 and 32 layers of the Llama bench config, strata's full
# step (bench/train_step_bench.cc, apply_layers) in its own process, then the
# peer (bench/train_torch.py, Debian's python3-torch) tuned as the issue asks
# — OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset in the peer's command only,
# OMP_WAIT_POLICY=passive, OPENBLAS_NUM_THREADS and torch threads 2, and
# again 1 — each in its own process. Prints tokens/s, peak RSS and the ratios
# against the faster peer.
#
#   bench/run_train_bench.sh                 # needs /usr/bin/python3 with torch
#   LAYERS="2 8" bench/run_train_bench.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build-bench}
LAYERS=${LAYERS:-2 8 32}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF >/dev/null
ninja -C "$BUILD_DIR" train_step_bench >/dev/null
out=$(mktemp -d)
for layers in $LAYERS; do
  "$BUILD_DIR/train_step_bench" --benchmark_filter="BM_TrainStep/$layers/1\$" \
    --benchmark_format=csv 2>/dev/null >"$out/strata$layers.csv"
  for threads in 2 1; do
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_WAIT_POLICY=passive \
      OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads \
      /usr/bin/python3 bench/train_torch.py --threads $threads --layers "$layers" \
      >"$out/torch$layers-$threads.txt"
  done
done
/usr/bin/python3 - "$out" $LAYERS <<'PY'
import csv, os, sys
out, layers = sys.argv[1], [int(x) for x in sys.argv[2:]]
tokens = 4 * 256
print(f"{'layers':<8}{'strata tok/s':>13}{'torch 2t':>10}{'torch 1t':>10}{'speed ratio':>13}"
      f"{'strata MiB':>12}{'torch MiB':>11}{'memory ratio':>14}")
for l in layers:
    rows = list(csv.reader(open(os.path.join(out, f"strata{l}.csv"))))
    header = rows[[i for i, r in enumerate(rows) if r and r[0] == "name"][0]]
    row = [r for r in rows if r and r[0].startswith("BM_TrainStep")][0]
    rec = dict(zip(header, row))
    s_ms = float(rec["real_time"])
    s_tps = tokens / (s_ms / 1e3)
    s_mib = float(rec["peak_rss_mib"])
    torch = {}
    for t in (2, 1):
        _, _, ms, mib = open(os.path.join(out, f"torch{l}-{t}.txt")).read().split()
        torch[t] = (float(ms), float(mib))
    best = min(torch, key=lambda t: torch[t][0])
    t_tps = {t: tokens / (torch[t][0] / 1e3) for t in torch}
    print(f"{l:<8}{s_tps:>13.0f}{t_tps[2]:>10.0f}{t_tps[1]:>10.0f}{s_tps / t_tps[best]:>13.2f}"
          f"{s_mib:>12.0f}{torch[best][1]:>11.0f}{s_mib / torch[best][1]:>14.2f}")
print("speed ratio = strata tokens/s / faster torch's; memory ratio = strata peak RSS / that torch's")
PY
rm -rf "$out"
