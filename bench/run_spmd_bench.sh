#!/usr/bin/env bash
# SPMD benchmarks (bench/spmd_bench.cc) in one run: collective bytes per
# device per training step for each Llama sharding plan against its
# analytical minimum, partition + compile time for 1..64 devices, and a step
# on 2 devices x 1 thread against 1 device x 2 threads. Prints the counters
# that carry the goals; the partitioner's report of every plan's step (each
# collective, the op it serves, its bytes) goes to
# $BUILD_DIR/bench-results/spmd-reports/.
#
#   bench/run_spmd_bench.sh
#   bench/run_spmd_bench.sh --benchmark_filter=BM_BytesPerStep
#   STRATA_DUMP_DIR=/tmp/dump bench/run_spmd_bench.sh --benchmark_filter=BM_BytesPerStep/2/
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build-bench}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF >/dev/null
ninja -C "$BUILD_DIR" spmd_bench >/dev/null
out="$BUILD_DIR/bench-results"
mkdir -p "$out/spmd-reports"
echo "$(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
SPMD_BENCH_REPORT_DIR="$out/spmd-reports" "$BUILD_DIR/spmd_bench" \
  --benchmark_out="$out/spmd_bench.json" --benchmark_out_format=json "$@" >"$out/spmd_bench.txt" \
  2>"$out/spmd_bench.stderr"
echo "$(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
/usr/bin/python3 - "$out/spmd_bench.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))["benchmarks"]
for r in rows:
    name = r["name"].split("/iterations")[0]
    if name.startswith("BM_BytesPerStep"):
        print(f"{name:<24} {r['label'].split(';')[0]:<26} {r['MB']:8.2f} MB  min {r['min_MB']:7.2f}"
              f"  ratio {r['ratio']:.3f} (goal <= 1.05)  loss diff {r['loss_rel_diff']:.1e}")
    elif name.startswith("BM_PartitionCompile"):
        print(f"{name:<24} partition {r['partition_ms']:6.1f} ms  compile {r['compile_ms']:6.1f} ms"
              f"  vs 1 device {r['vs_1_device']:.2f} (goal <= 1.2)  load {r['load1']:.1f}")
    elif name.startswith("BM_TwoDevicesVsOne"):
        print(f"{name:<24} {r['label'].split(';')[0]:<14} 1 dev x 2 t {r['one_dev_2t_tok_s']:7.0f}"
              f" tok/s  2 dev x 1 t {r['two_dev_1t_tok_s']:7.0f}  ratio {r['ratio']:.2f}"
              f" (rounds {r['min_round_ratio']:.2f}-{r['max_round_ratio']:.2f}; goal >= 0.9)"
              f"  load {r['load1']:.1f}")
PY
