#!/bin/sh
# check_cuda.sh LOOM_GPT DATA — loom-gpt --device cuda on a tiny model. Until
# every GPT op has a CUDA kernel (lib/ops/cuda), the run must stop cleanly:
# exit status 1 (no signal, no crash) with loom's error naming the op that
# has none ("OP: no kernel for device cuda:0 in this build"), and nothing
# left allocated (session.c's loom_shutdown would say "were still
# allocated"). Once they exist, it must train: a result line on cuda.
# Exit 77 (skipped, saying why) where CUDA is unavailable.
set -u
bin="$1" data="$2"
out=$("$bin" --data "$data" --layers 1 --heads 2 --embd 16 --block 16 --steps 3 --batch 2 --eval-batches 1 \
      --device cuda --quiet 2>&1)
rc=$?
printf '%s\n' "$out"
if printf '%s\n' "$out" | grep -q "CUDA is unavailable"; then
  echo "gpt cuda: skipped: CUDA is unavailable here"
  exit 77
fi
if printf '%s\n' "$out" | grep -q "were still allocated"; then echo "gpt cuda: FAIL: memory left allocated"; exit 1; fi
if [ $rc -eq 0 ]; then
  printf '%s\n' "$out" | grep -q "^result val_loss=.* device=cuda:0 " || { echo "gpt cuda: FAIL: no result line"; exit 1; }
  echo "gpt cuda: trained on the GPU"
  exit 0
fi
op=$(printf '%s\n' "$out" | sed -n 's/^loom-gpt: .*: \([a-z_0-9]*\): no kernel for device cuda:0 in this build$/\1/p' | head -1)
if [ $rc -eq 1 ] && [ -n "$op" ]; then
  echo "gpt cuda: stopped cleanly at the first op without a CUDA kernel: $op"
  exit 0
fi
echo "gpt cuda: FAIL: exit status $rc without a clean 'no kernel' error"
exit 1
