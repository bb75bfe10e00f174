"""Residual networks (loom_resnet_new): CIFAR-style ResNet-20/32/44/56/110
(He et al. 2016, 3x3 stem, 16/32/64 channels) and ImageNet-style
ResNet-18/34/50/101/152 with torchvision's structure and state_dict names
(conv1.weight, bn1.running_mean, layer1.0.downsample.0.weight, fc.bias)."""
import ctypes as C

from .._lib import ResnetOptions, check, lib, options
from ..tensor import as_device
from .module import Module

_SHORTCUT = {"projection": 0, "B": 0, "zero_pad": 1, "A": 1}
_FORMAT = {"nchw": 0, "nhwc": 1, "channels_last": 1}


class ResNet(Module):
    """A residual network by name: ResNet("resnet20", num_classes=10, in_channels=1).

    num_classes: 10 for CIFAR-style, 1000 for ImageNet-style by default.
    shortcut: "projection" ("B", torchvision's and loom's default) or
    "zero_pad" ("A": He et al.'s parameter-free CIFAR option, CIFAR-style
    only). memory_format: what the forward converts its input to once,
    "nchw" or "nhwc". checkpoint_every: recompute each run of that many
    residual blocks in backward (activation checkpointing; 0: off)."""

    def __init__(self, arch, num_classes=None, in_channels=3, shortcut="projection", memory_format="nchw",
                 zero_init_residual=False, checkpoint_every=0, device="cpu"):
        code = C.c_int()
        check(lib.loom_resnet_parse(str(arch).encode(), C.byref(code)))
        if shortcut not in _SHORTCUT:
            raise ValueError(f"shortcut is one of {sorted(_SHORTCUT)}, got {shortcut!r}")
        if memory_format not in _FORMAT:
            raise ValueError(f"memory_format is one of {sorted(_FORMAT)}, got {memory_format!r}")
        o = options(ResnetOptions, code.value)
        if num_classes is not None:
            o.num_classes = num_classes
        o.in_channels, o.shortcut, o.memory_format = in_channels, _SHORTCUT[shortcut], _FORMAT[memory_format]
        o.zero_init_residual, o.checkpoint_every = bool(zero_init_residual), int(checkpoint_every)
        super().__init__(lib.loom_resnet_new(code.value, C.byref(o), as_device(device)))

    def set_memory_format(self, memory_format):
        check(lib.loom_resnet_set_memory_format(self._h, _FORMAT[memory_format]))
        return self


def _builder(arch):
    def build(**kwargs):
        return ResNet(arch, **kwargs)
    build.__name__ = build.__qualname__ = arch
    build.__doc__ = f"ResNet({arch!r}, **kwargs): see loom.nn.ResNet."
    return build


resnet20, resnet32, resnet44, resnet56, resnet110 = (_builder(f"resnet{n}") for n in (20, 32, 44, 56, 110))
resnet18, resnet34, resnet50, resnet101, resnet152 = (_builder(f"resnet{n}") for n in (18, 34, 50, 101, 152))
