#!/usr/bin/env python3
"""linear_chain_bf16_emulation.py LIBLOOM — the float64 emulation behind the
bf16 tolerance of tests/test_cuda_paths.c's cuda_linear chained tests.

Builds that test's MLP (37-100-75-10, seeds 21 and 22, batch 33) with
libloom on the CPU (Philox: the GPU draws the same numbers), then emulates
one step in float64 with bf16 rounding where each CUDA path rounds:
  fused forward:    y = bf16(relu(f32(x·wᵀ) + b))        (RELU_AUX_BIAS)
  unfused forward:  y = relu(bf16(bf16(x·wᵀ) + b))       (GEMM, bias, ReLU)
  fused backward:   dZ_prev = bf16(mask ⊙ dZ·W), db_prev = Σ unrounded (DRELU_BGRAD)
  unfused backward: dZ_prev = bf16(dZ·W) ⊙ (y > 0),   db_prev = Σ rounded
and prints: ReLUs the two forwards decide differently, gradient elements
past the test's tolerance (|a - b| <= atol + rtol·|b|) for whole runs and for
the backward alone on the fused forward, and the worst-case bound derived in
the test's comment against its tolerance. Needs numpy.
"""
import ctypes as C
import sys

import numpy as np

lib = C.CDLL(sys.argv[1] if len(sys.argv) > 1 else "libloom.so")


class Device(C.Structure):
    _fields_ = [("kind", C.c_int32), ("index", C.c_int32)]


CPU, F32 = Device(0, 0), 0
lib.loom_mlp_new.restype = C.c_void_p
lib.loom_mlp_new.argtypes = [C.c_int64, C.c_int, C.POINTER(C.c_int64), C.c_int64, Device]
lib.loom_randn.restype = C.c_void_p
lib.loom_randn.argtypes = [C.c_int, C.POINTER(C.c_int64), C.c_int, Device]
lib.loom_module_param.restype = C.c_void_p
lib.loom_module_param.argtypes = [C.c_void_p, C.c_int]
lib.loom_tensor_numel.restype = C.c_int64
lib.loom_tensor_numel.argtypes = [C.c_void_p]
lib.loom_to_host.argtypes = [C.c_void_p, C.c_void_p, C.c_size_t, C.c_int]
lib.loom_manual_seed.argtypes = [C.c_uint64]


def host(t, shape):
    n = lib.loom_tensor_numel(t)
    a = np.empty(n, dtype=np.float32)
    assert lib.loom_to_host(t, a.ctypes.data, n * 4, F32) == 0
    return a.reshape(shape).astype(np.float64)


lib.loom_manual_seed(21)
hidden = (C.c_int64 * 2)(100, 75)
m = lib.loom_mlp_new(37, 2, hidden, 10, CPU)
W1, b1, W2, b2, W3, b3 = (host(lib.loom_module_param(m, i), s) for i, s in
                          enumerate([(100, 37), (100,), (75, 100), (75,), (10, 75), (10,)]))
lib.loom_manual_seed(22)
x = host(lib.loom_randn(2, (C.c_int64 * 2)(33, 37), F32, CPU), (33, 37))
lab = np.array([(i * 7) % 10 for i in range(33)])


def bf16(a):
    u = np.asarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16  # round to nearest even
    return r.astype(np.uint32).view(np.float32).astype(np.float64)


def f32(a):
    return np.asarray(a, dtype=np.float32).astype(np.float64)


Wb, bb, xb = [bf16(W1), bf16(W2), bf16(W3)], [bf16(b1), bf16(b2), bf16(b3)], bf16(x)


def forward(fused):
    a, hs, masks = xb, [xb], []
    for l in range(3):
        acc = f32(a @ Wb[l].T)
        z = f32(acc + bb[l]) if fused else bf16(bf16(acc) + bb[l])
        if l < 2:
            masks.append(z > 0)
            a = bf16(np.maximum(z, 0)) if fused else np.maximum(z, 0)
        else:
            a = bf16(z) if fused else z
        hs.append(a)
    return hs, masks


def backward(hs, masks, fused):
    logits = hs[3]
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    p[np.arange(33), lab] -= 1
    dz, g = bf16(f32(p / 33)), {}
    for l in (2, 1, 0):
        g[2 * l] = bf16(dz.T @ hs[l])
        if l == 2:
            g[5] = bf16(dz.sum(0))
        if l == 0:
            break
        acc = f32(dz @ Wb[l])
        if fused:
            masked = np.where(masks[l - 1], acc, 0)
            dz = bf16(masked)
            g[2 * l - 1] = bf16(masked.sum(0))
        else:
            dz = bf16(acc) * (hs[l] > 0)
            g[2 * l - 1] = bf16(dz.sum(0))
    return [g[i] for i in range(6)]


def over(a, b, atol, rtol):
    return sum(int((np.abs(ga - gb) > atol + rtol * np.abs(gb)).sum()) for ga, gb in zip(a, b))


hf, mf = forward(True)
hu, mu = forward(False)
print("ReLUs decided differently by the fused and unfused forwards:", [int((a != b).sum()) for a, b in zip(mf, mu)])
Gf, Gu, Gfu = backward(hf, mf, True), backward(hu, mu, False), backward(hf, mf, False)
for atol in (1e-3, 2e-3):
    print(f"atol {atol}, rtol 3e-2: whole runs {over(Gf, Gu, atol, 3e-2)} elements over, "
          f"same forward {over(Gf, Gfu, atol, 3e-2)}")
print("same forward, largest |difference|:", max(float(np.abs(a - b).max()) for a, b in zip(Gf, Gfu)))
# The derived worst case (see the test): one bf16 step u = 2^-7 in every dZ entry, carried down the chain.
u = 2.0 ** -7
p = np.exp(hf[3] - hf[3].max(1, keepdims=True))
p /= p.sum(1, keepdims=True)
p[np.arange(33), lab] -= 1
dz3 = bf16(f32(p / 33))
dz2 = bf16(np.where(mf[1], dz3 @ Wb[2], 0))
e2 = u * np.abs(dz2) * mf[1]
dz1 = bf16(np.where(mf[0], dz2 @ Wb[1], 0))
e1 = (u * np.abs(dz1) + e2 @ np.abs(Wb[1])) * mf[0]
bound = {0: e1.T @ np.abs(xb), 1: 2.0 ** -9 * np.abs(dz1).sum(0) + e1.sum(0),
         2: e2.T @ np.abs(hf[1]), 3: 2.0 ** -9 * np.abs(dz2).sum(0) + e2.sum(0)}
for i, name in enumerate(["w1", "b1", "w2", "b2"]):
    B = bound[i] + u * np.abs(Gfu[i])
    for atol in (1e-3, 2e-3):
        print(f"{name}: bound max {B.max():.3g}, largest bound / tolerance at atol {atol}: "
              f"{float(np.max(B / (atol + 3e-2 * np.abs(Gfu[i])))):.3f}")
