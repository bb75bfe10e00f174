#!/bin/sh
# check_resume.sh LOOM_RESNET [LAUNCHER...] — loom-resnet's checkpoint flags
# end to end: two epochs straight, versus a run stopped mid-epoch by
# --max-steps (saving every 3 steps on the way) and a second process resuming
# it to the end. Same flags otherwise, so the one-cycle schedule spans the
# same two epochs. The final checkpoints (parameters, SGD momentum, BN
# statistics, loader position, RNG, step) must be byte-identical. With a
# launcher (e.g. `mpirun -n 2`), the same under data parallelism: every rank
# restores, rank 0 writes.
set -eu
bin="$1"
shift
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
common="--train-limit 256 --test-limit 100 --batch 32 --epochs 2 --device cpu --threads 1 --workers 1 --quiet"
# The Fashion-MNIST files: ctest gives the configured LOOM_FASHION_MNIST_DIR.
data="${LOOM_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}"
"$@" "$bin" $common --data "$data" --save "$tmp/straight"
"$@" "$bin" $common --data "$data" --save "$tmp/resumed" --save-every 3 --max-steps 5
"$@" "$bin" $common --data "$data" --save "$tmp/resumed" --resume
cmp "$tmp/straight/checkpoint.safetensors" "$tmp/resumed/checkpoint.safetensors"
echo "resume: identical checkpoints"
