#!/usr/bin/env python3
"""PyTorch's side of tests/test_gpt_conformance.c: loom's GPT against the
nanoGPT-style twin (gpt_torch.py) on the same weights.

    gpt_conformance.py DIR

DIR/in.safetensors (written by the test) holds loom's parameters under their
names (the twin's state_dict keys), idx and targets [B, T] (i64) and the
config in its metadata (vocab_size, block_size, n_layer, n_head, n_embd,
bias). This script loads the weights into the twin (lm_head tied to wte, so
load_state_dict gets no lm_head.weight: strict=False, checked to miss only
that), and writes DIR/out.safetensors (float32: loom has no float64 tensors; the
rounding, 6e-8 relative, is far below the test's tolerance):
  logits            the twin's logits [B, T, V], computed in float64;
  loss              its cross-entropy (0-d);
  grad.NAME         d loss / d parameter, float64, for every parameter;
  f32err.X          max|float32 - float64| / max|float64| of the same
                    quantity computed by the twin in float32: the size of
                    float32's own rounding, which the test's tolerance scales.
"""
import json
import os
import struct
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt_torch  # noqa: E402

DTYPES = {"F32": torch.float32, "F64": torch.float64, "I64": torch.int64, "I32": torch.int32, "U8": torch.uint8}


def load(path):
    out = {}
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        meta = header.pop("__metadata__", {})
        for k, v in header.items():
            a, b = v["data_offsets"]
            f.seek(8 + n + a)
            t = torch.frombuffer(bytearray(f.read(b - a)), dtype=DTYPES[v["dtype"]]) if b > a else \
                torch.empty(0, dtype=DTYPES[v["dtype"]])
            out[k] = t.reshape(v["shape"])
    return out, meta


def save(path, tensors, metadata):
    tensors = {k: v.detach().to(torch.float32).contiguous().cpu() for k, v in tensors.items()}
    names = {v: k for k, v in DTYPES.items()}
    header, at = {"__metadata__": {k: str(v) for k, v in metadata.items()}}, 0
    for k, v in tensors.items():
        size = v.numel() * v.element_size()
        header[k] = {"dtype": names[v.dtype], "shape": list(v.shape), "data_offsets": [at, at + size]}
        at += size
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for v in tensors.values():
            f.write(memoryview(v.numpy()).cast("B"))


def run(cfg, state, idx, targets, dtype):
    torch.manual_seed(0)
    model = gpt_torch.GPT(cfg).to(dtype)
    missing, unexpected = model.load_state_dict({k: v.to(dtype) for k, v in state.items()}, strict=False)
    assert missing == ["lm_head.weight"] and not unexpected, (missing, unexpected)
    assert model.lm_head.weight is model.transformer.wte.weight
    model.eval()  # dropout is 0 anyway; eval also covers F.scaled_dot_product_attention's dropout_p
    logits, _ = model(idx)
    _, loss = model(idx, targets)
    loss.backward()
    grads = {"grad." + n: p.grad.detach().clone() for n, p in model.named_parameters()}
    return logits.detach(), loss.detach(), grads


def main():
    d = sys.argv[1]
    t, meta = load(os.path.join(d, "in.safetensors"))
    idx, targets = t.pop("idx"), t.pop("targets")
    cfg = gpt_torch.Config(int(meta["vocab_size"]), int(meta["block_size"]), int(meta["n_layer"]),
                           int(meta["n_head"]), int(meta["n_embd"]), 0.0, meta["bias"] == "1")
    names = [n for n, _ in gpt_torch.GPT(cfg).named_parameters()]
    assert sorted(names) == sorted(t), ("names differ", sorted(set(names) ^ set(t)))
    l64, s64, g64 = run(cfg, t, idx, targets, torch.float64)
    l32, s32, g32 = run(cfg, t, idx, targets, torch.float32)

    def err(a, b):
        return ((a.double() - b).abs().max() / b.abs().max().clamp_min(1e-300)).reshape(())

    out = {"logits": l64, "loss": s64.reshape(()), "f32err.logits": err(l32, l64), "f32err.loss": err(s32, s64)}
    for k in g64:
        out[k] = g64[k]
        out["f32err." + k] = err(g32[k], g64[k])
    save(os.path.join(d, "out.safetensors"), out, {"torch": torch.__version__, "params": ",".join(names)})
    print("gpt conformance: torch %s, %d parameters, loss %.6f" % (torch.__version__, len(names), s64.item()))


if __name__ == "__main__":
    main()
