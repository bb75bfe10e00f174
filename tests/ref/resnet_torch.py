#!/usr/bin/env python3
"""resnet_torch.py — the PyTorch numbers tests/test_resnet.c and
tests/test_optim_groups.c check loom against. Run with a Python that has
torch (Debian's /usr/bin/python3) and paste the output into the tests when a
case changes:

    /usr/bin/python3 tests/ref/resnet_torch.py

1. Parameter counts of torchvision's ResNet-18/50 (rebuilt here in plain
   torch, module for module, since torchvision is not packaged) and of the
   CIFAR-style ResNet-20/56 with both shortcuts, plus the first and last
   names of named_parameters() / named_buffers().
2. OneCycleLR (max_lr 0.4, total 100, pct_start 0.25, cos, div 25, final
   div 1e4, cycle_momentum off) at a few steps.
3. SGD (momentum 0.9, nesterov) over two parameter groups: group 0 lr 0.1
   weight_decay 5e-4, group 1 lr 0.05 weight_decay 0; five steps with
   gradients g[i] = sin(0.7 i + 1.3 t) (t the step), params starting at
   p[i] = cos(0.3 i) (i counts within each parameter), computed in float64.

The classes have forward passes too: tests/ref/resnet_conformance.py
imports them as the PyTorch twin of loom's CIFAR-style ResNets (option A
shortcut: the input subsampled by the stride, zero-padded with channels on
both sides)."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, shortcut="B"):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        self.stride, self.pad = stride, 0
        if (stride != 1 or inplanes != planes) and shortcut == "B":
            self.downsample = nn.Sequential(nn.Conv2d(inplanes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))
        elif stride != 1 or inplanes != planes:
            self.pad = (planes - inplanes) // 2

    def forward(self, x):
        out = self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x)))))
        if self.downsample is not None:
            sc = self.downsample(x)
        elif self.stride != 1 or self.pad:
            sc = F.pad(x[:, :, ::self.stride, ::self.stride], (0, 0, 0, 0, self.pad, self.pad))
        else:
            sc = x
        return self.relu(out + sc)


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
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or inplanes != planes * 4:
            self.downsample = nn.Sequential(nn.Conv2d(inplanes, planes * 4, 1, stride, bias=False),
                                            nn.BatchNorm2d(planes * 4))

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn3(self.conv3(self.relu(self.bn2(self.conv2(out)))))
        return self.relu(out + (self.downsample(x) if self.downsample is not None else x))


class ResNet(nn.Module):
    def __init__(self, block, layers, num_classes, in_channels=3, cifar=False, shortcut="B"):
        super().__init__()
        width = 16 if cifar else 64
        self.inplanes = width
        if cifar:
            self.conv1 = nn.Conv2d(in_channels, width, 3, 1, 1, bias=False)
        else:
            self.conv1 = nn.Conv2d(in_channels, width, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        if not cifar:
            self.maxpool = nn.MaxPool2d(3, 2, 1)
        for i, n in enumerate(layers):
            planes = width << i
            blocks = []
            for b in range(n):
                blocks.append(block(self.inplanes, planes, (1 if i == 0 else 2) if b == 0 else 1, shortcut))
                self.inplanes = planes * block.expansion
            setattr(self, f"layer{i + 1}", nn.Sequential(*blocks))
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(self.inplanes, num_classes)
        self.cifar, self.stages = cifar, len(layers)

    def forward(self, x):
        x = self.relu(self.bn1(self.conv1(x)))
        if not self.cifar:
            x = self.maxpool(x)
        for i in range(self.stages):
            x = getattr(self, f"layer{i + 1}")(x)
        return self.fc(torch.flatten(self.avgpool(x), 1))


def count(m):
    return sum(p.numel() for p in m.parameters())


def show(name, m):
    ps = list(m.named_parameters())
    bs = list(m.named_buffers())
    print(f"{name}: params={count(m)} tensors={len(ps)} buffers={len(bs)} first={ps[0][0]} last={ps[-1][0]} "
          f"buf0={bs[0][0]} buf_last={bs[-1][0]}")


def main():
    show("resnet18", ResNet(BasicBlock, [2, 2, 2, 2], 1000))
    show("resnet50", ResNet(Bottleneck, [3, 4, 6, 3], 1000))
    show("resnet18_1x10", ResNet(BasicBlock, [2, 2, 2, 2], 10, in_channels=1))
    show("resnet20_B", ResNet(BasicBlock, [3, 3, 3], 10, cifar=True))
    show("resnet20_A", ResNet(BasicBlock, [3, 3, 3], 10, cifar=True, shortcut="A"))
    show("resnet56_B", ResNet(BasicBlock, [9, 9, 9], 10, cifar=True))
    show("resnet20_B_1ch", ResNet(BasicBlock, [3, 3, 3], 10, in_channels=1, cifar=True))
    r50 = ResNet(Bottleneck, [3, 4, 6, 3], 1000)
    print("resnet50 names 3..8:", [n for n, _ in r50.named_parameters()][3:9])
    print("resnet50 downsample:", [n for n, _ in r50.named_parameters() if "downsample" in n][:3])

    # 2. OneCycleLR
    p = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([p], lr=0.1)
    sch = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.4, total_steps=100, pct_start=0.25, anneal_strategy="cos",
                                              div_factor=25.0, final_div_factor=1e4, cycle_momentum=False)
    lrs = []
    for t in range(100):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sch.step()
    print("one_cycle:", ", ".join(f"{{{t}, {lrs[t]!r}}}" for t in [0, 1, 10, 23, 24, 25, 50, 98, 99]))

    # 3. SGD nesterov over two groups
    torch.set_default_dtype(torch.float64)
    a = torch.tensor([math.cos(0.3 * i) for i in range(5)], requires_grad=True)
    b = torch.tensor([math.cos(0.3 * i) for i in range(3)], requires_grad=True)
    opt = torch.optim.SGD([{"params": [a], "lr": 0.1, "weight_decay": 5e-4}, {"params": [b], "lr": 0.05, "weight_decay": 0.0}],
                          lr=0.1, momentum=0.9, nesterov=True)
    for t in range(5):
        a.grad = torch.tensor([math.sin(0.7 * i + 1.3 * t) for i in range(5)])
        b.grad = torch.tensor([math.sin(0.7 * i + 1.3 * t) for i in range(3)])
        opt.step()
    print("sgd_groups a:", ", ".join(repr(v) for v in a.tolist()))
    print("sgd_groups b:", ", ".join(repr(v) for v in b.tolist()))


if __name__ == "__main__":
    main()
