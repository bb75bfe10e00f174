#!/usr/bin/env bash
# run_image_folder.sh [--build DIR] [--corpus DIR] [--rounds R] [--batch B] [--batches K] [--workers "1 2"]
# loom's ImageFolder loader vs torchvision's ImageFolder + DataLoader (PIL),
# train (RandomResizedCrop 224 + flip) and eval (Resize 256 + CenterCrop 224)
# transforms, f32 normalized NCHW batches on both sides, on the same JPEGs
# and cores. Rounds alternate the sides (loom first in odd rounds, torchvision
# first in even ones: ABAB, for a machine others load too) and the summary
# gives per-case medians and the ratio of medians. The corpus is made from
# python3-skimage's photographs by make_corpus.py when missing.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=build
corpus=/tmp/loom-image-folder-corpus
rounds=5
batch=32
batches=15
workers="1 2"
while (($#)); do
  case $1 in
    --build) build=$2; shift 2 ;;
    --corpus) corpus=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --batches) batches=$2; shift 2 ;;
    --workers) workers=$2; shift 2 ;;
    *) echo "run_image_folder: unknown argument $1" >&2; exit 2 ;;
  esac
done
py=${LOOM_PYTHON:-/usr/bin/python3}
[ -x "$py" ] || py=python3
bin=$build/bench/bench_image_folder
[ -x "$bin" ] || { echo "run_image_folder: $bin not built (cmake --build $build --target bench_image_folder)" >&2; exit 1; }
if [ ! -d "$corpus" ]; then
  # The photographs come from Debian's python3-skimage; torchvision's side needs python3-torchvision.
  "$here/../../scripts/setup.sh" python3-skimage python3-torchvision python3-pil
  "$py" "$here/make_corpus.py" "$corpus"
fi
log=$(mktemp)
for ((r = 1; r <= rounds; r++)); do
  for mode in train eval; do
    for w in $workers; do
      loom=("$bin" "$corpus" --mode "$mode" --workers "$w" --batch "$batch" --batches "$batches")
      tv=("$py" "$here/pytorch_image_folder.py" "$corpus" --mode "$mode" --workers "$w" --batch "$batch" --batches "$batches")
      if ((r % 2)); then "${loom[@]}" | tee -a "$log"; "${tv[@]}" | tee -a "$log"
      else "${tv[@]}" | tee -a "$log"; "${loom[@]}" | tee -a "$log"; fi
    done
  done
done
"$py" - "$log" <<'PY'
import re, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    kv = dict(re.findall(r"(\w+)=(\S+)", line))
    if kv.get("bench") != "image_folder":
        continue
    runs.setdefault((kv["mode"], int(kv["workers"]), kv["side"]), []).append(float(kv["images_per_sec"]))
print("| transform | workers | loom img/s (median) | torchvision img/s (median) | loom per worker | torchvision per worker | loom / torchvision | rounds |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
for (mode, w) in sorted({(m, w) for m, w, _ in runs}, key=lambda k: (k[0] != "train", k[1])):
    a, b = runs.get((mode, w, "loom"), []), runs.get((mode, w, "torchvision"), [])
    if not a or not b:
        continue
    ma, mb = statistics.median(a), statistics.median(b)
    print(f"| {mode} | {w} | {ma:.1f} | {mb:.1f} | {ma / w:.1f} | {mb / w:.1f} | {ma / mb:.2f} | {len(a)} |")
PY
rm -f "$log"
