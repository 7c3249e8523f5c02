"""Anomaly detection (``tp.autograd.detect_anomaly``): which forward line made the backward
step that failed or produced NaN.

While it is on, every node recorded keeps the stack of the forward call that made it
(``node.metadata["traceback_"]``, torch's key), and a node recorded while a backward step
runs (``create_graph=True``) keeps that step's node (``metadata["parent_"]``). The backward
pass then runs every node through ``step``: an error raised by a node is preceded by a
warning with the node's forward stack (and its parents'), which is also added to the
exception as a note; with ``check_nan`` a gradient holding NaN is such an error.

Off by default, and then all but free: recording reads one flag per node, and the backward
pass picks its loop once per call (the native loop when off: nothing is added per node).
The mode is process-wide, as torch's is.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import traceback
import warnings

from tensorplay.autograd import grad_mode

__all__ = [
    "detect_anomaly",
    "set_detect_anomaly",
    "is_anomaly_enabled",
    "is_anomaly_check_nan_enabled",
]


class _State:
    enabled = False
    check_nan = True


state = _State()


class _Running(threading.local):
    node = None  # the node whose backward step runs on this thread (the parent of new nodes)


_running = _Running()


def is_anomaly_enabled() -> bool:
    """Is anomaly detection on?"""
    return state.enabled


def is_anomaly_check_nan_enabled() -> bool:
    """Does anomaly detection raise on NaN gradients (``check_nan``)?"""
    return state.check_nan


def _check_flag(where: str, name: str, value) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{where}: {name} must be True or False, got {value!r}")


class detect_anomaly:
    """Context manager that turns anomaly detection on.

    Args:
        check_nan: also raise ``RuntimeError`` when a backward step returns a gradient
            holding NaN ("Function 'DivBackward0' returned nan values in its 0th output.").

    Run the forward pass inside it too: a node only knows its forward stack when it was
    recorded with detection on. Warns (``UserWarning``) that it slows programs down, as
    torch does.

    Example::

        with tp.autograd.detect_anomaly():
            y = x / x          # 0 / 0 -> nan
            y.sum().backward() # RuntimeError: Function 'DivBackward0' returned nan ...
    """

    def __init__(self, check_nan: bool = True) -> None:
        _check_flag("detect_anomaly", "check_nan", check_nan)
        self.check_nan = check_nan
        self.prev = (state.enabled, state.check_nan)
        warnings.warn(
            "Anomaly Detection has been enabled. This mode will increase the runtime and "
            "should only be enabled for debugging.",
            stacklevel=2,
        )

    def __enter__(self) -> None:
        state.enabled, state.check_nan = True, self.check_nan

    def __exit__(self, *exc) -> bool:
        state.enabled, state.check_nan = self.prev
        return False


class set_detect_anomaly:
    """Turn anomaly detection on or off at once; as a context manager, the previous setting
    comes back on exit.

    Args:
        mode: True to turn it on, False to turn it off.
        check_nan: with ``mode``, raise on NaN gradients (see ``detect_anomaly``).
    """

    def __init__(self, mode: bool, check_nan: bool = True) -> None:
        _check_flag("set_detect_anomaly", "mode", mode)
        _check_flag("set_detect_anomaly", "check_nan", check_nan)
        self.prev = (state.enabled, state.check_nan)
        state.enabled, state.check_nan = mode, check_nan

    def __enter__(self) -> None:
        pass

    def __exit__(self, *exc) -> bool:
        state.enabled, state.check_nan = self.prev
        return False


# ---- what recording and the engine call while the mode is on ----------------------------------


def _ours(frame) -> bool:
    """Is ``frame`` TensorPlay's own (a module of the package, or a generated op binding)?"""
    name = frame.f_globals.get("__name__") or ""
    if name == "tensorplay" or name.startswith("tensorplay."):
        return True
    return frame.f_code.co_filename.startswith("<tensorplay ")


def _user_level() -> int:
    """The ``stacklevel`` of the user's frame that called into TensorPlay (a warning then
    points at the user's ``backward()`` line)."""
    level, frame = 1, sys._getframe(1)
    while frame is not None and _ours(frame):
        frame = frame.f_back
        level += 1
    return level


def record(node) -> None:
    """Keep on ``node`` the stack of the forward call that made it, ending at the caller's
    line (TensorPlay's own frames below it, the dispatcher and recording, are left out),
    and the node whose backward step is running, if any."""
    frame = sys._getframe(1)
    while frame is not None and _ours(frame):
        frame = frame.f_back
    meta = node.metadata
    meta["traceback_"] = traceback.format_stack(frame) if frame is not None else []
    if _running.node is not None:
        meta["parent_"] = _running.node


def _has_nan(g) -> bool:
    if g._data is None:  # meta tensors hold no values
        return False
    prev, grad_mode.state.enabled = grad_mode.state.enabled, False
    try:
        return bool(g.isnan().any())
    finally:
        grad_mode.state.enabled = prev


def check_nan(node, grad_inputs) -> None:
    """Raise if one of the gradients ``node`` returned holds NaN (when ``check_nan`` is on)."""
    if not state.check_nan:
        return
    for i, g in enumerate(grad_inputs):
        if g is not None and _has_nan(g):
            raise RuntimeError(f"Function '{node.name()}' returned nan values in its {i}th output.")


def _report(node) -> str:
    """The forward stacks behind ``node``: its own, then its parents' (torch's wording)."""
    name = node.name()
    stack = node.metadata.get("traceback_")
    if stack is None:
        return (
            f"Error detected in {name}. No forward pass information available. Enable "
            "detect anomaly during forward pass for more information."
        )
    parts = [f"Error detected in {name}. Traceback of forward call that caused the error:\n"]
    parts.append("".join(stack))
    parent = node.metadata.get("parent_")
    while parent is not None and "traceback_" in parent.metadata:
        parts.append(
            f"\n\nPrevious calculation was induced by {parent.name()}. Traceback of forward "
            "call that induced the previous calculation:\n"
        )
        parts.append("".join(parent.metadata["traceback_"]))
        parent = parent.metadata.get("parent_")
    return "".join(parts)


@contextlib.contextmanager
def backward_pass():
    """A backward pass under anomaly detection (around the engine's loop of ``step``s)."""
    prev = _running.node
    try:
        yield
    finally:
        _running.node = prev


def step(node, run_step, *args):
    """``run_step(node, *args)``, one backward step of ``node``, watched: an error leaving it
    (a NaN gradient counts, with ``check_nan``) is reported with ``node``'s forward stack,
    as a warning and as a note on the exception."""
    # set until the next step: the gradients returned here are summed into the next nodes'
    # buffers after it, and a sum recorded then (create_graph) has this node as its parent
    _running.node = node
    try:
        grad_inputs = run_step(node, *args)
        check_nan(node, grad_inputs)
    except Exception as e:
        report = _report(node)
        warnings.warn(report, stacklevel=_user_level())
        if hasattr(e, "add_note"):  # Python 3.11+
            e.add_note(report)
        raise
    return grad_inputs
