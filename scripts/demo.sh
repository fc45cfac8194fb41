#!/usr/bin/env bash
# Installs the dependencies, builds the strata tool and runs the main job:
# `strata train` on the corpus shipped in data/ (a few minutes on 2 cores).
# Extra arguments go to `strata train` (for example --steps 100, or --resume).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build --target strata
./build/strata train "$@"
