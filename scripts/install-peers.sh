#!/usr/bin/env bash
# Creates (or reuses) the peers' Python environment: JAX / XLA:CPU from PyPI,
# pinned in bench/peers-requirements.txt, in a virtual environment over
# Debian's /usr/bin/python3 at $STRATA_PEERS_VENV (default
# ~/.cache/strata/peers-venv), apart from the test environment (their NumPy
# pins differ). Made the way scripts/install-python.sh makes that one, and
# reused while the requirements file is unchanged. Prints the interpreter on
# its last line.
set -euo pipefail
cd "$(dirname "$0")/.."
home=${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}
STRATA_VENV=${STRATA_PEERS_VENV:-$home/.cache/strata/peers-venv} \
  STRATA_REQUIREMENTS=bench/peers-requirements.txt exec scripts/install-python.sh
