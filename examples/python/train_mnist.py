#!/usr/bin/env python3
"""train_mnist.py — the loom-mnist trainer written with the loom Python
package: the same model (784 -> 1024 -> 1024 -> 10, fused Linear+ReLU),
AdamW with a cosine schedule and half an epoch of warm-up, the same loader
options and seed. It makes the same loom calls in the same order as
examples/mnist/main.c, so on the CPU it reproduces loom-mnist's result
exactly (same flags, same thread count).

    python3 examples/python/train_mnist.py [--epochs 10] [--hidden 1024,1024] ...
    python3 examples/python/train_mnist.py --save ckpt --save-every 200   # then --resume

Ends with the same machine-readable line as loom-mnist:
    result test_accuracy=0.9038 samples_per_sec=... epochs=10 device=cpu ...
"""
import argparse
import os
import sys
import time

import numpy as np

import loom


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--hidden", default="1024,1024")
    p.add_argument("--optimizer", choices=["adamw", "sgd"], default="adamw")
    p.add_argument("--device", default="auto")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--schedule", choices=["constant", "cosine"], default="cosine")
    p.add_argument("--train-limit", type=int, default=0)
    p.add_argument("--test-limit", type=int, default=0)
    p.add_argument("--precision", choices=["fp32", "fp16", "bf16"], default="fp32")
    p.add_argument("--keep-last-fp32", action="store_true")
    p.add_argument("--save", metavar="DIR")
    p.add_argument("--save-every", type=int, default=0)
    p.add_argument("--resume", action="store_true")
    p.add_argument("--quiet", action="store_true")
    return p.parse_args()


def open_split(directory, prefix, limit):
    for ext in (".gz", ""):
        img = os.path.join(directory, f"{prefix}-images-idx3-ubyte{ext}")
        lab = os.path.join(directory, f"{prefix}-labels-idx1-ubyte{ext}")
        if os.path.exists(img) and os.path.exists(lab):
            ds = loom.Dataset.idx(img, lab)
            break
    else:
        sys.exit(f"train_mnist: no {prefix}-images-idx3-ubyte[.gz] in {directory} (install dataset-fashion-mnist)")
    if 0 < limit < len(ds):  # the first `limit` samples, as an in-memory copy (like loom-mnist)
        xs, ys = zip(*(ds.read(i) for i in range(limit)))
        ds = loom.Dataset.from_arrays(np.stack(xs), np.stack(ys))
    return ds


def evaluate(model, test, in_features):
    correct = total = 0
    with loom.no_grad():
        test.start_epoch(0)
        for x, y in test:
            logits = model(x.reshape(x.shape[0], in_features))
            correct += loom.count_correct(logits, y)
            total += x.shape[0]
    return correct / total if total else 0.0


def main():
    o = parse_args()
    if o.threads > 0:
        loom.set_num_threads(o.threads)
    from loom.tensor import as_device, device_str
    dev = device_str(as_device(o.device))
    if o.device == "auto" and dev == "cpu" and not o.quiet:
        print(f"device: cpu (CUDA unavailable: {loom.cuda_unavailable_reason()})")
    loom.manual_seed(o.seed)

    train_ds = open_split(o.data, "train", o.train_limit)
    test_ds = open_split(o.data, "t10k", o.test_limit)
    in_features = int(np.prod(train_ds.read(0)[0].shape))
    common = dict(workers=o.workers, prefetch=4, device=dev, scale=1.0 / 255.0, mean=[0.2860], std=[0.3530])
    train = loom.Loader(train_ds, batch_size=o.batch, shuffle=True, seed=o.seed, drop_last=True, **common)
    test = loom.Loader(test_ds, batch_size=1000, shuffle=False, seed=o.seed, drop_last=False, **common)

    hidden = [int(h) for h in o.hidden.split(",")]
    model = loom.nn.MLP(in_features, hidden, 10, device=dev)
    if o.precision != "fp32":
        model.set_precision(o.precision, keep_last_fp32=o.keep_last_fp32)
    scaler = loom.amp.GradScaler(enabled=o.precision == "fp16")
    if o.optimizer == "sgd":
        opt = loom.optim.SGD(model.parameters(), lr=o.lr, momentum=0.9)
    else:
        opt = loom.optim.AdamW(model.parameters(), lr=o.lr)
    steps_per_epoch = len(train)
    sched = (loom.optim.cosine(o.lr, steps_per_epoch // 2, steps_per_epoch * o.epochs, 0.0)
             if o.schedule == "cosine" else loom.optim.constant(o.lr))

    global_step = 0
    ckpt = os.path.join(o.save, "checkpoint.safetensors") if o.save else None
    if ckpt:
        os.makedirs(o.save, exist_ok=True)
        if o.resume and os.path.exists(ckpt):
            global_step = loom.load_checkpoint(ckpt, model, opt, scaler, train, sched)
            if not o.quiet:
                print(f"resumed from {ckpt} at step {global_step}")
    if not o.quiet:
        print(f"model: {model!r}, device: {dev}, {o.optimizer} lr {o.lr}, batch {o.batch}, "
              f"{steps_per_epoch} steps/epoch, {loom.get_num_threads()} threads, precision {o.precision}")

    train_seconds, train_samples, accuracy = 0.0, 0, 0.0
    for epoch in range(train.epoch + 1, o.epochs + 1):
        t0, losses, samples = time.perf_counter(), [], 0
        for x, y in train:
            b = x.shape[0]
            opt.lr = sched(global_step)
            loss = loom.cross_entropy(model(x.reshape(b, in_features)), y)
            opt.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(opt)
            global_step += 1
            samples += b
            if global_step % 20 == 0:
                losses.append(loss.item())  # reading the loss syncs with the device: sparingly
            if o.save_every and global_step % o.save_every == 0:
                loom.save_checkpoint(ckpt, model, opt, scaler, train, sched, global_step)
        if dev != "cpu":
            loom.synchronize(dev)
        dt = time.perf_counter() - t0
        train_seconds += dt
        train_samples += samples
        accuracy = evaluate(model, test, in_features)
        if not o.quiet:
            print(f"epoch {epoch}/{o.epochs}: train loss {np.mean(losses) if losses else float('nan'):.4f}, "
                  f"test accuracy {100 * accuracy:.2f}%, {samples / dt:.0f} samples/s, {dt:.1f} s", flush=True)
    if train_seconds == 0:
        accuracy = evaluate(model, test, in_features)
    if ckpt:
        loom.save_checkpoint(ckpt, model, opt, scaler, train, sched, global_step)
    print(f"result test_accuracy={accuracy:.4f} samples_per_sec={train_samples / train_seconds if train_seconds else 0:.1f}"
          f" epochs={o.epochs} device={dev} train_seconds={train_seconds:.1f} precision={model.precision}"
          f" loss_scale={scaler.get_scale():g} skipped_steps={scaler.steps_skipped}")


if __name__ == "__main__":
    main()
