"""DLPack capsules: the Python side of the protocol, over loom_to_dlpack /
loom_from_dlpack (and their versioned forms).

A capsule named "dltensor" (or "dltensor_versioned") owns a managed tensor
until a consumer renames it to "used_dltensor[_versioned]" and takes over the
deleter. The capsule destructor (loom_dlpack_pycapsule_destructor) calls the
deleter only when nobody consumed it, so it runs exactly once either way.
"""
import ctypes as C

from ._lib import check, check_handle, lib

_api = C.pythonapi
_api.PyCapsule_New.restype = C.py_object
_api.PyCapsule_New.argtypes = [C.c_void_p, C.c_char_p, C.c_void_p]
_api.PyCapsule_IsValid.restype = C.c_int
_api.PyCapsule_IsValid.argtypes = [C.py_object, C.c_char_p]
_api.PyCapsule_GetPointer.restype = C.c_void_p
_api.PyCapsule_GetPointer.argtypes = [C.py_object, C.c_char_p]
_api.PyCapsule_SetName.restype = C.c_int
_api.PyCapsule_SetName.argtypes = [C.py_object, C.c_char_p]

# PyCapsule keeps the name pointer, not a copy: these buffers live as long as
# the module (which outlives every capsule it makes).
_LEGACY = C.create_string_buffer(b"dltensor")
_VERSIONED = C.create_string_buffer(b"dltensor_versioned")
_USED_LEGACY = C.create_string_buffer(b"used_dltensor")
_USED_VERSIONED = C.create_string_buffer(b"used_dltensor_versioned")

KDL_CPU, KDL_CUDA, KDL_CUDA_HOST = 1, 2, 3


class _PyCapsuleApi(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("is_valid", C.c_void_p), ("get_pointer", C.c_void_p),
                ("err_fetch", C.c_void_p), ("err_restore", C.c_void_p)]


# The capsule destructor is loom's (C): CPython runs capsule destructors while
# a failing consumer's exception is pending, when Python code cannot run. It
# needs four Python C-API functions, handed over here.
_api_fns = _PyCapsuleApi(C.sizeof(_PyCapsuleApi),
                         *[C.cast(getattr(_api, n), C.c_void_p)
                           for n in ("PyCapsule_IsValid", "PyCapsule_GetPointer", "PyErr_Fetch", "PyErr_Restore")])
lib.loom_dlpack_set_pycapsule_api.restype = C.c_int
lib.loom_dlpack_set_pycapsule_api.argtypes = [C.POINTER(_PyCapsuleApi)]
check(lib.loom_dlpack_set_pycapsule_api(C.byref(_api_fns)))
_DESTRUCTOR = C.cast(lib.loom_dlpack_pycapsule_destructor, C.c_void_p)


def to_capsule(handle, versioned):
    """A capsule owning a new managed tensor of loom tensor `handle`."""
    if versioned:
        managed = check_handle(lib.loom_to_dlpack_versioned(handle))
        name = _VERSIONED
    else:
        managed = check_handle(lib.loom_to_dlpack(handle))
        name = _LEGACY
    return _api.PyCapsule_New(managed, C.cast(name, C.c_char_p), _DESTRUCTOR)


def from_capsule(capsule):
    """A new loom tensor handle viewing the capsule's memory. The capsule is
    marked used first: loom owns the managed tensor from here on (it calls
    the deleter itself, also when it refuses the tensor)."""
    if _api.PyCapsule_IsValid(capsule, C.cast(_VERSIONED, C.c_char_p)):
        managed = _api.PyCapsule_GetPointer(capsule, C.cast(_VERSIONED, C.c_char_p))
        _api.PyCapsule_SetName(capsule, C.cast(_USED_VERSIONED, C.c_char_p))
        return check_handle(lib.loom_from_dlpack_versioned(managed))
    if _api.PyCapsule_IsValid(capsule, C.cast(_LEGACY, C.c_char_p)):
        managed = _api.PyCapsule_GetPointer(capsule, C.cast(_LEGACY, C.c_char_p))
        _api.PyCapsule_SetName(capsule, C.cast(_USED_LEGACY, C.c_char_p))
        return check_handle(lib.loom_from_dlpack(managed))
    raise TypeError("from_dlpack: expected an object with __dlpack__ or a DLPack capsule named 'dltensor' or "
                    "'dltensor_versioned' that was not consumed yet")
