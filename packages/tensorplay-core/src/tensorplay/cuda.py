"""``tp.cuda``: CUDA availability, devices, synchronisation and streams (via CuPy)."""

from __future__ import annotations

from tensorplay import _device
from tensorplay._device_checks import raise_pending

__all__ = [
    "is_available",
    "device_count",
    "current_device",
    "set_device",
    "synchronize",
    "current_stream",
    "unavailable_reason",
]


def is_available() -> bool:
    """True when CuPy is installed and sees at least one CUDA device."""
    return _device.cuda_unavailable_reason() is None


def unavailable_reason() -> str | None:
    """Why CUDA is unavailable (None when it is available)."""
    return _device.cuda_unavailable_reason()


def device_count() -> int:
    if not is_available():
        return 0
    return _device.cupy_or_raise().cuda.runtime.getDeviceCount()


def current_device() -> int:
    return _device.cupy_or_raise().cuda.runtime.getDevice()


def set_device(device) -> None:
    d = _device.device(device)
    _device.cupy_or_raise().cuda.runtime.setDevice(d.index or 0)


def synchronize(device=None) -> None:
    """Wait for all work on the (current) CUDA device."""
    cp = _device.cupy_or_raise()
    if device is None:
        cp.cuda.Device().synchronize()
    else:
        cp.cuda.Device(_device.device(device).index or 0).synchronize()
    raise_pending()  # an error a device-side check recorded (see _device_checks)


class Stream:
    """A CUDA stream; ``cuda_stream`` is the raw ``cudaStream_t`` for Triton/tvm-ffi."""

    def __init__(self, cupy_stream):
        self._stream = cupy_stream

    @property
    def cuda_stream(self) -> int:
        return self._stream.ptr

    def synchronize(self) -> None:
        self._stream.synchronize()

    def __int__(self) -> int:
        return self._stream.ptr

    def __repr__(self) -> str:
        return f"<tensorplay.cuda.Stream cuda_stream={self._stream.ptr:#x}>"


def current_stream(device=None) -> Stream:
    """The stream TensorPlay's CUDA kernels run on (CuPy's current stream)."""
    cp = _device.cupy_or_raise()
    return Stream(cp.cuda.get_current_stream())
