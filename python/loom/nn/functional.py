"""loom.nn.functional: the ops behind the layers, with PyTorch's names and
arguments, for writing forward() of your own modules. All differentiable
(autograd records them); 4-D inputs may be NCHW or channels-last, and the
result keeps the input's layout."""
import ctypes as C

from .._lib import BatchNormOptions, Conv2dOptions, lib, options
from ..tensor import Tensor, _t
from .layers import _pair, _pool_options


def _h(t):
    return t.handle if t is not None else None


def linear(x, weight, bias=None):
    """x @ weight.T + bias (one fused op)."""
    return Tensor(lib.loom_linear(_t(x).handle, weight.handle, _h(bias), 0))


def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    o = options(Conv2dOptions)
    o.stride[:], o.padding[:], o.dilation[:] = _pair(stride, "stride"), _pair(padding, "padding"), \
        _pair(dilation, "dilation")
    o.groups = groups
    return Tensor(lib.loom_conv2d(_t(x).handle, weight.handle, _h(bias), C.byref(o)))


def batch_norm(x, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1, eps=1e-5):
    """Batch statistics when training (running ones updated in place), else
    the running statistics; statistics in f32 whatever x's dtype."""
    o = options(BatchNormOptions)
    o.training, o.momentum, o.eps = bool(training), momentum, eps
    return Tensor(lib.loom_batch_norm(_t(x).handle, _h(running_mean), _h(running_var), _h(weight), _h(bias),
                                      C.byref(o)))


def max_pool2d(x, kernel_size, stride=None, padding=0, ceil_mode=False):
    o = _pool_options(kernel_size, stride, padding, ceil_mode)
    return Tensor(lib.loom_max_pool2d(_t(x).handle, C.byref(o)))


def avg_pool2d(x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
    o = _pool_options(kernel_size, stride, padding, ceil_mode, count_include_pad)
    return Tensor(lib.loom_avg_pool2d(_t(x).handle, C.byref(o)))


def adaptive_avg_pool2d(x, output_size):
    oh, ow = _pair(output_size, "output_size")
    return Tensor(lib.loom_adaptive_avg_pool2d(_t(x).handle, oh, ow))


def dropout(x, p=0.5, training=True):
    """Zero each element with probability p, scale the rest by 1/(1-p); the
    identity when not training. The mask comes from loom's generator."""
    return Tensor(lib.loom_dropout(_t(x).handle, float(p), bool(training)))


def relu(x):
    return _t(x).relu()


def add_relu(a, b):
    """relu(a + b) in one pass (residual joins)."""
    return Tensor(lib.loom_add_relu(_t(a).handle, _t(b, a).handle))


def flatten(x, start_dim=0, end_dim=-1):
    return _t(x).flatten(start_dim, end_dim)


def softmax(x, dim=-1):
    return _t(x).softmax(dim)


def log_softmax(x, dim=-1):
    return _t(x).log_softmax(dim)


def sigmoid(x):
    return _t(x).sigmoid()


def tanh(x):
    return _t(x).tanh()


def cross_entropy(logits, labels):
    """Mean cross-entropy of logits [N, C] against integer labels [N]."""
    return Tensor(lib.loom_cross_entropy(logits.handle, _t(labels).handle))
