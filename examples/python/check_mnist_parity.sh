#!/bin/sh
# check_mnist_parity.sh PYTHON LOOM_MNIST — the Python example and loom-mnist
# make the same loom calls: on the CPU they must end with the same accuracy
# and byte-identical checkpoints (a short run; CI's version of the
# full-length comparison in the README).
set -eu
py="$1"; bin="$2"
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
flags="--epochs 1 --train-limit 2048 --test-limit 1000 --hidden 128 --device cpu --threads 2 --quiet"
c=$("$bin" $flags --save "$tmp/c" | grep '^result')
p=$("$py" "$here/train_mnist.py" $flags --save "$tmp/py" | grep '^result')
echo "loom-mnist: $c"
echo "python:     $p"
acc_c=$(echo "$c" | sed 's/.*test_accuracy=\([0-9.]*\).*/\1/')
acc_p=$(echo "$p" | sed 's/.*test_accuracy=\([0-9.]*\).*/\1/')
[ "$acc_c" = "$acc_p" ] || { echo "accuracies differ: $acc_c vs $acc_p"; exit 1; }
cmp "$tmp/c/checkpoint.safetensors" "$tmp/py/checkpoint.safetensors"
echo "parity: same accuracy $acc_c, identical checkpoints"
