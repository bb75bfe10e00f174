#!/usr/bin/env python3
"""pytorch_image_folder.py ROOT --mode train|eval --workers W --batch B --batches K
torchvision's side of bench_image_folder: ImageFolder (PIL loader) +
DataLoader(num_workers=W, shuffle) with the ImageNet transforms
(RandomResizedCrop(224) + RandomHorizontalFlip, or Resize(256) +
CenterCrop(224); then ToTensor + Normalize: f32 NCHW batches). Times K
batches after the first (worker start-up excluded) and prints one line."""
import argparse
import time

import torch
import torchvision
import torchvision.transforms as T


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("--mode", default="train")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--batches", type=int, default=20)
    a = ap.parse_args()
    torch.set_num_threads(1)
    norm = T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
    if a.mode == "train":
        tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(), norm])
    else:
        tf = T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(), norm])
    ds = torchvision.datasets.ImageFolder(a.root, tf)
    dl = torch.utils.data.DataLoader(ds, batch_size=a.batch, shuffle=True, num_workers=a.workers, drop_last=True,
                                     persistent_workers=a.workers > 0)
    n, t0, it = 0, None, None
    while n < a.batches:
        it = iter(dl)
        for x, _ in it:
            if t0 is None:
                t0 = time.perf_counter()  # after the first batch
                continue
            n += 1
            if n == a.batches:
                break
    dt = time.perf_counter() - t0
    ips = n * a.batch / dt
    print(f"bench=image_folder side=torchvision mode={a.mode} workers={a.workers} batch={a.batch} batches={n} "
          f"images_per_sec={ips:.1f} images_per_sec_per_worker={ips / max(a.workers, 1):.1f}")


if __name__ == "__main__":
    main()
