#!/usr/bin/env bash
# Installs the dependencies (Debian's packages, and the pinned Python
# environment of python/requirements.txt), builds everything (library, tool, tests,
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
# The Python module is built for, and its tests run in, the project's
# virtual environment (PyTorch 2.x, transformers: scripts/install-python.sh).
python=$(scripts/install-python.sh | tail -1)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$python"
cmake --build build
# strata's Python package into that environment (pip install . through
# scikit-build-core, reusing build/: an install, not a second build), with the
# entry point that makes torch.compile(..., backend="strata") find it. The
# wheel build points build/'s install prefix at a temporary directory: put
# the default back for a later `cmake --install build`.
"$python" -m pip install -q --no-build-isolation --no-deps --disable-pip-version-check .
cmake -S . -B build -DCMAKE_INSTALL_PREFIX=/usr/local > /dev/null
ctest --test-dir build --output-on-failure -j2 --timeout 600
scripts/test-package.sh
if [ "${STRATA_SANITIZERS:-1}" != 0 ]; then scripts/test-sanitizers.sh; fi
if [ "${STRATA_FUZZ:-1}" != 0 ]; then scripts/fuzz.sh --seconds "${STRATA_FUZZ_SECONDS:-30}"; fi
