#!/usr/bin/env bash
# Builds the libFuzzer harnesses (fuzz/) in build-asan/, the clang 16
# AddressSanitizer + UndefinedBehaviorSanitizer build the sanitizer tests
# also run (scripts/configure-asan.sh), and runs them; what they keep
# (seeds, corpus, logs, findings) is under build-asan/fuzz/.
#
#   scripts/fuzz.sh [--seconds S | --runs N] [--workers W] [--jobs J] [harness ...]
#
# Harnesses: hlo_text safetensors llama_config checkpoint (default: all),
# each for S seconds (default 60) or N executions in all, by W processes
# sharing its corpus (default 1); J processes run at a time (default 2).
# Seeds come from the test suite: the HLO fixtures and the programs the lazy
# tests compile (their STRATA_DUMP_DIR dumps, so the regular build in build/
# is built first), and real checkpoints, safetensors files and configs
# written by build-asan/strata_fuzz_seeds (one process and an mpirun job of
# two). Each harness grows its corpus in build-asan/fuzz/corpus/<harness>/.
#
# Any input that crashes, hangs, leaks, runs out of memory or breaks a
# harness's property is copied to tests/fuzz/<harness>/, where the test suite
# replays it; the script then fails. Fix the bug and commit the input.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
seconds=60
runs=""
jobs=2
workers=1
harnesses=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --workers) workers=$2; shift 2 ;;
    -h|--help) sed -n 2,20p "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
    *) harnesses+=("$1"); shift ;;
  esac
done
[ ${#harnesses[@]} -gt 0 ] || harnesses=(hlo_text safetensors llama_config checkpoint)

scripts/install-deps.sh
scripts/configure-asan.sh
cmake --build build-asan --target strata_fuzz_seeds "${harnesses[@]/#/fuzz_}"
work=build-asan/fuzz

# No allocation stacks in reports (a third of the checkpoint harness's time):
# replay a finding through the ASan build's test for them.
export ASAN_OPTIONS=detect_leaks=1:detect_stack_use_after_return=0:malloc_context_size=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader

seeds=$work/seeds
if [ ! -f "$seeds/.complete" ]; then
  echo "== seeds"
  rm -rf "$seeds"
  mkdir -p "$seeds/hlo_text"
  build-asan/strata_fuzz_seeds "$seeds"
  mpirun --oversubscribe --bind-to none -np 2 build-asan/strata_fuzz_seeds "$seeds"
  cp tests/hlo/testdata/*.hlo "$seeds/hlo_text/"
  # The HLO modules written out in the tests' sources (raw strings).
  perl -0777 -ne 'my $i = 0; while (/R"\((HloModule.*?)\)"/sg) {
      open(my $f, ">", "'"$seeds"'/hlo_text/" . ($ARGV =~ s{.*/}{}r) . "." . $i++ . ".hlo");
      print $f $1; }' $(grep -rl 'R"(HloModule' tests)
  # The programs the lazy, autograd, scan and nn tests compile, before and
  # after the optimizing passes (fusions included).
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release > /dev/null
  cmake --build build --target strata_lazy_tests strata_autograd_tests strata_transforms_tests \
    strata_nn_tests
  dumps=$(mktemp -d)
  for t in lazy autograd transforms nn; do
    STRATA_DUMP_DIR=$dumps "build/strata_${t}_tests" > /dev/null 2>&1 || true
  done
  find "$dumps" -name '*.hlo.txt' -size -16k -exec cp {} "$seeds/hlo_text/" \;
  rm -rf "$dumps" "$seeds/scratch"
  touch "$seeds/.complete"
fi
# A run of S seconds starts from at most S x 10 of a harness's seeds: libFuzzer
# runs every seed before it mutates any, and the HLO harness's 2,000 seeds
# (real programs, ~20 ms each under ASan) took a 30-s run's whole time, so
# CI's fresh clone fuzzed nothing. The sample is every n-th seed in order of
# size (small and large programs alike), the hand-written ones always.
seed_dir() {
  local h=$1 cap=$(( seconds * 10 ))
  local count
  count=$(ls "$seeds/$h" | wc -l)
  if [ -n "$runs" ] || [ "$count" -le "$cap" ]; then echo "$seeds/$h"; return; fi
  local sample=$work/seed-sample/$h
  rm -rf "$sample"
  mkdir -p "$sample"
  find "$seeds/$h" -type f ! -name '*.hlo.txt' -exec cp {} "$sample/" \;
  local left=$(( cap - $(ls "$sample" | wc -l) ))
  if [ "$left" -gt 0 ]; then
    local dumps
    dumps=$(find "$seeds/$h" -type f -name '*.hlo.txt' -printf '%s %p\n' | sort -n | cut -d' ' -f2-)
    local total
    total=$(echo "$dumps" | wc -l)
    echo "$dumps" | awk -v every="$(( (total + left - 1) / left ))" 'NR % every == 0' |
      xargs -r cp -t "$sample/"
  fi
  echo "$sample"
}
declare -A seed_dirs
for h in "${harnesses[@]}"; do
  seed_dirs[$h]=$(seed_dir "$h")
  echo "  seeds for $h: $(ls "${seed_dirs[$h]}" | wc -l) (of $(ls "$seeds/$h" | wc -l))"
done

declare -A max_len=([hlo_text]=16384 [safetensors]=262144 [llama_config]=4096 [checkpoint]=1048576)
# The checkpoint harness resumes a trainer per input (~4 ms): entropic
# scheduling's bookkeeping cost it 40 % of its inputs an hour for no more
# coverage, so it runs without.
declare -A extra=([checkpoint]=-entropic=0)
# The checkpoint harness writes each input's files: to memory where there is a tmpfs.
[ -d /dev/shm ] && export TMPDIR=/dev/shm
limit=(-max_total_time="$seconds")
[ -z "$runs" ] || limit=(-runs=$(( (runs + workers - 1) / workers )))
mkdir -p $work/logs
run_one() {
  local h=$1 w=$2
  # A hang is a run of one input past 20 s; memory is capped at 4 GiB.
  "build-asan/fuzz_$h" "${limit[@]}" ${extra[$h]:-} -timeout=20 -rss_limit_mb=4096 \
    -max_len="${max_len[$h]}" -print_final_stats=1 -artifact_prefix="$work/findings/$h/" \
    "$work/corpus/$h" "${seed_dirs[$h]}" > "$work/logs/$h.$w.log" 2>&1
}
failed=0
running=0
for h in "${harnesses[@]}"; do
  mkdir -p "$work/corpus/$h" "$work/findings/$h"
  rm -f $work/logs/"$h".*.log
  for w in $(seq 1 "$workers"); do
    echo "== fuzz_$h, worker $w of $workers (log: $work/logs/$h.$w.log)"
    run_one "$h" "$w" &
    running=$((running + 1))
    if [ "$running" -ge "$jobs" ]; then wait -n || true; running=$((running - 1)); fi
  done
done
wait || true

for h in "${harnesses[@]}"; do
  total=0
  for log in $work/logs/"$h".*.log; do
    executed=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*$' || true)
    if [ -z "$executed" ]; then
      echo "  $log: the fuzzer did not finish"
      failed=1
    fi
    total=$((total + ${executed:-0}))
  done
  echo "fuzz_$h: $total executions, corpus $(ls "$work/corpus/$h" | wc -l) inputs"
  for artifact in "$work/findings/$h"/*; do
    [ -e "$artifact" ] || continue
    mkdir -p "tests/fuzz/$h"
    cp "$artifact" "tests/fuzz/$h/"
    echo "  FINDING: $(basename "$artifact") -> tests/fuzz/$h/ (see $work/logs/$h.*.log)"
    rm "$artifact"
    failed=1
  done
done
exit $failed
