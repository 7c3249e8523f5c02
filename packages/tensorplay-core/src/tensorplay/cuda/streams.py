"""CUDA streams and events, as in ``torch.cuda``.

TensorPlay's CUDA work runs on CuPy's current stream: ``with tp.cuda.stream(s):`` makes
``s`` current, so every op, custom kernel (Triton, tvm-ffi) and copy inside the block is
queued on it. Streams from ``Stream()`` do not synchronise with the legacy default stream
(``cudaStreamNonBlocking``), as torch's do; order work across streams with
``wait_stream``/``wait_event``, and keep a tensor that another stream uses alive with
``Tensor.record_stream``.
"""

from __future__ import annotations

import contextlib

from tensorplay import _device
from tensorplay._device_checks import host_sync

__all__ = ["Event", "Stream", "current_stream", "default_stream", "stream"]


def _cp():
    return _device.cupy_or_raise()


class Stream:
    """A CUDA stream. ``Stream()`` creates a new one on the current device (or ``device``);
    ``cuda_stream`` is the raw ``cudaStream_t`` to hand to Triton or tvm-ffi.

    ``priority`` is accepted for torch's signature; TensorPlay creates every stream at the
    default priority and says so if asked for another."""

    def __init__(self, device=None, priority: int = 0, *, _cupy_stream=None):
        if _cupy_stream is not None:
            self._cupy_stream = _cupy_stream
            return
        if priority != 0:
            raise NotImplementedError(
                f"Stream(priority={priority}): stream priorities are not supported; "
                "create the stream with priority=0"
            )
        cp = _cp()
        if device is None:
            self._cupy_stream = cp.cuda.Stream(non_blocking=True)
        else:
            with cp.cuda.Device(_device.device(device).index or 0):
                self._cupy_stream = cp.cuda.Stream(non_blocking=True)

    @property
    def cuda_stream(self) -> int:
        return self._cupy_stream.ptr

    @property
    def device(self):
        dev = self._cupy_stream.device_id
        return _device.device("cuda", dev if dev >= 0 else _cp().cuda.runtime.getDevice())

    def synchronize(self) -> None:
        """Wait until every operation queued on this stream has finished."""
        host_sync("Stream.synchronize()")
        self._cupy_stream.synchronize()

    def query(self) -> bool:
        """True when every operation queued on this stream has finished."""
        return self._cupy_stream.done

    def wait_stream(self, other: Stream) -> None:
        """Work queued on this stream from now on waits for what ``other`` has queued."""
        self._cupy_stream.wait_event(other._cupy_stream.record())

    def wait_event(self, event: Event) -> None:
        """Work queued on this stream from now on waits for ``event``."""
        event.wait(self)

    def record_event(self, event: Event | None = None) -> Event:
        """Record ``event`` (a new one when None) on this stream and return it."""
        event = Event() if event is None else event
        event.record(self)
        return event

    def __enter__(self):
        self._cupy_stream.__enter__()
        return self

    def __exit__(self, *exc):
        return self._cupy_stream.__exit__(*exc)

    def __eq__(self, other) -> bool:
        return isinstance(other, Stream) and self._cupy_stream.ptr == other._cupy_stream.ptr

    def __hash__(self) -> int:
        return hash(("tensorplay.cuda.Stream", self._cupy_stream.ptr))

    def __int__(self) -> int:
        return self._cupy_stream.ptr

    def __repr__(self) -> str:
        ptr = self._cupy_stream.ptr
        return f"<tensorplay.cuda.Stream device={self.device} cuda_stream={ptr:#x}>"


class Event:
    """A CUDA event: a marker in a stream that other streams and the host can wait for.
    ``enable_timing=True`` lets ``elapsed_time`` measure between two recorded events."""

    def __init__(
        self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False
    ):
        if interprocess:
            raise NotImplementedError(
                "Event(interprocess=True): inter-process events are not supported"
            )
        self._event = _cp().cuda.Event(block=blocking, disable_timing=not enable_timing)
        self.enable_timing = enable_timing

    def record(self, stream: Stream | None = None) -> None:
        """Record the event on ``stream`` (the current stream when None)."""
        self._event.record((stream or current_stream())._cupy_stream)

    def wait(self, stream: Stream | None = None) -> None:
        """Make ``stream`` (the current stream when None) wait for this event."""
        (stream or current_stream())._cupy_stream.wait_event(self._event)

    def query(self) -> bool:
        """True when the work recorded before this event has finished."""
        return self._event.done

    def synchronize(self) -> None:
        """Wait on the host until the work recorded before this event has finished."""
        host_sync("Event.synchronize()")
        self._event.synchronize()

    def elapsed_time(self, end_event: Event) -> float:
        """Milliseconds between this event and ``end_event`` (both recorded and finished)."""
        if not (self.enable_timing and end_event.enable_timing):
            raise ValueError(
                "elapsed_time: both events need enable_timing=True; create them with "
                "tp.cuda.Event(enable_timing=True)"
            )
        return float(_cp().cuda.get_elapsed_time(self._event, end_event._event))

    @property
    def cuda_event(self) -> int:
        return self._event.ptr

    def __repr__(self) -> str:
        return f"<tensorplay.cuda.Event cuda_event={self._event.ptr:#x}>"


def current_stream(device=None) -> Stream:
    """The stream TensorPlay's CUDA work is queued on (CuPy's current stream)."""
    cp = _cp()
    if device is None:
        return Stream(_cupy_stream=cp.cuda.get_current_stream())
    with cp.cuda.Device(_device.device(device).index or 0):
        return Stream(_cupy_stream=cp.cuda.get_current_stream())


def default_stream(device=None) -> Stream:
    """The device's default stream (the one ``current_stream`` is outside any ``stream``)."""
    return Stream(_cupy_stream=_cp().cuda.Stream.null)


@contextlib.contextmanager
def stream(s: Stream | None):
    """Queue CUDA work inside the block on ``s`` (a no-op for None, as in torch)."""
    if s is None:
        yield None
        return
    if not isinstance(s, Stream):
        raise TypeError(f"stream: expected a tp.cuda.Stream or None, got {type(s).__name__}")
    with s._cupy_stream:
        yield s
