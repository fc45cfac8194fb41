#!/usr/bin/env bash
# Data-parallel scaling across processes: `strata train` as 2 MPI processes
# x 1 thread against 1 process x 2 threads, the same model and global batch,
# alternating which runs first, ROUNDS times. Prints each run's tokens/s
# (the summary's, after the first step) and the ratio. Then strata's
# collectives against Open MPI's own calls (bench/run_collectives_bench.sh).
#
#   bench/run_mpi_bench.sh                 # the default model
#   ROUNDS=5 bench/run_mpi_bench.sh --hidden 256 --num-layers 4
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build-bench}
ROUNDS=${ROUNDS:-3}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF >/dev/null
ninja -C "$BUILD_DIR" strata mpi_collectives_bench >/dev/null
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
args=(train --corpus data/corpus.txt --steps "${STEPS:-60}" --eval-every 0 --sample-tokens 0 "$@")
rate() { sed -n 's/.*(\([0-9.]*\)k tok\/s after the first step).*/\1/p' "$1"; }
one() { "$BUILD_DIR/strata" "${args[@]}" --out "$out/one" >"$out/one.txt"; }
two() { mpirun --oversubscribe --bind-to none -np 2 "$BUILD_DIR/strata" "${args[@]}" --out "$out/two" >"$out/two.txt"; }
echo "$(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg) args: ${args[*]}"
for ((r = 1; r <= ROUNDS; r++)); do
  if ((r % 2)); then one; two; else two; one; fi
  a=$(rate "$out/one.txt"); b=$(rate "$out/two.txt")
  echo "round $r: 1 process x 2 threads ${a}k tok/s, 2 processes x 1 thread ${b}k tok/s, ratio $(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.2f", b / a }')"
done
echo "$(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
if [ -z "${SKIP_COLLECTIVES:-}" ]; then
  BUILD_DIR="$BUILD_DIR" bench/run_collectives_bench.sh
fi
