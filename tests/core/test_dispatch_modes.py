"""Dispatch modes (``__tensorplay_dispatch__``): every op below autograd, per thread."""

from __future__ import annotations

import threading

import pytest

import tensorplay as tp
from tensorplay import _dispatch
from tensorplay.utils._python_dispatch import (
    TensorPlayDispatchMode,
    _get_current_dispatch_mode,
    _len_dispatch_stack,
)


class Log(TensorPlayDispatchMode):
    def __init__(self, log=None, tag=""):
        self.log = [] if log is None else log
        self.tag = tag

    def __tensorplay_dispatch__(self, func, types, args=(), kwargs=None):
        self.log.append(self.tag + func.name)
        return func(*args, **(kwargs or {}))


def test_mode_sees_forward_and_backward_ops_and_gradients_stay_right():
    x = tp.tensor([1.0, 2.0], requires_grad=True)
    with Log() as mode:
        y = (x * 3).exp().sum()
        y.backward()
    assert mode.log[:3] == ["mul", "exp", "sum"]
    assert "mul" in mode.log[3:]  # the backward formulas' ops pass through the mode too
    assert tp.allclose(x.grad, 3 * (x.detach() * 3).exp())


def test_modes_nest_innermost_first_and_the_stack_is_probed():
    log = []
    assert _len_dispatch_stack() == 0 and _get_current_dispatch_mode() is None
    with Log(log, "outer:"):
        with Log(log, "inner:") as inner:
            assert _len_dispatch_stack() == 2 and _get_current_dispatch_mode() is inner
            tp.ones(2) + tp.ones(2)
    assert log[-2:] == ["inner:add", "outer:add"]
    assert _len_dispatch_stack() == 0 and _dispatch.state.plain


def test_a_mode_can_replace_the_result():
    class Zeros(TensorPlayDispatchMode):
        def __tensorplay_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            return out * 0 if func.name == "exp" else out

    with Zeros():
        assert tp.exp(tp.ones(2)).tolist() == [0.0, 0.0]
    assert tp.exp(tp.zeros(1)).tolist() == [1.0]


def test_a_mode_carrying_a_tracer_records_one_node_per_op():
    class Tracer:
        def __init__(self):
            self.nodes = []

        def record(self, name, args):
            self.nodes.append((name, tuple(type(a).__name__ for a in args)))

    class Tracing(TensorPlayDispatchMode):
        def __init__(self):
            self.tracer = Tracer()

        def __tensorplay_dispatch__(self, func, types, args=(), kwargs=None):
            self.tracer.record(func.name, args)
            return func(*args, **(kwargs or {}))

    with Tracing() as t:
        tp.relu(tp.ones(3) - 2).sum()
    assert [n for n, _ in t.tracer.nodes] == ["sub", "relu", "sum"]
    assert t.tracer.nodes[0][1] == ("Tensor", "int")


def test_exception_in_a_mode_leaves_the_stack_clean():
    class Boom(TensorPlayDispatchMode):
        def __tensorplay_dispatch__(self, func, types, args=(), kwargs=None):
            raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        with Boom():
            tp.ones(2) * 2
    assert _len_dispatch_stack() == 0 and _dispatch.state.plain
    assert (tp.ones(2) * 2).tolist() == [2.0, 2.0]


def test_exiting_out_of_order_raises():
    a, b = Log(), Log()
    a.__enter__()
    b.__enter__()
    try:
        with pytest.raises(RuntimeError, match="reverse order"):
            a.__exit__(None, None, None)
    finally:
        b.__exit__(None, None, None)
        a.__exit__(None, None, None)
    assert _len_dispatch_stack() == 0


def test_modes_are_per_thread():
    seen = []
    with Log(seen):
        t = threading.Thread(target=lambda: tp.ones(2) + 1)
        t.start()
        t.join()
    assert seen == []
