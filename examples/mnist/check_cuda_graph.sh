#!/bin/sh
# check_cuda_graph.sh LOOM_MNIST — --cuda-graph end to end on the CPU: the
# step (fp32, and fp16 with the dynamic loss scaler and a cosine schedule
# attached to the optimizer) is captured once to check it is capture-safe,
# the loader writes every batch into the static input buffers, and the run
# must end byte-identical (checkpoint: parameters, AdamW state, scaler,
# loader position, step) to the same run without the flag. On a GPU the
# equality of replays with eager steps is tests/test_graph.c's graph_cuda.
set -eu
bin="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
common="--epochs 1 --train-limit 1024 --test-limit 500 --hidden 64 --batch 64 --device cpu --threads 2 --schedule cosine"
for prec in fp32 fp16; do
  "$bin" $common --precision $prec --quiet --save "$tmp/eager-$prec"
  "$bin" $common --precision $prec --cuda-graph --save "$tmp/graph-$prec" > "$tmp/graph-$prec.log"
  grep -q "step 3 was captured to check it is capture-safe" "$tmp/graph-$prec.log"
  cmp "$tmp/eager-$prec/checkpoint.safetensors" "$tmp/graph-$prec/checkpoint.safetensors"
done
echo "cuda graph: identical checkpoints"
