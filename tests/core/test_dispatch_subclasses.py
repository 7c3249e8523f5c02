"""Wrapper subclasses with ``__tensorplay_dispatch__`` (PyTorch's ``__torch_dispatch__``
subclasses): ops reach the class's handler below autograd, autograd records around it, a
dispatch mode is asked first, and ``register_dispatch_rule`` overrides one op for a class."""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp
from tensorplay.utils._python_dispatch import TensorPlayDispatchMode, register_dispatch_rule


def _map(fn, value):
    if isinstance(value, (list, tuple)):
        return type(value)(_map(fn, v) for v in value)
    if isinstance(value, dict):
        return {k: _map(fn, v) for k, v in value.items()}
    return fn(value)


class Wrapped(tp.Tensor):
    """Holds a plain tensor ``elem``; every op runs on ``elem`` and is logged."""

    log: list = []

    @staticmethod
    def __new__(cls, elem, requires_grad=False):
        t = tp.Tensor._make_wrapper_subclass(
            cls, elem.shape, dtype=elem.dtype, device=elem.device, requires_grad=requires_grad
        )
        t.elem = elem
        return t

    @classmethod
    def __tensorplay_dispatch__(cls, func, types, args=(), kwargs=None):
        cls.log.append(func.name)
        out = func(
            *_map(lambda x: x.elem if isinstance(x, Wrapped) else x, args),
            **_map(lambda x: x.elem if isinstance(x, Wrapped) else x, kwargs or {}),
        )
        return _map(lambda r: Wrapped(r) if type(r) is tp.Tensor else r, out)


@pytest.fixture(autouse=True)
def _clear_log():
    Wrapped.log = []


def test_ops_reach_the_handler_and_results_are_wrappers():
    x = Wrapped(tp.tensor([1.0, 2.0, 3.0]))
    y = (x * 2 + 1).exp()
    assert type(y) is Wrapped and Wrapped.log == ["mul", "add", "exp"]
    np.testing.assert_allclose(y.elem.numpy(), np.exp(np.array([3.0, 5.0, 7.0])), rtol=1e-6)
    values, indices = Wrapped(tp.tensor([[3.0, 1.0], [0.0, 5.0]])).max(1)
    assert type(values) is Wrapped and values.elem.tolist() == [3.0, 5.0]
    assert indices.elem.tolist() == [0, 1]
    s = Wrapped(tp.ones(2, 3)).sum(0)
    assert s.shape == (3,) and s.elem.tolist() == [2.0, 2.0, 2.0]


def test_autograd_records_around_the_handler():
    w = Wrapped(tp.tensor([1.0, -2.0, 0.5]), requires_grad=True)
    assert w.is_leaf and w.requires_grad
    loss = (w * w).sum()
    assert type(loss) is Wrapped and loss.grad_fn is not None
    loss.backward()
    assert type(w.grad) is Wrapped
    np.testing.assert_allclose(w.grad.elem.numpy(), [2.0, -4.0, 1.0])
    assert "sum" in Wrapped.log and Wrapped.log.count("mul") >= 3  # forward and backward


def test_detach_keeps_the_wrapper_and_what_it_wraps():
    w = Wrapped(tp.tensor([1.0, 2.0]), requires_grad=True)
    d = w.detach()
    assert type(d) is Wrapped and d.elem is w.elem and not d.requires_grad


def test_a_dispatch_mode_is_asked_first():
    seen = []

    class Mode(TensorPlayDispatchMode):
        def __tensorplay_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append((func.name, tuple(t.__name__ for t in types)))
            if Wrapped in types:
                return NotImplemented  # the subclass handles its own tensors
            return func(*args, **(kwargs or {}))

    x = Wrapped(tp.tensor([1.0, 2.0]))
    with Mode():
        y = x + 1
    assert type(y) is Wrapped and y.elem.tolist() == [2.0, 3.0]
    # the mode saw the wrapper call, then the handler's call on the plain tensor
    assert seen == [("add", ("Wrapped",)), ("add", ("Tensor",))]


def test_unhandled_calls_and_bad_classes_are_errors():
    class Refuses(Wrapped):
        @classmethod
        def __tensorplay_dispatch__(cls, func, types, args=(), kwargs=None):
            return NotImplemented

    with pytest.raises(TypeError, match=r"no implementation found for .*'Refuses'"):
        Refuses(tp.ones(2)) + 1
    with pytest.raises(TypeError, match="must be a classmethod"):

        class Plain(tp.Tensor):
            def __tensorplay_dispatch__(self, func, types, args=(), kwargs=None):
                return None

    with pytest.raises(TypeError, match="cls must subclass Tensor"):
        tp.Tensor._make_wrapper_subclass(int, (2,))
    with pytest.raises(ValueError, match="do not match size"):
        tp.Tensor._make_wrapper_subclass(Wrapped, (2, 3), strides=(1,))
    with pytest.raises(NotImplementedError, match="hold no data"):
        tp.Tensor._make_wrapper_subclass(Wrapped, (2,)).numpy()


def test_register_dispatch_rule_overrides_one_op_for_one_class():
    def double_instead(cls, func, types, args, kwargs):
        a, b = (x.elem if isinstance(x, Wrapped) else x for x in args)
        return Wrapped(a * b * 2)

    remove = register_dispatch_rule("mul", Wrapped, double_instead)
    try:
        x = Wrapped(tp.tensor([1.0, 2.0]))
        assert (x * 3).elem.tolist() == [6.0, 12.0]  # the rule, not the handler
        assert (x + 3).elem.tolist() == [4.0, 5.0] and Wrapped.log == ["add"]
    finally:
        remove()
    assert (Wrapped(tp.tensor([1.0])) * 3).elem.tolist() == [3.0]
    with pytest.raises(TypeError, match="owner"):
        register_dispatch_rule("mul", int, double_instead)


def test_plain_tensors_are_unaffected():
    # defining dispatch subclasses does not change what plain tensors do or cost
    a = tp.tensor([1.0, 2.0])
    assert type(a * 2) is tp.Tensor and (a * 2).tolist() == [2.0, 4.0]
    assert Wrapped.log == []


def test_a_custom_op_reaches_the_handler_and_a_library_rule():
    library = pytest.importorskip("tensorplay.library")
    with library._scoped_library("dispatch_sub_test", "FRAGMENT") as lib:
        lib.define("scale(Tensor x, float s) -> Tensor")
        lib.impl("scale", lambda x, s: x * s)
        op = tp.ops.dispatch_sub_test.scale
        y = op(Wrapped(tp.tensor([1.0, 2.0])), 3.0)
        assert type(y) is Wrapped and y.elem.tolist() == [3.0, 6.0]
        assert Wrapped.log[0] == "dispatch_sub_test::scale"

        @library.register_tensorplay_dispatch(op, Wrapped, lib=lib)
        def negate(cls, func, types, args, kwargs):
            return Wrapped(-args[0].elem * args[1])

        assert op(Wrapped(tp.tensor([1.0])), 2.0).elem.tolist() == [-2.0]
    # the library's exit withdrew the rule along with the op
    from tensorplay.utils import _python_dispatch

    assert not any(k[0] == "dispatch_sub_test::scale" for k in _python_dispatch._rules)
    with pytest.raises(ValueError, match="neither a built-in op"):
        library.register_tensorplay_dispatch("no_such_op", Wrapped, negate)


def test_enable_reentrant_dispatch_lets_a_handler_reach_its_own_mode():
    from tensorplay.overrides import enable_reentrant_dispatch

    seen = []

    class Mode(TensorPlayDispatchMode):
        def __tensorplay_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(func.name)
            if func.name == "mul":
                with enable_reentrant_dispatch():
                    return tp.add(args[0], args[0])  # x * 2 as x + x, seen by this mode
            return func(*args, **(kwargs or {}))

    x = tp.tensor([1.0, 2.0])
    with Mode():
        y = x * 2
        with enable_reentrant_dispatch():  # outside a handler: nothing changes
            z = x - 1
    assert y.tolist() == [2.0, 4.0] and z.tolist() == [0.0, 1.0]
    assert seen == ["mul", "add", "sub"]
