#!/bin/sh
# check_default_corpus.sh LOOM_GPT SETUP_SH — without --data, loom-gpt trains
# on the corpus scripts/setup.sh prepares (XDG_DATA_HOME/loom/shakespeare.txt,
# ~/.local/share by default): the file is the one setup.sh pins (its sha256),
# and a 3-step run reports reading all of it (5,057,281 bytes, 84 distinct).
# Exit 77 (skipped, saying why) when setup.sh has not prepared it here.
set -eu
bin="$1" setup="$2"
corpus="${XDG_DATA_HOME:-$HOME/.local/share}/loom/shakespeare.txt"
if [ ! -s "$corpus" ]; then
  echo "default corpus: skipped: $corpus is missing (scripts/setup.sh prepares it)"
  exit 77
fi
want=$(sed -n 's/^LOOM_SHAKESPEARE_TEXT_SHA256=\([0-9a-f]*\).*/\1/p' "$setup")
got=$(sha256sum "$corpus" | cut -d' ' -f1)
[ -n "$want" ] && [ "$want" = "$got" ] || { echo "default corpus: $corpus has sha256 $got, setup.sh pins '$want'"; exit 1; }
out=$("$bin" --layers 1 --heads 1 --embd 16 --block 16 --steps 3 --batch 2 --eval-batches 1 --device cpu)
printf '%s\n' "$out"
printf '%s\n' "$out" | grep -q "(the default corpus): 5057281 bytes, vocabulary 84," || {
  echo "default corpus: loom-gpt did not read the whole default corpus"; exit 1; }
printf '%s\n' "$out" | grep -q "^result val_loss=" || { echo "default corpus: no result line"; exit 1; }
echo "default corpus: $corpus, sha256 as pinned, read by default"
