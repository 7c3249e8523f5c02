"""The capture interface: how core-side code learns that a graph capture is live.

The compile distribution (``tensorplay-compile``) implements tracers; core only keeps
a thread-local stack of the active ones. Library ops (``tensorplay.library``) and the
Triton/TileLang kernel wrappers never import the compiler: they ask core two questions,
"is a capture live?" (``capturing()``) and "are these arguments symbolic?"
(``contains_proxy(args, kwargs)``), and if so hand the call to the innermost tracer with
``capture_call(target, args, kwargs)``, which returns the tracer's proxy for the result.

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
    """Marker base class of symbolic values produced by a tracer (subclassed by compile)."""

    __slots__ = ()


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
