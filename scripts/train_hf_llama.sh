#!/usr/bin/env bash
# Trains Hugging Face's LlamaForCausalLM on data/corpus.txt through
# torch.compile(backend="strata") (examples/train_hf_llama.py): installs the
# dependencies and the Python environment, builds and installs strata's
# Python package into it, then runs the loop. Extra arguments go to the
# script (--steps N, --backend inductor|eager to compare).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
python=$(scripts/install-python.sh | tail -1)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$python" > /dev/null
cmake --build build --target _strata
"$python" -m pip install -q --no-build-isolation --no-deps --disable-pip-version-check .
cmake -S . -B build -DCMAKE_INSTALL_PREFIX=/usr/local > /dev/null
exec "$python" examples/train_hf_llama.py "$@"
