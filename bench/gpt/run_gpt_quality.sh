#!/bin/sh
# run_gpt_quality.sh [--build DIR] [--python PY] [--tol NATS] -- LOOM_GPT_FLAGS...
# Issue 28's quality target as one command: loom-gpt and its PyTorch twin
# (bench/gpt/gpt_twin.py) train the same model on the same data, batches and
# schedule from the same initial weights (loom's, written by
# `loom-gpt --max-steps 0 --save`), one after the other, and their final
# validation losses are compared. The flags after -- go to both sides
# (--data or --tokens is required; --device/--precision too). With dropout
# above 0 the two sides draw different masks, so they are two runs of one
# recipe rather than one computation: the target is |loom - twin| <= --tol
# (0.03 nats by default). Each side's progress is printed as it runs, so a
# run cut short still shows how far it got. Last line:
#   result gpt_quality loom_val=X twin_val=Y diff=D loom_tokens_per_sec=A twin_tokens_per_sec=B
# and the exit status is 1 when |diff| > tol.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=build-dev py=/usr/bin/python3 tol=0.03
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --python) py=$2; shift 2 ;;
    --tol) tol=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "unknown flag $1" >&2; exit 2 ;;
  esac
done
bin="$build/examples/loom-gpt"
[ -x "$bin" ] || { echo "no $bin: build the loom-gpt target" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$bin" "$@" --max-steps 0 --save "$tmp/init.safetensors" --quiet > /dev/null
echo "== loom-gpt $*"
"$bin" "$@" | tee "$tmp/loom"
echo "== gpt_twin.py $* --init (loom's initial weights)"
"$py" "$here/gpt_twin.py" "$@" --init "$tmp/init.safetensors" | tee "$tmp/twin"
field() { sed -n "s/^result.* $1=\([0-9.eE+-]*\).*/\1/p" "$2" | tail -1; }
field2() { sed -n "s/^result $1=\([0-9.eE+-]*\).*/\1/p" "$2" | tail -1; }
lv=$(field2 val_loss "$tmp/loom") tv=$(field2 val_loss "$tmp/twin")
lt=$(field tokens_per_sec "$tmp/loom") tt=$(field tokens_per_sec "$tmp/twin")
[ -n "$lv" ] && [ -n "$tv" ] || { echo "a side printed no result line" >&2; exit 1; }
awk -v l="$lv" -v t="$tv" -v a="$lt" -v b="$tt" -v tol="$tol" 'BEGIN {
  d = l - t
  printf "result gpt_quality loom_val=%.4f twin_val=%.4f diff=%+.4f loom_tokens_per_sec=%s twin_tokens_per_sec=%s\n", l, t, d, a, b
  if (d > tol || d < -tol) { printf "note: |loom - twin| = %.4f nats, over the %.2f target\n", (d < 0 ? -d : d), tol; exit 1 }
  printf "note: loom %.4f vs twin %.4f: within %.2f nats\n", l, t, tol
}'
