"""Installing TensorPlay's environment allocator for ``Tensor::FromEnvAlloc`` (first use).

The allocator itself is C++ (``_allocator.cc``), compiled once through the build cache
into cpp_jit's helper library (``_support``): CPU requests never touch Python or the GIL.
Requests for other devices (CUDA) come back here, to ``_device_alloc``, which allocates
with ``tp.empty`` (CuPy's pool) and hands out TensorPlay's own DLPack export.
"""

from __future__ import annotations

import ctypes

import tensorplay as tp
from tensorplay._extension import (  # the one DLPack ABI description we have
    DLPACK_DTYPES as _FROM_DL,
    DLTensor,
)
from tensorplay.utils.cpp_jit import _support

# int (*)(DLTensor*, DLManagedTensorVersioned**, void* error_ctx, SetError)
_ALLOC_FN = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_void_p
)
_SET_ERROR_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p)
_capsule_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)
_capsule_set_name = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_void_p)(
    ("PyCapsule_SetName", ctypes.pythonapi)
)
# PyCapsule keeps the name pointer: the buffer must live as long as the process
_USED = ctypes.create_string_buffer(b"used_dltensor_versioned")

_active = False


def alloc_with_tensorplay(proto: DLTensor) -> int:
    """A ``DLManagedTensorVersioned*`` (as int) for memory from ``tp.empty``.

    The caller (tvm-ffi) owns the result and calls its deleter, which releases
    TensorPlay's export record and with it the tensor's storage.
    """
    key = (proto.dtype.code, proto.dtype.bits)
    if proto.dtype.lanes != 1 or key not in _FROM_DL:
        raise TypeError(
            f"TensorPlay allocator: no TensorPlay dtype for DLPack code {proto.dtype.code}, "
            f"{proto.dtype.bits} bits, {proto.dtype.lanes} lanes"
        )
    dev = proto.device
    device = "cpu" if dev.device_type == 1 else f"cuda:{dev.device_id}"
    shape = [proto.shape[i] for i in range(proto.ndim)]
    t = tp.empty(shape, dtype=_FROM_DL[key], device=device)
    capsule = t.__dlpack__(max_version=(1, 1), stream=None if device == "cpu" else -1)
    ptr = _capsule_get_pointer(capsule, b"dltensor_versioned")
    # renamed = consumed: the capsule's destructor leaves the export to its new owner
    _capsule_set_name(capsule, ctypes.addressof(_USED))
    return int(ptr)


@_ALLOC_FN
def _device_alloc(proto_ptr, out, error_ctx, set_error):
    try:
        out[0] = alloc_with_tensorplay(DLTensor.from_address(proto_ptr))
        return 0
    except Exception as exc:  # reported to the kernel, which raises it in the caller
        if set_error:
            _SET_ERROR_FN(set_error)(error_ctx, type(exc).__name__.encode(), str(exc).encode())
        return -1


def ensure_installed() -> bool:
    """Install TensorPlay's allocator unless a host allocator is already installed.

    Returns whether TensorPlay's allocator is the active one.
    """
    global _active
    if not _active:
        lib = _support.library()
        addr = ctypes.cast(_device_alloc, ctypes.c_void_p).value
        _active = bool(lib.install(addr))
    return _active


def live_blocks() -> int:
    """CPU blocks the native allocator handed out that are not freed yet."""
    return int(_support.library().live_blocks())
