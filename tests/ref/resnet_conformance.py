#!/usr/bin/env python3
"""resnet_conformance.py DIR — the PyTorch side of
tests/test_resnet_conformance.c, run by that test (it needs torch and
torchvision: Debian's python3-torch and python3-torchvision). The test's
header comment says why the comparison is built this way, with numbers.

DIR holds what loom wrote:
  in.safetensors     a model's state under torchvision's names
                     ("start.conv1.weight", ..., "start.bn1.num_batches_tracked")
                     after loom trained it for two SGD steps, the batches
                     x0, x1, x2 with labels y0, y1, y2, and metadata: arch
                     (resnet18/34/50/101/152: torchvision.models;
                     resnet20/32/44/56/110: the CIFAR twin in resnet_torch.py),
                     shortcut (A or B), num_classes, seed, lr, momentum,
                     weight_decay
  loom.safetensors   loom's gradients ("grad.NAME") from one more training
                     forward + backward on (x2, y2)
  optim.safetensors  loom's checkpoint after those two steps (its SGD
                     momentum buffers: "optim.NAME.momentum_buffer")
and this script writes DIR/out.safetensors (float32; int64 for
num_batches_tracked):
  logits_train, loss, grad.NAME, state.NAME
                     the training forward + backward on (x2, y2) in float64,
                     every ReLU and max-pool on the side of its kink that
                     loom's gradients show loom took (see "Kinks" below)
  logits_eval        eval mode on x2 after that forward, float64
  f32err.Q           for each Q above: max|R - float64| / max|float64| for R
                     = PyTorch's own float32 run with every kink on
                     float64's side, i.e. the smooth rounding error of a
                     float32 implementation
  sgd.update.NAME, sgd.momentum_buffer.NAME
                     torch.optim.SGD's third step (float64) from the start
                     state, loom's momentum buffers and loom's gradients:
                     the parameter's change and the new buffer
  tv.NAME, tv_logits_eval
                     the other direction: a model with PyTorch's own
                     initialisation (torch.manual_seed(seed)) after two
                     training forwards on x0, x1 (so that the running
                     statistics are not 0 / 1), and its eval logits on x2
                     (float64)
with metadata kinks (how many were candidates), loom_flips and
torch_f32_flips (how many loom's and PyTorch float32's gradients show on the
other side), torch_f32_recovered ("yes" when the fit below finds exactly
the kinks PyTorch's float32 run is known to have flipped) and loom_kinks (a
description of loom's).

Kinks. A ReLU whose input lies within float32's rounding error of 0, or a
max-pool window whose two largest inputs are that close, can go either way
in float32; when it goes the other way than in float64 it changes the
gradients by a discrete amount (BatchNorm makes that amount large: at batch 2
one flip moves a whole layer's gradients by up to 1e-1). Which ones go which
way differs between any two float32 implementations. So this script lists
the candidates (ReLU inputs within KINK_SIGMA standard deviations of
float32's forward error of 0, per channel; max-pool pairs within that of a
tie), computes each one's first-order effect on every gradient
(torch.autograd.grad from that element, in float64), finds by least squares
which of them explain loom's gradient error (a coefficient near 1 means
"flipped"), and reruns float64 with those kinks forced to loom's side. The
same fit is applied to PyTorch's own float32 run, whose flips are known, as
a check of the method (torch_f32_recovered).

safetensors comes from the safetensors package when installed, else a
minimal reader/writer of the format (header length, JSON header, raw
little-endian data)."""
import copy
import json
import os
import struct
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import resnet_torch  # noqa: E402  (the CIFAR twin)

DTYPES = {"F32": torch.float32, "F64": torch.float64, "I64": torch.int64, "I32": torch.int32, "U8": torch.uint8,
          "F16": torch.float16, "BF16": torch.bfloat16}
KINK_SIGMA = 8.0        # candidates: within this many standard deviations of float32's forward error
FLIP_EFFECT = 1e-6      # a kink whose flip moves no gradient by more than this (relative) is left alone
SKETCH = 4096           # elements per gradient tensor the least-squares fit looks at
POOL = (3, 2, 1)        # the stem's max-pool: kernel, stride, padding
SMOOTH_RUNS = 3         # PyTorch float32 runs on float64's side of every kink: as given, then from 2 perturbed copies


def load(path, prefix=""):
    """The tensors of a safetensors file whose names start with prefix, and its metadata."""
    try:
        from safetensors import safe_open
        with safe_open(path, framework="pt") as f:
            return {k: f.get_tensor(k) for k in f.keys() if k.startswith(prefix)}, dict(f.metadata() or {})
    except ImportError:
        pass
    out = {}
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        meta = header.pop("__metadata__", {})
        for k, v in header.items():
            if not k.startswith(prefix):
                continue
            a, b = v["data_offsets"]
            f.seek(8 + n + a)
            t = torch.frombuffer(bytearray(f.read(b - a)), dtype=DTYPES[v["dtype"]]) if b > a else \
                torch.empty(0, dtype=DTYPES[v["dtype"]])
            out[k] = t.reshape(v["shape"])
    return out, meta


def save(path, tensors, metadata):
    tensors = {k: v.detach().contiguous().cpu() for k, v in tensors.items()}
    metadata = {k: str(v) for k, v in metadata.items()}
    try:
        from safetensors.torch import save_file
        save_file(tensors, path, metadata=metadata)
        return
    except ImportError:
        pass
    names = {v: k for k, v in DTYPES.items()}
    header, at = {"__metadata__": metadata}, 0
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


def build(arch, shortcut, num_classes):
    if arch in ("resnet18", "resnet34", "resnet50", "resnet101", "resnet152"):
        return getattr(torchvision.models, arch)(num_classes=num_classes)
    blocks = {"resnet20": 3, "resnet32": 5, "resnet44": 7, "resnet56": 9, "resnet110": 18}[arch]
    return resnet_torch.ResNet(resnet_torch.BasicBlock, [blocks] * 3, num_classes, cifar=True, shortcut=shortcut)


def f32(t):
    return t.detach().float() if t.is_floating_point() else t.detach()


# ---- kinks: every ReLU's and max-pool's decision, recorded or forced ----------

class Kinks:
    """The log of one forward's decisions, in call order: (kind, site, input, output, decision), the decision
    being input > 0 for a ReLU and the argmax indices for a max-pool. With force, the decisions are taken
    from force instead of computed (the values follow them)."""

    def __init__(self, force=None):
        self.force, self.log = force, []


class KinkReLU(nn.Module):
    def __init__(self, kinks, site):
        super().__init__()
        self.kinks, self.site = kinks, site

    def forward(self, h):
        k = self.kinks
        force = k.force[len(k.log)] if k.force is not None and self.training else None
        y = F.relu(h) if force is None else h * force.to(h.dtype)
        if y.requires_grad:
            y.retain_grad()
        k.log.append(("relu", self.site, h, y, h.detach() > 0))
        return y


class KinkMaxPool(nn.Module):
    def __init__(self, kinks, site, pool):
        super().__init__()
        self.kinks, self.site = kinks, site
        self.k, self.s, self.p = pool.kernel_size, pool.stride, pool.padding

    def forward(self, a):
        k = self.kinks
        y, idx = F.max_pool2d(a, self.k, self.s, self.p, return_indices=True)
        if k.force is not None and self.training:
            idx = k.force[len(k.log)]
            y = a.flatten(2).gather(2, idx.flatten(2)).view_as(y)
        if y.requires_grad:
            y.retain_grad()
        k.log.append(("pool", self.site, a, y, idx))
        return y


def instrumented(arch, shortcut, classes):
    """The model with every nn.ReLU and nn.MaxPool2d replaced by one that logs (or forces) its decisions
    (a ReLU module called several times in a block is one site; the log tells the calls apart)."""
    model = build(arch, shortcut, classes)
    for mname, mod in list(model.named_modules()):
        for cname, c in list(mod.named_children()):
            name = f"{mname}.{cname}" if mname else cname
            if isinstance(c, nn.ReLU):
                setattr(mod, cname, KinkReLU(None, name))
            elif isinstance(c, nn.MaxPool2d):
                setattr(mod, cname, KinkMaxPool(None, name, c))
    return model


def train_step(template, state, x, y, dtype, force=None, keep_graph=False):
    """Training forward + backward of (a copy of) the instrumented template from state on (x, y) in dtype,
    then an eval forward; the results by the names of out.safetensors, the model and its kink log."""
    kinks = Kinks(force)
    model = copy.deepcopy(template)
    for mod in model.modules():
        if isinstance(mod, (KinkReLU, KinkMaxPool)):
            mod.kinks = kinks
    model.load_state_dict({k: v if v.dtype == torch.int64 else v.to(dtype) for k, v in state.items()}, strict=True)
    model.to(dtype).train()
    logits = model(x.to(dtype))
    loss = F.cross_entropy(logits, y)
    loss.backward(retain_graph=keep_graph)
    out = {"logits_train": logits.detach(), "loss": loss.detach().reshape(1)}
    for name, p in model.named_parameters():
        out["grad." + name] = p.grad.detach()
    for name, b in model.named_buffers():
        out["state." + name] = b.detach().clone()
    model.eval()
    log = kinks.log
    kinks.log = []
    with torch.no_grad():
        out["logits_eval"] = model(x.to(dtype))
    kinks.log = log
    return out, model, kinks


def ulp_perturbed(state, x, gen):
    """state's floats and x, each element moved by up to one unit in the last place of float32 (rounded
    back to float32): a float32 run from them rounds differently everywhere."""
    def move(v):
        u = torch.rand(v.shape, generator=gen, dtype=torch.float64) * 2 - 1
        return (v.double() * (1 + u * 2.0 ** -23)).float()
    return {k: v if v.dtype == torch.int64 else move(v) for k, v in state.items()}, move(x)


def decisions(kinks):
    return [entry[4] for entry in kinks.log]


def channel_rms(e):
    return e.pow(2).mean(dim=(0, 2, 3) if e.dim() == 4 else (0,), keepdim=True).sqrt()


def site_name(q):
    return f"{q['site']} {list(q['idx'])}"


def candidates(k64, k32, ku):
    """The kinks float32 can tip (see the module comment). k32: a float32 run on float64's side of every
    kink (its forward error sets sigma); ku: float32 as it falls (its flips are known: flip32). A kink ku
    flipped outside the KINK_SIGMA window is added too (outside says so)."""
    out = []
    calls = {}
    for i, ((kind, site, h, y, d), (_, _, h32, _, _), (_, _, _, _, du)) in enumerate(zip(k64.log, k32.log, ku.log)):
        calls[site] = calls.get(site, 0) + 1
        site = f"{site}#{calls[site]}" if kind == "relu" else site
        hd = h.detach()
        sigma = channel_rms(hd - h32.detach().double()).clamp(min=1e-300)
        u = y.grad  # the loss's gradient at the output
        if kind == "relu":
            z = hd.abs() / sigma
            near = (z < KINK_SIGMA) | (d != du)
            for idx in near.nonzero().tolist():
                idx = tuple(idx)
                seed = torch.zeros_like(hd)
                seed[idx] = (-1.0 if d[idx] else 1.0) * u[idx]
                out.append(dict(i=i, kind=kind, site=site, idx=idx, z=z[idx].item(), seed=seed, at=h,
                                flip32=bool(d[idx] != du[idx]), outside=bool(z[idx] >= KINK_SIGMA)))
        else:
            n_, c_, _, w = hd.shape
            ks, st, pad = POOL
            assert y.shape[2] == (hd.shape[2] + 2 * pad - ks) // st + 1, "not the 3x3/2 max-pool of a ResNet stem"
            cols = F.unfold(F.pad(hd, (pad,) * 4, value=-float("inf")), ks, stride=st).reshape(n_, c_, ks * ks, -1)
            top, slot = cols.topk(2, dim=2)
            gap = ((top[:, :, 0] - top[:, :, 1]) / (sigma.reshape(1, c_, 1) * 2 ** 0.5)).reshape(y.shape)
            ow_n = y.shape[3]
            pos = torch.arange(slot.shape[-1])
            oh, ow = (pos // ow_n).view(1, 1, -1), (pos % ow_n).view(1, 1, -1)
            flat = ((oh * st + slot // ks - pad) * w + (ow * st + slot % ks - pad)).reshape(n_, c_, 2, *y.shape[2:])
            second = torch.where(flat[:, :, 0] == d, flat[:, :, 1], flat[:, :, 0])
            near = ((gap < KINK_SIGMA) & (y.detach() > 0)) | (d != du)
            for idx in near.nonzero().tolist():
                idx = tuple(idx)
                n, ch = idx[0], idx[1]
                other = int(du[idx]) if du[idx] != d[idx] else int(second[idx])  # where float32 sent it
                seed = torch.zeros_like(hd).flatten(2)
                seed[n, ch, int(d[idx])] -= u[idx]
                seed[n, ch, other] += u[idx]
                out.append(dict(i=i, kind=kind, site=site, idx=idx, z=gap[idx].item(), seed=seed.view_as(hd), at=h,
                                other=other, flip32=bool(du[idx] != d[idx]), outside=bool(gap[idx] >= KINK_SIGMA)))
    return out


def forced(k64, flips):
    """float64's decisions with flips on the other side."""
    force = [d.clone() for d in decisions(k64)]
    for q in flips:
        if q["kind"] == "relu":
            force[q["i"]][q["idx"]] = ~force[q["i"]][q["idx"]]
        else:
            force[q["i"]][q["idx"]] = q["other"]
    return force


def sgd_step(state, bufs, grads, meta):
    """torch.optim.SGD's step from loom's parameters, momentum buffers and gradients (by parameter name),
    in float64, one parameter at a time: its update and new buffer by out.safetensors' names (float32)."""
    out = {}
    for n, g in grads.items():
        p = state[n].double().clone().requires_grad_(True)
        opt = torch.optim.SGD([p], lr=float(meta["lr"]), momentum=float(meta["momentum"]),
                              weight_decay=float(meta["weight_decay"]))
        p.grad = g.double().reshape(p.shape)
        opt.state[p]["momentum_buffer"] = bufs[n].double().reshape(p.shape).clone()
        opt.step()
        out["sgd.update." + n] = f32(p.detach() - state[n].double())
        out["sgd.momentum_buffer." + n] = f32(opt.state[p]["momentum_buffer"])
    return out


def kink_reference(template, state, x, y, got):
    """The float64 training step on loom's side of every kink (see the module comment), PyTorch float32's
    smooth error of each quantity, and a report of the kinks."""
    ref, m64, k64 = train_step(template, state, x, y, torch.float64, keep_graph=True)
    f32err, gen = {}, torch.Generator().manual_seed(1)
    for run in range(SMOOTH_RUNS):
        st, xr = (state, x) if run == 0 else ulp_perturbed(state, x, gen)
        smooth, _, kinks = train_step(template, st, xr, y, torch.float32, force=decisions(k64))
        if run == 0:
            k32 = kinks
        for k, v in ref.items():
            if v.is_floating_point():
                m = v.abs().max().item()
                e = (smooth[k].double() - v).abs().max().item()
                f32err[k] = max(f32err.get(k, 0.0), e / m if m > 0 else e)
        del smooth
    f32err = {"f32err." + k: torch.tensor([e], dtype=torch.float32) for k, e in f32err.items()}
    as_falls, _, ku = train_step(template, state, x, y, torch.float32)
    cands = candidates(k64, k32, ku)
    del k32

    # Least squares on a fixed sample of each gradient tensor (SKETCH elements, scaled by the tensor's
    # largest value: the comparison's metric).
    params = list(m64.parameters())
    gnames = ["grad." + n for n, _ in m64.named_parameters()]
    scale = {k: ref[k].abs().max().item() or 1.0 for k in gnames}
    gen = torch.Generator().manual_seed(0)
    pick = {k: torch.randint(ref[k].numel(), (SKETCH,), generator=gen) if ref[k].numel() > SKETCH else
            torch.arange(ref[k].numel()) for k in gnames}

    def sketch(value):  # value(k): the tensor for gradient k
        return torch.cat([value(k).double().flatten()[pick[k]] * ((ref[k].numel() / len(pick[k])) ** 0.5 / scale[k])
                          for k in gnames])

    def residual(run):
        return sketch(lambda k: run[k].double().reshape(ref[k].shape) - ref[k])

    r_loom, r_f32 = residual(got), residual(as_falls)
    del as_falls
    effects = []
    for q in cands:
        g = torch.autograd.grad(q.pop("at"), params, grad_outputs=q.pop("seed"), retain_graph=True, allow_unused=True)
        g = dict(zip(gnames, g))
        q["effect"] = max((g[k].abs().max().item() / scale[k] for k in gnames if g[k] is not None), default=0)
        effects.append(sketch(lambda k: torch.zeros_like(ref[k]) if g[k] is None else g[k]))
    if cands:
        a = torch.stack(effects, 1)
        coef = torch.linalg.lstsq(a, torch.stack([r_loom, r_f32], 1), driver="gelsd").solution
        for q, (c_loom, c_f32) in zip(cands, coef.tolist()):
            q["loom"], q["f32"] = c_loom, c_f32
    loom_flips = [q for q in cands if q["loom"] > 0.5 and q["effect"] > FLIP_EFFECT]
    f32_known = [q for q in cands if q["flip32"] and q["effect"] > FLIP_EFFECT]
    f32_fit = [q for q in cands if q["f32"] > 0.5 and q["effect"] > FLIP_EFFECT]
    force = forced(k64, loom_flips)
    del m64, k64, params  # the float64 graph
    if loom_flips:
        ref, _, _ = train_step(template, state, x, y, torch.float64, force=force)
    desc = "; ".join(f"{site_name(q)} (|input| {q['z']:.2g} sigma, moves gradients by {q['effect']:.2g})"
                     for q in loom_flips) or "none"
    report = {"kinks": len(cands), "loom_flips": len(loom_flips), "torch_f32_flips": len(f32_known),
              "loom_flips_max_sigma": f"{max([q['z'] for q in loom_flips], default=0):.3g}",
              "torch_f32_flips_outside": sum(q["outside"] for q in f32_known),
              "torch_f32_recovered": "yes" if [id(q) for q in f32_known] == [id(q) for q in f32_fit] else "no",
              "loom_kinks": desc}
    return ref, f32err, report


def main():
    d = sys.argv[1]
    t, meta = load(os.path.join(d, "in.safetensors"))
    got, _ = load(os.path.join(d, "loom.safetensors"))
    arch, shortcut, classes, seed = meta["arch"], meta["shortcut"], int(meta["num_classes"]), int(meta["seed"])
    state = {k[len("start."):]: v for k, v in t.items() if k.startswith("start.")}

    ref, out, report = kink_reference(instrumented(arch, shortcut, classes), state, t["x2"], t["y2"].long(), got)
    out.update({k: f32(v) for k, v in ref.items()})
    del ref
    bufs, _ = load(os.path.join(d, "optim.safetensors"), "optim.")
    out.update(sgd_step(state, {k[len("optim."):-len(".momentum_buffer")]: v for k, v in bufs.items()
                                if k.endswith(".momentum_buffer")},
                        {k[len("grad."):]: v for k, v in got.items()}, meta))
    del bufs, got

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

    save(os.path.join(d, "out.safetensors"), out, report)
    print(f"resnet_conformance.py: {arch} (torch {torch.__version__}, torchvision {torchvision.__version__}): "
          f"{report['kinks']} kinks within {KINK_SIGMA:g} sigma; loom took the other side at {report['loom_flips']}: "
          f"{report['loom_kinks']}; PyTorch float32 at {report['torch_f32_flips']}, "
          f"{'recovered' if report['torch_f32_recovered'] == 'yes' else 'NOT recovered'} by the same fit")


if __name__ == "__main__":
    main()
