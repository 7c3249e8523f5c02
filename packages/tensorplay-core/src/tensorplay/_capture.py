"""The capture interface: how core-side code learns that a graph capture is live.

The compile distribution (``tensorplay-compile``) implements tracers; core only keeps
a thread-local stack of the active ones. Symbolic values are ``Proxy`` instances, which
are overrides: the dispatcher hands any op given one (built-in or library op) to the
proxy, and by default to the innermost tracer with ``capture_call(target, args, kwargs)``,
which returns the tracer's proxy for the result. Code outside the dispatcher (the
Triton/TileLang kernel wrappers) asks core "is a capture live?" (``capturing()``) and "are
these arguments symbolic?" (``contains_proxy(args, kwargs)``).

A tracer is any object with ``record_call(target, args, kwargs)``; symbolic values are
instances of ``Proxy`` (the compiler subclasses it). Public names are re-exported by
``tensorplay.capture``.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from tensorplay._dispatch import state

__all__ = [
    "GraphCaptureError",
    "Proxy",
    "capture_call",
    "capturing",
    "contains_proxy",
    "current_tracer",
    "pop_tracer",
    "push_tracer",
    "tracing",
]


class GraphCaptureError(RuntimeError):
    """A call cannot be captured (e.g. a kernel wrapper given proxies it cannot trace)."""


class Proxy:
    """Base class of symbolic values produced by a tracer (subclassed by compile).

    A proxy is an override (``__tensorplay_function__``): the dispatcher hands every op
    that receives one, built-in or library op alike, to the innermost tracer's
    ``record_call``. A tracer may subclass ``Proxy`` to record calls its own way.
    """

    __slots__ = ()

    def __tensorplay_function__(self, func, types, args=(), kwargs=None):
        return capture_call(func, args, kwargs)


class _Stack(threading.local):
    def __init__(self):
        self.tracers: list = []


_stack = _Stack()


def capturing() -> bool:
    """A tracer is active in this thread."""
    return bool(_stack.tracers)


def current_tracer() -> Any | None:
    """The innermost active tracer of this thread, or None."""
    tracers = _stack.tracers
    return tracers[-1] if tracers else None


def push_tracer(tracer: Any) -> None:
    """Make ``tracer`` the innermost tracer of this thread (pair with ``pop_tracer``).

    While a tracer is active the dispatcher's fast-path gate is off, so components that
    check ``_dispatch.state.plain`` alone (library ops) know no capture is live when it is on.
    """
    _stack.tracers.append(tracer)
    state.block()


def pop_tracer() -> Any:
    """Remove and return the innermost tracer of this thread."""
    if not _stack.tracers:
        raise GraphCaptureError("pop_tracer(): no tracer is active in this thread")
    tracer = _stack.tracers.pop()
    state.unblock()
    return tracer


@contextlib.contextmanager
def tracing(tracer: Any) -> Iterator[Any]:
    """``with tracing(tracer):`` pushes ``tracer`` and pops it on exit, even on error."""
    push_tracer(tracer)
    try:
        yield tracer
    finally:
        popped = pop_tracer()
        if popped is not tracer:  # unbalanced push/pop inside the block
            raise GraphCaptureError("tracing(): the tracer stack was left unbalanced")


def capture_call(target: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
    """Ask the innermost tracer to record ``target(*args, **kwargs)``; return its result."""
    tracer = current_tracer()
    if tracer is None:
        raise GraphCaptureError(f"capture_call({target!r}): no capture is active")
    return tracer.record_call(target, tuple(args), dict(kwargs or {}))


def contains_proxy(args: Any = (), kwargs: dict | None = None) -> bool:
    """Some value in ``args``/``kwargs`` (nested lists, tuples, dicts) is a ``Proxy``."""
    return _has_proxy(args) or (kwargs is not None and _has_proxy(kwargs))


def _has_proxy(x: Any) -> bool:
    if isinstance(x, Proxy):
        return True
    if isinstance(x, (list, tuple)):
        return any(_has_proxy(y) for y in x)
    if isinstance(x, dict):
        return any(_has_proxy(y) for y in x.values())
    return False
