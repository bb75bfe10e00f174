#!/usr/bin/env python3
"""pytorch_transformer_ops.py — PyTorch's side of bench_transformer_ops.c:
the same ops and shapes, forward + backward from sum(y * g), median of REPS
steps after one warm-up, printed in the same line format with impl=pytorch.

    /usr/bin/python3 bench/transformer_ops/pytorch_transformer_ops.py [threads=2] [reps=5] [filter]

torch 1.13 (Debian's python3-torch) has no F.scaled_dot_product_attention:
attention is written out as models did before it (q kᵀ / sqrt(D), causal
mask, softmax, @ v), which stores the [T, T] scores. The final projection +
cross-entropy is F.cross_entropy(x @ w.t(), labels), which stores the
[N, vocab] logits."""
import math
import statistics
import sys
import time

import torch
import torch.nn.functional as F

threads = int(sys.argv[1]) if len(sys.argv) > 1 else 2
reps = int(sys.argv[2]) if len(sys.argv) > 2 else 5
filt = sys.argv[3] if len(sys.argv) > 3 else None
torch.set_num_threads(threads)
torch.manual_seed(1)

CASES = [
    ("attention_causal", (4, 6, 256, 64), 0), ("attention_causal", (1, 2, 1024, 64), 0),
    ("layer_norm", (1024, 384), 0), ("gelu", (1024, 1536), 0),
    ("linear_cross_entropy", (1024, 384), 65), ("linear_cross_entropy", (64, 768), 50257),
]


def leaf(*shape):
    return torch.randn(*shape, requires_grad=True)


for op, sh, vocab in CASES:
    if filt and filt not in op:
        continue
    D = sh[-1]
    if op == "attention_causal":
        q, k, v = leaf(*sh), leaf(*sh), leaf(*sh)
        g = torch.randn(*sh)
        T = sh[-2]
        mask = torch.ones(T, T, dtype=torch.bool).triu(1)
        params = [q, k, v]

        def fwd():
            s = (q @ k.transpose(-2, -1)) / math.sqrt(D)
            return (torch.softmax(s.masked_fill(mask, float("-inf")), dim=-1) @ v * g).sum()
    elif op == "layer_norm":
        x, w, b = leaf(*sh), leaf(D), leaf(D)
        g = torch.randn(*sh)
        params = [x, w, b]

        def fwd():
            return (F.layer_norm(x, [D], w, b, 1e-5) * g).sum()
    elif op == "gelu":
        x = leaf(*sh)
        g = torch.randn(*sh)
        params = [x]

        def fwd():
            return (F.gelu(x, approximate="tanh") * g).sum()
    else:
        x, w = leaf(*sh), leaf(vocab, D)
        lab = torch.tensor([(i * 7919) % vocab for i in range(sh[0])])
        params = [x, w]

        def fwd():
            return F.cross_entropy(x @ w.t(), lab)

    def step():
        loss = fwd()
        loss.backward()
        for p in params:
            p.grad = None

    step()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    shape = "x".join(str(s) for s in sh) + ("_v%d" % vocab if vocab else "")
    print("bench=transformer_ops op=%s shape=%s threads=%d impl=pytorch ms=%.3f" %
          (op, shape, threads, 1e3 * statistics.median(times)), flush=True)
