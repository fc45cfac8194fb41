#!/usr/bin/env bash
# Creates (or reuses) the Python environment of strata's PyTorch front end and
# its tests: a virtual environment over Debian's /usr/bin/python3 -- the
# interpreter whose headers (python3-dev) and pybind11 the extension is built
# against -- holding the packages pinned in python/requirements.txt from PyPI.
# It lives at $STRATA_VENV (default ~/.cache/strata/venv) and is reused while
# the requirements file is unchanged; an edited file updates it in place.
# Prints the environment's interpreter on its last line. Idempotent.
# STRATA_VENV and STRATA_REQUIREMENTS make another environment the same way
# (scripts/install-peers.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
home=${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}
venv=${STRATA_VENV:-$home/.cache/strata/venv}
requirements=${STRATA_REQUIREMENTS:-python/requirements.txt}
stamp=$venv/.strata-requirements
# Not pyenv's python3 on PATH: the module must load in the interpreter it was built for.
base=/usr/bin/python3
if [ ! -x "$venv/bin/python" ]; then
  echo "install-python: creating $venv over $base" >&2
  "$base" -m venv "$venv"
fi
if ! cmp -s "$requirements" "$stamp"; then
  echo "install-python: installing $requirements into $venv (PyTorch pulls ~3 GB once)" >&2
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip >&2
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$requirements" >&2
  cp "$requirements" "$stamp"
fi
echo "$venv/bin/python"
