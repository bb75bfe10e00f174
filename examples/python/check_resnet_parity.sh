#!/bin/sh
# check_resnet_parity.sh PYTHON LOOM_RESNET — train_resnet.py and loom-resnet
# make the same loom calls: on the CPU, with the same flags and thread count,
# they must end with the same result line (accuracy, loss scale, skipped
# steps) and byte-identical checkpoints. Two short runs of ResNet-20 on the
# first 256 Fashion-MNIST samples: the defaults (one-cycle, fp32,
# channels-last, augmentation), and bf16 with a cosine schedule and
# checkpoints every 4 steps.
set -eu
py="$1"; bin="$2"
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
base="--epochs 1 --train-limit 256 --test-limit 200 --batch 32 --device cpu --threads 2 --quiet"
n=0
for extra in "" "--precision bf16 --schedule cosine --save-every 4"; do
  n=$((n + 1))
  c=$("$bin" $base $extra --save "$tmp/c$n" | grep '^result')
  p=$("$py" "$here/train_resnet.py" $base $extra --save "$tmp/py$n" | grep '^result')
  echo "loom-resnet: $c"
  echo "python:      $p"
  # Everything but the timings must agree.
  strip() { echo "$1" | sed 's/samples_per_sec=[0-9.]* //; s/train_seconds=[0-9.]* //; s/data_wait_share=[0-9.]* //'; }
  [ "$(strip "$c")" = "$(strip "$p")" ] || { echo "result lines differ (run $n: $extra)"; exit 1; }
  cmp "$tmp/c$n/checkpoint.safetensors" "$tmp/py$n/checkpoint.safetensors"
done
echo "parity: same results, identical checkpoints"
