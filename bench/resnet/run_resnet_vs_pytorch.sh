#!/usr/bin/env bash
# run_resnet_vs_pytorch.sh — a whole-model ResNet training step, loom vs
# PyTorch, side by side in one invocation (alternating rounds, best of
# ROUNDS per side): SGD momentum 0.9 Nesterov, weight decay 5e-4 on conv/fc
# weights only, synthetic data (one batch made once).
#
#   CPU (default): ResNet-20, 3x32x32, batch 128, 2 threads, f32:
#     loom NHWC and NCHW vs PyTorch NCHW and channels-last (oneDNN); loom
#     NHWC three times: as it runs (Winograd F(4x4, 3x3) for the 3x3
#     stride-1 convolutions), with LOOM_CONV_WINOGRAD=2 (F(2x2, 3x3):
#     loom_nhwc_f2x2) and with LOOM_CONV_WINOGRAD=0 (the direct kernels:
#     loom_nhwc_direct).
#     --model resnet18|resnet50 (ImageNet-style, 3x224x224 unless --size):
#     the same four cases for torchvision's architectures.
#   GPU (--device cuda): ResNet-50, 3x224x224, batch 256, AMP (fp16 with
#     loss scaling), channels-last, vs PyTorch eager AMP channels-last.
#
#   bench/resnet/run_resnet_vs_pytorch.sh [--device cpu|cuda] [--build DIR] [--rounds N] [--steps N]
#                                  [--batch N] [--threads N] [--model M] [--size CxHxW] [--warmup N]
#
# One line per measurement (# round ...), then one summary line:
#   bench=resnet_vs_pytorch ... loom_best=... torch_best=... ratio=loom/faster-torch
# The CPU anchor is Debian's python3-torch; the GPU anchor $LOOM_PYTHON or the
# python3 on PATH that imports torch with CUDA.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DEVICE=cpu BUILD="$ROOT/build" ROUNDS=3 STEPS="" BATCH="" THREADS=2 MODEL="" SHAPE="" WARMUP=3
while (($#)); do
  case "$1" in
    --device) DEVICE="$2"; shift 2 ;;
    --build) BUILD="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --batch) BATCH="$2"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;;
    --model) MODEL="$2"; shift 2 ;;
    --size) SHAPE="$2"; shift 2 ;;
    --warmup) WARMUP="$2"; shift 2 ;;
    *) echo "usage: $0 [--device cpu|cuda] [--build DIR] [--rounds N] [--steps N] [--batch N] [--threads N]" \
            "[--model resnet20|resnet18|resnet50] [--size CxHxW] [--warmup N]" >&2; exit 2 ;;
  esac
done
if [ "$DEVICE" = cpu ]; then
  # $LOOM_PYTHON when it imports torch (the GPU machine's venv has no
  # Debian package behind it), else Debian's python3-torch.
  PY=/usr/bin/python3
  if [ -n "${LOOM_PYTHON:-}" ] && "$LOOM_PYTHON" -c "import torch" 2>/dev/null; then PY=$LOOM_PYTHON
  else "$PY" -c "import torch" 2>/dev/null || "$ROOT/scripts/setup.sh" python3-torch; fi
  MODEL=${MODEL:-resnet20} BATCH=${BATCH:-128} STEPS=${STEPS:-20}
  case "$MODEL" in
    resnet20|resnet56) SHAPE=${SHAPE:-3x32x32} ;;
    *) SHAPE=${SHAPE:-3x224x224} ;;
  esac
  LOOM_CASES=("--format nhwc" "LOOM_CONV_WINOGRAD=2 --format nhwc" "LOOM_CONV_WINOGRAD=0 --format nhwc" "--format nchw")
  TORCH_CASES=("--format nchw" "--format nhwc")
  LOOM_COMMON="--device cpu --threads $THREADS"
  TORCH_RUN="torch_best samples_per_s"  # the better of libgomp's wait policies (bench/torch_best.sh)
  TORCH_COMMON="--device cpu --threads $THREADS"
else
  TORCH_RUN=""
  PY=""
  for p in ${LOOM_PYTHON:-} python3 /usr/bin/python3; do
    if "$p" -c "import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then PY=$p; break; fi
  done
  [ -n "$PY" ] || { echo "bench=resnet_vs_pytorch device=cuda skipped reason=\"no python3 with CUDA torch\""; exit 0; }
  MODEL=${MODEL:-resnet50} SHAPE=${SHAPE:-3x224x224} BATCH=${BATCH:-256} STEPS=${STEPS:-30}
  LOOM_CASES=("--format nhwc --precision fp16")
  TORCH_CASES=("--format nhwc --amp")
  LOOM_COMMON="--device cuda"
  TORCH_COMMON="--device cuda"
fi
[ -x "$BUILD/examples/loom-resnet" ] || cmake --build "$BUILD" --target loom-resnet -j"$(nproc)"

# shellcheck source=../torch_best.sh
. "$ROOT/bench/torch_best.sh"
field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p"; }
declare -A best
for ((r = 1; r <= ROUNDS; r++)); do
  for c in "${LOOM_CASES[@]}"; do
    # A case may start with environment assignments (VAR=value words).
    envs=() args=""
    for word in $c; do
      if [ -z "$args" ] && [[ "$word" == LOOM_*=* ]]; then envs+=("$word"); else args="$args $word"; fi
    done
    # shellcheck disable=SC2086
    l=$(env "${envs[@]}" "$BUILD/examples/loom-resnet" --model $MODEL --synthetic $SHAPE --batch "$BATCH" --steps "$STEPS" --warmup "$WARMUP" \
        --shortcut A $LOOM_COMMON $args --quiet | grep '^result' | tail -1)
    echo "# round $r loom $c: $l"
    v=$(echo "$l" | field samples_per_sec)
    k="loom $c"; [ -n "$v" ] && best[$k]=$(awk -v a="${best[$k]:-0}" -v b="$v" 'BEGIN{print (b>a)?b:a}')
  done
  for c in "${TORCH_CASES[@]}"; do
    # shellcheck disable=SC2086
    t=$($TORCH_RUN "$PY" "$ROOT/bench/resnet/pytorch_resnet_step.py" --model $MODEL --size $SHAPE --batch "$BATCH" \
        --steps "$STEPS" --warmup "$WARMUP" --shortcut A $TORCH_COMMON $c | grep '^bench=' | tail -1)
    echo "# round $r torch $c: $t"
    v=$(echo "$t" | field samples_per_s)
    k="torch $c"; [ -n "$v" ] && best[$k]=$(awk -v a="${best[$k]:-0}" -v b="$v" 'BEGIN{print (b>a)?b:a}')
  done
done
lb=0 tb=0 line=""
for k in "${!best[@]}"; do
  name=$(echo "$k" | sed 's/LOOM_CONV_WINOGRAD=0 \(.*\)/\1 direct/; s/LOOM_CONV_WINOGRAD=2 \(.*\)/\1 f2x2/' | tr ' ' '_' |
         sed 's/--format_//; s/--precision_//; s/--amp/amp/; s/__*/_/g')
  line="$line ${name}_samples_per_s=${best[$k]}"
  case "$k" in
    loom*) lb=$(awk -v a="$lb" -v b="${best[$k]}" 'BEGIN{print (b>a)?b:a}') ;;
    torch*) tb=$(awk -v a="$tb" -v b="${best[$k]}" 'BEGIN{print (b>a)?b:a}') ;;
  esac
done
awk -v l="$lb" -v t="$tb" -v d="$DEVICE" -v m="$MODEL" -v s="$SHAPE" -v b="$BATCH" -v x="$line" 'BEGIN{
  if (l == 0 || t == 0) { printf "bench=resnet_vs_pytorch device=%s model=%s skipped reason=\"a side did not report\"\n", d, m; exit }
  printf "bench=resnet_vs_pytorch device=%s model=%s input=%s batch=%d%s loom_best=%.1f torch_best=%.1f ratio=%.3f\n", d, m, s, b, x, l, t, l/t }'
