#!/usr/bin/env bash
# run_op_overhead.sh — host overhead per op (1-element add, without and with
# grad recording), loom (bench_op_overhead) against PyTorch eager
# (pytorch_op_overhead.py) on the same device, alternating in one run, best
# of ROUNDS per side. Prints each side's lines, then per grad mode
#   bench=op_overhead_vs_pytorch device=D grad=G loom_host_us=.. torch_host_us=.. ratio=..
# (ratio = loom / torch on host µs per op; the issue's CUDA target is <= 0.33).
#
#   bench/op_overhead/run_op_overhead.sh [--device cpu|cuda] [--build DIR] [--rounds N] [--iters N]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DEVICE=cpu BUILD="$ROOT/build" ROUNDS=3 ITERS=200000
while (($#)); do
  case "$1" in
    --device) DEVICE="$2"; shift 2 ;;
    --build) BUILD="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --iters) ITERS="$2"; shift 2 ;;
    *) echo "usage: $0 [--device cpu|cuda] [--build DIR] [--rounds N] [--iters N]" >&2; exit 2 ;;
  esac
done
pick_python() {
  for p in "${LOOM_PYTHON:-}" "$(command -v python3 || true)" /usr/bin/python3; do
    [ -n "$p" ] && [ -x "$p" ] && "$p" -c "import torch" 2>/dev/null && { echo "$p"; return 0; }
  done
  return 1
}
PY=$(pick_python) || { echo "bench=op_overhead_vs_pytorch device=$DEVICE skipped reason=\"no python3 that can import torch\""; exit 0; }
[ -x "$BUILD/bench/bench_op_overhead" ] || cmake --build "$BUILD" --target bench_op_overhead -j"$(nproc)"
field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p"; }
declare -A best_l best_t
for ((r = 1; r <= ROUNDS; r++)); do
  l=$("$BUILD/bench/bench_op_overhead" --device "$DEVICE" --iters "$ITERS" --reps 1)
  t=$("$PY" "$ROOT/bench/op_overhead/pytorch_op_overhead.py" --device "$DEVICE" --iters "$ITERS" --reps 1)
  echo "$l" | sed "s/^/# round $r: /"
  echo "$t" | sed "s/^/# round $r: /"
  if echo "$l$t" | grep -q skipped; then echo "bench=op_overhead_vs_pytorch device=$DEVICE skipped reason=\"a side skipped\""; exit 0; fi
  for g in 0 1; do
    lv=$(echo "$l" | grep "grad=$g " | field host_us_per_op); tv=$(echo "$t" | grep "grad=$g " | field host_us_per_op)
    best_l[$g]=$(awk -v a="${best_l[$g]:-1e30}" -v b="$lv" 'BEGIN{print (b<a)?b:a}')
    best_t[$g]=$(awk -v a="${best_t[$g]:-1e30}" -v b="$tv" 'BEGIN{print (b<a)?b:a}')
  done
done
for g in 0 1; do
  awk -v l="${best_l[$g]}" -v t="${best_t[$g]}" -v d="$DEVICE" -v g="$g" 'BEGIN{
    printf "bench=op_overhead_vs_pytorch device=%s grad=%s loom_host_us=%.3f torch_host_us=%.3f ratio=%.2f\n", d, g, l, t, l/t }'
done
