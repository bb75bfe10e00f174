#!/usr/bin/env python3
"""image_folder_ref.py — torchvision's side of tests/test_image_folder.c.

  image_folder_ref.py samples ROOT PATHS PARAMS OUT.bin SIZE TOL
      ROOT is opened with torchvision.datasets.ImageFolder (PIL loader); its
      file order and labels must equal PATHS ("path label" lines, loom's
      order). Each PARAMS line is "i eval RESIZE" or "i train TOP LEFT H W FLIP":
      sample i is made with Resize(RESIZE)+CenterCrop(SIZE) or with
      F.resized_crop(TOP, LEFT, H, W -> SIZE, bilinear) (+ hflip), and must
      match loom's sample in OUT.bin (CHW u8, SIZE x SIZE, one after another)
      within TOL per pixel. Prints the largest and mean differences.
  image_folder_ref.py rrc W H N
      Statistics of N draws of RandomResizedCrop.get_params (scale 0.08..1,
      ratio 3/4..4/3) on a W x H image: mean area fraction, mean log aspect
      ratio, mean top / (H - h + 1), mean left / (W - w + 1), as one line.
Exit 0: agreement; 1: disagreement (printed); 3: torch/torchvision missing.
"""
import math
import sys

try:
    import numpy as np
    import torch
    import torchvision
    import torchvision.transforms as T
    import torchvision.transforms.functional as F
except Exception as e:  # noqa: BLE001 - any import failure means "cannot compare"
    print(f"image folder reference skipped: {e}")
    sys.exit(3)


def samples(root, paths_file, params_file, out_file, size, tol):
    ds = torchvision.datasets.ImageFolder(root)
    with open(paths_file) as f:
        loom = [line.rstrip("\n").rsplit(" ", 1) for line in f if line.strip()]
    tv = [(p, str(y)) for p, y in ds.samples]
    if [(p, y) for p, y in loom] != tv:
        print("file order or labels differ from torchvision's ImageFolder:")
        for a, b in zip(loom, tv):
            if tuple(a) != b:
                print(f"  loom {a}  torchvision {b}")
                break
        print(f"  counts: loom {len(loom)}, torchvision {len(tv)}")
        return 1
    data = np.fromfile(out_file, dtype=np.uint8)
    per = 3 * size * size
    worst, total, count, bad = 0, 0.0, 0, 0
    with open(params_file) as f:
        for line in f:
            fs = line.split()
            if not fs:
                continue
            i = int(fs[0])
            img = ds.loader(ds.samples[i][0])
            if fs[1] == "eval":
                ref = T.CenterCrop(size)(T.Resize(int(fs[2]))(img))
            else:
                top, left, h, w, flip = map(int, fs[2:7])
                ref = F.resized_crop(img, top, left, h, w, [size, size], T.InterpolationMode.BILINEAR)
                if flip:
                    ref = F.hflip(ref)
            ref = np.asarray(ref, dtype=np.int16).transpose(2, 0, 1)
            got = data[i * per:(i + 1) * per].astype(np.int16).reshape(3, size, size)
            d = np.abs(ref - got)
            m = int(d.max())
            worst = max(worst, m)
            total += float(d.sum())
            count += d.size
            if m > tol:
                bad += 1
                print(f"sample {i} ({ds.samples[i][0]}, {' '.join(fs[1:])}): max difference {m} > {tol}")
    print(f"compared {len(tv)} files: max |loom - torchvision| = {worst}, mean = {total / max(count, 1):.4f}")
    return 1 if bad else 0


def rrc(w, h, n):
    torch.manual_seed(0)
    img = torch.zeros(1, h, w)
    t = T.RandomResizedCrop(224)
    area, lr, top, left = 0.0, 0.0, 0.0, 0.0
    for _ in range(n):
        i, j, ch, cw = t.get_params(img, t.scale, t.ratio)
        area += ch * cw / (w * h)
        lr += math.log(cw / ch)
        top += i / (h - ch + 1)
        left += j / (w - cw + 1)
    print(f"{area / n:.6f} {lr / n:.6f} {top / n:.6f} {left / n:.6f}")
    return 0


if __name__ == "__main__":
    a = sys.argv[1:]
    if a and a[0] == "samples" and len(a) == 7:
        sys.exit(samples(a[1], a[2], a[3], a[4], int(a[5]), int(a[6])))
    if a and a[0] == "rrc" and len(a) == 4:
        sys.exit(rrc(int(a[1]), int(a[2]), int(a[3])))
    print(__doc__)
    sys.exit(2)
