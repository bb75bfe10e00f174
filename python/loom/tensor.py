"""loom.Tensor: a reference to a loom tensor, its ops (as methods and
operators), creation functions, and DLPack exchange.

Ownership: outside a loom scope every tensor a loom call makes belongs to
the caller; the Tensor object holds that reference and releases it when
Python collects it. Tensors borrowed from loom (a module's parameters, a
gradient) are retained first, and so are tensors made while a loom scope owns
new tensors (a Python module's forward called from C, see nn/module.py):
each Tensor object always holds a reference of its own.
"""
import ctypes as C
import enum

import numpy as np

from . import _dlpack
from ._lib import Device, Error, check, check_handle, lib, state


class dtype(enum.IntEnum):
    """loom's element types (include/loom/dtype.h)."""
    float32 = 0
    float16 = 1
    bfloat16 = 2
    int32 = 3
    int64 = 4
    uint8 = 5

    def __repr__(self):
        return f"loom.{self.name}"

    __str__ = __repr__


float32, float16, bfloat16 = dtype.float32, dtype.float16, dtype.bfloat16
int32, int64, uint8 = dtype.int32, dtype.int64, dtype.uint8
bool_ = uint8

_ALIASES = {"f32": float32, "float": float32, "f16": float16, "half": float16, "bf16": bfloat16, "i32": int32,
            "int": int64, "i64": int64, "long": int64, "u8": uint8, "bool": uint8}
_NUMPY = {float32: np.float32, float16: np.float16, int32: np.int32, int64: np.int64, uint8: np.uint8}
_FROM_NUMPY = {np.dtype(v): k for k, v in _NUMPY.items()}
_FROM_NUMPY[np.dtype(np.bool_)] = uint8


def as_dtype(dt):
    """A loom dtype from a loom.dtype, a name ("float32", "bf16", ...) or a NumPy dtype."""
    if isinstance(dt, dtype):
        return dt
    if isinstance(dt, int) and not isinstance(dt, bool) and 0 <= dt < len(dtype):
        return dtype(dt)
    if isinstance(dt, str):
        if dt in dtype.__members__:
            return dtype[dt]
        if dt in _ALIASES:
            return _ALIASES[dt]
    try:
        return _FROM_NUMPY[np.dtype(dt)]
    except (TypeError, KeyError):
        pass
    raise TypeError(f"loom has no dtype {dt!r} (it has float32, float16, bfloat16, int32, int64, uint8)")


def as_device(dev):
    """A loom Device from "cpu", "cuda", "cuda:N", "auto" or a Device."""
    if isinstance(dev, Device):
        return dev
    out = Device()
    check(lib.loom_device_parse(str(dev).encode(), C.byref(out)))
    return out


def device_str(dev):
    buf = C.create_string_buffer(32)
    return lib.loom_device_str(dev, buf, 32).decode()


def _shape_arg(shape):
    shape = tuple(int(s) for s in shape)
    return len(shape), (C.c_int64 * max(len(shape), 1))(*shape)


def _dims_arg(dims, ndim):
    if dims is None:
        return 0, None
    if isinstance(dims, int):
        dims = (dims,)
    dims = tuple(d % ndim if ndim else d for d in dims)
    return len(dims), (C.c_int * len(dims))(*dims)


class Tensor:
    """A loom tensor. Create with loom.tensor, loom.zeros, ...; share memory
    with NumPy/PyTorch through DLPack (numpy.from_dlpack(t),
    torch.from_dlpack(t), loom.from_dlpack(x))."""

    __slots__ = ("_h", "__weakref__")

    def __init__(self, handle, *, borrowed=False):
        check_handle(handle)
        if borrowed or getattr(state, "scoped", False):
            lib.loom_tensor_retain(handle)
        self._h = handle

    def __del__(self):
        h, self._h = getattr(self, "_h", None), None
        if h and lib is not None:
            lib.loom_tensor_release(h)

    @property
    def handle(self):
        """The loom_tensor * (for calling the C API directly)."""
        return self._h

    # ---- metadata ------------------------------------------------------------------
    @property
    def ndim(self):
        return lib.loom_tensor_ndim(self._h)

    @property
    def shape(self):
        p = lib.loom_tensor_shape(self._h)
        return tuple(p[i] for i in range(self.ndim))

    def size(self, dim=None):
        return self.shape if dim is None else self.shape[dim]

    def dim(self):
        return self.ndim

    @property
    def strides(self):
        """In elements."""
        p = lib.loom_tensor_strides(self._h)
        return tuple(p[i] for i in range(self.ndim))

    @property
    def dtype(self):
        return dtype(lib.loom_tensor_dtype(self._h))

    @property
    def device(self):
        return device_str(lib.loom_tensor_device(self._h))

    def numel(self):
        return lib.loom_tensor_numel(self._h)

    def __len__(self):
        if self.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def is_contiguous(self):
        return bool(lib.loom_tensor_is_contiguous(self._h))

    def data_ptr(self):
        return lib.loom_tensor_data(self._h) or 0

    # ---- autograd --------------------------------------------------------------------
    @property
    def requires_grad(self):
        return bool(lib.loom_requires_grad(self._h))

    @requires_grad.setter
    def requires_grad(self, value):
        check(lib.loom_set_requires_grad(self._h, bool(value)))

    def requires_grad_(self, value=True):
        self.requires_grad = value
        return self

    @property
    def grad(self):
        g = lib.loom_grad(self._h)
        return Tensor(g, borrowed=True) if g else None

    def backward(self, grad=None):
        if grad is None:
            check(lib.loom_backward(self._h))
        else:
            check(lib.loom_backward_with(self._h, _t(grad, self)._h))

    def zero_grad(self):
        check(lib.loom_zero_grad(self._h))

    def detach(self):
        return Tensor(lib.loom_detach(self._h))

    # ---- conversion ----------------------------------------------------------------------
    def numpy(self):
        """A writable NumPy array sharing this tensor's memory on the CPU (it
        keeps the tensor alive). CUDA tensors and bfloat16 (NumPy has no
        bfloat16) come back as copies, bfloat16 as float32.
        (numpy.from_dlpack(t) shares memory too, but NumPy < 2 marks such
        arrays read-only.)"""
        t = self
        if self.device != "cpu":
            t = t.to("cpu")
        if t.dtype == bfloat16:
            t = t.to(float32)
        npdt = np.dtype(_NUMPY[t.dtype])
        shape, strides = t.shape, t.strides
        extent = 1 + sum((n - 1) * s for n, s in zip(shape, strides)) if all(shape) else 0
        if extent == 0:
            return np.empty(shape, dtype=npdt)
        buf = (C.c_char * (extent * npdt.itemsize)).from_address(t.data_ptr())
        buf.tensor = t  # the array's base chain ends here: it keeps the tensor (and its memory) alive
        flat = np.frombuffer(buf, dtype=npdt)
        return np.lib.stride_tricks.as_strided(flat, shape, tuple(s * npdt.itemsize for s in strides))

    def tolist(self):
        return self.numpy().tolist()

    def item(self):
        out = C.c_double()
        check(lib.loom_item(self._h, C.byref(out)))
        return int(out.value) if self.dtype not in (float32, float16, bfloat16) else out.value

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def __bool__(self):
        if self.numel() != 1:
            raise ValueError("the truth value of a tensor with more than one element is ambiguous")
        return bool(self.item())

    def to(self, arg):
        """t.to("cuda"), t.to(loom.float16), t.to("float16")."""
        if isinstance(arg, (dtype, np.dtype)) or (isinstance(arg, str) and not arg.startswith(("cpu", "cuda", "auto"))):
            return Tensor(lib.loom_cast(self._h, as_dtype(arg)))
        return Tensor(lib.loom_to_device(self._h, as_device(arg)))

    def float(self):
        return self.to(float32)

    def half(self):
        return self.to(float16)

    def bfloat16(self):
        return self.to(bfloat16)

    def long(self):
        return self.to(int64)

    def cpu(self):
        return self.to("cpu")

    def cuda(self, index=0):
        return self.to(f"cuda:{index}")

    def clone(self):
        return Tensor(lib.loom_clone(self._h))

    def contiguous(self):
        return Tensor(lib.loom_contiguous(self._h))

    def copy_(self, src):
        check(lib.loom_copy_(self._h, _t(src, self)._h))
        return self

    def fill_(self, value):
        check(lib.loom_fill_(self._h, float(value)))
        return self

    # ---- views --------------------------------------------------------------------------
    def view(self, *shape):
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        n, arr = _shape_arg(shape)
        return Tensor(lib.loom_view(self._h, n, arr))

    def reshape(self, *shape):
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        n, arr = _shape_arg(shape)
        return Tensor(lib.loom_reshape(self._h, n, arr))

    def flatten(self, start_dim=0, end_dim=-1):
        """Merge dims start_dim..end_dim into one (a view when the strides allow)."""
        return Tensor(lib.loom_flatten(self._h, start_dim, end_dim))

    def unsqueeze(self, dim):
        """A view with a new dimension of size 1 at dim (negative counts from the end)."""
        n = self.ndim + 1
        if not -n <= dim < n:
            raise IndexError(f"unsqueeze: dim {dim} is out of range for a {self.ndim}-d tensor")
        shape = list(self.shape)
        shape.insert(dim % n, 1)
        return self.reshape(shape)

    def squeeze(self, dim=None):
        """Drop dimensions of size 1 (only dim, when given)."""
        shape = list(self.shape)
        if dim is None:
            return self.reshape([s for s in shape if s != 1])
        if shape and shape[dim] == 1:
            del shape[dim]
        return self.reshape(shape)

    def transpose(self, dim0, dim1):
        return Tensor(lib.loom_transpose(self._h, dim0, dim1))

    @property
    def T(self):
        if self.ndim != 2:
            raise ValueError(".T needs a 2-d tensor; use transpose(dim0, dim1)")
        return self.transpose(0, 1)

    def permute(self, *dims):
        dims = dims[0] if len(dims) == 1 and isinstance(dims[0], (tuple, list)) else dims
        return Tensor(lib.loom_permute(self._h, (C.c_int * len(dims))(*dims)))

    def expand(self, *shape):
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        n, arr = _shape_arg(shape)
        return Tensor(lib.loom_expand(self._h, n, arr))

    def __getitem__(self, key):
        """Integers, slices (step >= 1), None (a new dim of size 1) and one
        ... , as in PyTorch; the result is a view."""
        if not isinstance(key, tuple):
            key = (key,)
        if sum(k is Ellipsis for k in key) > 1:
            raise IndexError("an index can only have a single ellipsis ('...')")
        if Ellipsis in key:
            at = key.index(Ellipsis)
            used = sum(k is not None for k in key) - 1
            key = key[:at] + (slice(None),) * (self.ndim - used) + key[at + 1:]
        if sum(k is not None for k in key) > self.ndim:
            raise IndexError(f"too many indices for a {self.ndim}-d tensor")
        t, dim, drop, new = self, 0, [], []
        for k in key:
            if k is None:
                new.append(dim + len(new) - len(drop))
                continue
            size = t.shape[dim]
            if isinstance(k, slice):
                start, stop, step = k.indices(size)
                if step < 1:
                    raise IndexError("loom slices need a positive step")
                t = Tensor(lib.loom_slice(t._h, dim, start, max(stop, start), step))
            else:
                i = int(k)
                if i < -size or i >= size:
                    raise IndexError(f"index {i} is out of range for dimension {dim} of size {size}")
                i %= size
                t = Tensor(lib.loom_slice(t._h, dim, i, i + 1, 1))
                drop.append(dim)
            dim += 1
        if drop or new:
            shape = [s for d, s in enumerate(t.shape) if d not in drop]
            for d in new:
                shape.insert(d, 1)
            t = t.reshape(shape)
        return t

    def __setitem__(self, key, value):
        self[key].copy_(value if isinstance(value, Tensor) else full(self[key].shape, value, self.dtype, self.device))

    # ---- math ------------------------------------------------------------------------------
    def _binary(self, other, fn, scalar_fn=None):
        if not isinstance(other, Tensor) and scalar_fn is not None and np.isscalar(other):
            return scalar_fn(float(other))
        return Tensor(fn(self._h, _t(other, self)._h))

    def __add__(self, o):
        return self._binary(o, lib.loom_add, lambda s: Tensor(lib.loom_add_scalar(self._h, s)))

    __radd__ = __add__

    def __sub__(self, o):
        return self._binary(o, lib.loom_sub, lambda s: Tensor(lib.loom_add_scalar(self._h, -s)))

    def __rsub__(self, o):
        if np.isscalar(o):
            return Tensor(lib.loom_rsub_scalar(self._h, float(o)))
        return _t(o, self) - self

    def __mul__(self, o):
        return self._binary(o, lib.loom_mul, lambda s: Tensor(lib.loom_mul_scalar(self._h, s)))

    __rmul__ = __mul__

    def __truediv__(self, o):
        return self._binary(o, lib.loom_div, lambda s: Tensor(lib.loom_mul_scalar(self._h, 1.0 / s)))

    def __rtruediv__(self, o):
        if np.isscalar(o):
            return Tensor(lib.loom_rdiv_scalar(self._h, float(o)))
        return _t(o, self) / self

    def __pow__(self, p):
        return Tensor(lib.loom_pow_scalar(self._h, float(p)))

    def __neg__(self):
        return Tensor(lib.loom_neg(self._h))

    def __matmul__(self, o):
        return Tensor(lib.loom_matmul(self._h, _t(o, self)._h))

    def __rmatmul__(self, o):
        return _t(o, self) @ self

    matmul = __matmul__
    add, sub, mul, div = __add__, __sub__, __mul__, __truediv__

    def pow(self, p):
        return self ** p

    def exp(self):
        return Tensor(lib.loom_exp(self._h))

    def log(self):
        return Tensor(lib.loom_log(self._h))

    def sqrt(self):
        return Tensor(lib.loom_sqrt(self._h))

    def relu(self):
        return Tensor(lib.loom_relu(self._h))

    def sigmoid(self):
        """1 / (1 + exp(-x)), as the second entry of softmax([0, x]) (no overflow, finite gradients)."""
        z = self.unsqueeze(-1)
        return cat([zeros(z.shape, dtype=self.dtype, device=self.device), z], -1).softmax(-1)[..., 1]

    def tanh(self):
        return (self * 2).sigmoid() * 2 - 1

    def softmax(self, dim=-1):
        return self.log_softmax(dim).exp()

    def sum(self, dim=None, keepdim=False):
        n, dims = _dims_arg(dim, self.ndim)
        return Tensor(lib.loom_sum(self._h, n, dims, keepdim))

    def mean(self, dim=None, keepdim=False):
        n, dims = _dims_arg(dim, self.ndim)
        return Tensor(lib.loom_mean(self._h, n, dims, keepdim))

    def max(self, dim=None, keepdim=False):
        n, dims = _dims_arg(dim, self.ndim)
        return Tensor(lib.loom_max(self._h, n, dims, keepdim))

    def min(self, dim=None, keepdim=False):
        return -((-self).max(dim, keepdim))

    amax, amin = max, min  # PyTorch's names for the values-only reductions

    def argmax(self, dim=-1, keepdim=False):
        return Tensor(lib.loom_argmax(self._h, dim, keepdim))

    def log_softmax(self, dim=-1):
        return Tensor(lib.loom_log_softmax(self._h, dim))

    # ---- DLPack ----------------------------------------------------------------------------
    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        t = self
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError(f"__dlpack__: this tensor is on {self.device}; copy it there with .to() first")
        if copy:
            t = self.clone()
        if self.device != "cpu":
            # DLPack: None means the legacy default stream; -1 means no sync.
            check(lib.loom_dlpack_sync_stream(lib.loom_tensor_device(self._h), 1 if stream is None else int(stream)))
        versioned = max_version is not None and tuple(max_version)[0] >= 1
        return _dlpack.to_capsule(t._h, versioned)

    def __dlpack_device__(self):
        ty, i = C.c_int32(), C.c_int32()
        check(lib.loom_dlpack_device(self._h, C.byref(ty), C.byref(i)))
        return (ty.value, i.value)

    def __repr__(self):
        head = f"loom.Tensor(shape={list(self.shape)}, dtype={self.dtype.name}, device={self.device}"
        if self.requires_grad:
            head += ", requires_grad=True"
        if self.numel() <= 64:
            return head + f",\n{self.numpy()!r})"
        return head + ")"


def _t(x, like=None):
    """x as a Tensor (NumPy arrays and scalars are copied in, with like's
    dtype and device when x has none of its own)."""
    if isinstance(x, Tensor):
        return x
    if np.isscalar(x) and like is not None:
        return full((), x, like.dtype, like.device)
    return tensor(x, device=like.device if like is not None else "cpu")


def cat(tensors, dim=0):
    """The tensors joined along dim (PyTorch's torch.cat): same dtype, and
    equal sizes except in dim; differentiable."""
    ts = [_t(x) for x in tensors]
    if not ts:
        raise ValueError("cat: expected a non-empty list of tensors")
    arr = (C.c_void_p * len(ts))(*[x.handle for x in ts])
    return Tensor(lib.loom_cat(len(ts), arr, int(dim)))


def stack(tensors, dim=0):
    """The tensors (one shape) joined along a new dimension dim."""
    ts = [_t(x) for x in tensors]
    if not ts:
        raise ValueError("stack: expected a non-empty list of tensors")
    return cat([x.unsqueeze(dim) for x in ts], dim)


# ---- creation ---------------------------------------------------------------------------

def tensor(data, dtype=None, device="cpu", requires_grad=False):
    """A new tensor holding a copy of data (a NumPy array, nested lists, a
    scalar, or anything with __dlpack__, which is copied)."""
    if isinstance(data, Tensor) or (hasattr(data, "__dlpack__") and not isinstance(data, np.ndarray)):
        t = from_dlpack(data).clone()
        if dtype is not None:
            t = t.to(as_dtype(dtype))
        if device != "cpu" or t.device != "cpu":
            t = t.to(device)
    else:
        arr = np.asarray(data)
        if dtype is not None:
            dt = as_dtype(dtype)
        elif arr.dtype == np.float64:
            dt = float32  # Python floats: loom's default float
        else:
            dt = as_dtype(arr.dtype)
        if dt == bfloat16:
            t = tensor(arr.astype(np.float32), device=device).to(bfloat16)
        else:
            arr = np.ascontiguousarray(arr, dtype=_NUMPY[dt])
            n, shape = _shape_arg(arr.shape)
            t = Tensor(lib.loom_from_host(arr.ctypes.data_as(C.c_void_p), n, shape, int(dt), as_device(device)))
    if requires_grad:
        t.requires_grad = True
    return t


def from_numpy(arr):
    """A tensor sharing arr's memory (zero copy, through DLPack)."""
    return from_dlpack(arr)


def _make(fn, shape, dt, device, *extra):
    n, arr = _shape_arg(shape)
    return Tensor(fn(n, arr, *extra, int(as_dtype(dt)), as_device(device)))


def _shape_of(shape):
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        return tuple(shape[0])
    return shape


def empty(*shape, dtype=float32, device="cpu"):
    return _make(lib.loom_empty, _shape_of(shape), dtype, device)


def zeros(*shape, dtype=float32, device="cpu"):
    return _make(lib.loom_zeros, _shape_of(shape), dtype, device)


def ones(*shape, dtype=float32, device="cpu"):
    return _make(lib.loom_ones, _shape_of(shape), dtype, device)


def full(shape, value, dtype=float32, device="cpu"):
    return _make(lib.loom_full, shape, dtype, device, float(value))


def rand(*shape, dtype=float32, device="cpu"):
    """U(0, 1) from loom's Philox generator (loom.manual_seed)."""
    return _make(lib.loom_rand, _shape_of(shape), dtype, device)


def randn(*shape, dtype=float32, device="cpu"):
    return _make(lib.loom_randn, _shape_of(shape), dtype, device)


def arange(start, end=None, step=1, dtype=float32, device="cpu"):
    if end is None:
        start, end = 0, start
    return Tensor(lib.loom_arange(float(start), float(end), float(step), int(as_dtype(dtype)), as_device(device)))


def from_dlpack(x):
    """A loom tensor sharing x's memory: x has __dlpack__ (NumPy, PyTorch,
    CuPy, JAX, a loom.Tensor) or is a DLPack capsule. The producer is told to
    make its data ready on loom's current stream of the device."""
    if isinstance(x, Tensor):
        return x
    if hasattr(x, "__dlpack__"):
        kind, index = x.__dlpack_device__()
        kwargs = {}
        if int(kind) == _dlpack.KDL_CUDA:
            dev = Device(1, _logical_cuda(int(index)))
            stream = lib.loom_stream_native(check_handle(lib.loom_stream_current(dev)))
            kwargs["stream"] = stream or 1
        try:
            capsule = x.__dlpack__(max_version=(1, 0), **kwargs)
        except TypeError:  # producers from before DLPack 1.0 (NumPy < 2.1, PyTorch < 2.4)
            capsule = x.__dlpack__(**kwargs)
    else:
        capsule = x
    return Tensor(_dlpack.from_capsule(capsule))


def _logical_cuda(ordinal):
    """loom's index of the CUDA device with this ordinal."""
    n = lib.loom_device_count(1)
    for i in range(n):
        t = zeros(1, device=f"cuda:{i}")
        if t.__dlpack_device__()[1] == ordinal:
            return i
    raise Error(4, f"from_dlpack: CUDA device {ordinal} is not visible to loom")
