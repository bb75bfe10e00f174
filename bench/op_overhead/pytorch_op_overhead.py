#!/usr/bin/env python3
"""pytorch_op_overhead.py — the anchor of bench_op_overhead.c: c = a + b on
1-element f32 tensors in PyTorch eager, without and with autograd recording
(a requires grad), timed exactly like the C side: batches of 200 ops on the
host clock, the device synchronized after each batch outside the timer;
best of --reps.

Usage: pytorch_op_overhead.py [--device cpu|cuda] [--iters N] [--reps R]
Prints: bench=op_overhead impl=torch device=... grad=0|1 iters=... host_us_per_op=... wall_us_per_op=...
"""
import argparse
import time

import torch

BATCH = 200


def run(dev, grad, iters):
    a = torch.ones(1, device=dev, requires_grad=bool(grad))
    b = torch.ones(1, device=dev)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    host = 0.0
    sync()
    w0 = time.perf_counter()
    n = 0
    while n < iters:
        t0 = time.perf_counter()
        for _ in range(BATCH):
            c = a + b
        del c
        host += time.perf_counter() - t0
        sync()
        n += BATCH
    wall = time.perf_counter() - w0
    return host / n * 1e6, wall / n * 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--iters", type=int, default=200000)
    ap.add_argument("--reps", type=int, default=3)
    o = ap.parse_args()
    dev = torch.device(o.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        print(f'bench=op_overhead impl=torch device={o.device} skipped reason="torch sees no GPU"')
        return
    iters = max(o.iters, BATCH)
    for grad in (0, 1):
        run(dev, grad, iters // 10)
        best = min((run(dev, grad, iters) for _ in range(max(o.reps, 1))), key=lambda r: r[0])
        bw = best[1]
        print(f"bench=op_overhead impl=torch device={dev} grad={grad} iters={iters} host_us_per_op={best[0]:.3f} "
              f"wall_us_per_op={bw:.3f} torch={torch.__version__} threads={torch.get_num_threads()}")


if __name__ == "__main__":
    main()
