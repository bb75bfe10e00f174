#!/usr/bin/env python3
"""pytorch_resnet_step.py — PyTorch's side of bench/resnet/run_resnet_vs_pytorch.sh:
a ResNet training step on synthetic data (one random batch made once, as
timm's benchmark and `loom-resnet --synthetic` do), SGD momentum 0.9
Nesterov with weight decay 5e-4 on conv/fc weights only (BN parameters and
biases in a group without it, as loom_sgd_new_for_module does), cross
entropy, in NCHW or channels-last, f32, AMP (CUDA: autocast fp16 + GradScaler)
or --bf16 (CPU: torch.autocast("cpu", dtype=torch.bfloat16), what
bench/resnet/run_resnet_bf16.sh compares loom --precision bf16 with).

    /usr/bin/python3 bench/resnet/pytorch_resnet_step.py --model resnet20 --batch 128 --steps 20 --format nhwc

Models are rebuilt here module for module (torchvision is not packaged on
the CPU machines): CIFAR-style ResNet-20 (option-A zero-padding shortcut by
default, --shortcut B for projections) with 3x32x32 input, and
torchvision's ResNet-50 with 3x224x224 input. Prints one line:
bench=pytorch_resnet_step model=... samples_per_s=... step_ms=..."""
import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, shortcut="A"):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        self.pad = 0
        self.stride = stride
        if stride != 1 or inplanes != planes:
            if shortcut == "B":
                self.downsample = nn.Sequential(nn.Conv2d(inplanes, planes, 1, stride, bias=False),
                                                nn.BatchNorm2d(planes))
            else:
                self.pad = (planes - inplanes) // 2

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)), inplace=True)
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            sc = self.downsample(x)
        elif self.pad or self.stride != 1:
            sc = F.pad(x[:, :, ::self.stride, ::self.stride], (0, 0, 0, 0, self.pad, self.pad))
        else:
            sc = x
        return F.relu(out + sc, inplace=True)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes, planes, stride=1, shortcut="B"):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.downsample = None
        if stride != 1 or inplanes != planes * 4:
            self.downsample = nn.Sequential(nn.Conv2d(inplanes, planes * 4, 1, stride, bias=False),
                                            nn.BatchNorm2d(planes * 4))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)), inplace=True)
        out = F.relu(self.bn2(self.conv2(out)), inplace=True)
        out = self.bn3(self.conv3(out))
        sc = x if self.downsample is None else self.downsample(x)
        return F.relu(out + sc, inplace=True)


class ResNet(nn.Module):
    def __init__(self, block, layers, num_classes, in_channels=3, cifar=False, shortcut="B"):
        super().__init__()
        width = 16 if cifar else 64
        self.inplanes = width
        self.conv1 = nn.Conv2d(in_channels, width, 3 if cifar else 7, 1 if cifar else 2, 1 if cifar else 3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.maxpool = nn.Identity() if cifar else nn.MaxPool2d(3, 2, 1)
        stages = []
        for i, n in enumerate(layers):
            planes = width << i
            blocks = []
            for b in range(n):
                blocks.append(block(self.inplanes, planes, (1 if i == 0 else 2) if b == 0 else 1, shortcut))
                self.inplanes = planes * block.expansion
            stages.append(nn.Sequential(*blocks))
        self.layers = nn.Sequential(*stages)
        self.fc = nn.Linear(self.inplanes, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x):
        x = self.maxpool(F.relu(self.bn1(self.conv1(x)), inplace=True))
        x = self.layers(x)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def build(name, shortcut):
    if name == "resnet20":
        return ResNet(BasicBlock, [3, 3, 3], 10, cifar=True, shortcut=shortcut), (3, 32, 32), 10
    if name == "resnet56":
        return ResNet(BasicBlock, [9, 9, 9], 10, cifar=True, shortcut=shortcut), (3, 32, 32), 10
    if name == "resnet18":
        return ResNet(BasicBlock, [2, 2, 2, 2], 1000), (3, 224, 224), 1000
    if name == "resnet50":
        return ResNet(Bottleneck, [3, 4, 6, 3], 1000), (3, 224, 224), 1000
    raise SystemExit(f"unknown model {name}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="resnet20")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--format", choices=["nchw", "nhwc"], default="nchw")
    ap.add_argument("--amp", action="store_true", help="autocast fp16 + GradScaler (CUDA)")
    ap.add_argument("--bf16", action="store_true", help="autocast bf16 on the CPU (torch.autocast(\"cpu\"))")
    ap.add_argument("--shortcut", choices=["A", "B"], default="A")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--size", default="", help="CxHxW instead of the model's usual input")
    a = ap.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    dev = torch.device(a.device)
    model, shape, classes = build(a.model, a.shortcut)
    if a.size:
        shape = tuple(int(v) for v in a.size.split("x"))
    mf = torch.channels_last if a.format == "nhwc" else torch.contiguous_format
    model = model.to(dev).to(memory_format=mf)
    decay = [p for n, p in model.named_parameters() if p.ndim > 1]
    no_decay = [p for n, p in model.named_parameters() if p.ndim <= 1]
    opt = torch.optim.SGD([{"params": decay, "weight_decay": 5e-4}, {"params": no_decay, "weight_decay": 0.0}],
                          lr=0.1, momentum=0.9, nesterov=True)
    x = torch.randn(a.batch, *shape, device=dev).to(memory_format=mf)
    y = torch.arange(a.batch, device=dev) * 7919 % classes
    use_amp = a.amp and dev.type == "cuda"
    use_bf16 = a.bf16 and dev.type == "cpu"
    scaler = None
    if use_amp:  # torch.amp.GradScaler on torch 2.x, torch.cuda.amp's on 1.13
        scaler = torch.amp.GradScaler("cuda") if hasattr(torch.amp, "GradScaler") else torch.cuda.amp.GradScaler()

    def step():
        opt.zero_grad(set_to_none=True)
        if use_amp:
            with torch.autocast("cuda", dtype=torch.float16):
                loss = F.cross_entropy(model(x), y)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        elif use_bf16:  # bf16 has f32's range: no loss scaling
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
        else:
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
        return loss

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    model.train()
    for _ in range(a.warmup):
        step()
    sync()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        loss = step()
    sync()
    dt = time.perf_counter() - t0
    print(f"bench=pytorch_resnet_step model={a.model} device={a.device} format={a.format} amp={int(use_amp)} bf16={int(use_bf16)} "
          f"batch={a.batch} input={'x'.join(map(str, shape))} threads={torch.get_num_threads()} steps={a.steps} "
          f"samples_per_s={a.batch * a.steps / dt:.1f} step_ms={1e3 * dt / a.steps:.2f} "
          f"torch={torch.__version__} loss={loss.item():.4f}")


if __name__ == "__main__":
    main()
