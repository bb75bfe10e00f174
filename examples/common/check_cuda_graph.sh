#!/bin/sh
# check_cuda_graph.sh TRAINER FLAGS... — a trainer's --cuda-graph end to end
# on the CPU: the training step (fp32, and fp16 with the dynamic loss scaler)
# is captured once to check that it is capture-safe, the loader writes every
# batch into the static input buffers, the optimizer follows the attached LR
# schedule, and the run must end byte-identical (checkpoint: parameters,
# optimizer state, scaler, loader position, step) to the same run without
# the flag. FLAGS: the trainer's data/size flags (--device cpu among them).
# On a GPU the equality of replays with eager steps is tests/test_graph.c's
# graph_cuda.
set -eu
bin="$1"
shift
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for prec in fp32 fp16; do
  "$bin" "$@" --precision $prec --quiet --save "$tmp/eager-$prec"
  "$bin" "$@" --precision $prec --cuda-graph --save "$tmp/graph-$prec" > "$tmp/graph-$prec.log"
  grep -q "step 3 was captured to check it is capture-safe" "$tmp/graph-$prec.log"
  cmp "$tmp/eager-$prec/checkpoint.safetensors" "$tmp/graph-$prec/checkpoint.safetensors"
done
echo "cuda graph: identical checkpoints"
