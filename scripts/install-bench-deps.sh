#!/usr/bin/env bash
# The peers the benchmarks compare against: Debian's PyTorch for
# bench/run_llama_bench.sh, bench/run_train_bench.sh and the Python
# benchmarks, with an optimized BLAS beside it. install-deps.sh installs them
# too (the Python tests use PyTorch as their reference); this script checks
# that torch will load OpenBLAS. Idempotent.
set -euo pipefail
bash "$(dirname "$0")/install-deps.sh"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
# python3-torch only depends on "libblas3 | libblas.so.3", which Debian's
# reference BLAS satisfies at 7 GFLOP/s; OpenBLAS (pthreads build) registers a
# higher-priority libblas.so.3 alternative, so torch loads it instead.
packages=(python3-torch libopenblas0-pthread)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# A hand-set alternative could still point at the reference BLAS: say so.
blas=$(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 || true)
case "$blas" in
  *openblas*) ;;
  *) echo "warning: libblas.so.3 is $blas, not OpenBLAS; torch will be slow" \
          "(update-alternatives --config libblas.so.3-x86_64-linux-gnu)" >&2 ;;
esac
