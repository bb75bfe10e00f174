#!/bin/sh
# check_tokens.sh LOOM_GPT — --tokens FILE trains on uint16 token ids exactly
# as --data trains on the bytes of a text with the same sequence: a file of
# ids i mod 37 (little-endian uint16) and a text of the bytes 'A' + i mod 37
# have the same vocabulary (37 entries, in the same order), batches and
# initial weights, so with dropout 0 both runs must report the same
# val_loss; the sequence is learnable, so it must fall well below ln 37.
# Then the errors: an id outside --vocab, and --tokens with --data.
set -eu
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 - "$tmp" <<'PY'
import struct, sys
d = sys.argv[1]
seq = [i % 37 for i in range(6000)]
open(d + "/tokens.bin", "wb").write(struct.pack("<%dH" % len(seq), *seq))
open(d + "/text.txt", "wb").write(bytes(65 + v for v in seq))
PY
flags="--device cpu --layers 1 --heads 2 --embd 32 --block 16 --steps 40 --batch 4 --lr 1e-2 --dropout 0 --eval-batches 2 --threads 1 --quiet"
a=$("$bin" --tokens "$tmp/tokens.bin" $flags | sed -n 's/^result val_loss=\([0-9.]*\).*/\1/p')
b=$("$bin" --data "$tmp/text.txt" $flags | sed -n 's/^result val_loss=\([0-9.]*\).*/\1/p')
echo "val_loss: --tokens $a, --data $b"
[ -n "$a" ] && [ "$a" = "$b" ] || { echo "FAIL: --tokens and --data disagree"; exit 1; }
awk -v v="$a" 'BEGIN { exit !(v < 1.5) }' || { echo "FAIL: val_loss $a did not fall below 1.5 (ln 37 = 3.61)"; exit 1; }
if "$bin" --tokens "$tmp/tokens.bin" --vocab 30 $flags 2> "$tmp/err"; then echo "FAIL: id 36 accepted with --vocab 30"; exit 1; fi
grep -q "holds token id 36, outside --vocab 30" "$tmp/err" || { cat "$tmp/err"; exit 1; }
if "$bin" --tokens "$tmp/tokens.bin" --data "$tmp/text.txt" $flags 2> "$tmp/err"; then echo "FAIL: --tokens with --data accepted"; exit 1; fi
grep -q "takes the place of --data" "$tmp/err" || { cat "$tmp/err"; exit 1; }
echo ok
