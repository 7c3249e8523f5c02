"""The Tensor: a strided view (shape, stride, offset) of a Storage.

On ``cpu``/``cuda`` a tensor also keeps ``_data``, the numpy/CuPy array that
views exactly its elements; kernels work on it directly. Ops are not written
here: they are rows of the op table (``_optable``) attached as methods at import.
This module is a leaf of the package's import graph: the methods that need the factories
or DLPack (``__init__``, ``new_*``, ``__dlpack__``, pickling) attach in ``_bind`` with the
other methods, so that ``_factories`` and ``_dlpack`` can import this module plainly.
"""

from __future__ import annotations

import math

import numpy as np

from tensorplay import _device
from tensorplay._cuda_memory import record_stream as _record_stream
from tensorplay._device import CPU, META
from tensorplay._device_checks import to_host
from tensorplay._printing import tensor_repr
from tensorplay._storage import CudaStorage, Storage, cpu_empty, cuda_empty, new_storage

__all__ = ["Tensor", "wrap_array", "make_view", "contiguous_strides", "empty_tensor"]


def strides_of(t) -> tuple:
    """``t.stride()`` for core's own use: the public method is wrapped for
    ``__tensorplay_function__`` (overrides.install), which internal geometry must not pay."""
    st = t._stride
    if st is None:
        st = t._stride = contiguous_strides(t._shape)
    return st


def contiguous_strides(shape) -> tuple:
    if len(shape) < 2:  # the common short cases, without the loop
        return (1,) if shape else ()
    strides, acc = [1] * len(shape), 1
    for i in range(len(shape) - 1, -1, -1):
        strides[i] = acc
        n = shape[i]
        if n > 1:
            acc *= n
    return tuple(strides)


class Tensor:
    """A multi-dimensional array on a device, with autograd metadata.

    Build tensors with ``tp.tensor``/factories; ``tp.Tensor(data)`` accepts the
    same data as ``tp.tensor`` (lists, scalars, numpy arrays).
    """

    __slots__ = ("_data", "_storage", "_shape", "dtype", "device", "__weakref__", "__dict__")
    # Fields most tensors never change are class-level defaults: a fresh result then
    # costs five slot writes, and the rare writer stores into the instance dict.
    _offset = 0
    _stride = None  # None: C-contiguous strides, computed on demand
    requires_grad = False
    grad = None
    grad_fn = None
    _base = None

    def __new__(cls, *args, **kwargs):
        return object.__new__(cls)

    # ---- metadata -------------------------------------------------------------
    @property
    def shape(self) -> Size:
        return Size(self._shape)

    def size(self, dim: int | None = None):
        if dim is None:
            return Size(self._shape)
        return self._shape[_wrap_dim(dim, len(self._shape), "size")]

    def stride(self, dim: int | None = None):
        st = strides_of(self)
        return st if dim is None else st[_wrap_dim(dim, len(self._shape), "stride")]

    def storage_offset(self) -> int:
        return self._offset

    def dim(self) -> int:
        return len(self._shape)

    ndimension = dim

    @property
    def ndim(self) -> int:
        return len(self._shape)

    def numel(self) -> int:
        return math.prod(self._shape)

    nelement = numel

    def element_size(self) -> int:
        return self.dtype.itemsize

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        return self.numel() * self.dtype.itemsize

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"

    @property
    def is_meta(self) -> bool:
        return self.device is META

    @property
    def is_leaf(self) -> bool:
        return self.grad_fn is None

    def is_floating_point(self) -> bool:
        return self.dtype.is_floating_point

    def is_complex(self) -> bool:
        return self.dtype.is_complex

    def is_contiguous(self, memory_format=None) -> bool:
        if self._stride is None:
            return True
        expected = 1
        for n, s in zip(reversed(self._shape), reversed(self._stride)):
            if n != 1 and s != expected:
                return False
            expected *= n
        return True

    def untyped_storage(self) -> Storage:
        return self._storage

    def data_ptr(self) -> int:
        return self._storage.data_ptr() + self._offset * self.dtype.itemsize

    def record_stream(self, stream) -> None:
        """Mark this CUDA tensor's memory as used by ``stream`` (a ``tp.cuda.Stream``): it
        is not reused by another allocation until the work queued on ``stream`` before the
        tensor (and every view of it) died has finished."""
        if self.device.type != "cuda":
            raise RuntimeError(f"record_stream: expected a CUDA tensor, got one on {self.device}")
        _record_stream(self._storage._mem, stream)

    @property
    def _version(self) -> int:
        return self._storage._version

    def _bump_version(self) -> None:
        self._storage._version += 1

    @property
    def data(self) -> Tensor:
        return self.detach()

    def detach(self) -> Tensor:
        """A view of the same data, cut from the autograd graph."""
        # same geometry, so the array object itself can be shared: no new numpy/CuPy view
        # (custom-op kernels get detached inputs on every call)
        t = alias_of(self)
        t._base = self if self._base is None else self._base
        return t

    def _check_data(self, what: str):
        if self._data is None:
            raise NotImplementedError(
                f"{what}: meta tensors hold no data (shape {tuple(self._shape)}, {self.dtype}); "
                "move real data to the meta device's place with .to('cpu') on a real tensor"
            )
        return self._data

    # ---- conversion -------------------------------------------------------------
    def numpy(self, *, force: bool = False) -> np.ndarray:
        """The data as a numpy array; shares memory for CPU tensors (like torch)."""
        if self.requires_grad and not force:
            raise RuntimeError(
                "numpy(): can't call numpy() on a tensor that requires grad; "
                "use tensor.detach().numpy() instead"
            )
        data = self._check_data("numpy()")
        if self.device is not CPU:
            if not force:
                raise TypeError(
                    f"numpy(): can't convert {self.device} tensor to numpy; "
                    "use tensor.cpu() first (or numpy(force=True))"
                )
            return to_host(data)
        return data

    def __array__(self, dtype=None, copy=None):
        arr = self.detach().numpy(force=True)
        return arr.astype(dtype) if dtype is not None else arr

    def tolist(self):
        return self.detach().numpy(force=True).tolist()

    def item(self):
        n = self.numel()
        if n != 1:
            raise RuntimeError(f"item(): a Tensor with {n} elements cannot be converted to Scalar")
        return self.detach().numpy(force=True).reshape(()).item()

    def __bool__(self) -> bool:
        n = self.numel()
        if n != 1:
            many = "no" if n == 0 else "more than one"
            raise RuntimeError(f"Boolean value of Tensor with {many} values is ambiguous")
        return bool(self.item())

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __complex__(self) -> complex:
        return complex(self.item())

    def __index__(self) -> int:
        if self.dtype.category != 1 or self.numel() != 1:
            raise TypeError("only integer tensors of a single element can be converted to an index")
        return int(self.item())

    def __len__(self) -> int:
        if not self._shape:
            raise TypeError("len() of a 0-d tensor")
        return self._shape[0]

    def __iter__(self):
        if not self._shape:
            raise TypeError("iteration over a 0-d tensor")
        return iter(self.unbind(0))

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return tensor_repr(self)

    # ---- torch-compatible storage surface ---------------------------------------
    def set_(self, source=None, storage_offset: int = 0, size=None, stride=None) -> Tensor:
        """Point this tensor at ``source`` (a Storage or Tensor), torch semantics."""
        if source is None:
            source = new_storage(0, self.device)
        if isinstance(source, Tensor):
            storage_offset, size, stride = source._offset, source._shape, strides_of(source)
            source = source._storage
        if not isinstance(source, Storage):
            raise TypeError(f"set_(): expected a Storage or Tensor, got {type(source).__name__}")
        if source.device is not self.device:
            raise RuntimeError(
                f"set_(): storage is on {source.device} but the tensor is on {self.device}"
            )
        if size is None:
            size = (source.nbytes() // self.dtype.itemsize,)
        size = tuple(size)
        stride = tuple(stride) if stride is not None else contiguous_strides(size)
        _check_bounds(size, stride, storage_offset, source.nbytes(), self.dtype, "set_()")
        # Both counters move: tensors saved for backward that shared the old storage (this
        # tensor, its views) must fail their version check, as must readers of the new one.
        self._storage._version += 1
        self._storage = source
        self._install(size, stride, storage_offset)
        source._version += 1
        return self

    def _install(self, shape, stride, offset):
        self._shape, self._stride, self._offset = tuple(shape), tuple(stride), offset
        self._data = _view_array(self._storage, self.dtype, self._shape, self._stride, offset)


class Size(tuple):
    """``tensor.shape``: a tuple subclass printed like torch.Size."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"tensorplay.Size({list(self)})"

    def numel(self) -> int:
        return math.prod(self)


def _wrap_dim(dim, ndim: int, op: str) -> int:
    if not isinstance(dim, int) or isinstance(dim, bool):
        raise TypeError(f"{op}(): dim must be an int, got {type(dim).__name__}")
    lo, hi = (-1, 0) if ndim == 0 else (-ndim, ndim - 1)
    if not lo <= dim <= hi:
        raise IndexError(
            f"{op}(): dimension out of range (expected to be in range of "
            f"[{lo}, {hi}], but got {dim})"
        )
    return dim % ndim if ndim else 0


def _check_bounds(shape, stride, offset, nbytes, dt, op):
    if any(n < 0 for n in shape):
        raise RuntimeError(f"{op}: negative size in {tuple(shape)}")
    if any(s < 0 for s in stride):
        raise RuntimeError(f"{op}: negative stride in {tuple(stride)}")
    if offset < 0:
        raise RuntimeError(f"{op}: negative storage offset {offset}")
    if 0 in shape:
        return
    last = offset + sum((n - 1) * s for n, s in zip(shape, stride))
    if (last + 1) * dt.itemsize > nbytes:
        raise RuntimeError(
            f"{op}: setStorage: sizes {list(shape)}, strides {list(stride)}, storage offset "
            f"{offset} and itemsize {dt.itemsize} require a storage of at least "
            f"{(last + 1) * dt.itemsize} bytes, but it has {nbytes}"
        )


def _view_array(storage: Storage, dt, shape, stride, offset):
    """The numpy/CuPy array of a strided view into ``storage`` (None on meta)."""
    isz = dt.itemsize
    bstrides = tuple([s * isz for s in stride])
    start = storage._start + offset * isz
    if storage.device is CPU:
        buf = storage._buf
        if 0 in shape:
            return np.ndarray(shape, dt.np, buf, 0 if start > buf.nbytes else start, bstrides)
        return np.ndarray(shape, dt.np, buf, start, bstrides)
    if type(storage) is CudaStorage:  # no byte view needed (see CudaStorage)
        mem = storage._mem
    else:
        buf = storage._buf
        if buf is None:  # meta
            return None
        mem = buf.data
    if 0 in shape:  # no element is read; an empty allocation (null pointer) takes no offset
        start = 0
    return _device.cupy_or_raise().ndarray(shape, dt.np, memptr=mem + start, strides=bstrides)


def _new(cls, data, storage, offset, shape, stride, dt, dev) -> Tensor:
    t = object.__new__(cls)
    t._data = data
    t._storage = storage
    t._shape = shape
    t.dtype = dt
    t.device = dev
    if offset:
        t._offset = offset
    if stride is not None:
        t._stride = stride
    return t


def wrap_array(arr, buf, start: int, dt, dev=CPU) -> Tensor:
    """Wrap a freshly allocated C-contiguous array living at ``buf[start:]`` (hot path)."""
    t = _object_new(Tensor)
    t._data = arr
    t._storage = Storage(buf, start, arr.nbytes, dev)
    t._shape = arr.shape
    t.dtype = dt
    t.device = dev
    return t


_object_new = object.__new__

# ``t.data_ptr()`` for internal use (kernel launch glue): the method itself, taken before
# overrides.install wraps the class attribute for ``__tensorplay_function__``
data_ptr_of = Tensor.data_ptr


# What a tensor's instance dict may hold about its place in autograd (alias_of drops it)
_AUTOGRAD_STATE = frozenset(
    {
        "grad_fn",
        "_output_nr",
        "grad",
        "_base",
        "requires_grad",
        "_accumulator",
        "_fw_tangent",
        "_hooks",
        "_saves_out",
    }
)


def alias_of(t: Tensor) -> Tensor:
    """A new tensor object over ``t``'s memory and geometry (same storage, so the same
    version counter), with no autograd history and no ``_base``: ``detach()`` is this plus
    the ``_base`` that makes it a view of ``t`` (tensorplay-nn's Parameter is not one).
    A subclass instance stays one, with its own attributes (a wrapper subclass's wrapped
    tensor) carried over."""
    cls = type(t)
    a = _new(cls, t._data, t._storage, t._offset, t._shape, t._stride, t.dtype, t.device)
    if cls is not Tensor:
        for k, v in t.__dict__.items():
            if k not in _AUTOGRAD_STATE and k not in a.__dict__:
                a.__dict__[k] = v
    return a


def empty_tensor(shape: tuple, dt, dev) -> Tensor:
    """An uninitialised C-contiguous tensor (aligned storage on CPU)."""
    shape = tuple(shape)
    nbytes = math.prod(shape) * dt.itemsize
    if dev is CPU:
        arr, buf, start = cpu_empty(shape, dt.np, nbytes)
        return wrap_array(arr, buf, start, dt, dev)
    if dev.type == "cuda":
        storage = cuda_empty(nbytes, dev)
        data = _device.cupy_or_raise().ndarray(shape, dt.np, memptr=storage._mem)
        return _new(Tensor, data, storage, 0, shape, None, dt, dev)
    storage = new_storage(nbytes, dev)
    data = _view_array(storage, dt, shape, contiguous_strides(shape), 0)
    return _new(Tensor, data, storage, 0, shape, None, dt, dev)


def adopt_array(arr, dt, dev) -> Tensor:
    """A tensor holding ``arr``: a copy in fresh aligned storage on CPU (numpy's own
    buffers are only 16-byte aligned); CuPy's contiguous results are kept as they are."""
    if dev is CPU:  # every CPU result of the general path: empty_tensor's CPU branch, inlined
        out, buf, start = cpu_empty(arr.shape, dt.np, arr.size * dt.itemsize)
        if arr.size:
            out[...] = arr
        return wrap_array(out, buf, start, dt)
    if arr.flags.c_contiguous:
        storage = CudaStorage(arr.data, arr.nbytes, dev)
        return _new(Tensor, arr, storage, 0, arr.shape, None, dt, dev)
    out = empty_tensor(arr.shape, dt, dev)
    if out._data is not None and out._data.size:
        out._data[...] = arr
    return out


def _derived_cuda_view(src: Tensor, shape: tuple, stride: tuple, offset: int):
    """The CuPy array of a view of ``src`` that is a reshape of contiguous ``src`` or a
    permutation of its dims at the same offset, from ``src``'s own array (CuPy's reshape and
    transpose are C calls; a new ``cupy.ndarray`` over a memory pointer costs a few times
    more host time); None for any other view."""
    a = src._data
    if a is None or offset != src._offset:
        return None
    if src._stride is None and stride == contiguous_strides(shape):
        return a.reshape(shape)
    old = strides_of(src)
    if len(shape) != len(old) or len(shape) > 8:
        return None
    pairs, perm = list(zip(src._shape, old)), []
    for dim in zip(shape, stride):
        try:
            i = pairs.index(dim)
        except ValueError:
            return None
        pairs[i] = None  # each dim of src used once (equal pairs are interchangeable)
        perm.append(i)
    return a.transpose(perm)


_native_view = None  # tensorplay._C.make_view (register_native_view), or None


def register_native_view(fn) -> None:
    """``fn(src, shape, stride, offset)``: the view ``make_view`` would make, or None where
    it must (``tensorplay._native`` registers ``_C.make_view``, CPU views in C)."""
    global _native_view
    _native_view = fn


def make_view(src: Tensor, shape, stride, offset) -> Tensor:
    """A tensor viewing ``src``'s storage; shares its version counter."""
    if _native_view is not None:
        t = _native_view(src, shape, stride, offset)
        if t is not None:
            return t
    if type(shape) is not tuple:
        shape = tuple(shape)
    if type(stride) is not tuple:
        stride = tuple(stride)
    data = None
    if src.device is not CPU and type(src._storage) is CudaStorage:
        data = _derived_cuda_view(src, shape, stride, offset)
    if data is None:
        data = _view_array(src._storage, src.dtype, shape, stride, offset)
    t = _new(Tensor, data, src._storage, offset, shape, stride, src.dtype, src.device)
    t._base = src if src._base is None else src._base
    return t


def cpu_array_of(t: Tensor):
    return t._data if t.device is CPU else to_host(t._check_data("cpu()"))
