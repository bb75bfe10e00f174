"""Datasets and the prefetching loader.

Data comes from Python in three ways, all feeding loom's threaded loader
(batching, shuffling, sharding across ranks, augmentation, normalization,
prefetching to the device):

    Dataset.from_arrays(x, y)            # NumPy arrays: x[i] a sample, y[i] its label (copied into loom)
    Dataset.from_sequence(ds)            # anything with len(ds) and ds[i] -> (x, y), e.g. a torch Dataset
    Dataset.from_callback(n, read, shape)  # read(i) -> (x, y)
    Dataset.idx(images, labels)          # IDX files (MNIST, Fashion-MNIST)

then `for x, y in loom.Loader(ds, batch_size=128, shuffle=True, ...)`. The
Python callbacks run on the loader's threads, one at a time (under the
GIL); an exception in them becomes the loader's error.
"""
import ctypes as C

import numpy as np

from ._lib import (READ_FN, DESTROY_FN, DatasetCallbacks, LoaderOptions, LoaderStats, check, check_handle, lib, options,
                   sized)
from .tensor import Tensor, _NUMPY, as_device, as_dtype, float32, int64, uint8


class Dataset:
    """A loom dataset (reference counted in loom: a loader keeps its own)."""

    def __init__(self, handle, keep=None):
        self._h = check_handle(handle)
        self._keep = keep  # Python objects the C side calls into

    def __del__(self):
        h, self._h = getattr(self, "_h", None), None
        if h and lib is not None:
            lib.loom_dataset_release(h)

    @property
    def handle(self):
        return self._h

    def __len__(self):
        return lib.loom_dataset_length(self._h)

    @classmethod
    def idx(cls, images_path, labels_path=None):
        """IDX files (MNIST, Fashion-MNIST; raw or gzip)."""
        return cls(lib.loom_dataset_idx_open(str(images_path).encode(),
                                             str(labels_path).encode() if labels_path else None))

    @classmethod
    def from_arrays(cls, x, y=None):
        """Samples x[i] (any shape) with scalar labels y[i]; copied into loom."""
        x = np.ascontiguousarray(x)
        xdt = as_dtype(x.dtype)
        if xdt not in _NUMPY:
            raise TypeError(f"from_arrays: x has dtype {x.dtype}")
        shape = (C.c_int64 * max(x.ndim - 1, 1))(*x.shape[1:])
        yp, ydt = None, int64
        if y is not None:
            y = np.ascontiguousarray(y)
            ydt = as_dtype(y.dtype)
            if len(y) != len(x):
                raise ValueError(f"from_arrays: {len(x)} samples but {len(y)} labels")
            yp = y.ctypes.data_as(C.c_void_p)
        return cls(lib.loom_dataset_memory(x.ctypes.data_as(C.c_void_p), int(xdt), x.ndim - 1, shape, yp, int(ydt),
                                           len(x), True))

    @classmethod
    def from_callback(cls, length, read, x_shape, x_dtype=float32, y_dtype=int64, has_y=True):
        """read(i) -> (x, y): called by loom's loader threads (one at a time,
        under the GIL); x is array-like of x_shape, y a scalar. An exception
        becomes the loader's error."""
        x_shape = tuple(x_shape)
        xdt, ydt = as_dtype(x_dtype), as_dtype(y_dtype)
        nx = int(np.prod(x_shape)) if x_shape else 1

        @READ_FN
        def _read(user, i, xp, yp):
            try:
                xv, yv = read(int(i)) if has_y else (read(int(i)), None)
                xa = np.ascontiguousarray(xv, dtype=_NUMPY[xdt]).reshape(-1)
                if xa.size != nx:
                    raise ValueError(f"sample {i}: {xa.size} values, expected {nx}")
                C.memmove(xp, xa.ctypes.data, xa.nbytes)
                if has_y:
                    ya = np.asarray([yv], dtype=_NUMPY[ydt])
                    C.memmove(yp, ya.ctypes.data, ya.nbytes)
                return 0
            except Exception as e:  # noqa: BLE001 - every failure goes back to loom as a message
                return lib.loom_dataset_fail(1, f"python dataset: {type(e).__name__}: {e}".encode())

        @DESTROY_FN
        def _destroy(user):
            pass

        cb = sized(DatasetCallbacks)
        cb.length, cb.x_dtype, cb.x_ndim = length, int(xdt), len(x_shape)
        for k, s in enumerate(x_shape):
            cb.x_shape[k] = s
        cb.has_y, cb.y_dtype = has_y, int(ydt)
        cb.read, cb.destroy, cb.user, cb.thread_safe = _read, _destroy, None, False
        return cls(lib.loom_dataset_callback(C.byref(cb)), keep=(_read, _destroy, read))

    @classmethod
    def from_sequence(cls, seq, x_dtype=None, y_dtype=None):
        """A map-style dataset: len(seq) samples, seq[i] -> (x, y) with x
        array-like (every sample one shape) and y a scalar label; or
        seq[i] -> x alone. Shape and dtypes come from seq[0] (float64 samples
        are read as float32, Python ints as int64) unless given."""
        n = len(seq)
        if n == 0:
            raise ValueError("from_sequence: the sequence is empty")
        first = seq[0]
        has_y = isinstance(first, (tuple, list)) and len(first) == 2
        x0 = np.asarray(first[0] if has_y else first)
        if x_dtype is None:
            x_dtype = np.float32 if x0.dtype == np.float64 else x0.dtype
        if has_y and y_dtype is None:
            y0 = np.asarray(first[1])
            y_dtype = np.int64 if y0.dtype.kind in "iub" else y0.dtype
        return cls.from_callback(n, lambda i: seq[i], x0.shape, x_dtype=x_dtype,
                                 y_dtype=int64 if y_dtype is None else y_dtype, has_y=has_y)

    def read(self, i):
        """Sample i as NumPy arrays (x, y)."""
        dt, nd = C.c_int(), C.c_int()
        shape = (C.c_int64 * 8)()
        check(lib.loom_dataset_x_info(self._h, C.byref(dt), C.byref(nd), shape))
        has_y, ydt = C.c_bool(), C.c_int()
        check(lib.loom_dataset_y_info(self._h, C.byref(has_y), C.byref(ydt)))
        x = np.empty(tuple(shape[k] for k in range(nd.value)), dtype=_NUMPY[as_dtype(dt.value)])
        y = np.empty((), dtype=_NUMPY[as_dtype(ydt.value)]) if has_y.value else None
        check(lib.loom_dataset_read(self._h, i, x.ctypes.data_as(C.c_void_p),
                                    y.ctypes.data_as(C.c_void_p) if y is not None else None))
        return x, y


class Loader:
    """Batches of a dataset: `for x, y in loader:` runs one epoch; the next
    loop runs the following one. Options as in loom_loader_options."""

    def __init__(self, dataset, batch_size=64, shuffle=False, seed=0, drop_last=False, workers=2, prefetch=2,
                 rank=0, world_size=1, device="cpu", x_dtype=float32, y_dtype=int64, crop_padding=0, hflip=False,
                 scale=1.0, mean=None, std=None, channels_last=False):
        o = options(LoaderOptions)
        o.batch_size, o.shuffle, o.seed, o.drop_last = batch_size, shuffle, seed, drop_last
        o.workers, o.prefetch, o.rank, o.world_size = workers, prefetch, rank, world_size
        o.device, o.x_dtype, o.y_dtype = as_device(device), int(as_dtype(x_dtype)), int(as_dtype(y_dtype))
        o.crop_padding, o.hflip, o.scale, o.channels_last = crop_padding, hflip, scale, channels_last
        if mean is not None:
            mean, std = list(np.atleast_1d(mean)), list(np.atleast_1d(std))
            m, s = (C.c_float * len(mean))(*mean), (C.c_float * len(std))(*std)
            o.mean, o.std, o.norm_channels = C.cast(m, C.POINTER(C.c_float)), C.cast(s, C.POINTER(C.c_float)), len(mean)
        self.dataset = dataset
        self._h = check_handle(lib.loom_loader_new(dataset.handle, C.byref(o)))

    def __del__(self):
        h, self._h = getattr(self, "_h", None), None
        if h and lib is not None:
            lib.loom_loader_free(h)

    @property
    def handle(self):
        return self._h

    def next(self):
        """The next batch (x, y), or None at the end of the epoch."""
        x, y = C.c_void_p(), C.c_void_p()
        check(lib.loom_loader_next(self._h, C.byref(x), C.byref(y)))
        if not x.value:
            return None
        return Tensor(x.value), (Tensor(y.value) if y.value else None)

    def next_into(self, x, y=None):
        """Copy the next batch into tensors you own (e.g. a captured graph's
        static inputs), as loom_loader_next_into: x is [batch_size, sample
        shape...] of the loader's x dtype on its device, y (optional)
        [batch_size] of its y dtype. Returns the number of samples written
        (0 at the end of the epoch; rows past it are left untouched). Shares
        the stream of batches with next()."""
        n = C.c_int64()
        check(lib.loom_loader_next_into(self._h, x.handle, y.handle if y is not None else None, C.byref(n)))
        return n.value

    def __iter__(self):
        while True:
            b = self.next()
            if b is None:
                return
            yield b

    def __len__(self):
        return lib.loom_loader_num_batches(self._h)

    @property
    def epoch(self):
        return lib.loom_loader_epoch(self._h)

    def start_epoch(self, epoch):
        check(lib.loom_loader_start_epoch(self._h, epoch))

    def position(self):
        e, b = C.c_int64(), C.c_int64()
        check(lib.loom_loader_position(self._h, C.byref(e), C.byref(b)))
        return e.value, b.value

    def seek(self, epoch, batch):
        check(lib.loom_loader_seek(self._h, epoch, batch))

    def stats(self):
        s = sized(LoaderStats)
        check(lib.loom_loader_stats_get(self._h, C.byref(s)))
        return {k: getattr(s, k) for k, _ in LoaderStats._fields_ if k != "struct_size"}

    def reset_stats(self):
        lib.loom_loader_stats_reset(self._h)
