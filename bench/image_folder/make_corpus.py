#!/usr/bin/env python3
"""make_corpus.py OUT [--images N] [--classes C] [--seed S] — the image-folder
benchmark's corpus: OUT/<class>/<k>.jpg, ImageNet-like JPEGs (long side 500,
short side 333..375, quality 90) cut from the real photographs Debian's
python3-skimage ships (astronaut, coffee, chelsea, rocket, motorcycle, ...),
multiplied by random crops (30-100 % of the area, aspect 0.6-1.6, random
mirror) and resized with Lanczos. Nothing is downloaded; the corpus is made
again from the package, never committed."""
import argparse
import os
import random

from PIL import Image

PHOTOS = ["astronaut.png", "coffee.png", "chelsea.png", "rocket.jpg", "motorcycle_left.png", "motorcycle_right.png",
          "retina.jpg", "hubble_deep_field.jpg", "camera.png", "color.png"]


def sources():
    import skimage.data  # noqa: F401 - only to find the package's data folder
    d = os.path.dirname(skimage.data.__file__)
    out = []
    for name in PHOTOS:
        p = os.path.join(d, name)
        if os.path.exists(p):
            out.append(Image.open(p).convert("RGB"))
    if not out:
        raise SystemExit(f"make_corpus: no photographs under {d} (install python3-skimage)")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--images", type=int, default=1000)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    src = sources()
    for c in range(a.classes):
        os.makedirs(os.path.join(a.out, f"c{c:03d}"), exist_ok=True)
    for k in range(a.images):
        im = src[k % len(src)]
        W, H = im.size
        area = W * H * rng.uniform(0.3, 1.0)
        ar = rng.uniform(0.6, 1.6)
        w = min(W, int((area * ar) ** 0.5))
        h = min(H, int((area / ar) ** 0.5))
        x, y = rng.randint(0, W - w), rng.randint(0, H - h)
        crop = im.crop((x, y, x + w, y + h))
        if rng.random() < 0.5:
            crop = crop.transpose(Image.FLIP_LEFT_RIGHT)
        short = rng.randint(333, 375)
        size = (500, short) if w >= h else (short, 500)
        crop.resize(size, Image.LANCZOS).save(os.path.join(a.out, f"c{k % a.classes:03d}", f"{k:06d}.jpg"),
                                               quality=90)
    print(f"make_corpus: {a.images} JPEGs in {a.classes} classes under {a.out} from {len(src)} photographs")


if __name__ == "__main__":
    main()
