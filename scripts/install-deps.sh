#!/usr/bin/env bash
# Installs every dependency strata needs from Debian's packages. Idempotent.
set -euo pipefail
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
packages=(
  cmake ninja-build g++ pkg-config
  libdnnl-dev          # oneDNN: the benchmarks' GEMM peer, see docs/dependencies.md
  ocl-icd-opencl-dev   # oneDNN's dnnl-config.cmake requires OpenCL (only a Recommends of libdnnl-dev)
  libxxhash-dev        # XXH3-128 hashing
  nlohmann-json3-dev   # safetensors headers, config.json
  libcli11-dev         # the strata command line
  libfmt-dev           # formatting (g++ 12 has no <format>)
  libopenmpi-dev openmpi-bin  # many processes: the MPI communicator, mpirun
  libgtest-dev libgmock-dev libbenchmark-dev
  clang-format
  clang-16 libclang-rt-16-dev  # libFuzzer and the sanitizers' runtimes for scripts/fuzz.sh
  qemu-user            # the tests run the build on emulated CPUs without AVX-512 and without AVX
  iproute2 nftables    # the hosts tests: network namespaces, cut links, a slow and lossy link
  # The Python module (import strata): pybind11 and DLPack's header; its tests
  # run in the PyPI environment of scripts/install-python.sh (PyTorch 2.x). Debian's
  # NumPy, pytest and PyTorch 1.13 (with OpenBLAS beside it: python3-torch is
  # satisfied by the 30x slower reference BLAS otherwise) serve bench/run_*_bench.sh.
  python3-dev pybind11-dev libdlpack-dev python3-numpy python3-pytest
  python3-venv         # scripts/install-python.sh: the pinned PyPI environment over /usr/bin/python3
  python3-torch libopenblas0-pthread
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
