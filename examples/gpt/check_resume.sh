#!/bin/sh
# check_resume.sh LOOM_GPT DATA — loom-gpt's checkpoint flags end to end: 20
# steps straight, versus a run stopped by --max-steps 8 (saving every 4 steps
# on the way) and a second process resuming it to step 20. Dropout is on, so
# loom's RNG must be restored too. The final checkpoints (parameters, AdamW
# moments and counts, RNG, step) must be byte-identical, and so must the
# result lines' val_loss. Then --sample from the checkpoint without training.
# check_resume.sh LOOM_GPT DATA LAUNCHER... runs each under the launcher
# (e.g. `mpirun -n 2`): the same under data parallelism, where every rank
# restores and rank 0 writes (the result line must then say world_size=2).
set -eu
bin="$1"
data="$2"
shift 2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
common="--data $data --layers 2 --heads 2 --embd 16 --block 16 --steps 20 --batch 4 --dropout 0.1 --eval-batches 2 --quiet --device cpu"
"$@" "$bin" $common --save "$tmp/straight.safetensors" > "$tmp/straight.txt"
"$@" "$bin" $common --save "$tmp/resumed.safetensors" --save-every 4 --max-steps 8 > /dev/null
"$@" "$bin" $common --save "$tmp/resumed.safetensors" --resume > "$tmp/resumed.txt"
cmp "$tmp/straight.safetensors" "$tmp/resumed.safetensors"
a=$(sed -n 's/^result \(val_loss=[^ ]*\).*/\1/p' "$tmp/straight.txt")
b=$(sed -n 's/^result \(val_loss=[^ ]*\).*/\1/p' "$tmp/resumed.txt")
[ -n "$a" ] && [ "$a" = "$b" ] || { echo "straight $a, resumed $b"; exit 1; }
"$@" "$bin" $common --save "$tmp/straight.safetensors" --resume --sample 40 --prompt "loom" > "$tmp/sample.txt"
grep -q '^sample:$' "$tmp/sample.txt" && sed -n '/^sample:$/{n;p;}' "$tmp/sample.txt" | grep -q '^loom' || {
  echo "no sample starting with the prompt:"; cat "$tmp/sample.txt"; exit 1; }
w=$(sed -n 's/^result .*\(world_size=[0-9]*\).*/\1/p' "$tmp/resumed.txt")
echo "resume: identical checkpoints, $a, $w; a sample after the prompt"
