"""loom's own layers: thin classes over the C constructors of loom/nn.h, with
PyTorch's arguments and PyTorch's parameter and buffer names ("weight",
"bias", "running_mean", "num_batches_tracked", ...)."""
import ctypes as C

from .._lib import BatchNormOptions, Conv2dOptions, Pool2dOptions, check, lib, options
from ..tensor import as_device
from .module import Module

_INIT = {"default": 0, "kaiming_uniform": 1, "kaiming_normal": 2, "xavier_uniform": 3, "xavier_normal": 4,
         "kaiming_normal_fan_out": 5, "zeros": 6, "ones": 7}


def _pair(v, what):
    if isinstance(v, int):
        return (v, v)
    v = tuple(int(x) for x in v)
    if len(v) != 2:
        raise ValueError(f"{what} is an int or a pair, got {v!r}")
    return v


def _init(name):
    if name not in _INIT:
        raise ValueError(f"init is one of {sorted(_INIT)}, got {name!r}")
    return _INIT[name]


class Linear(Module):
    """y = x @ weight.T + bias; weight [out, in]."""

    def __init__(self, in_features, out_features, bias=True, init="default", device="cpu"):
        super().__init__(lib.loom_linear_new(in_features, out_features, bool(bias), _init(init), as_device(device)))


class ReLU(Module):
    def __init__(self):
        super().__init__(lib.loom_relu_new())


class Sequential(Module):
    """Children run in order; a ReLU right after a Linear, Conv2d or
    BatchNorm2d is fused into it. Takes loom's layers and modules of your own."""

    def __init__(self, *modules):
        super().__init__(lib.loom_sequential_new())
        self.__dict__["_items"] = []  # the Python objects (custom modules' forwards live there)
        for m in modules:
            self.append(m)

    def append(self, m):
        if not isinstance(m, Module):
            raise TypeError(f"Sequential takes loom.nn.Module objects, not {type(m).__name__}")
        if m._owner is not None:
            raise ValueError("this module already belongs to a container")
        m._owner = self  # loom owns it from here, also if the call fails
        self._items.append(m)
        check(lib.loom_sequential_add(self._h, m._h))
        return self

    def __len__(self):
        return lib.loom_module_num_children(self._h)


class MLP(Module):
    """in -> hidden[0] -> ... -> out with fused Linear+ReLU between, like loom_mlp_new."""

    def __init__(self, in_features, hidden, out_features, device="cpu"):
        hidden = list(hidden)
        arr = (C.c_int64 * max(len(hidden), 1))(*hidden)
        super().__init__(lib.loom_mlp_new(in_features, len(hidden), arr, out_features, as_device(device)))


class Conv2d(Module):
    """weight [out, in / groups, kh, kw], bias [out]; NCHW or channels-last
    input, kept in the output. init "default" is PyTorch's Conv2d default."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1, bias=True,
                 init="default", device="cpu"):
        kh, kw = _pair(kernel_size, "kernel_size")
        o = options(Conv2dOptions)
        o.stride[:], o.padding[:], o.dilation[:] = _pair(stride, "stride"), _pair(padding, "padding"), \
            _pair(dilation, "dilation")
        o.groups = groups
        super().__init__(lib.loom_conv2d_new(in_channels, out_channels, kh, kw, C.byref(o), bool(bias), _init(init),
                                             as_device(device)))


class BatchNorm2d(Module):
    """weight, bias (affine); buffers running_mean, running_var,
    num_batches_tracked. Batch statistics in train mode, running ones in eval."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, device="cpu"):
        o = options(BatchNormOptions)
        o.eps, o.momentum = eps, momentum
        super().__init__(lib.loom_batch_norm2d_new(num_features, C.byref(o), bool(affine), as_device(device)))


def _pool_options(kernel_size, stride, padding, ceil_mode, count_include_pad=True):
    kh, kw = _pair(kernel_size, "kernel_size")
    o = options(Pool2dOptions, kh, kw)
    o.stride[:] = _pair(stride, "stride") if stride is not None else (0, 0)
    o.padding[:] = _pair(padding, "padding")
    o.ceil_mode, o.count_include_pad = bool(ceil_mode), bool(count_include_pad)
    return o


class MaxPool2d(Module):
    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False):
        o = _pool_options(kernel_size, stride, padding, ceil_mode)
        super().__init__(lib.loom_max_pool2d_new(C.byref(o)))


class AvgPool2d(Module):
    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
        o = _pool_options(kernel_size, stride, padding, ceil_mode, count_include_pad)
        super().__init__(lib.loom_avg_pool2d_new(C.byref(o)))


class AdaptiveAvgPool2d(Module):
    def __init__(self, output_size):
        oh, ow = _pair(output_size, "output_size")
        super().__init__(lib.loom_adaptive_avg_pool2d_new(oh, ow))


class Dropout(Module):
    """Zeroes elements with probability p in train mode (loom's Philox
    generator: loom.manual_seed); the identity in eval mode."""

    def __init__(self, p=0.5):
        super().__init__(lib.loom_dropout_new(float(p)))


class Flatten(Module):
    def __init__(self, start_dim=1, end_dim=-1):
        super().__init__(lib.loom_flatten_new(start_dim, end_dim))
