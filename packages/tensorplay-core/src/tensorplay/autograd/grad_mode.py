"""Grad modes: whether ops record the autograd graph (thread-local, like torch)."""

from __future__ import annotations

import functools
import threading

__all__ = [
    "no_grad",
    "enable_grad",
    "set_grad_enabled",
    "is_grad_enabled",
    "inference_mode",
    "is_inference_mode_enabled",
]


class _GradState(threading.local):
    enabled = True
    inference = False


state = _GradState()


def is_grad_enabled() -> bool:
    return state.enabled


def is_inference_mode_enabled() -> bool:
    return state.inference


class _Mode:
    """A context manager that is also a decorator (``@tp.no_grad()``)."""

    def _set(self):
        raise NotImplementedError

    def __enter__(self):
        self._prev = (state.enabled, state.inference)
        self._set()
        return self

    def __exit__(self, *exc):
        state.enabled, state.inference = self._prev
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self.__class__(*self._args):
                return fn(*args, **kwargs)

        return wrapper

    _args: tuple = ()


class no_grad(_Mode):
    """Ops inside do not record the graph; results have ``requires_grad=False``."""

    def _set(self):
        state.enabled = False


class enable_grad(_Mode):
    """Re-enables recording inside a ``no_grad`` block."""

    def _set(self):
        state.enabled = True


class set_grad_enabled(_Mode):
    """``set_grad_enabled(False)`` acts at once (as a call) and as a context manager."""

    def __init__(self, mode: bool):
        self._args = (mode,)
        self._prev = (state.enabled, state.inference)
        state.enabled = bool(mode)

    def __enter__(self):
        return self

    def __call__(self, fn):
        # used as a decorator: construction already switched the mode; undo that here
        state.enabled, state.inference = self._prev
        return super().__call__(fn)

    def _set(self):
        state.enabled = bool(self._args[0])


class inference_mode(_Mode):
    """Like ``no_grad``, and tensors made inside are marked as inference tensors."""

    def __init__(self, mode: bool = True):
        self._args = (mode,)

    def _set(self):
        if self._args[0]:
            state.enabled = False
            state.inference = True
