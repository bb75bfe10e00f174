#!/usr/bin/env bash
# run_resnet_cpu_time.sh — the CPU time (perf's task-clock: both threads,
# user + system) of a ResNet-20 training run (3x32x32, batch 128, synthetic,
# channels-last) per precision, for a machine too loaded for wall-clock
# ratios: loom fp32, loom --precision bf16 with LOOM_CPU_ISA=avx512 (the
# widening path), loom --precision fp16, and with --base another build's
# fp32 and bf16 widening. OMP_WAIT_POLICY=passive, so threads waiting at a
# barrier sleep instead of spinning (spinning would bill the other jobs'
# load to the side). Sides alternate within each round (ABAB...); the
# summary gives medians of the per-round ratios fp32 CPU time / side's CPU
# time (a speed ratio, as the wall-clock scripts report). Each run's time
# includes start-up and the warm-up steps.
#
#   bench/resnet/run_resnet_cpu_time.sh [--build DIR] [--base DIR] [--rounds N] [--steps N] [--warmup N]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="$ROOT/build" BASE="" ROUNDS=5 STEPS=8 WARMUP=2
while (($#)); do
  case "$1" in
    --build) BUILD="$2"; shift 2 ;;
    --base) BASE="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --warmup) WARMUP="$2"; shift 2 ;;
    *) echo "usage: $0 [--build DIR] [--base DIR] [--rounds N] [--steps N] [--warmup N]" >&2; exit 2 ;;
  esac
done
command -v perf >/dev/null || { echo "bench=resnet_cpu_time skipped reason=\"no perf\""; exit 0; }
export OMP_WAIT_POLICY=passive
echo "# cpu: $(lscpu | sed -n 's/^Model name: *//p'); rounds=$ROUNDS steps=$STEPS warmup=$WARMUP threads=2; load: $(cut -d' ' -f1-3 /proc/loadavg)"
args=(--model resnet20 --synthetic 3x32x32 --batch 128 --steps "$STEPS" --warmup "$WARMUP" --shortcut A --device cpu
      --threads 2 --format nhwc --quiet)
# task-clock in ms of one run of build $1 with precision $2 (and LOOM_CPU_ISA=$3 unless empty).
tc() {
  local isa=()
  [ -n "$3" ] && isa=(env LOOM_CPU_ISA="$3")
  "${isa[@]}" perf stat -x, -e task-clock "$1/examples/loom-resnet" "${args[@]}" --precision "$2" 2>&1 >/dev/null |
    awk -F, '/task-clock/{printf "%.0f", $1}'
}
sides=(fp32 bf16_widening fp16)
[ -n "$BASE" ] && sides+=(base_fp32 base_bf16_widening)
declare -A vals
for ((r = 1; r <= ROUNDS; r++)); do
  line="# round $r task_clock_ms"
  for s in "${sides[@]}"; do
    case $s in
      fp32) v=$(tc "$BUILD" fp32 "") ;;
      bf16_widening) v=$(tc "$BUILD" bf16 avx512) ;;
      fp16) v=$(tc "$BUILD" fp16 "") ;;
      base_fp32) v=$(tc "$BASE" fp32 "") ;;
      base_bf16_widening) v=$(tc "$BASE" bf16 avx512) ;;
    esac
    [ -n "$v" ] || { echo "bench=resnet_cpu_time skipped reason=\"$s: no task-clock\""; exit 0; }
    vals[$s]="${vals[$s]:-} $v"
    line="$line $s=$v"
  done
  echo "$line"
done
median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END{printf "%.3f\n", (NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2}'; }
# speed ratio side / reference = reference CPU time / side CPU time, per round
speed() { paste <(echo ${vals[$2]} | tr ' ' '\n') <(echo ${vals[$1]} | tr ' ' '\n') | awk '{print $1/$2}' | median; }
out="bench=resnet_cpu_time model=resnet20 batch=128 threads=2 rounds=$ROUNDS"
for s in "${sides[@]}"; do out="$out ${s}_ms=$(echo ${vals[$s]} | median)"; done
out="$out bf16_widening_vs_fp32=$(speed bf16_widening fp32) fp16_vs_fp32=$(speed fp16 fp32)"
[ -n "$BASE" ] && out="$out base_bf16_widening_vs_base_fp32=$(speed base_bf16_widening base_fp32) bf16_widening_vs_base_bf16_widening=$(speed bf16_widening base_bf16_widening)"
echo "$out"
