#!/usr/bin/env bash
# Configures build-asan/, the one instrumented build that both runs the test
# suite under AddressSanitizer + UndefinedBehaviorSanitizer
# (scripts/test-sanitizers.sh) and links the libFuzzer harnesses
# (scripts/fuzz.sh): clang 16 (libFuzzer ships with clang, not g++), -O1
# with line tables, no recovery (any report ends the process, so a test
# fails), every target instrumented for the fuzzer's coverage. Without the
# benchmarks and the Python module (an instrumented extension needs the
# sanitizer runtime preloaded into the interpreter).
set -euo pipefail
cd "$(dirname "$0")/.."
# A build-asan/ an older script configured with another compiler is remade.
if [ -f build-asan/CMakeCache.txt ] &&
   ! grep -q '^CMAKE_CXX_COMPILER:.*clang++-16$' build-asan/CMakeCache.txt; then
  rm -rf build-asan
fi
CC=clang-16 CXX=clang++-16 cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Release \
  "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -gline-tables-only" -DSTRATA_BENCH=OFF -DSTRATA_PYTHON=OFF \
  -DSTRATA_SANITIZE=address,undefined -DSTRATA_FUZZ=ON > /dev/null
