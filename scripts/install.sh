#!/usr/bin/env bash
# Creates .venv in the repository root and installs cxsim with its dev extras.
# On a CPU-only machine torch is pinned to a CPU build first, so that the
# unpinned dependency never pulls a multi-GB CUDA build. Set CXSIM_TORCH to
# another requirement (for example a CUDA build you want) to override.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  .venv/bin/python -m pip install -q "${CXSIM_TORCH:-torch==2.13.0}"
fi
.venv/bin/python -m pip install -q -e ".[dev]"
