#!/usr/bin/env bash
# The GPU check, in one call on a bare GPU machine that has no registry access:
#   1. installs cxsim and what the image lacks from the wheels in .whl/ (made beforehand, on
#      a machine with registry access, by `bash scripts/gpu_wheels.sh`) into $CXSIM_SITE;
#   2. runs the GPU-marked tests (pytest -m gpu);
#   3. runs the main job from the shipped chat-templated checkpoint on cuda in bf16
#      (`cxsim run --policy pretrained-chat --seeds 100`) and records its learning row: base
#      and final Compacted Pass@1, summary recall, wall time;
#   4. runs `cxsim bench gpu` (a Qwen2.5-0.5B-sized model through SFT and PPO; the tiny
#      preset against the CPU).
# At most 10 minutes in all (the main job at most 4 of them; the tests and the bench are
# stopped at what is left).
#
#   bash scripts/gpu_check.sh              # on the GPU machine
#   bash scripts/gpu_check.sh --cpu-smoke  # without a GPU: the same install and tests, the
#                                          # main job in bf16 on the CPU at a smoke budget,
#                                          # then `cxsim bench gpu --small --device cpu`
#
# Environment: PYTHON (default python3), CXSIM_SITE (default /tmp/cxsim-site), OUT (when set,
# the log gpu_check.log, the main job's folder learning/ and the bench's figures
# bench_gpu.json go there; else runs/gpu_check).
set -uo pipefail
cd "$(dirname "$0")/.."
MODE=gpu
while [ $# -gt 0 ]; do
  case "$1" in
    --cpu-smoke) MODE=cpu-smoke; shift ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "gpu_check.sh: unknown argument '$1' (the only option is --cpu-smoke)" >&2; exit 2 ;;
  esac
done
PY=${PYTHON:-python3}
SITE=${CXSIM_SITE:-/tmp/cxsim-site}
RESULTS=${OUT:-runs/gpu_check}
TOTAL_S=600
LEARNING_S=240
mkdir -p "$RESULTS"
LOG="$RESULTS/gpu_check.log"
exec > >(tee "$LOG") 2>&1
export PYTHONUNBUFFERED=1
BEGAN=$(date +%s)
SUMMARY=()
FAILED=0

section() { echo; echo "=== $1  [$(date -u +%H:%M:%S) UTC, $(( $(date +%s) - BEGAN )) s in]"; }
left() {  # seconds left of TOTAL_S, at least 1 (timeout 0 would mean no limit)
  local l=$(( TOTAL_S - ($(date +%s) - BEGAN) ))
  echo $(( l < 1 ? 1 : l ))
}
record() {  # $1: name, $2: start time, $3: exit status
  local status=ok
  [ "$3" = 0 ] || { status="FAILED (exit $3)"; FAILED=1; }
  [ "$3" = 124 ] && status="STOPPED at the time limit"
  SUMMARY+=("$(printf '%-12s %5d s  %s' "$1" $(( $(date +%s) - $2 )) "$status")")
}

section "1/5 environment ($MODE)"
"$PY" - <<'PYEOF'
import platform, torch
print(f"python {platform.python_version()} ({platform.machine()}), torch {torch.__version__}, "
      f"CUDA build {torch.version.cuda}, CUDA available {torch.cuda.is_available()}")
for i in range(torch.cuda.device_count() if torch.cuda.is_available() else 0):
    p = torch.cuda.get_device_properties(i)
    print(f"  cuda:{i} {p.name}, {p.total_memory / 2**30:.0f} GiB, {p.multi_processor_count} SMs")
PYEOF
command -v nvidia-smi >/dev/null && nvidia-smi -L
if [ "$MODE" = gpu ] && ! "$PY" -c "import torch, sys; sys.exit(not torch.cuda.is_available())"; then
  echo "gpu_check: torch sees no CUDA device here; on a machine without a GPU run: $0 --cpu-smoke"
  exit 1
fi

section "2/5 install from .whl/"
t=$(date +%s)
shopt -s nullglob
cxsim_wheels=(.whl/cxsim-*.whl)
if [ ${#cxsim_wheels[@]} -ne 1 ]; then
  echo "gpu_check: .whl/ must hold exactly one cxsim wheel (found ${#cxsim_wheels[@]}): run" \
       "'bash scripts/gpu_wheels.sh' on a machine with registry access and carry .whl/ along"
  exit 1
fi
# a carried wheel is installed where the image lacks that distribution or has an older one
mapfile -t wanted < <(env -u PYTHONPATH "$PY" - .whl/*.whl <<'PYEOF'
import importlib.metadata as md, re, sys
def key(v):
    try:
        from packaging.version import Version
        return Version(v)
    except ImportError:
        return tuple(int(x) for x in re.findall(r"\d+", v))
for path in sys.argv[1:]:
    name, version = path.rsplit("/", 1)[-1].split("-")[:2]
    try:
        have = md.version(name)
    except md.PackageNotFoundError:
        have = None
    use = name == "cxsim" or have is None or key(have) < key(version)
    print(f"  {name} {version}: " + ("install" if use else f"skip (the image has {have})"),
          file=sys.stderr)
    if use:
        print(path)
PYEOF
)
rm -rf "$SITE"
"$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" \
  "${wanted[@]}"
status=$?
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
if [ $status = 0 ]; then  # -P: the checkout's own cxsim/ folder must not shadow the wheel
  "$PY" -P -c "
import cxsim, cxsim.envs, cxsim.experiments.bench_gpu, gymnasium, tyro, transformers
assert cxsim.__file__.startswith('$SITE'), cxsim.__file__
print(f'cxsim from {cxsim.__file__}; gymnasium {gymnasium.__version__}, tyro {tyro.__version__},'
      f' transformers {transformers.__version__}')" || status=$?
fi
record install "$t" $status
[ $status = 0 ] || { echo "gpu_check: the install failed; nothing else can run"; exit 1; }

section "3/5 GPU-marked tests (pytest -m gpu)"
t=$(date +%s)
timeout $(( $(left) < 200 ? $(left) : 200 )) \
  "$PY" -P -m pytest -q -m gpu -p no:cacheprovider tests
record "gpu tests" "$t" $?

section "4/5 the main job from pretrained-chat (learning)"
t=$(date +%s)
learn=(run --policy pretrained-chat --seeds 100 --precision bf16 --run-dir "$RESULTS/learning"
       --overwrite --no-progress-bar)
if [ "$MODE" = cpu-smoke ]; then  # the smoke budget: a few episodes, two PPO iterations
  learn+=(--device cpu --sft.episodes 16 --sft.heldout-episodes 4 --sft.epochs 1
          --ppo.iterations 2 --ppo.critic-warmup 1 --ppo.rollouts-per-batch 8 --eval.episodes 8)
else
  learn+=(--device cuda)
fi
limit=$(( $(left) < LEARNING_S ? $(left) : LEARNING_S ))
echo "cxsim ${learn[*]}  (stopped after $limit s)"
timeout "$limit" "$PY" -P -m cxsim.cli "${learn[@]}" > "$RESULTS/learning.log" 2>&1
status=$?
tail -n 12 "$RESULTS/learning.log"
LEARNING_ROW=$("$PY" - "$RESULTS/learning/results.json" "$MODE" <<'PYEOF'
import json, sys
from pathlib import Path
path, mode = Path(sys.argv[1]), sys.argv[2]
if not path.is_file():
    print("no results.json (the main job did not finish)")
    sys.exit()
made = json.loads(path.read_text())
rows = {(r["label"], r["protocol"]): r for r in made["table"]}
base = rows[("base (SFT)", "compacted")]
final = next(r for (label, p), r in rows.items() if p == "compacted" and label != "base (SFT)")
cfg = made["config"]
print(f"Compacted Pass@1 {base['pass_at_1']:.3f} -> {final['pass_at_1']:.3f}, summary recall "
      f"{base['summary_recall']:.2f} -> {final['summary_recall']:.2f}, main job "
      f"{made['wall_time_s']:.0f} s ({cfg['device']} {cfg['precision']}, seed "
      f"{cfg['seeds'][0]}, {cfg['ppo']['iterations']} PPO iterations"
      + (", smoke budget)" if mode == "cpu-smoke" else ")"))
PYEOF
)
echo "learning: $LEARNING_ROW"
record learning "$t" $status
SUMMARY[-1]+="  $LEARNING_ROW"

section "5/5 cxsim bench gpu"
t=$(date +%s)
bench=(bench gpu --out "$RESULTS/bench_gpu.json")
[ "$MODE" = cpu-smoke ] && bench+=(--small --device cpu)
limit=$(left)
echo "cxsim ${bench[*]}  (stopped after $limit s)"
timeout "$limit" "$PY" -P -m cxsim.cli "${bench[@]}"
record bench "$t" $?

section "summary ($MODE)"
printf '%s\n' "${SUMMARY[@]}"
echo "total $(( $(date +%s) - BEGAN )) s (limit $TOTAL_S s); log: $LOG; figures:" \
  "$RESULTS/bench_gpu.json, $RESULTS/learning/results.json"
exit $FAILED
