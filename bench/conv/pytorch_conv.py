#!/usr/bin/env python3
"""pytorch_conv.py — PyTorch's convolution on the conv shapes of ResNet-20
(the same table as bench_conv.c): forward, backward-data and
backward-filter, NCHW and channels-last, batch 128, f32, on the CPU (Debian's
python3-torch 1.13: its channels-last path is oneDNN) or CUDA.

Usage: /usr/bin/python3 bench/conv/pytorch_conv.py [--device cpu|cuda] [--threads 2]
           [--batch 128] [--reps 5] [--dataset cifar|fmnist|both]
           [--format nchw|nhwc|both] [--min-time 0.05] [--layer SUBSTRING]
Prints lines in bench_conv's format with path=pytorch:
  bench=conv device=cpu dataset=cifar layer=s1.conv3x3 shape=... fmt=nhwc pass=fwd path=pytorch ms=... gflops=...
and bench=conv_resnet20 ... path=pytorch step_conv_ms=... gflops=...
backward-data / backward-filter are aten.convolution_backward with only dX /
only dW asked for (what autograd calls). Each number is the best of --reps
batches of calls lasting >= --min-time seconds.
"""
import argparse
import sys
import time

try:
    import torch
except ImportError:
    sys.exit("pytorch_conv.py needs torch: run it with /usr/bin/python3 (Debian's python3-torch)")

CIFAR = [
    ("stem.conv3x3", 3, 16, 32, 3, 1, 1, True),
    ("s1.conv3x3", 16, 16, 32, 3, 1, 6, False),
    ("s2.down3x3", 16, 32, 32, 3, 2, 1, False),
    ("s2.short1x1", 16, 32, 32, 1, 2, 1, False),
    ("s2.conv3x3", 32, 32, 16, 3, 1, 5, False),
    ("s3.down3x3", 32, 64, 16, 3, 2, 1, False),
    ("s3.short1x1", 32, 64, 16, 1, 2, 1, False),
    ("s3.conv3x3", 64, 64, 8, 3, 1, 5, False),
]
FMNIST = [
    ("stem.conv3x3", 1, 16, 28, 3, 1, 1, True),
    ("s1.conv3x3", 16, 16, 28, 3, 1, 6, False),
    ("s2.down3x3", 16, 32, 28, 3, 2, 1, False),
    ("s2.short1x1", 16, 32, 28, 1, 2, 1, False),
    ("s2.conv3x3", 32, 32, 14, 3, 1, 5, False),
    ("s3.down3x3", 32, 64, 14, 3, 2, 1, False),
    ("s3.short1x1", 32, 64, 14, 1, 2, 1, False),
    ("s3.conv3x3", 64, 64, 7, 3, 1, 5, False),
]
PASSES = ["fwd", "bwd_data", "bwd_filter"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--dataset", default="both")
    ap.add_argument("--format", default="both")
    ap.add_argument("--min-time", type=float, default=0.05)
    ap.add_argument("--layer", default=None)
    a = ap.parse_args()
    dev = torch.device(a.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        print('bench=conv path=pytorch skipped reason="no CUDA device"')
        return
    torch.set_num_threads(a.threads)
    torch.set_grad_enabled(False)
    fmts = [f for f in ("nchw", "nhwc") if a.format in ("both", f)]
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)

    for dsname, layers in (("cifar", CIFAR), ("fmnist", FMNIST)):
        if a.dataset not in ("both", dsname):
            continue
        ms = {}
        for name, C, O, H, K, s, count, stem in layers:
            if a.layer and a.layer not in name:
                continue
            pad = K // 2
            OH = (H + 2 * pad - K) // s + 1
            flops = 2.0 * a.batch * O * OH * OH * C * K * K
            for fmt in fmts:
                mf = torch.channels_last if fmt == "nhwc" else torch.contiguous_format
                x = torch.randn(a.batch, C, H, H, device=dev).contiguous(memory_format=mf)
                w = torch.randn(O, C, K, K, device=dev).contiguous(memory_format=mf)
                gy = torch.randn(a.batch, O, OH, OH, device=dev).contiguous(memory_format=mf)

                def fwd():
                    return torch.nn.functional.conv2d(x, w, None, s, pad)

                def bwd(mask):
                    return torch.ops.aten.convolution_backward(gy, x, w, None, [s, s], [pad, pad], [1, 1], False,
                                                               [0, 0], 1, mask)

                fns = {"fwd": fwd, "bwd_data": lambda: bwd([True, False, False]),
                       "bwd_filter": lambda: bwd([False, True, False])}
                for p in PASSES:
                    if p == "bwd_data" and stem:
                        continue
                    f = fns[p]
                    f()
                    sync()
                    t0 = time.perf_counter()
                    f()
                    sync()
                    one = time.perf_counter() - t0
                    iters = max(1, int(a.min_time / max(one, 1e-9)) + 1)
                    best = 1e30
                    for _ in range(a.reps):
                        t0 = time.perf_counter()
                        for _ in range(iters):
                            f()
                        sync()
                        best = min(best, (time.perf_counter() - t0) / iters)
                    ms[(name, fmt, p)] = best * 1e3
                    print(f"bench=conv device={dev.type} dataset={dsname} layer={name} "
                          f"shape={a.batch}x{C}x{H}x{H}->{O},k{K},s{s} fmt={fmt} pass={p} path=pytorch dtype=f32 "
                          f"threads={a.threads} ms={best * 1e3:.3f} gflops={flops / best / 1e9:.1f}", flush=True)
        if a.layer:
            continue
        for fmt in fmts:
            tot = fl = 0.0
            for name, C, O, H, K, s, count, stem in layers:
                pad = K // 2
                OH = (H + 2 * pad - K) // s + 1
                f1 = 2.0 * a.batch * O * OH * OH * C * K * K
                for p in PASSES:
                    if p == "bwd_data" and stem:
                        continue
                    tot += count * ms[(name, fmt, p)]
                    fl += count * f1
            print(f"bench=conv_resnet20 device={dev.type} dataset={dsname} fmt={fmt} path=pytorch dtype=f32 "
                  f"threads={a.threads} batch={a.batch} step_conv_ms={tot:.2f} gflops={fl / (tot * 1e-3) / 1e9:.1f}")


if __name__ == "__main__":
    main()
