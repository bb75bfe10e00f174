#!/bin/sh
# run_gpt_vs_pytorch.sh [--build DIR] [--rounds N] [--threads N] [--python PY] -- LOOM_GPT_FLAGS...
# loom-gpt against its PyTorch twin (bench/gpt/gpt_twin.py) on the same CPU,
# threads, data, batches, schedule and initial weights (loom's, written by
# `loom-gpt --max-steps 0 --save`): rounds alternate loom, PyTorch, loom,
# PyTorch (ABAB) so both sides see the same machine load; each round prints
# both result lines; at the end the medians of tokens/s, their ratio and
# both validation losses. The flags after -- go to both sides (--data is
# required; --dropout 0 makes the two runs the same computation up to
# float32 rounding). Both run on the CPU unless the flags say --device cuda
# (then the twin too: bench/gpt/gpt_twin.py --device, --precision).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=build-dev rounds=3 threads=2 py=/usr/bin/python3
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --python) py=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "unknown flag $1" >&2; exit 2 ;;
  esac
done
bin="$build/examples/loom-gpt"
[ -x "$bin" ] || { echo "no $bin: build the loom-gpt target" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$bin" --device cpu "$@" --threads "$threads" --max-steps 0 --save "$tmp/init.safetensors" --quiet > /dev/null
# On the CPU the twin is the better of libgomp's two wait policies in each
# round (bench/torch_best.sh: with the default, OpenBLAS's threads and ATen's
# spinning workers halve the twin's speed on 2 cores).
. "$here/../torch_best.sh"
tb="torch_best tokens_per_sec"
case " $* " in *" --device cuda "*) tb="" ;; esac
: > "$tmp/loom" ; : > "$tmp/torch"
r=1
while [ "$r" -le "$rounds" ]; do
  a=$("$bin" --device cpu "$@" --threads "$threads" --quiet | grep '^result')
  b=$($tb "$py" "$here/gpt_twin.py" --device cpu "$@" --threads "$threads" --init "$tmp/init.safetensors" --quiet | grep '^result')
  echo "round $r loom:    $a"
  echo "round $r pytorch: $b"
  echo "$a" >> "$tmp/loom"; echo "$b" >> "$tmp/torch"
  r=$((r + 1))
done
median() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" "$2" | sort -g | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
lt=$(median tokens_per_sec "$tmp/loom"); pt=$(median tokens_per_sec "$tmp/torch")
echo "median tokens/s: loom $lt, pytorch $pt, loom/pytorch $(awk -v a="$lt" -v b="$pt" 'BEGIN {printf "%.2f", a / b}')"
echo "val_loss: loom $(median val_loss "$tmp/loom"), pytorch $(median val_loss "$tmp/torch")"
