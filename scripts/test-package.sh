#!/usr/bin/env bash
# The installed package as a downstream project sees it: installs build/
# into build/install, then builds examples/downstream against it twice, by
# find_package(strata) and by pkg-config, and runs both programs (each
# compares strata's numbers and gradients with a plain loop and exits 1 on
# a mismatch), then imports the installed Python package from the prefix.
# scripts/test.sh runs it after the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=$PWD/build/install
rm -rf "$prefix" build/example
cmake --install build --prefix "$prefix" > /dev/null
cmake -S examples/downstream -B build/example -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" > /dev/null
cmake --build build/example
build/example/rnn_gradient
PKG_CONFIG_PATH=$prefix/lib/pkgconfig
export PKG_CONFIG_PATH
# shellcheck disable=SC2046  # pkg-config's flags are words
g++ -O2 examples/downstream/main.cc $(pkg-config --cflags --libs strata) -o build/example/rnn_gradient_pc
build/example/rnn_gradient_pc | tail -1
# The installed program, run from outside the source tree: its version, and
# `strata train` with no --corpus finds the corpus installed beside it.
run_dir=$(mktemp -d)
(cd "$run_dir" && "$prefix/bin/strata" --version &&
  "$prefix/bin/strata" train --hidden 16 --num-layers 1 --heads 2 --kv-heads 1 --intermediate 32 \
    --batch 2 --seq 8 --steps 2 --warmup 1 --eval-every 2 --eval-batches 1 --sample-tokens 0 \
    --out "$run_dir/run" --quiet)
rm -rf "$run_dir"
echo "installed program ok"
# The Python package as installed: import it from the prefix (not the build
# tree) and check a gradient against the one worked out by hand.
python_dir=$(find "$prefix" -path '*-packages/strata' -type d | head -1)
[ -n "$python_dir" ] || { echo "test-package: the strata Python package was not installed" >&2; exit 1; }
(cd /tmp && PYTHONPATH=$(dirname "$python_dir") /usr/bin/python3 -c '
import strata
x = strata.tensor([1.0, 2.0, 3.0])
g = strata.grad(lambda v: (v * v).sum())(x)  # 2x
assert strata.__file__.startswith("'"$prefix"'"), strata.__file__
assert g.tolist() == [2.0, 4.0, 6.0], g
print("python package ok")
')
