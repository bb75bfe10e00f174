#!/bin/sh
# check_image_folder.sh LOOM_RESNET PYTHON — loom-resnet on an ImageFolder the
# way the README shows it (`loom-resnet --data DIR`, DIR/train and DIR/val of
# class folders of JPEGs), on a tiny generated one: 3 classes of photos-like
# JPEGs (and a PNG) made with PIL, ResNet-50 at 224 (the defaults), 2 steps.
# Checks the banner (ImageFolder, 3 classes, resnet50) and the result line
# with images/s and the data-wait share. Exit 77 (ctest: skipped) when PYTHON
# cannot import numpy and PIL (examples/CMakeLists.txt looks for one that can).
set -eu
resnet=$1
py=$2
if ! "$py" -c "import numpy, PIL" 2>/dev/null; then
  echo "check_image_folder: skipped: $py cannot import numpy and PIL (configure with -DLOOM_EXAMPLE_PYTHON=...)"
  exit 77
fi
dir=$(mktemp -d /tmp/loom-resnet-imgf-XXXXXX)
trap 'rm -rf "$dir"' EXIT
"$py" - "$dir" <<'PY'
import sys, os
import numpy as np
from PIL import Image
root = sys.argv[1]
rng = np.random.default_rng(0)
for split, n in (("train", 4), ("val", 2)):
    for c in ("ant", "bee", "cat"):
        os.makedirs(f"{root}/{split}/{c}")
        for k in range(n):
            h, w = rng.integers(160, 400, size=2)
            y, x = np.mgrid[0:h, 0:w]
            img = np.stack([(x * (k + 1) + y) % 256, (y * 3 + 40 * k) % 256, (x ^ y) % 256], -1).astype(np.uint8)
            ext = "png" if k == 0 and c == "bee" else "jpg"
            Image.fromarray(img).save(f"{root}/{split}/{c}/{k}.{ext}", quality=90)
PY
out=$("$resnet" --data "$dir" --batch 4 --epochs 1 --max-steps 2 --workers 2 --device cpu 2>&1) || {
  echo "$out"
  exit 1
}
echo "$out"
echo "$out" | grep -q "ImageFolder" || { echo "check_image_folder: no ImageFolder banner"; exit 1; }
echo "$out" | grep -q "images: 3 classes, 224x224 crops" || { echo "check_image_folder: classes/size"; exit 1; }
echo "$out" | grep -Eq "^result test_accuracy=[01]\.[0-9]+ samples_per_sec=[0-9.]+ model=resnet50 .*data_wait_share=[0-9.]+" ||
  { echo "check_image_folder: no result line"; exit 1; }
