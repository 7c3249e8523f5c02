"""DLPack both ways: ``Tensor.__dlpack__`` and ``tp.from_dlpack`` (zero-copy)."""

from __future__ import annotations

import numpy as np

from tensorplay import _device
from tensorplay import _dtype as D
from tensorplay._device import CPU


def to_dlpack_capsule(t, *, stream=None, max_version=None, dl_device=None, copy=None):
    data = t._data
    if data is None:
        raise BufferError("__dlpack__(): meta tensors hold no data to export")
    kwargs = {}
    if max_version is not None:
        kwargs["max_version"] = max_version
    if dl_device is not None:
        kwargs["dl_device"] = dl_device
    if copy is not None:
        kwargs["copy"] = copy
    if t.device is not CPU:
        kwargs["stream"] = stream
    return data.__dlpack__(**kwargs)


def from_dlpack(obj):
    """A tensor sharing memory with ``obj`` (anything with ``__dlpack__``)."""
    from tensorplay._factories import wrap_foreign  # noqa: PLC0415
    from tensorplay._tensor import Tensor  # noqa: PLC0415

    if isinstance(obj, Tensor):
        return obj
    if not hasattr(obj, "__dlpack_device__"):
        raise TypeError(f"from_dlpack(): expected an object with __dlpack__ and "
                        f"__dlpack_device__, got {type(obj).__name__}")
    dev_type, dev_id = obj.__dlpack_device__()
    if int(dev_type) == 1:
        arr = np.from_dlpack(obj)
        return wrap_foreign(arr, D.from_numpy_dtype(arr.dtype), CPU)
    if int(dev_type) == 2:
        cp = _device.cupy_or_raise()
        arr = cp.from_dlpack(obj)
        return wrap_foreign(arr, D.from_numpy_dtype(arr.dtype), _device.device("cuda", dev_id))
    raise RuntimeError(f"from_dlpack(): unsupported DLPack device type {dev_type}")
