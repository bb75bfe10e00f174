"""loom: a training runtime in C, from Python (over its public C ABI).

    import loom
    x = loom.tensor([[1.0, 2.0]])
    model = loom.nn.MLP(2, [16], 3)
    loss = loom.cross_entropy(model(x), loom.tensor([1]))
    loss.backward()

Modules of your own subclass loom.nn.Module (see loom.nn.module); the CNN
layers and ResNets are in loom.nn, data parallelism in loom.dist. Tensors
exchange memory with NumPy and PyTorch through DLPack (numpy.from_dlpack(t),
torch.from_dlpack(t), loom.from_dlpack(x)); every failed call raises
loom.Error with loom's message. `python -m loom` prints the build.
"""
import contextlib as _contextlib
import ctypes as _C

from . import amp, data, dist, nn, optim
from ._lib import Error, lib as _lib, library_path
from .data import Dataset, Loader
from .io import load_checkpoint, load_file, safe_open, save_checkpoint, save_file
from .nn.module import Parameter
from .tensor import (Tensor, arange, as_dtype, bfloat16, bool_, cat, dtype, empty, float16, float32, from_dlpack,
                     from_numpy, full, int32, int64, ones, rand, randn, stack, tensor, uint8, zeros)

__version__ = "0.1.0"


def manual_seed(seed):
    """Seed loom's Philox generator (initializers, rand, randn) on every device."""
    _lib.loom_manual_seed(int(seed))


def rng_state():
    s, o = _C.c_uint64(), _C.c_uint64()
    _lib.loom_rng_get_state(_C.byref(s), _C.byref(o))
    return s.value, o.value


def set_rng_state(state):
    _lib.loom_rng_set_state(int(state[0]), int(state[1]))


def set_num_threads(n):
    _lib.loom_set_num_threads(int(n))


def get_num_threads():
    return _lib.loom_get_num_threads()


def cuda_is_available():
    return _lib.loom_device_count(1) > 0


def cuda_device_count():
    return _lib.loom_device_count(1)


def build_info():
    """What libloom was built with: {"version": "0.1.0", "cuda": True, "mpi": True, ...}."""
    out = {}
    for item in _lib.loom_build_info().decode().split():
        k, v = item.split("=", 1)
        out[k] = {"yes": True, "no": False}.get(v, v)
    return out


def cpu_isa():
    """The instruction set loom's CPU kernels use: "avx512", "avx2" or "scalar"."""
    return _lib.loom_cpu_isa().decode()


def cuda_unavailable_reason():
    r = _lib.loom_cuda_unavailable_reason()
    return r.decode() if r else None


def memory_stats(device="cpu"):
    """loom's allocator statistics for a device (see loom/alloc.h): the
    current and peak values of allocated_bytes, reserved_bytes, ... for all
    pools, and the counters."""
    from ._lib import MemoryStats, check
    from .tensor import as_device
    s = MemoryStats(struct_size=_C.sizeof(MemoryStats))
    check(_lib.loom_memory_stats_get(as_device(device), _C.byref(s)))
    out = {}
    for name, _ in MemoryStats._fields_[1:]:
        v = getattr(s, name)
        out[name] = {"current": v[0].current, "peak": v[0].peak} if hasattr(v, "__len__") else v
    return out


def memory_allocated(device="cpu"):
    """Bytes of live loom tensors (and other allocations) on device."""
    return memory_stats(device)["allocated_bytes"]["current"]


def memory_summary(device="cpu"):
    """loom's allocator statistics for a device as a readable table."""
    from ._lib import take_string
    from .tensor import as_device
    return take_string(_lib.loom_memory_summary(as_device(device)))


def memory_snapshot(device="cpu"):
    """Every segment and block of loom's allocator for a device, its
    statistics and its event history (loom_memory_snapshot_json), parsed."""
    import json
    from ._lib import take_string
    from .tensor import as_device
    return json.loads(take_string(_lib.loom_memory_snapshot_json(as_device(device))))


def synchronize(device="cuda"):
    from .tensor import as_device
    from ._lib import check
    check(_lib.loom_device_synchronize(as_device(device)))


@_contextlib.contextmanager
def no_grad():
    """Ops inside record no autograd (this thread)."""
    prev = _lib.loom_set_grad_enabled(False)
    try:
        yield
    finally:
        _lib.loom_set_grad_enabled(prev)


def is_grad_enabled():
    return bool(_lib.loom_is_grad_enabled())


# ---- functions over tensors ---------------------------------------------------------------

def matmul(a, b):
    return a @ b


def linear(x, w, b=None, relu=False):
    """act(x @ w.T + b) as one fused op."""
    return Tensor(_lib.loom_linear(x.handle, w.handle, b.handle if b is not None else None, 1 if relu else 0))


def relu(x):
    return x.relu()


def sigmoid(x):
    return x.sigmoid()


def tanh(x):
    return x.tanh()


def softmax(x, dim=-1):
    return x.softmax(dim)


def log_softmax(x, dim=-1):
    return x.log_softmax(dim)


def reshape(x, *shape):
    return x.reshape(*shape)


def permute(x, *dims):
    return x.permute(*dims)


def transpose(x, dim0, dim1):
    return x.transpose(dim0, dim1)


def flatten(x, start_dim=0, end_dim=-1):
    return x.flatten(start_dim, end_dim)


def unsqueeze(x, dim):
    return x.unsqueeze(dim)


def squeeze(x, dim=None):
    return x.squeeze(dim)


def sum(x, dim=None, keepdim=False):  # noqa: A001 - torch.sum
    return x.sum(dim, keepdim)


def mean(x, dim=None, keepdim=False):
    return x.mean(dim, keepdim)


def exp(x):
    return x.exp()


def log(x):
    return x.log()


def sqrt(x):
    return x.sqrt()


def cross_entropy(logits, labels):
    """Mean cross-entropy of logits [N, C] against integer labels [N]."""
    return Tensor(_lib.loom_cross_entropy(logits.handle, labels.handle))


def accuracy(logits, labels):
    from ._lib import check
    out = _C.c_double()
    check(_lib.loom_accuracy(logits.handle, labels.handle, _C.byref(out)))
    return out.value


def count_correct(logits, labels):
    from ._lib import check
    out = _C.c_int64()
    check(_lib.loom_count_correct(logits.handle, labels.handle, _C.byref(out)))
    return out.value
