#!/bin/sh
# run_gpt2_gpu.sh [--build DIR] [--python PY] [--rounds N] [--steps N] [--batch N] [--precision bf16|fp16|fp32]
#                 [--profile FILE]
# Issue 28's GPU target: GPT-2 124M (12 layers, 12 heads, 768 wide, context
# 1024, GPT-2's vocabulary padded to 50304) trained in bf16 on one GPU,
# loom-gpt against the PyTorch twin (torch.autocast, and
# F.scaled_dot_product_attention where the torch build has it), tokens/s,
# both from loom's initial weights, sides alternating round by round
# (bench/gpt/run_gpt_vs_pytorch.sh). The data are random token ids (seeded:
# the GPU machine is offline; tokens/s does not depend on the text), written
# as nanoGPT's uint16 train.bin and read with --tokens. Dropout 0, as
# nanoGPT's GPT-2 runs; the first step of each run is not timed.
# --profile FILE: no comparison; loom-gpt alone, 3 warm-up steps then 3
# profiled ones (Chrome trace to FILE, the per-op table with device time
# printed), to see where a step's time goes.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=build py=${LOOM_PYTHON:-python3} rounds=2 steps=20 batch=8 prec=bf16 profile=
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --python) py=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --precision) prec=$2; shift 2 ;;
    --profile) profile=$2; shift 2 ;;
    *) echo "unknown flag $1" >&2; exit 2 ;;
  esac
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$py" - "$tmp/tokens.bin" <<'PY'
import random, struct, sys
r = random.Random(1337)
n = 4 << 20  # 4 Mi tokens: 90 % train, 10 % validation, both far longer than a window
open(sys.argv[1], "wb").write(struct.pack("<%dH" % n, *(r.randrange(50257) for _ in range(n))))
PY
model="--vocab 50304 --device cuda --precision $prec --layers 12 --heads 12 --embd 768 --block 1024 --batch $batch --dropout 0"
if [ -n "$profile" ]; then
  "$build/examples/loom-gpt" --tokens "$tmp/tokens.bin" $model --steps 7 --eval-batches 1 \
    --profile "$profile" --profile-warmup 3 --profile-steps 3
  exit
fi
sh "$here/run_gpt_vs_pytorch.sh" --build "$build" --python "$py" --rounds "$rounds" --threads 0 -- \
  --tokens "$tmp/tokens.bin" $model --steps "$steps" --eval-batches 1
