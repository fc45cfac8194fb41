#!/usr/bin/env bash
# The peers the benchmarks compare against (not needed to build or test):
# Debian's PyTorch for bench/run_llama_bench.sh. Idempotent.
set -euo pipefail
bash "$(dirname "$0")/install-deps.sh"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
if ! /usr/bin/python3 -c "import torch" 2>/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends python3-torch
fi
