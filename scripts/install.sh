#!/usr/bin/env bash
# Creates .venv in the repository root and installs cxsim with its dev extras.
#
# torch: a torch already in .venv is kept (install your own build first to choose it).
# Otherwise CXSIM_TORCH, if set, is installed as given (for example a CUDA build).
# Otherwise, on a machine without an NVIDIA GPU, the CPU build: from PyTorch's CPU wheel
# index when it answers within 5 s, else from the default index (on machines that reach
# only the package registries, as some CI and sandboxes do, that index serves CPU files
# for Linux; elsewhere it may serve the CUDA build, and this script says so).
# With a GPU, the default index's torch (a CUDA build).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
TORCH_VERSION=2.13.0
CPU_INDEX=https://download.pytorch.org/whl/cpu
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip

reachable() {  # $1: URL; true when it answers within 5 s
  .venv/bin/python - "$1" <<'PYEOF' 2>/dev/null
import sys, urllib.request
urllib.request.urlopen(sys.argv[1], timeout=5)
PYEOF
}

if .venv/bin/python -c "import torch" 2>/dev/null; then
  echo "install: keeping the installed torch $(.venv/bin/python -c 'import torch; print(torch.__version__)')"
elif [ -n "${CXSIM_TORCH:-}" ]; then
  .venv/bin/python -m pip install -q "$CXSIM_TORCH"
elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  echo "install: NVIDIA GPU found; torch==$TORCH_VERSION from the default index (CUDA build)"
  .venv/bin/python -m pip install -q "torch==$TORCH_VERSION"
elif reachable "$CPU_INDEX/torch/"; then
  echo "install: no GPU; torch==$TORCH_VERSION CPU build from $CPU_INDEX"
  .venv/bin/python -m pip install -q "torch==$TORCH_VERSION" --index-url "$CPU_INDEX"
else
  echo "install: no GPU and $CPU_INDEX unreachable; torch==$TORCH_VERSION from the default index"
  .venv/bin/python -m pip install -q "torch==$TORCH_VERSION"
  .venv/bin/python -W ignore -c "import torch, sys; sys.exit(torch.version.cuda is not None)" \
    || echo "install: note: that is a CUDA build; set CXSIM_TORCH to a CPU wheel to save disk"
fi
.venv/bin/python -m pip install -q -e ".[dev]"
