#!/bin/sh
# check_resume.sh LOOM_MNIST — the trainer's checkpoint flags end to end: two
# epochs straight, versus one epoch, exit, and a second process resuming for
# the second epoch. The final checkpoints (parameters, AdamW state, loader
# position, RNG, step) must be byte-identical. check_resume.sh LOOM_MNIST
# LAUNCHER... runs each under the launcher (e.g. `mpirun -n 2`): the same
# under data parallelism, where every rank restores and rank 0 writes.
set -eu
bin="$1"
shift
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
common="--train-limit 1024 --test-limit 500 --hidden 64 --batch 64 --device cpu --threads 2 --schedule constant --quiet"
# The Fashion-MNIST files: ctest gives the configured LOOM_FASHION_MNIST_DIR.
data="${LOOM_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}"
"$@" "$bin" $common --data "$data" --epochs 2 --save "$tmp/straight"
"$@" "$bin" $common --data "$data" --epochs 1 --save "$tmp/resumed" --save-every 5
"$@" "$bin" $common --data "$data" --epochs 2 --save "$tmp/resumed" --resume
cmp "$tmp/straight/checkpoint.safetensors" "$tmp/resumed/checkpoint.safetensors"
echo "resume: identical checkpoints"
