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
