#!/usr/bin/env python3
"""The PyTorch twin of loom-gpt (issue 28 part 4): the same model
(tests/ref/gpt_torch.py, nanoGPT's structure and names), data (the file's
bytes, 90/10 split), batches (the same splitmix64 windows per (seed, step)),
optimizer (AdamW, betas 0.9/0.99, eps 1e-8, weight decay on 2-D parameters
only), schedule (loom_lr_cosine: linear warm-up, cosine to min-lr), gradient
clipping and evaluation (the same validation batches, eval mode), and the
same last line:

    result val_loss=X tokens_per_sec=Y

--init FILE starts from a loom checkpoint's weights (the model.* tensors of
`loom-gpt --max-steps 0 --save FILE` with the same flags), so that with
dropout 0 both sides train the same network on the same batches and their
losses differ only by float32 rounding; without it the twin uses nanoGPT's
own initialization from --seed (same distribution, other numbers).

    gpt_twin.py --data FILE [--layers 6 --heads 6 --embd 384 --block 256 --steps 5000 --batch 64 ...]

On a GPU (the issue's GPU target: GPT-2 124M at T=1024 in bf16 against
F.scaled_dot_product_attention, which gpt_torch.py uses where torch has it):
--device cuda, --precision bf16|fp16 (torch.autocast; fp16 with a GradScaler),
--tokens FILE --vocab N for a nanoGPT-style flat file of little-endian uint16
token ids instead of the bytes of --data (as loom-gpt's --tokens).
tokens_per_sec leaves out the first step (library initialisation, the
allocator's first growth), as loom-gpt does.
"""
import argparse
import json
import math
import os
import struct
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "ref"))
import gpt_torch  # noqa: E402

M = (1 << 64) - 1


def rng_next(s):
    """loom-gpt's splitmix64: (new state, value)."""
    s = (s + 0x9E3779B97F4A7C15) & M
    z = s
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
    return s, z ^ (z >> 31)


def rng_for(seed, step):
    _, v = rng_next((seed * 0xD1B54A32D192ED03 + step) & M)
    return v


def batch(ids, lo, hi, B, T, rng):
    xs, ys = [], []
    for _ in range(B):
        rng, v = rng_next(rng)
        at = lo + v % (hi - lo - T)
        xs.append(ids[at:at + T])
        ys.append(ids[at + 1:at + T + 1])
    return torch.stack(xs).long(), torch.stack(ys).long()


def load_init(path):
    """model.<name> tensors (f32) of a loom checkpoint."""
    out = {}
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        header.pop("__metadata__", None)
        for k, v in header.items():
            if not k.startswith("model.") or v["dtype"] != "F32":
                continue
            a, b = v["data_offsets"]
            f.seek(8 + n + a)
            out[k[len("model."):]] = torch.frombuffer(bytearray(f.read(b - a)), dtype=torch.float32).reshape(v["shape"])
    return out


def evaluate(model, ids, lo, hi, a):
    model.eval()
    rng, total = rng_for(a.seed, -2 - 7), 0.0
    with torch.no_grad():
        for _ in range(a.eval_batches):
            # one generator carries on across the evaluation's batches, as in loom-gpt
            xs, ys = [], []
            for _ in range(a.batch):
                rng, v = rng_next(rng)
                at = lo + v % (hi - lo - a.block)
                xs.append(ids[at:at + a.block])
                ys.append(ids[at + 1:at + a.block + 1])
            dev = next(model.parameters()).device
            with torch.autocast(dev.type, dtype=a.amp_dtype, enabled=a.amp_dtype is not None):
                _, loss = model(torch.stack(xs).long().to(dev), torch.stack(ys).long().to(dev))
            total += loss.item()
    model.train()
    return total / a.eval_batches


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data")
    p.add_argument("--tokens")
    p.add_argument("--vocab", type=int, default=0)
    p.add_argument("--device", default="cpu")
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "fp16"])
    for k, v in dict(layers=6, heads=6, embd=384, block=256, steps=5000, batch=64, warmup=-1, eval_batches=20,
                     seed=1337, threads=0).items():
        p.add_argument("--" + k.replace("_", "-"), type=int, default=v)
    for k, v in dict(lr=1e-3, min_lr=-1.0, dropout=0.2, weight_decay=0.1, grad_clip=1.0).items():
        p.add_argument("--" + k.replace("_", "-"), type=float, default=v)
    p.add_argument("--init")
    p.add_argument("--quiet", action="store_true")
    a = p.parse_args()
    if a.min_lr < 0:
        a.min_lr = a.lr / 10
    if a.warmup < 0:
        a.warmup = a.steps // 50
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    if (a.data is None) == (a.tokens is None):
        p.error("give one of --data FILE or --tokens FILE")
    if a.tokens:
        raw = open(a.tokens, "rb").read()
        ids = torch.frombuffer(bytearray(raw), dtype=torch.int16).to(torch.int32) & 0xFFFF
        vocab = a.vocab if a.vocab > 0 else int(ids.max()) + 1
    else:
        raw = open(a.data, "rb").read()
        chars = sorted(set(raw))
        index = {c: i for i, c in enumerate(chars)}
        ids = torch.tensor([index[b] for b in raw], dtype=torch.uint8)
        vocab = len(chars)
    n_tok = len(ids)
    n_train = n_tok * 9 // 10
    dev = torch.device(a.device)
    cfg = gpt_torch.Config(vocab, a.block, a.layers, a.heads, a.embd, a.dropout, True)
    torch.manual_seed(a.seed)
    model = gpt_torch.GPT(cfg)
    if a.init:
        missing, unexpected = model.load_state_dict(load_init(a.init), strict=False)
        assert missing == ["lm_head.weight"] and not unexpected, (missing, unexpected)
    model.to(dev)
    opt = torch.optim.AdamW(model.optimizer_groups(a.weight_decay), lr=a.lr, betas=(0.9, 0.99), eps=1e-8)
    amp_dtype = a.amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(a.precision)
    scaler = torch.cuda.amp.GradScaler() if a.precision == "fp16" else None
    train_s, timed_steps = 0.0, 0
    for step in range(a.steps):
        t0 = time.perf_counter()
        lr = gpt_torch.lr_at(step, a.lr, a.warmup, a.steps, a.min_lr)
        for g in opt.param_groups:
            g["lr"] = lr
        x, y = batch(ids, 0, n_train, a.batch, a.block, rng_for(a.seed, step))
        x, y = x.to(dev), y.to(dev)
        with torch.autocast(dev.type, dtype=amp_dtype, enabled=amp_dtype is not None):
            _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        if scaler:
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
        else:
            loss.backward()
        if a.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.grad_clip)
        if scaler:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        lv = loss.item()  # waits for the GPU
        if step > 0 or a.steps == 1:
            train_s += time.perf_counter() - t0
            timed_steps += 1
        if not a.quiet and ((step + 1) % 50 == 0 or step + 1 == a.steps):
            print("step %d/%d loss %.4f" % (step + 1, a.steps, lv), flush=True)
    val = evaluate(model, ids, n_train, n_tok, a)
    print("result val_loss=%.4f tokens_per_sec=%.0f" % (val, timed_steps * a.batch * a.block / train_s))


if __name__ == "__main__":
    main()
