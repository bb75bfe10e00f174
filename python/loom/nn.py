"""Modules: Linear, ReLU, Sequential, MLP over loom_module handles, with
PyTorch-style names for parameters and buffers (the names checkpoints use)."""
import ctypes as C

from ._lib import check, check_handle, lib, scoped
from .tensor import Tensor, _t, as_device

_INIT = {"default": 0, "kaiming_uniform": 1, "kaiming_normal": 2, "xavier_uniform": 3, "xavier_normal": 4}
_PRECISION = {"fp32": 0, "fp16": 1, "mixed-fp16": 1, "bf16": 2, "mixed-bf16": 2}


class Module:
    """A loom module. A module given to a Sequential is owned by it from then
    on (the Python object keeps the container alive)."""

    def __init__(self, handle):
        self._h = check_handle(handle)
        self._owner = None  # the container that owns our handle, if any

    def __del__(self):
        h, self._h = getattr(self, "_h", None), None
        if h and self._owner is None and lib is not None:
            lib.loom_module_free(h)

    @property
    def handle(self):
        return self._h

    def __call__(self, x):
        return self.forward(x)

    def forward(self, x):
        # In a scope: the layers' intermediate outputs die with it (see _lib.scoped).
        return Tensor(scoped(lib.loom_module_forward, self._h, _t(x)._h))

    @property
    def name(self):
        return lib.loom_module_name(self._h).decode()

    def __repr__(self):
        kids = self.children()
        return self.name + ("(" + ", ".join(repr(k) for k in kids) + ")" if kids else "")

    def children(self):
        out = []
        for i in range(lib.loom_module_num_children(self._h)):
            m = Module.__new__(Module)
            m._h, m._owner = lib.loom_module_child(self._h, i), self
            out.append(m)
        return out

    def _named(self, count, get, name):
        buf = C.create_string_buffer(512)
        out = []
        for i in range(count(self._h)):
            check_handle(name(self._h, i, buf, 512))
            out.append((buf.value.decode(), Tensor(get(self._h, i), borrowed=True)))
        return out

    def named_parameters(self):
        return self._named(lib.loom_module_num_params, lib.loom_module_param, lib.loom_module_param_name)

    def parameters(self):
        return [t for _, t in self.named_parameters()]

    def named_buffers(self):
        return self._named(lib.loom_module_num_buffers, lib.loom_module_buffer, lib.loom_module_buffer_name)

    def state_dict(self):
        """name -> tensor (shared with the module, not copied)."""
        return dict(self.named_parameters() + self.named_buffers())

    def load_state_dict(self, state):
        mine = self.state_dict()
        missing = [k for k in mine if k not in state]
        unexpected = [k for k in state if k not in mine]
        if missing or unexpected:
            raise KeyError(f"load_state_dict: missing {missing}, unexpected {unexpected}")
        for k, t in mine.items():
            t.copy_(state[k])
        check(lib.loom_module_refresh_lowp(self._h))

    def train(self, mode=True):
        check(lib.loom_module_train(self._h, bool(mode)))
        return self

    def eval(self):
        return self.train(False)

    @property
    def training(self):
        return bool(lib.loom_module_is_training(self._h))

    def set_precision(self, precision, keep_last_fp32=False):
        """"fp32", "fp16" (mixed, f32 masters) or "bf16" (see loom/amp.h)."""
        if precision not in _PRECISION:
            raise ValueError(f"precision is one of {sorted(_PRECISION)}, got {precision!r}")
        check(lib.loom_module_set_precision(self._h, _PRECISION[precision], bool(keep_last_fp32)))
        return self

    @property
    def precision(self):
        return lib.loom_precision_name(lib.loom_module_get_precision(self._h)).decode()


class Linear(Module):
    def __init__(self, in_features, out_features, bias=True, init="default", device="cpu"):
        super().__init__(lib.loom_linear_new(in_features, out_features, bool(bias), _INIT[init], as_device(device)))


class ReLU(Module):
    def __init__(self):
        super().__init__(lib.loom_relu_new())


class Sequential(Module):
    """Children run in order; a ReLU right after a Linear is fused into it."""

    def __init__(self, *modules):
        super().__init__(lib.loom_sequential_new())
        for m in modules:
            self.append(m)

    def append(self, m):
        if m._owner is not None:
            raise ValueError("this module already belongs to a container")
        m._owner = self  # loom owns it from here, also if the call fails
        check(lib.loom_sequential_add(self._h, m._h))
        return self


class MLP(Module):
    """in -> hidden[0] -> ... -> out with fused Linear+ReLU between, like loom_mlp_new."""

    def __init__(self, in_features, hidden, out_features, device="cpu"):
        hidden = list(hidden)
        arr = (C.c_int64 * max(len(hidden), 1))(*hidden)
        super().__init__(lib.loom_mlp_new(in_features, len(hidden), arr, out_features, as_device(device)))
