#!/usr/bin/env bash
# The GPU check (see check.py): on a machine with an NVIDIA GPU and rlsweep installed with a CUDA
# torch, e.g. `make install TORCH="torch==2.13.0+cu126"`, then `tests/gpu/check.sh`. ~5 minutes.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY="${PY:-.venv/bin/python}"
[ -x "$PY" ] || PY=python3
exec timeout 480 "$PY" tests/gpu/check.py "$@"
