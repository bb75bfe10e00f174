#!/usr/bin/env python3
"""loom_ctypes.py — using loom's C ABI from Python with nothing but ctypes.

Shows what a language binding needs: opaque handles, status codes with
loom_last_error(), options structs that start with their struct_size
(filled by loom_X_options_init), scopes for tensor lifetime, memory loom
hands over given back with loom_free, and a *callback dataset* (Python
produces the samples; loom's loader threads call back into it). Trains a small MLP to separate two
Gaussian blobs and checks that it learns.

    python3 examples/python/loom_ctypes.py [path/to/libloom.so]
Prints `binding ok loss_first=... loss_last=... accuracy=...` and exits 0 on
success.
"""
import ctypes as C
import math
import os
import random
import sys

LOOM_OK, LOOM_F32, LOOM_I64 = 0, 0, 4


def load(path=None):
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = [path] if path else [os.path.join(here, "..", "..", "build", "lib", "libloom.so"), "libloom.so"]
    for p in candidates:
        try:
            return C.CDLL(p)
        except OSError:
            continue
    raise SystemExit(f"cannot load libloom.so (tried {candidates})")


class Device(C.Structure):
    _fields_ = [("kind", C.c_int32), ("index", C.c_int32)]


READ_FN = C.CFUNCTYPE(C.c_int, C.c_void_p, C.c_int64, C.c_void_p, C.c_void_p)
DESTROY_FN = C.CFUNCTYPE(None, C.c_void_p)


class DatasetCallbacks(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("length", C.c_int64), ("x_dtype", C.c_int), ("x_ndim", C.c_int),
                ("x_shape", C.c_int64 * 8), ("has_y", C.c_bool), ("y_dtype", C.c_int), ("read", READ_FN),
                ("destroy", DESTROY_FN), ("user", C.c_void_p), ("thread_safe", C.c_bool)]


class LoaderOptions(C.Structure):
    """Mirror of loom_loader_options (include/loom/data.h). Its struct_size
    field lets loom check the layout: loom_loader_options_init writes loom's
    sizeof there."""
    _fields_ = [("struct_size", C.c_size_t), ("batch_size", C.c_int64), ("shuffle", C.c_bool), ("seed", C.c_uint64),
                ("drop_last", C.c_bool), ("workers", C.c_int), ("prefetch", C.c_int), ("rank", C.c_int),
                ("world_size", C.c_int), ("device", Device), ("x_dtype", C.c_int), ("y_dtype", C.c_int),
                ("crop_padding", C.c_int), ("hflip", C.c_bool), ("scale", C.c_float),
                ("mean", C.POINTER(C.c_float)), ("std", C.POINTER(C.c_float)), ("norm_channels", C.c_int),
                ("channels_last", C.c_bool)]


def declare(lib):
    P = C.c_void_p
    sigs = {
        "loom_last_error": (C.c_char_p, []),
        "loom_free": (None, [C.c_void_p]),
        "loom_memory_summary": (C.c_void_p, [Device]),  # a char * the caller owns: loom_free it
        "loom_manual_seed": (None, [C.c_uint64]),
        "loom_scope_begin": (None, []),
        "loom_scope_end": (None, []),
        "loom_mlp_new": (P, [C.c_int64, C.c_int, C.POINTER(C.c_int64), C.c_int64, Device]),
        "loom_module_num_params": (C.c_int, [P]),
        "loom_module_param": (P, [P, C.c_int]),
        "loom_module_forward": (P, [P, P]),
        "loom_module_free": (None, [P]),
        "loom_adamw_new": (P, [C.POINTER(P), C.c_int, P]),
        "loom_optimizer_step": (C.c_int, [P]),
        "loom_optimizer_zero_grad": (C.c_int, [P]),
        "loom_optimizer_free": (None, [P]),
        "loom_cross_entropy": (P, [P, P]),
        "loom_backward": (C.c_int, [P]),
        "loom_item": (C.c_int, [P, C.POINTER(C.c_double)]),
        "loom_accuracy": (C.c_int, [P, P, C.POINTER(C.c_double)]),
        "loom_dataset_callback": (P, [C.POINTER(DatasetCallbacks)]),
        "loom_dataset_release": (None, [P]),
        "loom_loader_options_init": (None, [C.c_void_p]),
        "loom_loader_new": (P, [P, C.POINTER(LoaderOptions)]),
        "loom_loader_next": (C.c_int, [P, C.POINTER(P), C.POINTER(P)]),
        "loom_loader_free": (None, [P]),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args


def check(lib, status, what):
    if status != LOOM_OK:
        raise RuntimeError(f"{what}: {lib.loom_last_error().decode()}")


def main():
    lib = load(sys.argv[1] if len(sys.argv) > 1 else None)
    declare(lib)
    lib.loom_manual_seed(3)
    cpu = Device(0, 0)

    # Two Gaussian blobs in 2-D, produced by Python on demand.
    rng = random.Random(7)
    n = 512
    samples = []
    for i in range(n):
        label = i % 2
        cx = 1.5 if label else -1.5
        samples.append(((cx + rng.gauss(0, 0.7), rng.gauss(0, 0.7)), label))

    @READ_FN
    def read(user, i, x, y):
        (a, b), label = samples[i]
        xs = C.cast(x, C.POINTER(C.c_float))
        xs[0], xs[1] = a, b
        C.cast(y, C.POINTER(C.c_int64))[0] = label
        return LOOM_OK

    @DESTROY_FN
    def destroy(user):
        pass

    cb = DatasetCallbacks()
    cb.struct_size = C.sizeof(DatasetCallbacks)
    cb.length, cb.x_dtype, cb.x_ndim = n, LOOM_F32, 1
    cb.x_shape[0] = 2
    cb.has_y, cb.y_dtype = True, LOOM_I64
    cb.read, cb.destroy, cb.user = read, destroy, None
    cb.thread_safe = False  # loom serializes calls into Python
    ds = lib.loom_dataset_callback(C.byref(cb))
    if not ds:
        raise RuntimeError(lib.loom_last_error().decode())

    # Options structs: start from loom's defaults, change what you need. (A
    # buffer larger than the mirror first: a newer loom's struct may be longer.)
    probe = (C.c_char * 4096)()
    lib.loom_loader_options_init(probe)
    lib_size = C.cast(probe, C.POINTER(C.c_size_t))[0]
    if lib_size != C.sizeof(LoaderOptions):
        raise SystemExit(f"LoaderOptions mirror is {C.sizeof(LoaderOptions)} bytes, loom's is {lib_size}")
    opts = LoaderOptions()
    lib.loom_loader_options_init(C.byref(opts))
    opts.batch_size, opts.shuffle, opts.seed, opts.workers = 32, True, 11, 2
    loader = lib.loom_loader_new(ds, C.byref(opts))
    if not loader:
        raise RuntimeError(lib.loom_last_error().decode())
    lib.loom_dataset_release(ds)

    hidden = (C.c_int64 * 1)(32)
    model = lib.loom_mlp_new(2, 1, hidden, 2, cpu)
    nparams = lib.loom_module_num_params(model)
    params = (C.c_void_p * nparams)(*[lib.loom_module_param(model, i) for i in range(nparams)])
    opt = lib.loom_adamw_new(params, nparams, None)
    if not opt:
        raise RuntimeError(lib.loom_last_error().decode())

    losses, acc = [], C.c_double(0)
    for epoch in range(8):
        while True:
            lib.loom_scope_begin()
            x, y = C.c_void_p(), C.c_void_p()
            check(lib, lib.loom_loader_next(loader, C.byref(x), C.byref(y)), "loader")
            if not x.value:
                lib.loom_scope_end()
                break
            logits = lib.loom_module_forward(model, x)
            loss = lib.loom_cross_entropy(logits, y)
            check(lib, lib.loom_optimizer_zero_grad(opt), "zero_grad")
            check(lib, lib.loom_backward(loss), "backward")
            check(lib, lib.loom_optimizer_step(opt), "step")
            v = C.c_double()
            check(lib, lib.loom_item(loss, C.byref(v)), "item")
            check(lib, lib.loom_accuracy(logits, y, C.byref(acc)), "accuracy")
            losses.append(v.value)
            lib.loom_scope_end()

    # Text loom returns belongs to the caller and goes back through loom_free
    # (libloom's allocator), never through another library's free().
    summary = lib.loom_memory_summary(cpu)
    if not summary or b"loom memory summary" not in C.string_at(summary):
        raise RuntimeError(f"memory summary: {lib.loom_last_error().decode()}")
    lib.loom_free(summary)

    lib.loom_optimizer_free(opt)
    lib.loom_module_free(model)
    lib.loom_loader_free(loader)
    first, last = losses[0], sum(losses[-4:]) / 4
    print(f"binding ok loss_first={first:.4f} loss_last={last:.4f} accuracy={acc.value:.3f}")
    if not (math.isfinite(last) and last < 0.5 * first and acc.value >= 0.9):
        print("binding: the model did not learn", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
