"""Bad DLPack capsules from Python (issue 24 part 5): capsules built with
ctypes, as a buggy or hostile producer could hand them over, with bad
strides, dtypes, devices, shapes, data pointers and versions. Each must give
loom.Error (never a crash), and loom, which owns a capsule once it takes it,
must call the producer's deleter exactly once whether it refuses or accepts.
The crashes these found (NULL data, strides reaching past the producer's
memory) and the overflow (a zero-stride shape of 2^80 elements) are refused
in lib/io/dlpack.c since."""
import ctypes as C
import gc

import numpy as np
import pytest

import loom
from conftest import needs


class DLDevice(C.Structure):
    _fields_ = [("device_type", C.c_int32), ("device_id", C.c_int32)]


class DLDataType(C.Structure):
    _fields_ = [("code", C.c_uint8), ("bits", C.c_uint8), ("lanes", C.c_uint16)]


class DLTensor(C.Structure):
    _fields_ = [("data", C.c_void_p), ("device", DLDevice), ("ndim", C.c_int32), ("dtype", DLDataType),
                ("shape", C.POINTER(C.c_int64)), ("strides", C.POINTER(C.c_int64)), ("byte_offset", C.c_uint64)]


DELETER = C.CFUNCTYPE(None, C.c_void_p)


class DLManagedTensor(C.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", C.c_void_p), ("deleter", DELETER)]


class DLPackVersion(C.Structure):
    _fields_ = [("major", C.c_uint32), ("minor", C.c_uint32)]


class DLManagedTensorVersioned(C.Structure):
    _fields_ = [("version", DLPackVersion), ("manager_ctx", C.c_void_p), ("deleter", DELETER),
                ("flags", C.c_uint64), ("dl_tensor", DLTensor)]


_api = C.pythonapi
_api.PyCapsule_New.restype = C.py_object
_api.PyCapsule_New.argtypes = [C.c_void_p, C.c_char_p, C.c_void_p]


class Producer:
    """A fake producer: 64 floats of its own, the structs of one capsule (kept
    alive here), and a count of its deleter's calls."""

    def __init__(self):
        self.buf = (C.c_float * 64)(*range(64))
        self.deleted = 0
        self._keep = []

    def capsule(self, shape, strides=None, code=2, bits=32, lanes=1, device=(1, 0), data=None, byte_offset=0,
                ndim=None, versioned=False, major=1, flags=0):
        sh = (C.c_int64 * max(1, len(shape)))(*shape) if shape is not None else None
        st = (C.c_int64 * max(1, len(strides)))(*strides) if strides is not None else None
        t = DLTensor(C.addressof(self.buf) if data is None else data, DLDevice(*device),
                     len(shape) if ndim is None else ndim, DLDataType(code, bits, lanes),
                     C.cast(sh, C.POINTER(C.c_int64)) if sh is not None else None,
                     C.cast(st, C.POINTER(C.c_int64)) if st is not None else None, byte_offset)

        def deleter(_):
            self.deleted += 1
        d = DELETER(deleter)
        if versioned:
            m = DLManagedTensorVersioned(DLPackVersion(major, 0), None, d, flags, t)
            name = b"dltensor_versioned"
        else:
            m = DLManagedTensor(t, None, d)
            name = b"dltensor"
        self._keep += [sh, st, d, m]
        return _api.PyCapsule_New(C.addressof(m), name, None)


BAD = {
    # dtypes loom has no match for
    "complex64": dict(code=5, bits=64),
    "float64": dict(code=2, bits=64),
    "int8": dict(code=0, bits=8),
    "two_lanes": dict(lanes=2),
    "zero_bits": dict(bits=0),
    "unknown_code": dict(code=99),
    "versioned_complex": dict(code=5, bits=64, versioned=True),
    # strides
    "negative_stride": dict(shape=[4], strides=[-1]),
    "stride_past_the_address_space": dict(shape=[4], strides=[2 ** 61]),
    "strides_past_the_buffer": dict(shape=[3, 3], strides=[2 ** 40, 2 ** 40]),
    "zero_strides_2_80_elements": dict(shape=[2 ** 40, 2 ** 40], strides=[0, 0]),
    "shape_past_the_address_space": dict(shape=[2 ** 40, 2 ** 40]),
    # devices
    "device_opencl": dict(device=(4, 0)),
    "device_cuda_managed": dict(device=(13, 0)),
    "device_cuda_absent": dict(device=(2, 99)),
    "device_cuda_negative": dict(device=(2, -1)),
    "device_type_0": dict(device=(0, 0)),
    # geometry and data
    "negative_dimension": dict(shape=[-3]),
    "ndim_negative": dict(ndim=-1),
    "ndim_100": dict(ndim=100),
    "shape_null": dict(shape=None, ndim=2),
    "misaligned": dict(byte_offset=1),
    "data_null": dict(data=0),
    "data_unmapped": dict(data=4096),
    # versions
    "major_version_2": dict(versioned=True, major=2),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_capsule_is_a_loom_error(case, no_leak):
    kw = dict(BAD[case])
    kw.setdefault("shape", [4])
    p = Producer()
    cap = p.capsule(**kw)
    with pytest.raises(loom.Error) as e:
        loom.from_dlpack(cap)
    assert "from_dlpack" in str(e.value)
    assert p.deleted == 1, "loom owns a capsule it took: its deleter runs once, also when refused"
    with pytest.raises(TypeError):
        loom.from_dlpack(cap)  # consumed: not taken twice
    assert p.deleted == 1


def test_good_capsules_still_work(no_leak):
    p = Producer()
    t = loom.from_dlpack(p.capsule([4, 4], strides=[1, 4]))        # a transposed view of 16 floats
    assert t.data_ptr() == C.addressof(p.buf) and t.strides == (1, 4)
    np.testing.assert_array_equal(t.numpy(), np.arange(16, dtype=np.float32).reshape(4, 4).T)
    r = loom.from_dlpack(p.capsule([0], data=0))                   # empty: no data needed
    assert r.shape == (0,)
    c = loom.from_dlpack(p.capsule([4], versioned=True, flags=1))  # read-only: loom copies, lets go at once
    assert c.tolist() == [0, 1, 2, 3] and c.data_ptr() != C.addressof(p.buf)
    assert p.deleted == 1
    del t, r, c
    gc.collect()
    assert p.deleted == 3


class FakeArray:
    """An object speaking the protocol whose __dlpack__ hands out a bad capsule."""

    def __init__(self, producer, device, **kw):
        self.p, self.device, self.kw = producer, device, kw

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, **_):
        return self.p.capsule(shape=[4], device=self.device, **self.kw)


@pytest.mark.parametrize("device,kw", [((1, 0), dict(strides=[2 ** 40])), ((1, 0), dict(code=5, bits=64)),
                                       ((4, 0), {}), ((2, 99), {})])
def test_a_bad_producer_object_is_a_loom_error(device, kw, no_leak):
    p = Producer()
    with pytest.raises(loom.Error):
        loom.from_dlpack(FakeArray(p, device, **kw))
    assert p.deleted in (0, 1)  # 0: refused before its capsule was asked for (a CUDA device loom does not see)


def test_torch_tensors_loom_cannot_take(no_leak):
    torch = needs("torch")
    for bad in (torch.zeros(4, dtype=torch.float64), torch.zeros(4, dtype=torch.complex64),
                torch.zeros(4, dtype=torch.int8)):
        with pytest.raises(loom.Error, match="dtype"):
            loom.from_dlpack(bad)
    with pytest.raises(loom.Error, match="dtype"):
        loom.from_dlpack(torch.zeros(8, dtype=torch.float64)[::2])  # strided too
