#!/usr/bin/env bash
# run_mlp_bf16.sh — the MNIST MLP training step (784→1024→1024→10, AdamW,
# batch 128) on the CPU six ways, side by side in one run: loom fp32, loom
# --precision bf16, loom --precision bf16 with LOOM_CPU_ISA=avx512 (avx2 on
# CPUs without AVX-512) (the
# widening path, what a CPU without AVX512_BF16 runs), loom --precision fp16,
# PyTorch fp32 and PyTorch under torch.autocast("cpu", dtype=torch.bfloat16). The sides alternate within each
# round (ABAB...: the machine may be shared, so every side sees the same load)
# and the summary gives medians over the rounds: steps/s, samples/s, and the
# median of the per-round ratios loom bf16 / loom fp32, loom fp16 / loom fp32,
# loom bf16 / torch autocast bf16 and loom fp32 / torch fp32.
#
#   bench/mlp/run_mlp_bf16.sh [--build DIR] [--base DIR] [--no-torch] [--rounds N] [--steps N] [--threads T]
#
# --threads sets OMP_NUM_THREADS for both sides (default: nproc).
# --base DIR: also run another build's bench_mlp_step (fp32, bf16, fp16: sides
# base_fp32, base_bf16, base_bf16_widening, base_fp16) in the same rounds —
# the code before a change, measured under the same load; the summary adds
# new / base ratios. --no-torch: leave the PyTorch sides out.
# Each side also reports its CPU time per step (all threads, user + system):
# at --threads 1 on an oversubscribed machine the wall clock mostly measures
# the wait for the core, the CPU time what the step costs; the summary gives
# its medians (*_cpu_ms) and the ratios of their inverses (*_cpu).
# The anchor is the first python3 that imports torch (as run_mlp_vs_pytorch.sh),
# with as many OpenMP threads as loom, each side the better of libgomp's two
# wait policies (bench/torch_best.sh says why); the round lines name the one.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="$ROOT/build" BASE="" TORCH=1 ROUNDS=5 STEPS=100 BATCH=128 THREADS=""
while (($#)); do
  case "$1" in
    --build) BUILD="$2"; shift 2 ;;
    --base) BASE="$2"; shift 2 ;;
    --no-torch) TORCH=0; shift ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;;
    *) echo "usage: $0 [--build DIR] [--base DIR] [--no-torch] [--rounds N] [--steps N] [--threads T]" >&2; exit 2 ;;
  esac
done
pick_python() {
  for p in "${LOOM_PYTHON:-}" "$(command -v python3 || true)" /usr/bin/python3; do
    [ -n "$p" ] && [ -x "$p" ] && "$p" -c "import torch" 2>/dev/null && { echo "$p"; return 0; }
  done
  return 1
}
if ((!TORCH)); then
  PY=none
elif ! PY=$(pick_python); then
  "$ROOT/scripts/setup.sh" python3-torch
  PY=/usr/bin/python3
fi
export OMP_NUM_THREADS="${THREADS:-$(nproc)}"  # torch would take 1 ATen thread on 2 cores
# shellcheck source=../torch_best.sh
. "$ROOT/bench/torch_best.sh"
[ -x "$BUILD/bench/bench_mlp_step" ] || cmake --build "$BUILD" --target bench_mlp_step -j"$(nproc)"
if ((TORCH)); then
  echo "# anchor: $PY (torch $("$PY" -c 'import torch; print(torch.__version__)')), threads=$OMP_NUM_THREADS, rounds=$ROUNDS, steps=$STEPS"
else
  echo "# no PyTorch sides; threads=$OMP_NUM_THREADS, rounds=$ROUNDS, steps=$STEPS"
fi
WIDEN_ISA=avx2
grep -q -w avx512f /proc/cpuinfo && WIDEN_ISA=avx512
echo "# cpu: $(lscpu | sed -n 's/^Model name: *//p'); bf16 flags: $(grep -o 'avx512_bf16\|amx_bf16\|avx512_fp16' /proc/cpuinfo | sort -u | tr '\n' ' ')"

field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p"; }
sides=(loom_fp32 loom_bf16 loom_bf16_widening loom_fp16)
((TORCH)) && sides+=(torch_fp32 torch_bf16)
[ -n "$BASE" ] && sides+=(base_fp32 base_bf16 base_bf16_widening base_fp16)
declare -A vals cpu
for ((r = 1; r <= ROUNDS; r++)); do
  for s in "${sides[@]}"; do
    case $s in
      loom_fp32) line=$("$BUILD/bench/bench_mlp_step" --device cpu --batch "$BATCH" --steps "$STEPS" --precision fp32 | grep '^bench=') ;;
      loom_bf16|loom_fp16) line=$("$BUILD/bench/bench_mlp_step" --device cpu --batch "$BATCH" --steps "$STEPS" --precision "${s#loom_}" | grep '^bench=') ;;
      loom_bf16_widening) line=$(LOOM_CPU_ISA=$WIDEN_ISA "$BUILD/bench/bench_mlp_step" --device cpu --batch "$BATCH" --steps "$STEPS" --precision bf16 | grep '^bench=') ;;
      base_bf16_widening) line=$(LOOM_CPU_ISA=$WIDEN_ISA "$BASE/bench/bench_mlp_step" --device cpu --batch "$BATCH" --steps "$STEPS" --precision bf16 | grep '^bench=') ;;
      base_*) line=$("$BASE/bench/bench_mlp_step" --device cpu --batch "$BATCH" --steps "$STEPS" --precision "${s#base_}" | grep '^bench=') ;;
      torch_*) line=$(torch_best steps_per_s "$PY" "$ROOT/bench/mlp/pytorch_mlp_step.py" --device cpu --batch "$BATCH" --steps "$STEPS" --precision "${s#torch_}" | grep '^bench=') ;;
    esac
    v=$(echo "$line" | field steps_per_s)
    [ -n "$v" ] || { echo "bench=mlp_bf16 skipped reason=\"$s did not report steps_per_s: $line\""; exit 0; }
    c=$(echo "$line" | field cpu_ms_per_step)
    vals[$s]="${vals[$s]:-} $v"
    [ -n "$c" ] && cpu[$s]="${cpu[$s]:-} $(awk -v c="$c" 'BEGIN{print 1000/c}')"  # steps per CPU second
    echo "# round $r $s steps_per_s=$v cpu_ms_per_step=${c:-?}$(echo "$line" | grep -o ' omp_wait_policy=[a-z]*')"
  done
done
median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END{print (NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2}'; }
ratios() { paste <(echo ${vals[$1]} | tr ' ' '\n') <(echo ${vals[$2]} | tr ' ' '\n') | awk '{print $1/$2}' | median; }
cratios() { paste <(echo ${cpu[$1]:-0} | tr ' ' '\n') <(echo ${cpu[$2]:-1} | tr ' ' '\n') | awk '{print $1/$2}' | median; }
out="bench=mlp_bf16 batch=$BATCH threads=$OMP_NUM_THREADS"
for s in "${sides[@]}"; do
  m=$(echo ${vals[$s]} | median)
  out="$out ${s}_samples_per_s=$(awk -v m="$m" -v b="$BATCH" 'BEGIN{printf "%.0f", m*b}')"
done
out="$out bf16_vs_fp32=$(ratios loom_bf16 loom_fp32) fp16_vs_fp32=$(ratios loom_fp16 loom_fp32) bf16_widening_vs_fp32=$(ratios loom_bf16_widening loom_fp32)"
((TORCH)) && out="$out bf16_vs_torch_bf16=$(ratios loom_bf16 torch_bf16) fp32_vs_torch_fp32=$(ratios loom_fp32 torch_fp32)"
[ -n "$BASE" ] && out="$out fp32_vs_base=$(ratios loom_fp32 base_fp32) bf16_vs_base=$(ratios loom_bf16 base_bf16) fp16_vs_base=$(ratios loom_fp16 base_fp16) base_fp16_vs_base_fp32=$(ratios base_fp16 base_fp32) base_bf16_widening_vs_base_fp32=$(ratios base_bf16_widening base_fp32)"
echo "$out"
out="bench=mlp_bf16_cpu_time batch=$BATCH threads=$OMP_NUM_THREADS"
for s in "${sides[@]}"; do
  m=$(echo ${cpu[$s]:-0} | median)
  out="$out ${s}_cpu_ms=$(awk -v m="$m" 'BEGIN{printf "%.2f", m ? 1000/m : 0}')"
done
out="$out bf16_vs_fp32_cpu=$(cratios loom_bf16 loom_fp32) fp16_vs_fp32_cpu=$(cratios loom_fp16 loom_fp32) bf16_widening_vs_fp32_cpu=$(cratios loom_bf16_widening loom_fp32)"
((TORCH)) && out="$out bf16_vs_torch_bf16_cpu=$(cratios loom_bf16 torch_bf16) fp32_vs_torch_fp32_cpu=$(cratios loom_fp32 torch_fp32)"
[ -n "$BASE" ] && out="$out fp32_vs_base_cpu=$(cratios loom_fp32 base_fp32) bf16_vs_base_cpu=$(cratios loom_bf16 base_bf16) fp16_vs_base_cpu=$(cratios loom_fp16 base_fp16) base_fp16_vs_base_fp32_cpu=$(cratios base_fp16 base_fp32)"
echo "$out"
