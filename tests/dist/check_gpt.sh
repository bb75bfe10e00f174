#!/bin/sh
# check_gpt.sh LOOM_GPT DATA LAUNCHER... — loom-gpt under data parallelism
# (issue 28 part 3), on a tiny model and 10 steps of the text file DATA:
#  (a) 2 ranks end with bit-identical parameters (--check-replicas hashes
#      every rank's parameters and all-reduces the hashes; rank 0 reports),
#      once without dropout and once with it (the ranks' masks differ, their
#      averaged gradients must not);
#  (b) 2 ranks at --batch 2 equal 1 rank at --batch 4: step s draws 2 x 2
#      windows from (seed, s) and rank r takes the r-th pair, so both runs
#      train on the same windows (dropout 0). The final parameters agree within
#      f32 tolerance (|diff| <= 1e-5; seen: 3.3e-7, where training on rank 0's
#      half alone differs by 1e-2), and so do the sharded val losses.
set -eu
bin="$1" data="$2"
shift 2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
common="--data $data --layers 2 --heads 2 --embd 16 --block 16 --steps 10 --eval-batches 2 --eval-every 0 --device cpu --quiet"
"$@" "$bin" $common --batch 2 --dropout 0 --check-replicas --save "$tmp/two.safetensors" > "$tmp/two.txt"
"$bin" $common --batch 4 --dropout 0 --save "$tmp/one.safetensors" > "$tmp/one.txt"
"$@" "$bin" $common --batch 2 --dropout 0.1 --check-replicas > "$tmp/dropout.txt"
cat "$tmp/two.txt" "$tmp/one.txt" "$tmp/dropout.txt"
for f in two dropout; do
  grep -q "^replicas: identical parameters on 2 ranks" "$tmp/$f.txt" || { echo "check_gpt: no identical replicas ($f)"; exit 1; }
  grep -q "^result .* world_size=2$" "$tmp/$f.txt" || { echo "check_gpt: no 2-rank result line ($f)"; exit 1; }
done
python3 - "$tmp/one.safetensors" "$tmp/two.safetensors" "$tmp/one.txt" "$tmp/two.txt" <<'PY'
import json, re, struct, sys
from array import array

def tensors(path):  # safetensors: u64 header size, JSON header, data
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    head = json.loads(b[8:8 + n])
    return {k: (v["dtype"], b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
            for k, v in head.items() if k != "__metadata__"}

one, two = tensors(sys.argv[1]), tensors(sys.argv[2])
assert one.keys() == two.keys(), "the checkpoints hold different tensors"
params = [k for k in one if k.startswith("model.")]
assert params and all(one[k][0] == "F32" for k in params), "expected f32 parameters"
worst, where = max((max(abs(a - b) for a, b in zip(array("f", one[k][1]), array("f", two[k][1]))), k) for k in params)
val = [float(re.search(r"^result val_loss=(\S+)", open(f).read(), re.M).group(1)) for f in sys.argv[3:5]]
print(f"check_gpt: {len(params)} parameters, largest |1 rank x batch 4 - 2 ranks x batch 2| = {worst:.3g} ({where}); "
      f"val_loss {val[0]} vs {val[1]}")
assert worst <= 1e-5, "the 2-rank run does not train the 1-rank run's model"
assert abs(val[0] - val[1]) <= 2e-4, "the sharded val loss differs"
PY
echo "check_gpt: identical replicas; 2 ranks x batch 2 = 1 rank x batch 4"
