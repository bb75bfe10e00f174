#!/usr/bin/env python3
"""batch_norm_torch.py — the PyTorch numbers tests/test_ops_batch_norm.c
checks loom against (test torch_reference). Run with a Python that has torch
(Debian's /usr/bin/python3) and paste the output into the test when the case
changes:

    /usr/bin/python3 tests/ref/batch_norm_torch.py

Case: x [2, 3, 2, 2], x[i] = sin(0.37 i) * (1 + 0.5 c) + c (i the flat
index, c the channel), weight w[c] = 0.5 + 0.25 c, bias b[c] = 0.1 c - 0.1,
running stats starting at mean 0.2 c, var 1 + 0.5 c; two training steps
(momentum 0.1, then 0.3; the second on x * 0.5 + 1), ReLU(batch_norm(x)) on
the first step, then eval mode on x. The gradient of sum(y * gy),
gy[i] = cos(0.23 i), for the first step. Computed in float64."""
import math

import torch
import torch.nn.functional as F

N, C, H, W = 2, 3, 2, 2
x = torch.zeros(N, C, H, W, dtype=torch.float64)
flat = x.view(-1)
for i in range(flat.numel()):
    c = (i // (H * W)) % C
    flat[i] = float(torch.tensor(math.sin(0.37 * i) * (1 + 0.5 * c) + c, dtype=torch.float32))
w = torch.tensor([0.5 + 0.25 * c for c in range(C)], dtype=torch.float64, requires_grad=True)
b = torch.tensor([0.1 * c - 0.1 for c in range(C)], dtype=torch.float64, requires_grad=True)
rm = torch.tensor([0.2 * c for c in range(C)], dtype=torch.float64)
rv = torch.tensor([1 + 0.5 * c for c in range(C)], dtype=torch.float64)
x.requires_grad_(True)
y = F.relu(F.batch_norm(x, rm, rv, w, b, training=True, momentum=0.1, eps=1e-5))
gy = torch.tensor([math.cos(0.23 * i) for i in range(y.numel())], dtype=torch.float64).view_as(y)
(y * gy).sum().backward()
rm1, rv1 = rm.clone(), rv.clone()
x2 = (x.detach() * 0.5 + 1).float().double()
F.batch_norm(x2, rm, rv, w, b, training=True, momentum=0.3, eps=1e-5)
ye = F.batch_norm(x.detach(), rm, rv, w.detach(), b.detach(), training=False, eps=1e-5)


def arr(name, t):
    vals = ", ".join("%.9g" % v for v in t.detach().reshape(-1).tolist())
    print("static const double %s[%d] = {%s};" % (name, t.numel(), vals))


arr("TORCH_Y", y)
arr("TORCH_RM1", rm1)
arr("TORCH_RV1", rv1)
arr("TORCH_DX", x.grad)
arr("TORCH_DW", w.grad)
arr("TORCH_DB", b.grad)
arr("TORCH_RM2", rm)
arr("TORCH_RV2", rv)
arr("TORCH_YEVAL", ye)
