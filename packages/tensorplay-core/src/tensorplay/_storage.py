"""Storage: one flat buffer, shared by a tensor and all its views.

CPU buffers are 64-byte aligned numpy ``uint8`` arrays (TVM kernels fault on
less; numpy's own allocator only guarantees 16). Small buffers are slots of
shared aligned slabs (one per power-of-two size class) so that allocating a
10-element result costs about as much as ``np.empty``; a slab is freed once every
tensor carved from it is gone.
The version counter lives here, so a tensor and its views share it.
"""

from __future__ import annotations

import ctypes
import itertools
import threading

import numpy as np

from tensorplay import _device
from tensorplay._device_checks import to_host

__all__ = ["Storage", "UntypedStorage", "CudaStorage", "cpu_empty", "cuda_empty", "ALIGNMENT"]

ALIGNMENT = 64
_SMALL = 512  # bytes; larger requests get a buffer of their own
_SLAB = 1 << 16  # bytes per slab
_U8 = np.dtype(np.uint8)


def _address(arr) -> int:
    return arr.__array_interface__["data"][0]


# The address of a fresh (so writable) numpy array, via ctypes: 0.4 µs where
# ``__array_interface__`` builds a dict (1.7 µs), paid by every result over ``_SMALL`` bytes.
_char_over = ctypes.c_char.from_buffer
_addressof = ctypes.addressof


def _aligned_u8(nbytes: int):
    raw = np.empty(nbytes + ALIGNMENT, _U8)
    start = -_addressof(_char_over(raw)) % ALIGNMENT
    return raw[start : start + nbytes]


class _SizeClass:
    """Fixed-size slots carved from one aligned slab; ``next(counter)`` hands out a slot.

    ``next`` on an ``itertools.count`` is atomic under the GIL, so threads never get the
    same slot and the hot path takes no lock; only swapping in a new slab does.
    """

    def __init__(self, slot: int):
        self.slot = slot
        self.slots = _SLAB // slot
        self.lock = threading.Lock()
        self._refill()

    def _refill(self):
        self.buf = _aligned_u8(_SLAB)
        self.counter = itertools.count()

    def take(self):
        buf, i = self.buf, next(self.counter)
        if i >= self.slots:
            with self.lock:
                if self.buf is buf:  # nobody refilled while we waited
                    self._refill()
            return self.take()
        return buf, i * self.slot


# the size class serving each small request, indexed by ceil(nbytes / 64)
_BY_SLOT = {
    ALIGNMENT << k: _SizeClass(ALIGNMENT << k) for k in range((_SMALL // ALIGNMENT).bit_length())
}
_CLASSES = [_BY_SLOT[ALIGNMENT]] + [
    _BY_SLOT[ALIGNMENT << (k - 1).bit_length()] for k in range(1, _SMALL // ALIGNMENT + 1)
]


def cpu_empty(shape: tuple, np_dtype, nbytes: int):
    """A C-contiguous, 64-byte aligned numpy array and the flat buffer it lives in.

    Returns ``(array, buffer, byte_offset)``.
    """
    if nbytes <= _SMALL:
        buf, pos = _CLASSES[(nbytes + ALIGNMENT - 1) // ALIGNMENT].take()
        return np.ndarray(shape, np_dtype, buf, pos), buf, pos
    buf = _aligned_u8(nbytes)
    return np.ndarray(shape, np_dtype, buf, 0), buf, 0


class Storage:
    """A flat, untyped buffer (``untyped_storage()``) plus the version counter.

    ``_buf`` is a 1-D ``uint8`` array (numpy or CuPy) or None on ``meta``; the
    storage's bytes are ``_buf[_start:_start + _nbytes]``. A storage never changes
    buffer, so its address is computed once (kernel launches ask for it on every call).
    """

    __slots__ = ("_buf", "_start", "_nbytes", "device", "_version", "_ptr", "__weakref__")

    def __init__(self, buf, start: int, nbytes: int, device):
        self._buf = buf
        self._start = start
        self._nbytes = nbytes
        self.device = device
        self._version = 0

    def data_ptr(self) -> int:
        try:
            return self._ptr  # unset until first asked (tensorplay._C builds storages too)
        except AttributeError:
            buf = self._buf
            if buf is None:
                ptr = 0
            elif self.device is _device.CPU:
                ptr = _address(buf) + self._start
            else:
                ptr = buf.data.ptr + self._start
            self._ptr = ptr
            return ptr

    def nbytes(self) -> int:
        return self._nbytes

    def size(self) -> int:
        return self._nbytes

    def __len__(self) -> int:
        return self._nbytes

    def bytes_view(self):
        """The storage's bytes as a 1-D uint8 array (numpy or CuPy)."""
        return self._buf[self._start : self._start + self._nbytes]

    def cpu(self) -> Storage:
        if self.device is _device.CPU:
            return self
        if self._buf is None:
            raise RuntimeError("cannot copy a meta storage to the CPU: it holds no data")
        host = to_host(self.bytes_view())
        out = new_storage(self._nbytes, _device.CPU)
        out.bytes_view()[:] = host
        return out

    def copy_(self, src: Storage) -> Storage:
        if src._nbytes != self._nbytes:
            raise RuntimeError(
                f"copy_(): storage sizes differ ({src._nbytes} vs {self._nbytes} bytes)"
            )
        if self._buf is None or src._buf is None:
            return self
        data = src.bytes_view()
        if src.device is not self.device:
            data = to_host(data) if src.device.type == "cuda" else data
        dst = self.bytes_view()
        if self.device.type == "cuda":
            dst.set(data) if src.device is _device.CPU else dst.__setitem__(slice(None), data)
        else:
            dst[:] = data
        self._version += 1
        return self

    def __repr__(self) -> str:
        return f"UntypedStorage(nbytes={self._nbytes}, device='{self.device}')"


UntypedStorage = Storage

_BUF = Storage._buf  # the slot itself (a member descriptor): CudaStorage fills it lazily


class CudaStorage(Storage):
    """A CUDA storage over a CuPy memory pointer, its byte view (``_buf``) made on first use.

    Most CUDA tensors never need that view (CuPy ops read the typed array, kernels the
    address) and making a CuPy array costs about as much as the allocation itself, so
    allocation (``cuda_empty``) and adopted CuPy results (``adopt_array``) make none.
    """

    __slots__ = ("_mem",)

    def __init__(self, mem, nbytes: int, device):
        self._mem = mem  # keeps the allocation alive
        self._start = 0
        self._nbytes = nbytes
        self.device = device
        self._version = 0

    @property
    def _buf(self):
        try:
            return _BUF.__get__(self, CudaStorage)
        except AttributeError:
            buf = _device.cupy_or_raise().ndarray((self._nbytes,), _U8, memptr=self._mem)
            _BUF.__set__(self, buf)
            return buf

    @_buf.setter
    def _buf(self, buf) -> None:
        _BUF.__set__(self, buf)

    def data_ptr(self) -> int:
        return self._mem.ptr


def new_storage(nbytes: int, dev) -> Storage:
    """Allocate an uninitialised storage of ``nbytes`` on ``dev``."""
    if dev is _device.CPU:
        _, buf, start = cpu_empty((nbytes,), _U8, nbytes)
        return Storage(buf, start, nbytes, dev)
    if dev.type == "cuda":
        return cuda_empty(nbytes, dev)
    return Storage(None, 0, nbytes, dev)


def cuda_empty(nbytes: int, dev) -> CudaStorage:
    """A new CUDA storage of ``nbytes`` on ``dev``, from CuPy's pool (512-byte aligned
    blocks). Every CUDA result is allocated here, so it skips what it can: switching
    device when ``dev`` is current, and the byte view (see ``CudaStorage``)."""
    cp = _device.cupy_or_raise()
    if cp.cuda.runtime.getDevice() != dev.index:
        with cp.cuda.Device(dev.index):
            return cuda_empty(nbytes, dev)
    return CudaStorage(cp.cuda.alloc(nbytes), nbytes, dev)
