#!/usr/bin/env bash
# The test suite under the sanitizers, each in a build directory of its own
# at -O1 without the benchmarks:
# - AddressSanitizer + UndefinedBehaviorSanitizer (build-asan/, clang 16,
#   scripts/configure-asan.sh; the fuzz harnesses link against the same
#   build): the whole suite, including the `strata` commands the tool tests
#   run and the MPI jobs; leaks detected, no recovery: any report fails its
#   test;
# - ThreadSanitizer (build-tsan/, g++): the runtime and lazy suites, which
#   hold the tests that run threads (the thread pool, the in-process
#   communicator and collective kernels, concurrent runs of one plan, syncs
#   and compiles from several threads, meshes of in-process devices).
# The Python module is left out (STRATA_PYTHON=OFF): an instrumented
# extension needs the sanitizer runtime preloaded into the interpreter.
# scripts/test.sh runs it after the plain build; run it alone the same way.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/configure-asan.sh
cmake --build build-asan
# Leaks are checked in every process but those an MPI launcher started
# (src/distributed/processes.cc says why).
export ASAN_OPTIONS=detect_leaks=1:detect_stack_use_after_return=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# One random fault run instead of two: each is a whole training job across
# namespace hosts, eight times slower instrumented, and the plain suite has
# just run two (CI's time budget).
export STRATA_FAULT_RUNS=${STRATA_FAULT_RUNS:-1}
ctest --test-dir build-asan --output-on-failure -j2 --timeout 900

cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS_RELEASE=-O1" \
  -DSTRATA_BENCH=OFF -DSTRATA_PYTHON=OFF -DSTRATA_SANITIZE=thread
cmake --build build-tsan --target strata_runtime_tests strata_lazy_tests
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
build-tsan/strata_runtime_tests
build-tsan/strata_lazy_tests
