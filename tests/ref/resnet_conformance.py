#!/usr/bin/env python3
"""resnet_conformance.py IN OUT — the PyTorch side of
tests/test_resnet_conformance.c, run by that test (it needs torch and
torchvision: Debian's python3-torch and python3-torchvision).

IN (safetensors, written by loom) holds a model's state under torchvision's
names ("start.conv1.weight", ..., "start.bn1.num_batches_tracked") after loom
trained it for two SGD steps, the batches x0, x1, x2 with labels y0, y1, y2,
and metadata: arch (resnet18/34/50/101/152: torchvision.models;
resnet20/32/44/56/110: the CIFAR twin in resnet_torch.py), shortcut (A or B),
num_classes, seed.

This side loads the state strictly (every name and shape must match) and, on
(x2, y2), runs one training forward + backward and an eval forward, in
float64 (the reference) and again in float32 (to measure what float32
rounding alone does to each quantity: deep BatchNorm networks have gradients
that float32 gets only to a few digits). OUT (safetensors) gets, as float32
(int64 for num_batches_tracked):
  logits_train, loss        the training forward
  grad.NAME                 every parameter's gradient from its backward
  state.NAME                every buffer after that forward (running
                            statistics, num_batches_tracked)
  logits_eval               eval mode on x2
  f32err.Q                  for each Q above, how far float32-sized errors
                            move it: the largest of max|R - float64| /
                            max|float64| over R = PyTorch's own float32 run
                            and two float64 runs from inputs and state
                            perturbed by a relative 2^-24 ([1])
and, for the other direction, a model with PyTorch's own initialisation
(torch.manual_seed(seed)) after two training forwards on x0, x1 (so that the
running statistics are not 0 / 1):
  tv.NAME                   its parameters and buffers
  tv_logits_eval            its eval-mode logits on x2 (float64)

safetensors comes from the safetensors package when installed, else a
minimal reader/writer of the format (header length, JSON header, raw
little-endian data)."""
import json
import os
import struct
import sys

import torch
import torch.nn.functional as F
import torchvision

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import resnet_torch  # noqa: E402  (the CIFAR twin)

DTYPES = {"F32": torch.float32, "F64": torch.float64, "I64": torch.int64, "I32": torch.int32, "U8": torch.uint8,
          "F16": torch.float16, "BF16": torch.bfloat16}


def load(path):
    try:
        from safetensors import safe_open
        with safe_open(path, framework="pt") as f:
            return {k: f.get_tensor(k) for k in f.keys()}, dict(f.metadata() or {})
    except ImportError:
        pass
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    data = raw[8 + n:]
    out = {}
    for k, v in header.items():
        a, b = v["data_offsets"]
        t = torch.frombuffer(bytearray(data[a:b]), dtype=DTYPES[v["dtype"]]) if b > a else \
            torch.empty(0, dtype=DTYPES[v["dtype"]])
        out[k] = t.reshape(v["shape"])
    return out, meta


def save(path, tensors):
    tensors = {k: v.detach().contiguous().cpu() for k, v in tensors.items()}
    try:
        from safetensors.torch import save_file
        save_file(tensors, path)
        return
    except ImportError:
        pass
    names = {v: k for k, v in DTYPES.items()}
    header, blobs, at = {}, [], 0
    for k, v in tensors.items():
        b = v.numpy().tobytes()
        header[k] = {"dtype": names[v.dtype], "shape": list(v.shape), "data_offsets": [at, at + len(b)]}
        blobs.append(b)
        at += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def build(arch, shortcut, num_classes):
    if arch in ("resnet18", "resnet34", "resnet50", "resnet101", "resnet152"):
        return getattr(torchvision.models, arch)(num_classes=num_classes)
    blocks = {"resnet20": 3, "resnet32": 5, "resnet44": 7, "resnet56": 9, "resnet110": 18}[arch]
    return resnet_torch.ResNet(resnet_torch.BasicBlock, [blocks] * 3, num_classes, cifar=True, shortcut=shortcut)


def f32(t):
    return t.detach().float() if t.is_floating_point() else t.detach()


def perturbed(v, gen):
    """v (float64) with every element moved by a relative 2^-24 at most:
    what rounding to float32 does to an input."""
    return v * (1 + (torch.rand(v.shape, generator=gen, dtype=torch.float64) * 2 - 1) * 2.0 ** -24)


def step(arch, shortcut, classes, state, x, y, dtype, gen=None):
    """Training forward + backward and eval forward from state, in dtype;
    with gen, the state's floats and x perturbed at float32's rounding."""
    model = build(arch, shortcut, classes)
    state = {k: v if v.dtype == torch.int64 else v.to(dtype) for k, v in state.items()}
    if gen is not None:
        state = {k: v if v.dtype == torch.int64 else perturbed(v, gen) for k, v in state.items()}
        x = perturbed(x.to(dtype), gen)
    model.load_state_dict(state, strict=True)
    model.to(dtype).train()
    logits = model(x.to(dtype))
    loss = F.cross_entropy(logits, y)
    loss.backward()
    out = {"logits_train": logits.detach(), "loss": loss.detach().reshape(1)}
    for name, p in model.named_parameters():
        out["grad." + name] = p.grad
    for name, b in model.named_buffers():
        out["state." + name] = b.detach().clone()
    model.eval()
    with torch.no_grad():
        out["logits_eval"] = model(x.to(dtype))
    return out


def main():
    src, dst = sys.argv[1], sys.argv[2]
    t, meta = load(src)
    arch, shortcut, classes, seed = meta["arch"], meta["shortcut"], int(meta["num_classes"]), int(meta["seed"])
    state = {k[len("start."):]: v for k, v in t.items() if k.startswith("start.")}
    ref = step(arch, shortcut, classes, state, t["x2"], t["y2"].long(), torch.float64)
    gen = torch.Generator().manual_seed(seed)
    runs = [step(arch, shortcut, classes, state, t["x2"], t["y2"].long(), torch.float32)]
    runs += [step(arch, shortcut, classes, state, t["x2"], t["y2"].long(), torch.float64, gen) for _ in range(2)]
    out = {}
    for k, v in ref.items():
        out[k] = f32(v)
        if v.is_floating_point():
            scale = v.abs().max().item()
            dev = max((r[k].double() - v).abs().max().item() for r in runs)
            out["f32err." + k] = torch.tensor([dev / scale if scale > 0 else dev], dtype=torch.float32)

    # The other direction: PyTorch's own initialisation.
    torch.manual_seed(seed)
    tv = build(arch, shortcut, classes).train()
    with torch.no_grad():
        tv(t["x0"])
        tv(t["x1"])
    for name, v in tv.state_dict().items():
        out["tv." + name] = v
    tv.double().eval()
    with torch.no_grad():
        out["tv_logits_eval"] = f32(tv(t["x2"].double()))
    save(dst, out)
    print(f"resnet_conformance.py: {arch} (torch {torch.__version__}, torchvision {torchvision.__version__}): "
          f"{len(out)} tensors written")


if __name__ == "__main__":
    main()
