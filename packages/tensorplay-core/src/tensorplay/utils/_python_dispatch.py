"""Dispatch modes: objects with ``__tensorplay_dispatch__`` that see every op *below*
autograd (PyTorch's ``TorchDispatchMode``).

    class Log(TensorPlayDispatchMode):
        def __tensorplay_dispatch__(self, func, types, args=(), kwargs=None):
            print(func.name)
            return func(*args, **(kwargs or {}))

Autograd has already decided what to record when a mode is called; the mode
produces the op's result (usually by calling ``func``, which runs the op with this
mode switched off and without recording), and autograd records around it. That is
what tracing needs (a mode carrying a ``tracer`` with ``record()`` turns every op,
and every library op as one node, into a graph node) and fake/meta execution too.
The stack is per thread; modes nest, the innermost sees an op first.
"""

from __future__ import annotations

import sys
import threading

from tensorplay import _dispatch
from tensorplay._tensor import Tensor
from tensorplay.autograd import grad_mode
from tensorplay.overrides import user_call

__all__ = [
    "TensorPlayDispatchMode",
    "OpHandle",
    "_push_mode",
    "_pop_mode",
    "_len_dispatch_stack",
    "_get_current_dispatch_mode",
]


class _Stack(threading.local):
    modes: tuple = ()


_stack = _Stack()


class OpHandle:
    """``func`` as a dispatch mode sees it: call it to run the op below the mode."""

    __slots__ = ("row", "inplace")

    def __init__(self, row, inplace: bool = False):
        self.row, self.inplace = row, inplace

    @property
    def name(self) -> str:
        return self.row.name + ("_" if self.inplace else "")

    def __call__(self, *args, **kwargs):
        row = self.row
        with grad_mode.no_grad():  # below autograd: the outer call records
            if row.kind == "tensor_op":  # the next mode, or the kernel
                return row.below_autograd(args, kwargs)
            return (row.inplace_fn if self.inplace else row.fn)(*args, **kwargs)

    def __repr__(self) -> str:
        if self.row.kind == "tensor_op":
            return f"<op {self.name}>"
        return f"<op tensorplay.{self.name}>"

    def __eq__(self, other) -> bool:
        return isinstance(other, OpHandle) and (other.row, other.inplace) == (
            self.row,
            self.inplace,
        )

    def __hash__(self) -> int:
        return hash((self.row.name, self.inplace))


class TensorPlayDispatchMode:
    """Base class: override ``__tensorplay_dispatch__``; use as a context manager."""

    def __tensorplay_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))

    def __enter__(self):
        _push_mode(self)
        return self

    def __exit__(self, exc_type, exc, tb):
        if not _stack.modes or _stack.modes[-1] is not self:
            raise RuntimeError(
                "dispatch modes must be exited in the reverse order they were "
                f"entered ({type(self).__name__} is not the innermost mode)"
            )
        _pop_mode()
        return False


def _push_mode(mode) -> None:
    _stack.modes = _stack.modes + (mode,)
    _dispatch.state.block()  # every op must reach the dispatcher's general path


def _pop_mode():
    mode = _stack.modes[-1]
    _stack.modes = _stack.modes[:-1]
    _dispatch.state.unblock()
    return mode


def _len_dispatch_stack() -> int:
    """How many dispatch modes are active in this thread (a cheap probe)."""
    return len(_stack.modes)


def _get_current_dispatch_mode():
    return _stack.modes[-1] if _stack.modes else None


def active() -> bool:
    return bool(_stack.modes)


def run(row, targs: tuple, params: dict, out, inplace):
    """Give the op to the innermost mode, which runs with itself switched off."""
    _, args, kwargs = user_call(row, targs, params, out, inplace)
    mode = _stack.modes[-1]
    types = tuple({type(x) for x in _flat((*targs, *params.values())) if isinstance(x, Tensor)})
    saved = _stack.modes
    _stack.modes = saved[:-1]
    try:
        return mode.__tensorplay_dispatch__(OpHandle(row, inplace is not None), types, args, kwargs)
    finally:
        _stack.modes = saved


def _flat(values):
    for v in values:
        if isinstance(v, (list, tuple)):
            yield from v
        else:
            yield v


_dispatch.register_dispatch_modes(sys.modules[__name__])  # execute() consults this module
