#!/usr/bin/env bash
# Installs the dependencies, builds everything (library, tool, tests,
# benchmarks) and runs the whole test suite under CTest; builds and runs a
# downstream project against the installed package (scripts/test-package.sh);
# runs the suite again under the sanitizers (scripts/test-sanitizers.sh:
# AddressSanitizer + UndefinedBehaviorSanitizer for the whole suite,
# ThreadSanitizer for the tests that run threads); then builds the fuzz
# harnesses and runs each for STRATA_FUZZ_SECONDS (default 30) on the corpus
# it has grown so far (scripts/fuzz.sh: a new finding fails the run).
# STRATA_SANITIZERS=0 and STRATA_FUZZ=0 skip those two (a quick run).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build
ctest --test-dir build --output-on-failure -j2 --timeout 600
scripts/test-package.sh
if [ "${STRATA_SANITIZERS:-1}" != 0 ]; then scripts/test-sanitizers.sh; fi
if [ "${STRATA_FUZZ:-1}" != 0 ]; then scripts/fuzz.sh --seconds "${STRATA_FUZZ_SECONDS:-30}"; fi
