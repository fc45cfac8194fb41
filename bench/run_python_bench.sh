#!/usr/bin/env bash
# The Python benchmarks of issue 18, each side by side with its peer in one run:
# - per-op cost on tiny tensors: strata tracing from Python against PyTorch
#   eager (bench/python_overhead.py, both in one process);
# - the bench Llama's training step driven from Python
#   (bench/python_train_bench.py) against the same step in C++
#   (train_step_bench BM_TrainStep/<layers>/1/), alternating ROUNDS times,
#   each side's best round counting.
#
#   bench/run_python_bench.sh            # LAYERS="2 8" ROUNDS=3 by default
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build-bench}
LAYERS=${LAYERS:-2 8}
ROUNDS=${ROUNDS:-3}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF >/dev/null
ninja -C "$BUILD_DIR" train_step_bench _strata >/dev/null
export PYTHONPATH=$PWD/$BUILD_DIR/python
echo "== per-op cost (torch: 1 thread)"
/usr/bin/python3 bench/python_overhead.py
echo "== training step: Python-driven against C++ (best of $ROUNDS rounds)"
for layers in $LAYERS; do
  cpp=1e9 py=1e9
  for round in $(seq "$ROUNDS"); do
    ms=$("$BUILD_DIR/train_step_bench" --benchmark_filter="BM_TrainStep/$layers/1/" \
           --benchmark_format=csv 2>/dev/null | awk -F, '/^"BM_TrainStep/ {print $4}')
    cpp=$(/usr/bin/python3 -c "print(min($cpp, $ms))")
    ms=$(/usr/bin/python3 bench/python_train_bench.py --layers "$layers" | awk '{print $1}')
    py=$(/usr/bin/python3 -c "print(min($py, $ms))")
  done
  /usr/bin/python3 -c "
c, p = $cpp, $py
print(f'{$layers} layers: C++ {c:.1f} ms/step ({1024/c*1e3:.0f} tok/s), Python {p:.1f} ms/step ({1024/p*1e3:.0f} tok/s), Python/C++ tokens/s {c/p:.3f}')"
done
