"""``tp.cuda``: CUDA devices, synchronisation, streams and events, memory statistics and
CUDA graphs, as in ``torch.cuda`` (on CuPy: its pool, streams and graphs)."""

from __future__ import annotations

from tensorplay import _device
from tensorplay._cuda_memory import (
    empty_cache,
    max_memory_allocated,
    max_memory_reserved,
    memory_allocated,
    memory_reserved,
    memory_stats,
    reset_peak_memory_stats,
)
from tensorplay._device_checks import host_sync, raise_pending
from tensorplay.cuda.graphs import (
    CUDAGraph,
    graph,
    graph_pool_handle,
    is_current_stream_capturing,
    make_graphed_callables,
)
from tensorplay.cuda.streams import Event, Stream, current_stream, default_stream, stream

__all__ = [
    "CUDAGraph",
    "Event",
    "Stream",
    "current_device",
    "current_stream",
    "default_stream",
    "device_count",
    "empty_cache",
    "graph",
    "graph_pool_handle",
    "is_available",
    "is_current_stream_capturing",
    "make_graphed_callables",
    "max_memory_allocated",
    "max_memory_reserved",
    "memory_allocated",
    "memory_reserved",
    "memory_stats",
    "reset_peak_memory_stats",
    "set_device",
    "stream",
    "synchronize",
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
    host_sync("tp.cuda.synchronize()")
    cp = _device.cupy_or_raise()
    if device is None:
        cp.cuda.Device().synchronize()
    else:
        cp.cuda.Device(_device.device(device).index or 0).synchronize()
    raise_pending()  # an error a device-side check recorded (see _device_checks)
