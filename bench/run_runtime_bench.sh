#!/usr/bin/env bash
# Builds the runtime benchmarks (Release) and runs them with repetitions,
# then prints medians and the ratios against the goals in bench/RESULTS.md.
#
#   bench/run_runtime_bench.sh                  # runtime_bench, 5 repetitions
#   bench/run_runtime_bench.sh --libraries      # also gemm_libraries_bench
#   REPETITIONS=3 bench/run_runtime_bench.sh --benchmark_filter=Gemm
#
# Other arguments go to the benchmark binaries. The machine is shared: compare
# ratios from one run, not absolute numbers across runs. The environment is
# passed through as is (OPENBLAS_CORETYPE included).
set -euo pipefail
cd "$(dirname "$0")/.."
# oneDNN (the GEMM peer) threads through OpenMP, whose idle team would spin
# after each of its GEMMs and slow strata's next one in a paired benchmark.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"
BUILD_DIR="${BUILD_DIR:-build-bench}"
REPETITIONS="${REPETITIONS:-5}"
OUT_DIR="${OUT_DIR:-$BUILD_DIR/bench-results}"
libraries=0
args=()
for a in "$@"; do
  if [ "$a" = "--libraries" ]; then libraries=1; else args+=("$a"); fi
done

targets=(runtime_bench)
if [ "$libraries" = 1 ]; then targets+=(gemm_libraries_bench); fi
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C "$BUILD_DIR" -j1 "${targets[@]}"
mkdir -p "$OUT_DIR"

echo "== $(date -u +%Y-%m-%dT%H:%MZ) nproc=$(nproc)" \
  "cpu='$(lscpu | sed -n 's/^Model name: *//p')'" \
  "OPENBLAS_CORETYPE='${OPENBLAS_CORETYPE-<unset>}' load='$(cut -d' ' -f1-3 /proc/loadavg)'"
for t in "${targets[@]}"; do
  # Interleaving the repetitions spreads a neighbour's load over every
  # benchmark. Not for the library comparison: OpenBLAS's idle threads spin
  # on after its runs and would slow whatever ran next.
  interleave=true
  if [ "$t" = gemm_libraries_bench ]; then interleave=false; fi
  "$BUILD_DIR/$t" --benchmark_repetitions="$REPETITIONS" --benchmark_display_aggregates_only=true \
    --benchmark_enable_random_interleaving="$interleave" \
    --benchmark_out="$OUT_DIR/$t.json" --benchmark_out_format=json ${args[@]+"${args[@]}"} \
    >"$OUT_DIR/$t.txt" 2>&1
done

python3 - "$OUT_DIR" "${targets[@]}" <<'EOF'
import json, re, sys

out_dir, targets = sys.argv[1], sys.argv[2:]
medians = {}
for t in targets:
    text = open(f"{out_dir}/{t}.json").read()
    if not text:  # the filter matched none of this binary's benchmarks
        continue
    for b in json.loads(text)["benchmarks"]:
        if b.get("aggregate_name") == "median":
            medians[b["run_name"]] = b

def numbers(name):
    return [int(x) for x in re.findall(r":(\d+)", name)]

def find(prefix):  # ordered by the numeric arguments
    return dict(sorted(((k, v) for k, v in medians.items() if k.startswith(prefix)),
                       key=lambda kv: (kv[0].split("/")[0], numbers(kv[0]))))

def args_of(name):  # "BM_X/M:1024/K:512/real_time" -> "M:1024/K:512"
    return "/".join(p for p in name.split("/")[1:] if ":" in p and not p.startswith("iterations"))

def ok(ratio, goal):
    return "MET" if ratio >= goal else "NOT MET"

strata, dnnl, paired = find("BM_GemmStrata/"), find("BM_GemmDnnl/"), find("BM_GemmPaired/")
if strata:
    print("\nf32 GEMM, GFLOP/s (medians); goal strata >= 0.90 x direct dnnl_sgemm")
    print(f"  {'':24} {'separate benchmarks':>28}   {'paired (alternating calls)':>34}")
    for name, s in strata.items():
        d = dnnl.get(name.replace("BM_GemmStrata", "BM_GemmDnnl"))
        p = paired.get(name.replace("BM_GemmStrata", "BM_GemmPaired"))
        line = f"  {args_of(name):24}"
        if d:
            line += f" strata {s['GFLOPS']:5.1f} dnnl {d['GFLOPS']:5.1f} ratio {s['GFLOPS'] / d['GFLOPS']:.2f}"
        if p:
            line += (f" | strata {p['strata_GFLOPS']:5.1f} dnnl {p['dnnl_GFLOPS']:5.1f}"
                     f" ratio {p['ratio']:.2f} {ok(p['ratio'], 0.90)}")
        print(line)

triads = find("BM_Triad/")
if triads:
    best = max(v["bytes_per_second"] for v in triads.values())
    print("\nElementwise f32[16M], GB/s at 12 bytes/element (medians); goal strata >= 0.60 x triad")
    for name, v in sorted(find("BM_Triad").items()):
        print(f"  {name.split('/real_time')[0]:36} {v['bytes_per_second'] / 1e9:6.2f}")
    print(f"  machine triad bandwidth (faster of 1 and 2 threads): {best / 1e9:.2f}")
    for name, v in find("BM_ElementwiseStrata/").items():
        r = v["bytes_per_second"] / best
        print(f"  {name.split('/real_time')[0]:36} {v['bytes_per_second'] / 1e9:6.2f}  ratio {r:.2f}  {ok(r, 0.60)}")

loops = find("BM_WhileRowUpdateStrata/")
if loops:
    print("\nWhile row update, us per loop iteration (medians): (N-iteration run - 0-iteration run) / N")
    print("  strata: mean of the differences; fastest: difference of the fastest runs")
    print(f"  {'cols/MiB/iters':28} {'strata':>8} {'fastest':>8} {'plain loop':>11} {'0-iter run ms':>14}")
    plain = find("BM_WhileRowUpdateLoop/")
    for name, v in loops.items():
        key = args_of(name)
        p = next((x for n, x in plain.items() if args_of(n) == key), None)
        ptime = f"{p['real_time']:11.3f}" if p else f"{'-':>11}"
        print(f"  {key:28} {v['real_time']:8.3f} {v['fastest_diff_us']:8.3f} {ptime}"
              f" {v['zero_iter_run_ms']:14.2f}")

libs = find("BM_Sgemm")
if libs:
    print("\nGEMM libraries, f32 1024^3, GFLOP/s (medians)")
    for name, v in libs.items():
        print(f"  {name.split('/real_time')[0]:32} {v['GFLOPS']:6.1f}")
print(f"\nfull output: {out_dir}/*.txt, *.json")
EOF
