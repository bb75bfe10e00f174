"""DLPack both ways with NumPy and PyTorch: the same memory (pointer
identity, writes seen on both sides), strides honoured, every dtype each side
has, versioned and legacy capsules, and no leak when a consumer refuses a
capsule or nobody consumes it."""
import gc

import numpy as np
import pytest

import loom
from conftest import cuda, needs


def test_numpy_views_loom_memory_and_back(no_leak):
    t = loom.arange(12).reshape(3, 4)
    d = np.from_dlpack(t)              # the protocol (read-only arrays in NumPy < 2)
    assert d.ctypes.data == t.data_ptr()
    a = t.numpy()                      # a writable view of the same memory
    assert a.ctypes.data == t.data_ptr()
    a[1, 2] = 100.0                    # NumPy writes, loom sees
    assert t[1, 2].item() == 100.0 and d[1, 2] == 100.0
    t.fill_(3.0)                       # loom writes, NumPy sees
    assert a.sum() == 36.0 and d.sum() == 36.0
    tr = t.transpose(0, 1).numpy()     # strided views stay views
    assert tr.strides == (4, 16) and tr.ctypes.data == t.data_ptr()
    b = np.arange(10, dtype=np.float32)
    u = loom.from_dlpack(b)
    assert u.data_ptr() == b.ctypes.data
    b[0] = -1
    assert u[0].item() == -1.0
    u.fill_(2.0)
    assert b.sum() == 20.0
    assert loom.from_numpy(b).data_ptr() == b.ctypes.data
    del a, d, u, tr


def test_torch_shares_memory_both_ways(no_leak):
    torch = needs("torch")
    t = loom.randn(4, 5)
    p = torch.from_dlpack(t)
    assert p.data_ptr() == t.data_ptr() and p.shape == (4, 5)
    p.mul_(0).add_(7)
    assert t.sum().item() == 140.0
    q = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    u = loom.from_dlpack(q)
    assert u.data_ptr() == q.data_ptr()
    u.fill_(1.5)
    assert float(q.sum()) == 9.0
    del p, u


def test_dtypes_both_ways(no_leak):
    torch = needs("torch")
    pairs = [("float32", torch.float32), ("float16", torch.float16), ("bfloat16", torch.bfloat16),
             ("int32", torch.int32), ("int64", torch.int64), ("uint8", torch.uint8)]
    for name, tdt in pairs:
        t = loom.arange(6, dtype=name)
        p = torch.from_dlpack(t)
        assert p.dtype == tdt and p.data_ptr() == t.data_ptr()
        assert p.float().tolist() == [0, 1, 2, 3, 4, 5]
        q = torch.arange(4).to(tdt)
        u = loom.from_dlpack(q)
        assert u.dtype.name == name and u.data_ptr() == q.data_ptr()
        assert u.to("float32").tolist() == [0, 1, 2, 3]
    # (bool: NumPy < 2 and PyTorch 1.13 do not export it; the C tests import kDLBool as uint8)


def test_strides_are_honoured(no_leak):
    torch = needs("torch")
    a = np.arange(20, dtype=np.float32).reshape(4, 5)
    v = loom.from_dlpack(a.T)            # a transposed NumPy view: strides (1, 5)
    assert v.strides == (1, 5) and v.data_ptr() == a.ctypes.data
    np.testing.assert_array_equal(v.numpy(), a.T)
    s = loom.from_dlpack(a[1:, ::2])     # an offset, strided view
    np.testing.assert_array_equal(s.numpy(), a[1:, ::2])
    assert s.data_ptr() == a[1:, ::2].ctypes.data
    t = loom.arange(12).reshape(3, 4).transpose(0, 1)
    p = torch.from_dlpack(t)
    assert p.stride() == (1, 4) and p.data_ptr() == t.data_ptr()
    assert p.tolist() == t.tolist()
    with pytest.raises(loom.Error, match="negative stride"):
        loom.from_dlpack(a[::-1])
    del v, s, p


def test_capsules_versioned_legacy_and_unconsumed(no_leak):
    t = loom.arange(8)
    base = loom.memory_allocated()
    cap = t.__dlpack__(max_version=(1, 0))
    assert "dltensor_versioned" in repr(cap)
    u = loom.from_dlpack(cap)             # loom consumes its own versioned capsule
    assert u.data_ptr() == t.data_ptr()
    with pytest.raises(TypeError):
        loom.from_dlpack(cap)             # a used capsule is not taken twice
    legacy = t.__dlpack__()
    assert '"dltensor"' in repr(legacy)
    del legacy                            # never consumed: loom's destructor releases it
    del u, cap
    gc.collect()
    assert loom.memory_allocated() == base
    del t


def test_a_refused_capsule_does_not_leak(no_leak):
    # NumPy has no bfloat16: it raises, and the capsule it dropped still frees loom's memory.
    gc.collect()
    base = loom.memory_allocated()
    t = loom.ones(1000, dtype="bfloat16")
    with pytest.raises(Exception, match="dtype|Unsupported"):
        np.from_dlpack(t)
    del t
    gc.collect()
    assert loom.memory_allocated() == base


def test_producer_memory_lives_as_long_as_loom_needs_it(no_leak):
    a = np.arange(1000, dtype=np.float32)
    u = loom.from_dlpack(a)
    ref = u * 2
    del a                                  # loom's view keeps NumPy's buffer alive
    gc.collect()
    assert u.sum().item() == float(np.arange(1000).sum())
    assert ref.sum().item() == 2 * float(np.arange(1000).sum())
    del u, ref


@cuda
def test_cuda_both_ways_with_torch():
    torch = needs("torch")
    t = loom.arange(6, device="cuda").reshape(2, 3)
    assert t.__dlpack_device__()[0] == 2
    p = torch.from_dlpack(t)
    assert p.is_cuda and p.data_ptr() == t.data_ptr()
    q = torch.arange(5, device="cuda", dtype=torch.float32)
    u = loom.from_dlpack(q)
    assert u.device.startswith("cuda") and u.data_ptr() == q.data_ptr()
    assert u.sum().item() == 10.0
