"""safetensors files and training checkpoints (loom/io.h)."""
import ctypes as C

from ._lib import TrainState, check, check_handle, lib, sized
from .tensor import Tensor, _t, as_device


def save_file(tensors, path, metadata=None):
    """Write {name: tensor} (and {key: str} metadata) as a safetensors file,
    atomically."""
    names = list(tensors)
    ts = [_t(tensors[n]) for n in names]
    metadata = dict(metadata or {})
    name_arr = (C.c_char_p * max(len(names), 1))(*[n.encode() for n in names])
    t_arr = (C.c_void_p * max(len(ts), 1))(*[t.handle for t in ts])
    keys = (C.c_char_p * max(len(metadata), 1))(*[str(k).encode() for k in metadata])
    vals = (C.c_char_p * max(len(metadata), 1))(*[str(v).encode() for v in metadata.values()])
    check(lib.loom_safetensors_save(str(path).encode(), len(names), name_arr, t_arr, len(metadata), keys, vals))


class safe_open:
    """An open, fully validated safetensors file:

        with loom.safe_open(path) as f:
            w = f.get_tensor("model.0.weight")   # CPU: a zero-copy view of the file
    """

    def __init__(self, path, device="cpu"):
        self.path = str(path)
        self.device = device
        self._h = check_handle(lib.loom_safetensors_open(self.path.encode()))

    def close(self):
        h, self._h = getattr(self, "_h", None), None
        if h and lib is not None:
            lib.loom_safetensors_close(h)

    __del__ = close

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def keys(self):
        return [lib.loom_safetensors_name(self._h, i).decode() for i in range(lib.loom_safetensors_num_tensors(self._h))]

    def dtype_name(self, name):
        return lib.loom_safetensors_dtype_name(self._h, lib.loom_safetensors_find(self._h, name.encode())).decode()

    def get_tensor(self, name, device=None):
        return Tensor(lib.loom_safetensors_get(self._h, name.encode(), as_device(device or self.device)))

    def metadata(self):
        n = lib.loom_safetensors_num_metadata(self._h)
        keys = [lib.loom_safetensors_metadata_key(self._h, i) for i in range(n)]
        return {k.decode(): lib.loom_safetensors_metadata(self._h, k).decode() for k in keys}


def load_file(path, device="cpu"):
    """{name: tensor} of a safetensors file (on the CPU, views of the file's
    memory map that stay valid after the call)."""
    with safe_open(path, device) as f:
        return {k: f.get_tensor(k) for k in f.keys()}


def _state(model, optimizer, scaler, loader, schedule, step):
    st = sized(TrainState)
    st.model = model.handle
    st.optimizer = optimizer.handle if optimizer is not None else None
    st.scaler = scaler.handle if scaler is not None else None
    st.loader = loader.handle if loader is not None else None
    st.schedule = C.pointer(schedule.struct) if schedule is not None else None
    st.step = step
    return st


def save_checkpoint(path, model, optimizer=None, scaler=None, loader=None, schedule=None, step=0):
    """The whole training state, atomically (see loom_checkpoint_save)."""
    st = _state(model, optimizer, scaler, loader, schedule, step)
    check(lib.loom_checkpoint_save(str(path).encode(), C.byref(st)))


def load_checkpoint(path, model, optimizer=None, scaler=None, loader=None, schedule=None):
    """Restore what is given (and loom's RNG); returns the saved step. Checks
    everything before changing anything."""
    st = _state(model, optimizer, scaler, loader, schedule, 0)
    check(lib.loom_checkpoint_restore(str(path).encode(), C.byref(st)))
    return st.step
