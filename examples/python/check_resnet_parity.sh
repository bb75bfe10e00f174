#!/bin/sh
# check_resnet_parity.sh PYTHON LOOM_RESNET [LAUNCHER...] — train_resnet.py
# and loom-resnet make the same loom calls: on the CPU, with the same flags
# and thread count, they must end with the same result line (accuracy, loss
# scale, skipped steps, world size; not the timings) and byte-identical
# checkpoints. Short runs of ResNet-20 on the first 256 Fashion-MNIST
# samples: the defaults (one-cycle, fp32, channels-last, augmentation), and
# bf16 with a cosine schedule and checkpoints every 4 steps. With a launcher
# (e.g. `mpirun -n 2`): the defaults under data parallelism, both programs
# as its ranks.
set -eu
py="$1"; bin="$2"
shift 2
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
base="--epochs 1 --train-limit 256 --test-limit 200 --batch 32 --device cpu --quiet"
# Everything but the timings must agree.
strip() { echo "$1" | sed 's/samples_per_sec=[0-9.]* //; s/train_seconds=[0-9.]* //; s/data_wait_share=[0-9.]* //'; }
runs=2
[ $# -gt 0 ] && runs=1
n=0
while [ $n -lt $runs ]; do
  n=$((n + 1))
  if [ $# -gt 0 ]; then extra="--threads 1"
  elif [ $n -eq 1 ]; then extra="--threads 2"
  else extra="--threads 2 --precision bf16 --schedule cosine --save-every 4"; fi
  c=$("$@" "$bin" $base $extra --save "$tmp/c$n" | grep '^result')
  p=$("$@" "$py" "$here/train_resnet.py" $base $extra --save "$tmp/py$n" | grep '^result')
  echo "loom-resnet: $c"
  echo "python:      $p"
  [ "$(strip "$c")" = "$(strip "$p")" ] || { echo "result lines differ (run $n: $extra)"; exit 1; }
  cmp "$tmp/c$n/checkpoint.safetensors" "$tmp/py$n/checkpoint.safetensors"
done
echo "parity: same results, identical checkpoints"
