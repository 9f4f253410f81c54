#!/usr/bin/env bash
# Run on a machine with registry access: fills .whl/ (ignored by git) with what the GPU
# machine's image lacks, for scripts/gpu_check.sh to install there without a registry.
#
#   bash scripts/gpu_wheels.sh                       # for the GPU image (CPython 3.12)
#   bash scripts/gpu_wheels.sh --python-version 3.11 # for a local rehearsal on Python 3.11
#   bash scripts/gpu_wheels.sh --with-scipy          # also scipy (the image has it; ~35 MB)
#
# Wheels: gymnasium and tyro with their pure-Python dependencies, at the versions the CPU
# suite runs with, plus cxsim itself (`pip wheel --no-deps .`: its package-dir layout, envs/
# installed as cxsim.envs, does not import from a bare PYTHONPATH). cloudpickle and
# typing-extensions are in the image too; gpu_check.sh installs a carried wheel only where
# the image's copy is missing or older.
set -euo pipefail
cd "$(dirname "$0")/.."
PYVER=3.12
WITH_SCIPY=0
while [ $# -gt 0 ]; do
  case "$1" in
    --python-version) PYVER=${2:?--python-version needs a value such as 3.12}; shift 2 ;;
    --with-scipy) WITH_SCIPY=1; shift ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "gpu_wheels.sh: unknown argument '$1' (use --python-version X.Y, --with-scipy)" >&2; exit 2 ;;
  esac
done
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] && PY=${PYTHON:-.venv/bin/python}

PINNED=(
  gymnasium==1.4.0 farama-notifications==0.0.6 cloudpickle==3.1.3
  tyro==1.0.17 docstring-parser==0.18.0 typeguard==4.6.1 typing-extensions==4.16.0
)
[ "$WITH_SCIPY" = 1 ] && PINNED+=(scipy==1.17.1)

rm -rf .whl
mkdir -p .whl
start=$(date +%s)
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version "$PYVER" \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d .whl "${PINNED[@]}"
"$PY" -m pip wheel -q --no-deps -w .whl .
rm -rf build  # setuptools' staging folder
echo "gpu_wheels: $(ls .whl | wc -l) wheels, $(du -sh .whl | cut -f1), in $(( $(date +%s) - start )) s:"
ls -1 .whl
