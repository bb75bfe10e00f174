#!/usr/bin/env bash
# run_conv_vs_pytorch.sh — the per-layer convolution table of ResNet-20
# (bench_conv) and PyTorch's convolution on the same shapes
# (pytorch_conv.py), run alternately in one invocation, then joined: for
# every layer, format and pass the best time of each side over the rounds
# and loom/pytorch as a ratio; then the whole ResNet-20 step's convolutions
# per format, and loom's faster format against PyTorch's faster one.
#
#   bench/conv/run_conv_vs_pytorch.sh [--device cpu|cuda] [--build DIR] [--rounds N]
#                                [--threads N] [--dataset cifar|fmnist|both]
#                                [--layer SUBSTRING] [--isa avx512|avx2|none]
#
# Output: bench=conv_vs_pytorch ... loom_gflops=... torch_gflops=... ratio=...
# (ratio > 1: loom faster), bench=conv_resnet20_vs_pytorch ... lines, and the
# raw lines of every round as comments.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DEVICE=cpu BUILD="$ROOT/build" ROUNDS=3 THREADS=2 DATASET=both
LAYER=()  # --layer SUBSTRING: only the layers whose name contains it (no whole-step lines then)
ISA=()    # --isa: loom's direct-kernel instruction set (none: the 1x1 and im2col paths)
while (($#)); do
  case "$1" in
    --device) DEVICE="$2"; shift 2 ;;
    --build) BUILD="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;;
    --dataset) DATASET="$2"; shift 2 ;;
    --layer) LAYER=(--layer "$2"); shift 2 ;;
    --isa) ISA=(--isa "$2"); shift 2 ;;
    *) echo "usage: $0 [--device cpu|cuda] [--build DIR] [--rounds N] [--threads N] [--dataset cifar|fmnist|both]" \
            "[--layer SUBSTRING] [--isa avx512|avx2|none]" >&2
       exit 2 ;;
  esac
done
PY=/usr/bin/python3
if [ "$DEVICE" = cpu ] && ! "$PY" -c "import torch" 2>/dev/null; then
  "$ROOT/scripts/setup.sh" python3-torch
fi
[ -x "$BUILD/bench/bench_conv" ] || cmake --build "$BUILD" --target bench_conv -j"$(nproc)"

# shellcheck source=../torch_best.sh
. "$ROOT/bench/torch_best.sh"
TORCH_RUN=""
if [ "$DEVICE" = cpu ]; then TORCH_RUN=torch_both; fi
OUT="$(mktemp)"
trap 'rm -f "$OUT"' EXIT
for ((r = 1; r <= ROUNDS; r++)); do
  "$BUILD/bench/bench_conv" --device "$DEVICE" --threads "$THREADS" --dataset "$DATASET" --paths default --reps 2 "${LAYER[@]}" "${ISA[@]}" |
    sed "s/^/round=$r /" >>"$OUT"
  # On the CPU, PyTorch under both of libgomp's wait policies; the joiner keeps
  # each layer's faster (bench/torch_best.sh says why the default can handicap it).
  $TORCH_RUN "$PY" "$ROOT/bench/conv/pytorch_conv.py" --device "$DEVICE" --threads "$THREADS" --dataset "$DATASET" \
    --reps 2 "${LAYER[@]}" | sed "s/^/round=$r /" >>"$OUT"
done
sed 's/^/# /' "$OUT"

"$PY" - "$OUT" <<'EOF'
import re, sys
rows = {}
steps = {}
peak = 0.0
for line in open(sys.argv[1]):
    kv = dict(re.findall(r"(\w+)=(\S+)", line))
    if kv.get("bench") == "gemm_peak":
        peak = max(peak, float(kv["gflops"]))
    elif kv.get("bench") == "conv" and "ms" in kv:
        key = (kv["device"], kv["dataset"], kv["layer"], kv["shape"], kv["fmt"], kv["pass"])
        side = "torch" if kv["path"] == "pytorch" else "loom"
        r = rows.setdefault(key, {})
        if side not in r or float(kv["ms"]) < float(r[side]["ms"]):
            r[side] = kv
    elif kv.get("bench") == "conv_resnet20":
        key = (kv["device"], kv["dataset"], kv["fmt"])
        side = "torch" if kv["path"] == "pytorch" else "loom"
        s = steps.setdefault(key, {})
        s[side] = min(s.get(side, 1e30), float(kv["step_conv_ms"]))
for (dev, ds, layer, shape, fmt, p), r in rows.items():
    if "loom" not in r or "torch" not in r:
        continue
    lg, tg = float(r["loom"]["gflops"]), float(r["torch"]["gflops"])
    extra = f" loom_of_gemm_peak={lg / peak:.2f}" if peak else ""
    print(f"bench=conv_vs_pytorch device={dev} dataset={ds} layer={layer} shape={shape} fmt={fmt} pass={p} "
          f"loom_gflops={lg:.1f} torch_gflops={tg:.1f} ratio={lg / tg:.2f}{extra}")
best = {}
for (dev, ds, fmt), s in steps.items():
    if "loom" in s and "torch" in s:
        print(f"bench=conv_resnet20_vs_pytorch device={dev} dataset={ds} fmt={fmt} loom_step_conv_ms={s['loom']:.2f} "
              f"torch_step_conv_ms={s['torch']:.2f} ratio={s['torch'] / s['loom']:.2f}")
        b = best.setdefault((dev, ds), {})
        for side in ("loom", "torch"):
            if side not in b or s[side] < b[side][0]:
                b[side] = (s[side], fmt)
for (dev, ds), b in best.items():
    print(f"bench=conv_resnet20_vs_pytorch device={dev} dataset={ds} fmt=best loom_step_conv_ms={b['loom'][0]:.2f} "
          f"loom_fmt={b['loom'][1]} torch_step_conv_ms={b['torch'][0]:.2f} torch_fmt={b['torch'][1]} "
          f"ratio={b['torch'][0] / b['loom'][0]:.2f}")
if peak:
    print(f"bench=gemm_peak device=cpu gflops={peak:.1f}")
EOF
