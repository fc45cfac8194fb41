#!/usr/bin/env bash
# Creates (or reuses) the peers' Python environment: JAX / XLA:CPU from PyPI,
# pinned in bench/peers-requirements.txt, in a virtual environment over
# Debian's /usr/bin/python3 at $STRATA_PEERS_VENV (default
# ~/.cache/strata/peers-venv), apart from the test environment of
# scripts/install-python.sh (their NumPy pins differ). Reused while the
# requirements file is unchanged. Prints the interpreter on its last line.
set -euo pipefail
cd "$(dirname "$0")/.."
home=${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}
venv=${STRATA_PEERS_VENV:-$home/.cache/strata/peers-venv}
requirements=bench/peers-requirements.txt
stamp=$venv/.strata-requirements
base=/usr/bin/python3
if [ ! -x "$venv/bin/python" ]; then
  echo "install-peers: creating $venv over $base" >&2
  "$base" -m venv "$venv"
fi
if ! cmp -s "$requirements" "$stamp"; then
  echo "install-peers: installing $requirements into $venv" >&2
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip >&2
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$requirements" >&2
  cp "$requirements" "$stamp"
fi
echo "$venv/bin/python"
