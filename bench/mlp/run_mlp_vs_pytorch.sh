#!/usr/bin/env bash
# run_mlp_vs_pytorch.sh — the MNIST MLP training step (784→1024→1024→10,
# AdamW lr 1e-3, batch 128, f32) in loom and in PyTorch on the same device,
# run alternately in one invocation; prints each side's steps/s and samples/s
# (best of ROUNDS) and loom/pytorch as the ratio.
#
#   bench/mlp/run_mlp_vs_pytorch.sh [--device cpu|cuda] [--build DIR] [--rounds N]
#
# The anchor runs on the first python3 that can import torch: LOOM_PYTHON,
# the python3 on PATH, then /usr/bin/python3 (Debian's python3-torch, installed
# here for --device cpu when missing). On the CPU both sides get OMP_NUM_THREADS
# threads (default: nproc; torch alone would take one ATen thread on 2 cores),
# and the anchor is the better of libgomp's two wait policies in each round
# (bench/torch_best.sh says why).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DEVICE=cpu BUILD="$ROOT/build" ROUNDS=3 STEPS=200 BATCH=128
while (($#)); do
  case "$1" in
    --device) DEVICE="$2"; shift 2 ;;
    --build) BUILD="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --batch) BATCH="$2"; shift 2 ;;
    *) echo "usage: $0 [--device cpu|cuda] [--build DIR] [--rounds N] [--steps N] [--batch N]" >&2; exit 2 ;;
  esac
done
# The anchor's interpreter: the python3 on PATH when it can import torch (the
# GPU node's venv), else Debian's /usr/bin/python3 (python3-torch on the CPU).
pick_python() {
  for p in "${LOOM_PYTHON:-}" "$(command -v python3 || true)" /usr/bin/python3; do
    [ -n "$p" ] && [ -x "$p" ] && "$p" -c "import torch" 2>/dev/null && { echo "$p"; return 0; }
  done
  return 1
}
if ! PY=$(pick_python); then
  if [ "$DEVICE" = cpu ]; then
    "$ROOT/scripts/setup.sh" python3-torch
    PY=/usr/bin/python3
  else
    echo "bench=mlp_vs_pytorch device=$DEVICE skipped reason=\"no python3 that can import torch\""; exit 0
  fi
fi
echo "# anchor: $PY (torch $("$PY" -c 'import torch; print(torch.__version__)'))"
[ -x "$BUILD/bench/bench_mlp_step" ] || cmake --build "$BUILD" --target bench_mlp_step -j"$(nproc)"

# shellcheck source=../torch_best.sh
. "$ROOT/bench/torch_best.sh"
TORCH_RUN=""
if [ "$DEVICE" = cpu ]; then
  export OMP_NUM_THREADS="${OMP_NUM_THREADS:-$(nproc)}"
  TORCH_RUN="torch_best steps_per_s"
fi
field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p"; }
best_loom=0 best_torch=0
for ((r = 1; r <= ROUNDS; r++)); do
  l=$("$BUILD/bench/bench_mlp_step" --device "$DEVICE" --batch "$BATCH" --steps "$STEPS" | grep '^bench=' | tail -1)
  t=$($TORCH_RUN "$PY" "$ROOT/bench/mlp/pytorch_mlp_step.py" --device "$DEVICE" --batch "$BATCH" --steps "$STEPS" | grep '^bench=' | tail -1)
  echo "# round $r: $l"
  echo "# round $r: $t"
  lv=$(echo "$l" | field steps_per_s); tv=$(echo "$t" | field steps_per_s)
  [ -n "$lv" ] && [ -n "$tv" ] || { echo "bench=mlp_vs_pytorch device=$DEVICE skipped reason=\"a side did not report steps_per_s\""; exit 0; }
  best_loom=$(awk -v a="$best_loom" -v b="$lv" 'BEGIN{print (b>a)?b:a}')
  best_torch=$(awk -v a="$best_torch" -v b="$tv" 'BEGIN{print (b>a)?b:a}')
done
awk -v l="$best_loom" -v t="$best_torch" -v d="$DEVICE" -v b="$BATCH" 'BEGIN{
  printf "bench=mlp_vs_pytorch device=%s batch=%d loom_steps_per_s=%.2f torch_steps_per_s=%.2f loom_samples_per_s=%.0f torch_samples_per_s=%.0f ratio=%.2f\n",
         d, b, l, t, l*b, t*b, l/t }'
