#!/usr/bin/env bash
# Installs the dependencies, builds everything (library, tool, tests,
# benchmarks) and runs the whole test suite under CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build
ctest --test-dir build --output-on-failure -j2 --timeout 600
