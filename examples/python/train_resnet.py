#!/usr/bin/env python3
"""train_resnet.py — the loom-resnet trainer written with the loom Python
package: a CIFAR-style ResNet (default ResNet-20, option-A shortcuts,
channels-last) on Fashion-MNIST IDX files, SGD with Nesterov momentum and
weight decay on conv/fc weights only (BatchNorm parameters and biases in a
second group without it), a one-cycle (default), cosine, step or constant
schedule, random crop + flip, mixed precision, per-epoch test accuracy.

It makes the same loom calls in the same order as examples/resnet/main.c
(the communicator, the loaders, the model, the optimizer, the schedule
attached to it, each step's forward / loss / scaled backward / scaler step),
so on the CPU it reproduces loom-resnet's result exactly with the same flags
and thread count; examples/python/check_resnet_parity.sh checks that.
Under `mpirun -np N` each process is one rank (loom.dist), as loom-resnet.

    python3 examples/python/train_resnet.py [--epochs 30] [--model resnet20] ...
    python3 examples/python/train_resnet.py --save ckpt --save-every 200   # then --resume

Ends with loom-resnet's machine-readable line:
    result test_accuracy=0.9234 samples_per_sec=... model=resnet20 epochs=30 device=cpu ...
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
    p.add_argument("--model", default="resnet20")
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--wd", type=float, default=5e-4)
    p.add_argument("--schedule", choices=["onecycle", "cosine", "step", "constant"], default="onecycle")
    p.add_argument("--device", default="auto")
    p.add_argument("--precision", choices=["fp32", "fp16", "bf16"], default="fp32")
    p.add_argument("--format", choices=["auto", "nhwc", "nchw"], default="auto")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--shortcut", choices=["A", "B"], default="A")
    p.add_argument("--no-augment", dest="augment", action="store_false")
    p.add_argument("--train-limit", type=int, default=0)
    p.add_argument("--test-limit", type=int, default=0)
    p.add_argument("--checkpoint-every", type=int, default=0)
    p.add_argument("--scale-lr", action="store_true")
    p.add_argument("--save", metavar="DIR")
    p.add_argument("--save-every", type=int, default=0)
    p.add_argument("--resume", action="store_true")
    p.add_argument("--max-steps", type=int, default=0)
    p.add_argument("--quiet", action="store_true")
    o = p.parse_args()
    if (o.resume or o.save_every) and not o.save:
        p.error("--resume and --save-every need --save DIR")
    return o


def open_split(directory, prefix, limit):
    """DIR/{prefix}-images-idx3-ubyte(.gz) + labels; the first `limit`
    samples as an in-memory copy (loom-resnet's datasets_head)."""
    for ext in (".gz", ""):
        img = os.path.join(directory, f"{prefix}-images-idx3-ubyte{ext}")
        lab = os.path.join(directory, f"{prefix}-labels-idx1-ubyte{ext}")
        if os.path.exists(img) and os.path.exists(lab):
            ds = loom.Dataset.idx(img, lab)
            break
    else:
        sys.exit(f"train_resnet: no {prefix}-images-idx3-ubyte[.gz] in {directory} (install dataset-fashion-mnist)")
    if 0 < limit < len(ds):
        xs, ys = zip(*(ds.read(i) for i in range(limit)))
        ds = loom.Dataset.from_arrays(np.stack(xs), np.stack(ys))
    return ds


def as_images(x):
    """IDX batches are [N, H, W]: one channel, as a view."""
    return x if x.ndim == 4 else x.view(x.shape[0], 1, x.shape[1], x.shape[2])


def evaluate(model, test):
    correct = total = 0
    with loom.no_grad():
        model.eval()
        test.start_epoch(0)
        for x, y in test:
            correct += loom.count_correct(model(as_images(x)), y)
            total += x.shape[0]
        model.train()
    return correct / total if total else 0.0


def schedule(o, steps_per_epoch, world):
    total = steps_per_epoch * o.epochs
    if o.schedule == "onecycle":
        s = loom.optim.one_cycle(o.lr, total * 3 // 10, total, 25.0, 1e4)
    elif o.schedule == "cosine":
        s = loom.optim.cosine(o.lr, steps_per_epoch, total, 0.0)
    elif o.schedule == "step":
        s = loom.optim.step_lr(o.lr, max(total // 3, 1), 0.1)
    else:
        s = loom.optim.constant(o.lr)
    return loom.optim.scale_for_world(s, world, steps_per_epoch) if o.scale_lr else s


def main():
    o = parse_args()
    if o.threads > 0:
        loom.set_num_threads(o.threads)
    comm = loom.dist.init(o.device)  # a world of one, or this rank of mpirun's
    dev, rank, world = comm.device, comm.rank, comm.size
    quiet = o.quiet or rank != 0
    if o.device == "auto" and dev == "cpu" and not quiet:
        print(f"device: cpu (CUDA unavailable: {loom.cuda_unavailable_reason()})")
    fmt = "nchw" if o.format == "nchw" else "nhwc"
    loom.manual_seed(o.seed)

    train_ds = open_split(o.data, "train", o.train_limit)
    test_ds = open_split(o.data, "t10k", o.test_limit)
    x0, _ = train_ds.read(0)
    if x0.ndim not in (2, 3):
        sys.exit(f"train_resnet: samples must be images ([H,W] or [C,H,W]); these have {x0.ndim} dims")
    in_channels = x0.shape[0] if x0.ndim == 3 else 1
    common = dict(workers=o.workers, prefetch=4, device=dev, scale=1.0 / 255.0, mean=[0.2860], std=[0.3530],
                  channels_last=x0.ndim == 3 and fmt == "nhwc")
    augment = dict(crop_padding=4 if x0.shape[-2] >= 32 else 2, hflip=True) if o.augment else {}
    train = loom.Loader(train_ds, batch_size=o.batch, shuffle=True, seed=o.seed, drop_last=True, rank=rank,
                        world_size=world, **common, **augment)
    test = loom.Loader(test_ds, batch_size=500, shuffle=False, seed=o.seed, drop_last=False, **common)

    model = loom.nn.ResNet(o.model, num_classes=10, in_channels=in_channels,
                           shortcut="zero_pad" if o.shortcut == "A" else "projection", memory_format=fmt,
                           checkpoint_every=o.checkpoint_every, device=dev)
    scaler = loom.amp.GradScaler(enabled=o.precision == "fp16")  # bf16 has f32's range
    if o.precision != "fp32":
        model.set_precision(o.precision, keep_last_fp32=True)
    opt = loom.optim.SGD.for_module(model, lr=o.lr, momentum=0.9, nesterov=True, weight_decay=o.wd)
    ddp = None
    if world > 1:  # rank 0's weights and BN statistics everywhere, gradients averaged during backward
        ddp = loom.dist.DistributedDataParallel(model, comm)
        ddp.attach_scaler(scaler)
    if not quiet:
        print(f"model: {model.name} ({model.num_parameters()} parameters), "
              f"{'channels-last' if fmt == 'nhwc' else 'NCHW'}, {o.precision}\n"
              f"device: {dev}, {loom.get_num_threads()} threads, SGD nesterov lr {o.lr:g} wd {o.wd:g} "
              f"(not on BN/bias), batch {o.batch}" + (f", {world} ranks ({comm.backend})" if world > 1 else ""))

    steps_per_epoch = len(train)
    sched = schedule(o, steps_per_epoch, world)
    ckpt = os.path.join(o.save, "checkpoint.safetensors") if o.save else None
    global_step = 0
    if ckpt:
        os.makedirs(o.save, exist_ok=True)
        if o.resume and os.path.exists(ckpt):
            global_step = loom.load_checkpoint(ckpt, model, opt, scaler, train, sched)
            if not quiet:
                print(f"resumed from {ckpt} at step {global_step}")
    opt.set_schedule(sched, global_step)  # the optimizer follows the schedule itself

    def save(step):
        if ckpt and rank == 0:
            loom.save_checkpoint(ckpt, model, opt, scaler, train, sched, step)

    train_seconds, train_samples, accuracy, wait_share, stopped = 0.0, 0, 0.0, 0.0, False
    for epoch in range(train.epoch + 1, o.epochs + 1):
        train.reset_stats()
        t0, losses, epoch_samples = time.perf_counter(), [], 0
        step = global_step - (epoch - 1) * steps_per_epoch
        if not 0 <= step <= steps_per_epoch:
            step = 0
        for x, y in train:
            loss = loom.cross_entropy(model(as_images(x)), y)
            opt.zero_grad()
            scaler.scale(loss).backward()
            if ddp is not None:
                ddp.sync()  # the last bucket's average
            scaler.step(opt)
            step, global_step = step + 1, global_step + 1
            epoch_samples += x.shape[0] * world
            if o.save_every and global_step % o.save_every == 0:
                save(global_step)
            if step % 10 == 0 or step == steps_per_epoch:
                losses.append(loss.item())  # reading the loss waits for the device: sparingly
            if o.max_steps and global_step >= o.max_steps:
                stopped = True
                break
        if dev != "cpu":
            loom.synchronize(dev)
        dt = time.perf_counter() - t0
        wait_share = train.stats()["wait_fraction"]
        train_seconds += dt
        train_samples += epoch_samples
        if ddp is not None:
            ddp.broadcast_buffers()  # each rank's BN statistics saw only its shard: evaluate rank 0's
        accuracy = evaluate(model, test)
        if not quiet:
            print(f"epoch {epoch}/{o.epochs}: train loss {np.mean(losses) if losses else float('nan'):.4f}, "
                  f"test accuracy {100 * accuracy:.2f}%, {epoch_samples / dt:.1f} samples/s, {dt:.1f} s, "
                  f"data wait {100 * wait_share:.2f}%", flush=True)
        if stopped:
            break
    if train_seconds == 0:
        accuracy = evaluate(model, test)  # resumed from a finished run: still report
    save(global_step)
    if rank == 0:
        print(f"result test_accuracy={accuracy:.4f} samples_per_sec="
              f"{train_samples / train_seconds if train_seconds > 0 else 0.0:.1f} model={o.model} epochs={o.epochs} "
              f"device={dev} train_seconds={train_seconds:.1f} data_wait_share={wait_share:.4f} "
              f"precision={model.precision} format={fmt} loss_scale={scaler.get_scale():g} "
              f"skipped_steps={scaler.steps_skipped} world_size={world}", flush=True)
    if ddp is not None:
        ddp.close()
    comm.close()


if __name__ == "__main__":
    main()
