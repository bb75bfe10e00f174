#!/usr/bin/env python3
"""pytorch_cnn_ops.py — PyTorch's side of bench_cnn_ops.c: the same ops,
shapes, formats and byte counts, timed the same way (best of ROUNDS batches
of >= 30 ms), printed in the same line format with impl=pytorch.

    /usr/bin/python3 bench/cnn_ops/pytorch_cnn_ops.py [threads=2] [rounds=5] [filter]

Batch norm + ReLU is F.batch_norm then F.relu_ (PyTorch has no fused CPU
kernel); backward ops time autograd's backward of that forward (through
torch.autograd.grad with the forward graph retained), which is what a
training step runs. memcpy_gbps is a tensor copy_ of bytes/2."""
import sys
import time

import torch
import torch.nn.functional as F

threads = int(sys.argv[1]) if len(sys.argv) > 1 else 2
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
filt = sys.argv[3] if len(sys.argv) > 3 else None
torch.set_num_threads(threads)
torch.manual_seed(1)

CASES = [
    ("batch_norm_relu_train_fwd", (128, 16, 32, 32)), ("batch_norm_relu_train_fwd", (128, 64, 8, 8)),
    ("batch_norm_relu_train_bwd", (128, 16, 32, 32)), ("batch_norm_relu_train_bwd", (128, 64, 8, 8)),
    ("batch_norm_eval_fwd", (128, 16, 32, 32)), ("add_relu_fwd", (128, 16, 32, 32)),
    ("add_relu_bwd", (128, 16, 32, 32)), ("max_pool3x3s2_fwd", (32, 64, 56, 56)),
    ("max_pool3x3s2_bwd", (32, 64, 56, 56)), ("avg_pool2x2_fwd", (128, 32, 16, 16)),
    ("avg_pool2x2_bwd", (128, 32, 16, 16)), ("global_avg_pool_fwd", (128, 64, 8, 8)),
    ("global_avg_pool_bwd", (128, 64, 8, 8)), ("dropout_fwd", (128, 16, 32, 32)), ("dropout_bwd", (128, 16, 32, 32)),
    ("grad_accumulate", (128, 16, 32, 32)),
]


def best_time(fn):
    best = 1e30
    iters = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        t = time.perf_counter() - t0
        if t >= 0.03:
            break
        iters *= 2
    return t / iters


def make(op, shape, nhwc):
    mf = torch.channels_last if nhwc else torch.contiguous_format
    x = torch.randn(shape).contiguous(memory_format=mf)
    x2 = torch.randn(shape).contiguous(memory_format=mf)
    C = shape[1]
    n = x.numel()
    rm, rv, w, b = torch.zeros(C), torch.ones(C), torch.ones(C, requires_grad=True), torch.zeros(C, requires_grad=True)
    if op == "batch_norm_relu_train_fwd":
        return (lambda: F.relu_(F.batch_norm(x, rm, rv, w, b, training=True))), 2 * n * 4
    if op == "batch_norm_eval_fwd":
        return (lambda: F.batch_norm(x, rm, rv, w, b, training=False)), 2 * n * 4
    if op == "add_relu_fwd":
        return (lambda: torch.relu_(x + x2)), 3 * n * 4
    if op == "grad_accumulate":
        return (lambda: x.add_(x2)), 3 * n * 4
    xg = x.detach().clone().requires_grad_(True)
    if op == "batch_norm_relu_train_bwd":
        y = F.relu(F.batch_norm(xg, rm, rv, w, b, training=True))
        return (lambda: torch.autograd.grad(y, (xg, w, b), x2, retain_graph=True)), 3 * n * 4
    if op == "add_relu_bwd":
        x2g = x2.detach().clone().requires_grad_(True)
        y = torch.relu(xg + x2g)
        return (lambda: torch.autograd.grad(y, (xg, x2g), x2, retain_graph=True)), 4 * n * 4
    if op.startswith("max_pool"):
        f = lambda t: F.max_pool2d(t, 3, 2, 1)
    elif op.startswith("avg_pool"):
        f = lambda t: F.avg_pool2d(t, 2)
    elif op.startswith("global"):
        f = lambda t: F.adaptive_avg_pool2d(t, 1)
    elif op.startswith("dropout"):
        f = lambda t: F.dropout(t, 0.5, True)
    if op.endswith("_fwd"):
        y = f(x)
        extra = y.numel() * 4 if op.startswith("max_pool") else 0
        if op.startswith("dropout"):
            return (lambda: f(x)), 2 * n * 4 + n // 8
        return (lambda: f(x)), n * 4 + y.numel() * 4 + extra
    y = f(xg)
    gy = torch.randn(y.shape).contiguous(memory_format=mf)
    extra = y.numel() * 4 if op.startswith("max_pool") else 0
    nbytes = 2 * n * 4 + n // 8 if op.startswith("dropout") else n * 4 + y.numel() * 4 + extra
    return (lambda: torch.autograd.grad(y, xg, gy, retain_graph=True)), nbytes


for op, shape in CASES:
    if filt and filt not in op:
        continue
    for nhwc in (False, True):
        fn, nbytes = make(op, shape, nhwc)
        src = torch.ones(nbytes // 8)
        dst = torch.empty_like(src)
        best = best_mc = 1e30
        for _ in range(rounds):
            best = min(best, best_time(fn))
            best_mc = min(best_mc, best_time(lambda: dst.copy_(src)))
        gbps = nbytes / best / 1e9
        mgbps = 2 * src.numel() * 4 / best_mc / 1e9
        print("bench=cnn_ops impl=pytorch op=%s shape=%s format=%s dtype=f32 threads=%d ms=%.4f gbps=%.2f "
              "memcpy_gbps=%.2f vs_memcpy=%.3f" % (op, "x".join(map(str, shape)), "nhwc" if nhwc else "nchw", threads,
                                                  best * 1e3, gbps, mgbps, gbps / mgbps), flush=True)
