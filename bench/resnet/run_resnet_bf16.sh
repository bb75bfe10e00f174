#!/usr/bin/env bash
# run_resnet_bf16.sh — a ResNet-20 training step (3x32x32, batch 128, SGD
# Nesterov, synthetic data, channels-last) on the CPU six ways, side by
# side in one run: loom fp32, loom --precision bf16, loom --precision bf16
# with LOOM_CPU_ISA=avx512 (avx2 on CPUs without AVX-512) (the widening path: what bf16 ran before the
# AVX512_BF16 convolutions, and what a CPU without the instruction runs),
# loom --precision fp16 (widening on every CPU loom has kernels for),
# PyTorch fp32 and PyTorch under torch.autocast("cpu", dtype=torch.bfloat16),
# both channels-last. The sides alternate within each round (ABAB...: the
# machine may be shared, so every side sees the same load) and the summary
# gives medians over the rounds of samples/s and of the per-round ratios.
#
#   bench/resnet/run_resnet_bf16.sh [--build DIR] [--base DIR] [--no-torch] [--rounds N] [--steps N]
#                                   [--warmup N] [--threads T]
#
# --threads: loom's --threads and torch.set_num_threads (default 2).
# --base DIR: also run another build's loom-resnet (sides base_fp32 and
# base_bf16_widening) in the same rounds — the code before a change, under
# the same load; the summary adds new / base ratios. --no-torch: leave the
# PyTorch sides out (the loom sides alone, more rounds in the same time).
# The anchor is Debian's python3-torch (/usr/bin/python3).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="$ROOT/build" BASE="" TORCH=1 ROUNDS=5 STEPS=10 WARMUP=2 BATCH=128 THREADS=2
while (($#)); do
  case "$1" in
    --build) BUILD="$2"; shift 2 ;;
    --base) BASE="$2"; shift 2 ;;
    --no-torch) TORCH=0; shift ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --warmup) WARMUP="$2"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;;
    *) echo "usage: $0 [--build DIR] [--base DIR] [--no-torch] [--rounds N] [--steps N] [--warmup N] [--threads T]" >&2
       exit 2 ;;
  esac
done
PY=/usr/bin/python3
if ((TORCH)); then
  # $LOOM_PYTHON when it imports torch (as run_resnet_vs_pytorch.sh), else Debian's python3-torch.
  if [ -n "${LOOM_PYTHON:-}" ] && "$LOOM_PYTHON" -c "import torch" 2>/dev/null; then PY=$LOOM_PYTHON
  else "$PY" -c "import torch" 2>/dev/null || "$ROOT/scripts/setup.sh" python3-torch; fi
fi
[ -x "$BUILD/examples/loom-resnet" ] || cmake --build "$BUILD" --target loom-resnet -j"$(nproc)"
if ((TORCH)); then
  echo "# anchor: $PY (torch $("$PY" -c 'import torch; print(torch.__version__)')), threads=$THREADS, rounds=$ROUNDS, steps=$STEPS, warmup=$WARMUP"
else
  echo "# no PyTorch sides; threads=$THREADS, rounds=$ROUNDS, steps=$STEPS, warmup=$WARMUP"
fi
[ -z "$BASE" ] || echo "# base: $BASE"
# The widening side's instruction set: AVX-512 without AVX512_BF16, or
# AVX2 on CPUs without AVX-512 (where bf16 always widens).
WIDEN_ISA=avx2
grep -q -w avx512f /proc/cpuinfo && WIDEN_ISA=avx512
echo "# cpu: $(lscpu | sed -n 's/^Model name: *//p'); flags: $(grep -o -w 'avx512f\|avx512_bf16\|amx_bf16\|avx512_fp16' /proc/cpuinfo | sort -u | tr '\n' ' ')"

field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p"; }
loom() { loom_of "$BUILD" "$@"; }
# shellcheck source=../torch_best.sh
. "$ROOT/bench/torch_best.sh"  # PyTorch's sides: the better of libgomp's wait policies
loom_of() {
  local build="$1"
  shift
  "$build/examples/loom-resnet" --model resnet20 --synthetic 3x32x32 --batch "$BATCH" --steps "$STEPS" \
    --warmup "$WARMUP" --shortcut A --device cpu --threads "$THREADS" --format nhwc --quiet "$@" | grep '^result' | tail -1
}
torch_step() {
  torch_best samples_per_s "$PY" "$ROOT/bench/resnet/pytorch_resnet_step.py" --model resnet20 --batch "$BATCH" --steps "$STEPS" \
    --warmup "$WARMUP" --shortcut A --device cpu --threads "$THREADS" --format nhwc "$@" | grep '^bench=' | tail -1
}
sides=(loom_fp32 loom_bf16 loom_bf16_widening loom_fp16)
((TORCH)) && sides+=(torch_fp32 torch_bf16)
[ -n "$BASE" ] && sides+=(base_fp32 base_bf16_widening)
declare -A vals
for ((r = 1; r <= ROUNDS; r++)); do
  for s in "${sides[@]}"; do
    case $s in
      loom_fp32) line=$(loom --precision fp32); key=samples_per_sec ;;
      loom_bf16) line=$(loom --precision bf16); key=samples_per_sec ;;
      loom_bf16_widening) line=$(LOOM_CPU_ISA=$WIDEN_ISA loom --precision bf16); key=samples_per_sec ;;
      loom_fp16) line=$(loom --precision fp16); key=samples_per_sec ;;
      base_fp32) line=$(loom_of "$BASE" --precision fp32); key=samples_per_sec ;;
      base_bf16_widening) line=$(LOOM_CPU_ISA=$WIDEN_ISA loom_of "$BASE" --precision bf16); key=samples_per_sec ;;
      torch_fp32) line=$(torch_step); key=samples_per_s ;;
      torch_bf16) line=$(torch_step --bf16); key=samples_per_s ;;
    esac
    v=$(echo "$line" | field $key)
    [ -n "$v" ] || { echo "bench=resnet_bf16 skipped reason=\"$s did not report $key: $line\""; exit 0; }
    vals[$s]="${vals[$s]:-} $v"
    echo "# round $r $s samples_per_s=$v"
  done
done
median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END{printf "%.3f\n", (NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2}'; }
ratios() { paste <(echo ${vals[$1]} | tr ' ' '\n') <(echo ${vals[$2]} | tr ' ' '\n') | awk '{print $1/$2}' | median; }
out="bench=resnet_bf16 model=resnet20 batch=$BATCH threads=$THREADS rounds=$ROUNDS"
for s in "${sides[@]}"; do out="$out ${s}_samples_per_s=$(echo ${vals[$s]} | median)"; done
out="$out bf16_vs_fp32=$(ratios loom_bf16 loom_fp32) bf16_vs_widening=$(ratios loom_bf16 loom_bf16_widening)"
out="$out widening_vs_fp32=$(ratios loom_bf16_widening loom_fp32) fp16_vs_fp32=$(ratios loom_fp16 loom_fp32)"
((TORCH)) && out="$out bf16_vs_torch_bf16=$(ratios loom_bf16 torch_bf16) fp32_vs_torch_fp32=$(ratios loom_fp32 torch_fp32)"
[ -n "$BASE" ] && out="$out widening_vs_base_widening=$(ratios loom_bf16_widening base_bf16_widening)" &&
  out="$out base_widening_vs_base_fp32=$(ratios base_bf16_widening base_fp32) fp32_vs_base_fp32=$(ratios loom_fp32 base_fp32)"
echo "$out"
