"""DLPack both ways, zero-copy, in pure Python (ctypes; no compiled extension).

Export (``Tensor.__dlpack__``): we build the C structs ourselves instead of
delegating to numpy's ``__dlpack__``, because numpy refuses bfloat16
(ml_dtypes) and read-only arrays, and cannot describe CUDA memory at all.

* ``max_version >= (1, 0)`` gets a ``DLManagedTensorVersioned`` in a capsule
  named ``"dltensor_versioned"`` (flags carry READ_ONLY / IS_COPIED); otherwise a
  legacy ``DLManagedTensor`` in a ``"dltensor"`` capsule.
* The struct, its shape/strides arrays and references to the tensor's storage
  live in ``_exports`` (keyed by the struct's address) until the consumer calls
  ``deleter``; that is what keeps the memory alive on the consumer's side.
* A consumer that takes ownership renames the capsule to ``"used_dltensor..."``;
  the capsule destructor calls the deleter only if the name is unchanged.

Import (``tp.from_dlpack``): we parse the producer's capsule with ctypes, rename
it to ``used_...`` (we now own the managed tensor), view its memory as a numpy
array (CPU) or a CuPy array over ``UnownedMemory`` (CUDA) without copying, and
call the producer's deleter once the last array viewing that memory is gone.

Pure-Python caveat, and why unconsumed capsules are swept rather than freed on
the spot: a ctypes callback cannot preserve an exception that is pending when it
runs (CPython turns it into ``SystemError`` and prints "Exception ignored").
Consumers drop a capsule they reject (numpy and bfloat16, say) exactly while
their error is pending, so we keep our own reference to every capsule we hand
out and release it from ``_sweep()`` -- run by the next export/import and after
every garbage collection -- once nobody else holds it. Its destructor then runs
in a clean context. A C destructor in ``tensorplay._C`` would not need this.
"""

from __future__ import annotations

import ctypes
import gc
import sys
import threading
import weakref

import numpy as np

from tensorplay import _device, _dtype as D
from tensorplay._device import CPU
from tensorplay._device_checks import to_host
from tensorplay._factories import wrap_foreign
from tensorplay._tensor import Tensor, adopt_array, contiguous_strides

__all__ = ["from_dlpack", "to_dlpack_capsule", "dlpack_device"]

# ---- the DLPack ABI (dlpack.h, v1.1) ---------------------------------------------------------

kDLCPU, kDLCUDA, kDLCUDAHost, kDLCUDAManaged = 1, 2, 3, 13
kDLInt, kDLUInt, kDLFloat, kDLBfloat, kDLComplex, kDLBool = 0, 1, 2, 4, 5, 6
FLAG_READ_ONLY = 1 << 0
FLAG_IS_COPIED = 1 << 1
DLPACK_VERSION = (1, 1)


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


# ``deleter`` is kept as a raw address: we store our callback's address when
# exporting and read the producer's function pointer when importing.
class DLManagedTensor(ctypes.Structure):
    _fields_ = [
        ("dl_tensor", DLTensor),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
    ]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("version", DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", DLTensor),
    ]


# TensorPlay dtype <-> (DLDataTypeCode, bits); lanes is always 1.
_TO_DL = {
    D.bool: (kDLBool, 8),
    D.uint8: (kDLUInt, 8),
    D.int8: (kDLInt, 8),
    D.int16: (kDLInt, 16),
    D.int32: (kDLInt, 32),
    D.int64: (kDLInt, 64),
    D.float16: (kDLFloat, 16),
    D.bfloat16: (kDLBfloat, 16),
    D.float32: (kDLFloat, 32),
    D.float64: (kDLFloat, 64),
    D.complex64: (kDLComplex, 64),
    D.complex128: (kDLComplex, 128),
}
_FROM_DL = {v: k for k, v in _TO_DL.items()}

# ---- the CPython capsule API through ctypes -----------------------------------------------------
# ``pythonapi`` calls hold the GIL. Capsules are passed as raw addresses (c_void_p)
# where they may be mid-deallocation (the destructor), and as objects elsewhere.


def _capi(name: str, restype, *argtypes):
    # Private prototypes: ``ctypes.pythonapi.X`` is one shared object whose
    # argtypes any other module may overwrite. PYFUNCTYPE holds the GIL.
    return ctypes.PYFUNCTYPE(restype, *argtypes)((name, ctypes.pythonapi))


_vp, _cp, _obj = ctypes.c_void_p, ctypes.c_char_p, ctypes.py_object
_PyCapsule_New = _capi("PyCapsule_New", _obj, _vp, _vp, _vp)
_PyCapsule_IsValid = _capi("PyCapsule_IsValid", ctypes.c_int, _vp, _cp)
_PyCapsule_GetPointer = _capi("PyCapsule_GetPointer", _vp, _vp, _cp)
_PyCapsule_GetName = _capi("PyCapsule_GetName", _cp, _obj)
_PyCapsule_SetName = _capi("PyCapsule_SetName", ctypes.c_int, _obj, _vp)

# PyCapsule stores the name pointer without copying it: these buffers must
# outlive every capsule, so they live at module level for the whole process.
_NAMES = {
    n: ctypes.create_string_buffer(n)
    for n in (b"dltensor", b"dltensor_versioned", b"used_dltensor", b"used_dltensor_versioned")
}

# Calling a producer's deleter: PYFUNCTYPE keeps the GIL held during the call
# (deleters written in C, numpy's and torch's included, re-enter it safely).
_CALL_DELETER = ctypes.PYFUNCTYPE(None, ctypes.c_void_p)


def _name_ptr(name: bytes) -> int:
    return ctypes.addressof(_NAMES[name])


# ---- export -------------------------------------------------------------------------------------

# address of a struct we exported -> everything the consumer's view depends on.
_exports: dict[int, tuple] = {}
# capsules handed out and not yet released by ``_sweep``; the lock keeps a sweep
# (from another thread, or from a garbage collection inside one) from losing an append
_pending: list = []
_pending_lock = threading.Lock()


# The two callbacks below are called by C code that may run during interpreter shutdown (a
# consumer's array still holding our export when the last garbage collection frees it), after
# this module's globals are gone: they use only their default arguments, and their C thunks
# are never freed (one reference is leaked on purpose), so the address stays callable.


@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def _deleter(managed_ptr, _pop=_exports.pop):
    # Called by the consumer when it is done with the memory (any thread: ctypes
    # takes the GIL). Dropping the record frees the struct and, once no one else
    # uses it, the tensor's storage.
    _pop(managed_ptr, None)


@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def _capsule_destructor(
    capsule_ptr,
    _pop=_exports.pop,
    _is_valid=_PyCapsule_IsValid,
    _get=_PyCapsule_GetPointer,
    _names=(b"dltensor_versioned", b"dltensor"),
):
    # DLPack's rule: if the capsule still has its original name nobody consumed it,
    # so the producer frees it; a "used_..." capsule belongs to its consumer.
    for name in _names:
        if _is_valid(capsule_ptr, name):
            _pop(_get(capsule_ptr, name), None)
            return


for _callback in (_deleter, _capsule_destructor):
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(_callback))
del _callback
_DELETER_ADDR = ctypes.cast(_deleter, ctypes.c_void_p).value
_DESTRUCTOR_ADDR = ctypes.cast(_capsule_destructor, ctypes.c_void_p).value


def _refcounts(items: list) -> list[int]:
    return [sys.getrefcount(x) for x in items]


# references one list element has when nothing outside the list holds it (measured,
# not assumed, so that interpreter changes in reference handling do not matter)
_UNREFERENCED = _refcounts([object()])[0]


def _sweep() -> None:
    """Release capsules that were consumed (renamed) or that nobody else holds."""
    if not _pending or not _pending_lock.acquire(blocking=False):
        return  # nothing to do, or a sweep/append is already running
    try:
        keep, released = [], []
        for cap, n in zip(_pending, _refcounts(_pending)):
            consumed = _PyCapsule_GetName(cap).startswith(b"used_")
            (released if consumed or n <= _UNREFERENCED else keep).append(cap)
        _pending[:] = keep
    finally:
        _pending_lock.release()
    # the last references go here, outside the lock and with no exception pending:
    # unconsumed capsules' destructors free their exports now
    del released


def _gc_sweep(phase, info) -> None:
    if phase == "stop":
        _sweep()


gc.callbacks.append(_gc_sweep)


def dlpack_device(t) -> tuple[int, int]:
    """``(device_type, device_id)`` of ``t`` as DLPack codes."""
    if t.device is CPU:
        return (kDLCPU, 0)
    if t.device.type == "cuda":
        # "cuda" without an index means the current device: ask the array itself
        return (kDLCUDA, int(t._data.device.id))
    raise BufferError(f"__dlpack__(): {t.device} tensors hold no data to export")


def _sync_cuda_stream(t, stream) -> None:
    """Make the consumer's ``stream`` wait for work queued on TensorPlay's stream."""
    if stream == -1:  # the consumer asked for no synchronisation
        return
    cp = _device.cupy_or_raise()
    if stream is None or stream == 0:
        stream = 1  # None (and the ambiguous 0) mean the legacy default stream
    if not isinstance(stream, int):
        raise BufferError(f"__dlpack__(): stream must be an int or None, got {stream!r}")
    with cp.cuda.Device(t._data.device.id):
        ours = cp.cuda.get_current_stream()
        if ours.ptr == stream or (ours.ptr == 0 and stream == 1):
            return
        event = cp.cuda.Event(disable_timing=True)
        event.record(ours)
        # the runtime call, not cp.cuda.ExternalStream (deprecated in CuPy 14)
        cp.cuda.runtime.streamWaitEvent(stream, event.ptr, 0)


def to_dlpack_capsule(t, *, stream=None, max_version=None, dl_device=None, copy=None):
    """``Tensor.__dlpack__``: a capsule describing ``t``'s memory (zero-copy when allowed)."""
    _sweep()
    if t._data is None:
        raise BufferError("__dlpack__(): meta tensors hold no data to export")
    src_dev = dlpack_device(t)
    versioned = max_version is not None and int(max_version[0]) >= 1
    storage, arr, dev, copied = t._storage, t._data, t.device, False

    if dl_device is not None and tuple(int(x) for x in dl_device) != src_dev:
        if tuple(int(x) for x in dl_device) != (kDLCPU, 0):
            raise BufferError(
                f"__dlpack__(): cannot export a {t.device} tensor to DLPack "
                f"device {tuple(dl_device)}"
            )
        if copy is False:
            raise BufferError("__dlpack__(): exporting to the CPU needs a copy, but copy=False")
        host = adopt_array(to_host(arr), t.dtype, CPU)
        storage, arr, dev, copied = host._storage, host._data, CPU, True
    elif copy:
        fresh = adopt_array(arr if dev is CPU else arr.copy(), t.dtype, dev)
        storage, arr, copied = fresh._storage, fresh._data, True

    read_only = dev is CPU and not arr.flags.writeable
    if read_only and not versioned:
        # Legacy capsules cannot say "read-only"; hand out a private copy instead
        # of letting the consumer write into memory that must not change.
        if copy is False:
            raise BufferError(
                "__dlpack__(): the tensor is read-only and the consumer asked for a "
                "legacy (pre-1.0) capsule, which cannot flag that; copy=False"
            )
        fresh = adopt_array(arr, t.dtype, CPU)
        storage, arr, copied, read_only = fresh._storage, fresh._data, True, False

    if src_dev[0] == kDLCPU:
        if stream is not None and stream != -1:
            raise BufferError(f"__dlpack__(): stream must be None for CPU tensors, got {stream!r}")
    elif dev is not CPU:  # (a host copy is already complete: .get() synchronises)
        _sync_cuda_stream(t, stream)

    itemsize = t.dtype.itemsize
    ndim = arr.ndim
    shape = (ctypes.c_int64 * ndim)(*arr.shape)
    strides = (ctypes.c_int64 * ndim)(*(s // itemsize for s in arr.strides))
    data_ptr = arr.__array_interface__["data"][0] if dev is CPU else arr.data.ptr
    code, bits = _TO_DL[t.dtype]
    dl = DLTensor(
        data_ptr,
        DLDevice(*(src_dev if dev is not CPU else (kDLCPU, 0))),
        ndim,
        DLDataType(code, bits, 1),
        shape,
        strides,
        0,
    )
    if versioned:
        minor = DLPACK_VERSION[1] if tuple(max_version) >= DLPACK_VERSION else 0
        flags = (FLAG_READ_ONLY if read_only else 0) | (FLAG_IS_COPIED if copied else 0)
        managed = DLManagedTensorVersioned(DLPackVersion(1, minor), None, _DELETER_ADDR, flags, dl)
        name = b"dltensor_versioned"
    else:
        managed = DLManagedTensor(dl, None, _DELETER_ADDR)
        name = b"dltensor"
    addr = ctypes.addressof(managed)
    # The record keeps the struct, its arrays and the memory (storage + the array
    # viewing it) alive until the deleter runs; holding the storage rather than
    # the tensor survives a later ``t.set_()`` pointing ``t`` elsewhere.
    _exports[addr] = (managed, shape, strides, storage, arr)
    capsule = _PyCapsule_New(addr, _name_ptr(name), _DESTRUCTOR_ADDR)
    with _pending_lock:
        _pending.append(capsule)
    return capsule


# ---- import -------------------------------------------------------------------------------------


class _ForeignMemory:
    """Owner of imported memory: numpy/CuPy arrays over it keep this object alive,
    and when it dies the producer's deleter runs (``weakref.finalize``)."""

    __slots__ = ("__array_interface__", "capsule", "__weakref__")


def _release(managed_ptr: int, deleter_ptr: int) -> None:
    if deleter_ptr:
        _CALL_DELETER(deleter_ptr)(managed_ptr)


def _own(capsule, managed_ptr: int, deleter_ptr: int) -> _ForeignMemory:
    owner = _ForeignMemory()
    owner.capsule = capsule  # renamed "used_...": its destructor leaves the memory to us
    fin = weakref.finalize(owner, _release, managed_ptr, deleter_ptr)
    # At interpreter exit the producer may already be half torn down; leaking is safer.
    fin.atexit = False
    return owner


def _is_capsule(obj) -> bool:
    return type(obj).__name__ == "PyCapsule"


def _call_producer(obj, dev_type: int):
    """``obj.__dlpack__`` with the newest protocol the producer understands."""
    kwargs = {}
    if dev_type in (kDLCUDA, kDLCUDAManaged):
        # The producer makes its data ready on our stream (1 = legacy default stream).
        cp = _device.cupy_or_raise()
        kwargs["stream"] = cp.cuda.get_current_stream().ptr or 1
    try:
        return obj.__dlpack__(max_version=DLPACK_VERSION, **kwargs)
    except TypeError:
        # a pre-2023 producer: no max_version keyword, legacy capsules only
        return obj.__dlpack__(**kwargs)


def _parse_capsule(capsule):
    """``(managed_ptr, DLTensor, flags, deleter_ptr, used_name)``; raises if unusable."""
    # ``versioned`` is read after the loop, at the name that matched
    for name, versioned in ((b"dltensor_versioned", True), (b"dltensor", False)):  # noqa: B007
        if _PyCapsule_IsValid(id(capsule), name):
            ptr = _PyCapsule_GetPointer(id(capsule), name)
            break
    else:
        name = _PyCapsule_GetName(capsule)
        if name and name.startswith(b"used_"):
            raise BufferError("from_dlpack(): this DLPack capsule was already consumed")
        raise BufferError(f"from_dlpack(): not a DLPack capsule (name {name!r})")
    if versioned:
        m = DLManagedTensorVersioned.from_address(ptr)
        if m.version.major != 1:
            raise BufferError(
                f"from_dlpack(): unsupported DLPack version "
                f"{m.version.major}.{m.version.minor} (TensorPlay reads 1.x)"
            )
        return ptr, m.dl_tensor, int(m.flags), m.deleter, b"used_" + name
    m = DLManagedTensor.from_address(ptr)
    return ptr, m.dl_tensor, 0, m.deleter, b"used_" + name


def _layout(dl: DLTensor):
    shape = tuple(dl.shape[i] for i in range(dl.ndim))
    if dl.strides and dl.ndim:
        strides = tuple(dl.strides[i] for i in range(dl.ndim))
    else:  # NULL strides: compact row-major (allowed by DLPack < 1.2)
        strides = contiguous_strides(shape)
    return shape, strides


def _view(dl: DLTensor, dt: D.dtype, owner: _ForeignMemory, read_only: bool, dev):
    """A numpy/CuPy array over the DLTensor's memory; ``owner`` is its base."""
    shape, strides = _layout(dl)
    isz = dt.itemsize
    ptr = (dl.data or 0) + dl.byte_offset
    np_strides = tuple(s * isz for s in strides)
    # the bytes the view can touch, relative to its first element (strides may be negative)
    lo = sum(min(0, (n - 1) * s) for n, s in zip(shape, np_strides))
    hi = sum(max(0, (n - 1) * s) for n, s in zip(shape, np_strides)) + isz
    if dev is CPU:
        owner.__array_interface__ = {
            "version": 3,
            "shape": (hi - lo,),
            "typestr": "|u1",
            "data": (ptr + lo, read_only),
        }
        flat = np.asarray(owner).view(dt.np)  # base chain: view -> owner
        return np.lib.stride_tricks.as_strided(
            flat[-lo // isz :], shape, np_strides, writeable=not read_only
        )
    cp = _device.cupy_or_raise()
    mem = cp.cuda.UnownedMemory(ptr + lo, hi - lo, owner, device_id=dl.device.device_id)
    return cp.ndarray(shape, dt.np, cp.cuda.MemoryPointer(mem, -lo), strides=np_strides)


def _import_capsule(capsule, *, copy=None):
    ptr, dl, flags, deleter_ptr, used = _parse_capsule(capsule)
    # Validate before taking ownership: until the rename, an error leaves the
    # capsule to its producer's destructor.
    dev_type = dl.device.device_type
    if dev_type == kDLCPU or dev_type == kDLCUDAHost:
        dev = CPU
    elif dev_type in (kDLCUDA, kDLCUDAManaged):
        _device.cupy_or_raise()
        dev = _device.device("cuda", int(dl.device.device_id))
    else:
        raise BufferError(
            f"from_dlpack(): unsupported DLPack device type {dev_type} "
            "(TensorPlay reads CPU and CUDA memory)"
        )
    key = (dl.dtype.code, dl.dtype.bits)
    if dl.dtype.lanes != 1 or key not in _FROM_DL:
        raise BufferError(
            f"from_dlpack(): unsupported DLPack dtype (code={dl.dtype.code}, "
            f"bits={dl.dtype.bits}, lanes={dl.dtype.lanes}); TensorPlay has "
            + ", ".join(d.name for d in _TO_DL)
        )
    dt = _FROM_DL[key]
    if _PyCapsule_SetName(capsule, _name_ptr(used)) != 0:
        raise BufferError("from_dlpack(): could not mark the capsule as consumed")

    # From here on we own the managed tensor: ``owner`` calls its deleter.
    owner = _own(capsule, ptr, deleter_ptr)
    read_only = bool(flags & FLAG_READ_ONLY)
    shape, strides = _layout(dl)
    if 0 in shape:
        del owner  # nothing to share; runs the deleter now
        xp = np if dev is CPU else _device.cupy_or_raise()
        return wrap_foreign(xp.empty(shape, dt.np), dt, dev)
    arr = _view(dl, dt, owner, read_only, dev)
    del owner  # the array now holds it
    if copy or any(s < 0 for s in strides):
        # TensorPlay views cannot walk backwards (neither can torch's): copy.
        if copy is False:
            raise BufferError("from_dlpack(): negative strides need a copy, but copy=False")
        return adopt_array(arr.copy(), dt, dev)
    return wrap_foreign(arr, dt, dev)


def from_dlpack(ext_tensor, *, device=None, copy=None):
    """A tensor sharing memory with ``ext_tensor`` (zero-copy).

    ``ext_tensor`` is anything with ``__dlpack__``/``__dlpack_device__`` (numpy,
    CuPy, torch, JAX, tvm-ffi, TensorPlay) or a raw DLPack capsule. ``copy=True``
    always copies; ``copy=False`` raises ``BufferError`` rather than copy;
    ``device`` moves the result (a copy unless it already lives there).
    """
    _sweep()
    if isinstance(ext_tensor, Tensor):
        out = ext_tensor.detach()  # shares storage and version counter, like a view
        if copy:
            out = out.clone()
    elif _is_capsule(ext_tensor):
        out = _import_capsule(ext_tensor, copy=copy)
    elif hasattr(ext_tensor, "__dlpack__") and hasattr(ext_tensor, "__dlpack_device__"):
        dev_type, _ = ext_tensor.__dlpack_device__()
        out = _import_capsule(_call_producer(ext_tensor, int(dev_type)), copy=copy)
    else:
        raise TypeError(
            f"from_dlpack(): expected an object with __dlpack__ and "
            f"__dlpack_device__ (or a DLPack capsule), got {type(ext_tensor).__name__}"
        )
    if device is not None and _device.device(device) is not out.device:
        if copy is False:
            raise BufferError(f"from_dlpack(): moving to {device} needs a copy, but copy=False")
        out = out.to(device)
    return out
