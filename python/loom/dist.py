"""Data parallelism from Python, with the calls loom's C trainers make.

Run the script under the launcher: `mpirun -np 2 python train.py` (CPU
tensors over MPI; GPUs over NCCL, one process per GPU). loom does its own MPI
through the C library: no mpi4py needed.

    comm = loom.dist.init(device)            # the world (a world of one when not launched)
    loader = loom.Loader(ds, ..., rank=comm.rank, world_size=comm.size)
    ddp = loom.dist.DistributedDataParallel(model, comm)   # rank 0's weights everywhere
    for x, y in loader:
        loss = loom.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()                       # buckets are all-reduced as gradients get ready
        ddp.sync()                            # the rest; gradients are now averaged
        opt.step()
    ...
    ddp.close(); comm.close()                 # libloom finalizes MPI at exit
"""
import ctypes as C

from ._lib import CommOptions, DdpOptions, DistEnv, check, check_handle, lib, options, sized
from .tensor import as_device, device_str

_REDUCE = {"sum": 0, "avg": 1, "mean": 1, "max": 2}
_BACKEND = {"auto": 0, "single": 1, "mpi": 2, "nccl": 3}


def env():
    """What the launcher says about this process (before any communicator):
    launched, rank, world_size, local_rank, local_size, launcher."""
    e = sized(DistEnv)
    check(lib.loom_dist_env_get(C.byref(e)))
    return {"launched": bool(e.launched), "rank": e.rank, "world_size": e.world_size, "local_rank": e.local_rank,
            "local_size": e.local_size, "launcher": (e.launcher or b"none").decode()}


def have_mpi():
    return bool(lib.loom_dist_have_mpi())


def have_nccl():
    return bool(lib.loom_dist_have_nccl())


class Comm:
    """One rank of a group (loom_comm): collectives in place on dense tensors
    of its device. Close it (or let Python collect it) before finalize."""

    def __init__(self, device="cpu", backend="auto", init=None, timeout_s=0.0, set_threads=True):
        o = options(CommOptions)
        dev = as_device(device)
        if dev.kind == 1 and str(device) == "cuda" and env()["world_size"] > 1:
            dev.index = -1  # one GPU per rank, by local rank (as loom's trainers do)
        o.device, o.backend, o.timeout_s, o.set_threads = dev, _BACKEND[backend], timeout_s, set_threads
        self._init = init.encode() if init else None  # kept alive while loom reads it
        o.init = self._init
        h = C.c_void_p()
        check(lib.loom_comm_init(C.byref(o), C.byref(h)))
        self._h = h.value

    def close(self):
        h, self._h = getattr(self, "_h", None), None
        if h and lib is not None:
            lib.loom_comm_free(h)

    __del__ = close

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def handle(self):
        return self._h

    @property
    def rank(self):
        return lib.loom_comm_rank(self._h)

    @property
    def size(self):
        return lib.loom_comm_size(self._h)

    @property
    def local_rank(self):
        return lib.loom_comm_local_rank(self._h)

    @property
    def device(self):
        return device_str(lib.loom_comm_device(self._h))

    @property
    def backend(self):
        return lib.loom_comm_backend_name(lib.loom_comm_get_backend(self._h)).decode()

    def all_reduce(self, t, op="sum"):
        """In place; returns once queued (read t after wait() / synchronize())."""
        check(lib.loom_comm_all_reduce(self._h, t.handle, _REDUCE[op]))
        return t

    def broadcast(self, t, root=0):
        check(lib.loom_comm_broadcast(self._h, t.handle, int(root)))
        return t

    def all_gather(self, t, out):
        check(lib.loom_comm_all_gather(self._h, t.handle, out.handle))
        return out

    def barrier(self):
        check(lib.loom_comm_barrier(self._h))

    def wait(self):
        check(lib.loom_comm_wait(self._h))

    def synchronize(self):
        check(lib.loom_comm_synchronize(self._h))


def init(device="cpu", **kwargs):
    """The communicator of this process: MPI (CPU) or NCCL (GPU) when
    launched, else a world of one; see Comm."""
    return Comm(device, **kwargs)


class DistributedDataParallel:
    """Data parallelism for model over comm (loom_ddp): checks every rank has
    the same model, broadcasts rank 0's parameters and buffers, and averages
    gradients during backward in buckets. Call sync() after backward, before
    the optimizer (or scaler) step. Set a precision policy before making it."""

    def __init__(self, model, comm, first_bucket_mib=1.0, bucket_mib=25.0, reduce_in_fp32=False,
                 broadcast_buffers=True):
        o = options(DdpOptions)
        o.first_bucket_mib, o.bucket_mib = first_bucket_mib, bucket_mib
        o.reduce_in_fp32, o.broadcast_buffers = reduce_in_fp32, broadcast_buffers
        self.model, self.comm, self._scaler = model, comm, None
        self._h = check_handle(lib.loom_ddp_new(model.handle, comm.handle, C.byref(o)))

    def close(self):
        h, self._h = getattr(self, "_h", None), None
        if h and lib is not None:
            lib.loom_ddp_free(h)

    __del__ = close

    def __call__(self, x):
        return self.model(x)

    def sync(self):
        check(lib.loom_ddp_sync(self._h))

    def set_sync(self, on):
        """False: backward accumulates locally (no_sync, for all but the last micro-batch)."""
        check(lib.loom_ddp_set_sync(self._h, bool(on)))

    def attach_scaler(self, scaler):
        """Agree the loss scaler's overflow flag across ranks (close the ddp before the scaler)."""
        check(lib.loom_ddp_attach_scaler(self._h, scaler.handle if scaler is not None else None))
        self._scaler = scaler

    def broadcast_buffers(self):
        """Rank 0's buffers (BatchNorm statistics) everywhere, e.g. before evaluating."""
        check(lib.loom_ddp_broadcast_buffers(self._h))


def finalize():
    """Finalize MPI if loom started it (after every communicator is closed);
    also done at exit."""
    check(lib.loom_dist_finalize())

