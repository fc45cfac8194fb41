#!/usr/bin/env bash
# Creates (or reuses) the torch_xla peer's Python environment: PyTorch/XLA
# (XLA:CPU through PJRT_DEVICE=CPU) from PyPI, pinned in
# bench/torch-xla-requirements.txt, in a virtual environment over Debian's
# /usr/bin/python3 at $STRATA_TORCH_XLA_VENV (default
# ~/.cache/strata/torch-xla-venv), apart from the test environment (torch_xla
# 2.9.0 needs torch 2.9.0 exactly; the test environment pins 2.9.1). Made the
# way scripts/install-python.sh makes that one, and reused while the
# requirements file is unchanged. Prints the interpreter on its last line.
set -euo pipefail
cd "$(dirname "$0")/.."
home=${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}
STRATA_VENV=${STRATA_TORCH_XLA_VENV:-$home/.cache/strata/torch-xla-venv} \
  STRATA_REQUIREMENTS=bench/torch-xla-requirements.txt exec scripts/install-python.sh
