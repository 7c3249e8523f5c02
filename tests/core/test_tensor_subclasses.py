"""Tensor subclasses, factories under modes and the overrides switches, with PyTorch as the
reference (issue 18): each program runs on both libraries where torch is installed, and the
result types and values must agree."""

from __future__ import annotations

import math

import numpy as np
import pytest

import tensorplay as tp
from tensorplay.overrides import (
    DisableTensorPlayFunction,
    DisableTensorPlayFunctionSubclass,
    TensorPlayFunctionMode,
    disabled_tensorplay_function_impl,
    get_ignored_functions,
    get_overridable_functions,
    has_tensorplay_function,
)


def _kinds(lib, sub):
    """The result types (as 'sub'/'base'/other) of a program on a subclass of lib's tensor."""
    base = lib.Tensor
    x = lib.tensor([1.0, -2.0, 3.0]).as_subclass(sub)
    plain = lib.tensor([1.0, 1.0, 1.0])
    results = {
        "binary": x + plain,
        "reflected": plain + x,
        "method": x.exp(),
        "view": x.view(3),
        "index": x[1:],
        "reduction": x.sum(),
        "detach": x.detach(),
        "clone": x.clone(),
        "stack": lib.stack([x, plain]),
        "max_values": x.max(0).values,
        "inplace_on_plain": plain.clone().add_(x),
        "zeros_like": lib.zeros_like(x),
    }
    name = {sub: "sub", base: "base"}
    return {k: name.get(type(v), type(v).__name__) for k, v in results.items()}


def test_result_types_match_torch():
    class Sub(tp.Tensor):
        pass

    ours = _kinds(tp, Sub)
    assert set(ours.values()) == {"sub"}, ours
    torch = pytest.importorskip("torch")

    class TSub(torch.Tensor):
        pass

    assert _kinds(torch, TSub) == ours


def test_in_place_ops_and_views_keep_the_object_and_the_memory():
    class Sub(tp.Tensor):
        pass

    s = Sub([1.0, 2.0])
    r = s.add_(1)
    assert r is s and type(s) is Sub and s.tolist() == [2.0, 3.0]
    v = s.view(2)
    v.mul_(10)  # a view shares the memory
    assert s.tolist() == [20.0, 30.0] and type(v) is Sub


def test_autograd_through_a_subclass_matches_torch():
    class Sub(tp.Tensor):
        pass

    x = tp.tensor([0.5, -1.0, 2.0], requires_grad=True)
    s = x.as_subclass(Sub)
    assert not s.is_leaf and s.requires_grad and s.grad_fn is not None
    y = (s * s).exp().sum()
    assert type(y) is Sub
    y.backward()
    v = np.array([0.5, -1.0, 2.0])
    np.testing.assert_allclose(x.grad.numpy(), 2 * v * np.exp(v * v), rtol=1e-6)
    leaf = Sub([1.0, 2.0]).requires_grad_()  # a subclass leaf accumulates its own grad
    (leaf * 3).sum().backward()
    assert leaf.grad.tolist() == [3.0, 3.0]


def test_as_subclass_refuses_what_is_not_a_tensor_class():
    x = tp.ones(2)
    with pytest.raises(TypeError, match="subclass of tensorplay.Tensor"):
        x.as_subclass(int)

    class Slotted(tp.Tensor):
        __slots__ = ("extra",)

    with pytest.raises(TypeError, match="drop them"):
        x.as_subclass(Slotted)
    assert tp.Tensor.as_subclass in get_ignored_functions()


def test_subclass_handler_and_super():
    seen = []

    class Logged(tp.Tensor):
        @classmethod
        def __tensorplay_function__(cls, func, types, args=(), kwargs=None):
            seen.append(func.__name__)
            return super().__tensorplay_function__(func, types, args, kwargs)

    a = Logged([1.0, 2.0])
    r = tp.mul(a, 2)
    assert seen == ["mul"] and type(r) is Logged and r.tolist() == [2.0, 4.0]


def test_default_handler_declines_foreign_types():
    """Tensor's default handler returns NotImplemented for a type it does not derive from,
    so that type's handler runs (torch's rule)."""

    class Sub(tp.Tensor):
        pass

    class Other:
        def __tensorplay_function__(self, func, types, args=(), kwargs=None):
            return ("other", tuple(t.__name__ for t in types))

    assert tp.add(Sub([1.0]), Other()) == ("other", ("Sub", "Other"))


def test_switches():
    class Sub(tp.Tensor):
        pass

    s = Sub([1.0])
    with DisableTensorPlayFunctionSubclass():
        assert type(s + 1) is tp.Tensor and not has_tensorplay_function((s,))
    assert type(s + 1) is Sub

    class Opted(tp.Tensor):
        __tensorplay_function__ = classmethod(disabled_tensorplay_function_impl)

    assert type(Opted([1.0]) * 2) is tp.Tensor

    calls = []

    class Count(TensorPlayFunctionMode):
        def __tensorplay_function__(self, func, types, args=(), kwargs=None):
            calls.append(func.__name__)
            return func(*args, **(kwargs or {}))

    x = tp.ones(2)
    with Count():
        with DisableTensorPlayFunction():
            r = s + x
        x + x
    assert type(r) is tp.Tensor and calls == ["add"]


def test_mode_returning_not_implemented_for_a_subclass_is_asked_twice_as_in_torch():
    def run(lib, mode_base, make_sub):
        calls = []

        class M(mode_base):
            def __tensorplay_function__(self, func, types, args=(), kwargs=None):
                return self.handle(func, types, args, kwargs)

            def __torch_function__(self, func, types, args=(), kwargs=None):
                return self.handle(func, types, args, kwargs)

            def handle(self, func, types, args, kwargs):
                calls.append(len(types))
                if types:
                    return NotImplemented
                return func(*args, **(kwargs or {}))

        s = make_sub()
        with M():
            r = lib.add(s, 1)
        return calls, type(r) is type(s), r.tolist()

    class Sub(tp.Tensor):
        pass

    ours = run(tp, TensorPlayFunctionMode, lambda: tp.tensor([1.0, 2.0]).as_subclass(Sub))
    assert ours == ([1, 0], True, [2.0, 3.0])
    torch = pytest.importorskip("torch")
    from torch.overrides import TorchFunctionMode

    class TSub(torch.Tensor):
        pass

    theirs = run(torch, TorchFunctionMode, lambda: torch.tensor([1.0, 2.0]).as_subclass(TSub))
    assert theirs == ours


def test_factories_and_devices_reach_modes():
    class Sentinel(TensorPlayFunctionMode):
        def __tensorplay_function__(self, func, types, args=(), kwargs=None):
            return ("sentinel", func.__name__)

    with Sentinel():
        got = [tp.randn(3), tp.empty([]), tp.tensor([1]), tp.device(0), tp.zeros(2)]
        got += [tp.arange(3), tp.full((2,), 1.0), tp.eye(2), tp.linspace(0, 1, 3)]
    names = [g[1] for g in got]
    assert names == [
        "randn",
        "empty",
        "tensor",
        "device",
        "zeros",
        "arange",
        "full",
        "eye",
        "linspace",
    ]
    # outside a mode they are the real factories, and a device is still a device
    assert tp.zeros(2).tolist() == [0.0, 0.0] and isinstance(tp.device("cpu"), tp.device)
    ignored = get_ignored_functions()
    assert {tp.tensor, tp.zeros, tp.randn, tp.device} <= ignored
    overridable = get_overridable_functions()[tp]
    assert tp.zeros_like in overridable and tp.zeros not in overridable


def test_a_classmethod_mode_is_refused_as_in_torch():
    class Bad(TensorPlayFunctionMode):
        @classmethod
        def __tensorplay_function__(cls, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    with pytest.raises(RuntimeError, match="plain method"):
        with Bad():
            pass
    assert (tp.ones(1) + 1).tolist() == [2.0]  # nothing was left active


def test_handlers_nested_in_view_arguments_are_asked():
    class W:
        def __tensorplay_function__(self, func, types, args=(), kwargs=None):
            return func.__name__

    t = tp.ones(4)
    assert t.view(W()) == "view" and t.reshape(W()) == "reshape"
    assert t[(W(), 1)] == "__getitem__"
    with pytest.raises(TypeError, match="sequence of ints"):
        t.view("four")


def test_subclass_on_meta_and_printing():
    class Sub(tp.Tensor):
        pass

    m = tp.empty(2, 3, device="meta").as_subclass(Sub)
    assert type(m.sum(0)) is Sub and m.sum(0).shape == (3,)
    assert repr(Sub([1.5])) == "Sub([1.5000])"
    assert math.isclose(Sub([2.0]).exp().item(), math.exp(2.0), rel_tol=1e-6)


def test_overrides_helpers():
    from tensorplay import overrides as O

    assert O.resolve_name(tp.add) == "tensorplay.add"
    assert O.resolve_name(tp.Tensor.to) == "tensorplay.Tensor.to"
    assert O.resolve_name(print) is None
    assert O.is_tensor_method_or_property(tp.Tensor.to)
    assert O.is_tensor_method_or_property(tp.Tensor.shape.__get__)
    assert not O.is_tensor_method_or_property(tp.zeros_like)  # (tp.add is Tensor.add here)

    dummies = O.get_testing_overrides()
    assert dummies[tp.add](tp.ones(1), tp.ones(1)) == -1
    import inspect

    assert str(inspect.signature(dummies[tp.add])) == str(inspect.signature(tp.add))
    # every overridable function has a dummy, and a handler sees each of them
    assert set(dummies) == {f for fs in get_overridable_functions().values() for f in fs}

    seen = []

    class Spy:
        def __tensorplay_function__(self, func, types, args=(), kwargs=None):
            seen.append(func)
            return 7

    @O.wrap_tensorplay_function(lambda x, scale=1.0: (x,))
    def scaled(x, scale=1.0):
        return x * scale

    assert scaled(tp.ones(2), 3.0).tolist() == [3.0, 3.0]
    assert scaled(Spy(), 2.0) == 7 and seen == [scaled]
    with pytest.raises(TypeError, match="dispatcher must be callable"):
        O.wrap_tensorplay_function(3)

    assert O._get_current_function_mode() is None
    with O.BaseTensorPlayFunctionMode() as outer, O.BaseTensorPlayFunctionMode() as inner:
        assert O._get_current_function_mode() is inner
        assert O._get_current_function_mode_stack() == [outer, inner]
        assert (tp.ones(2) * 2).tolist() == [2.0, 2.0]  # the base mode runs calls unchanged
    assert O._get_current_function_mode_stack() == []


def test_autograd_grad_and_backward_offer_tensor_likes_to_their_handler():
    seen = []

    class W:
        def __init__(self, t):
            self.t = t

        def __tensorplay_function__(self, func, types, args=(), kwargs=None):
            seen.append(func)
            return "handled"

    w = W(tp.ones(2, requires_grad=True))
    assert tp.autograd.grad(w, w) == "handled"
    assert tp.autograd.backward([w]) == "handled"
    assert seen == [tp.autograd.grad, tp.autograd.backward]

    class Names(TensorPlayFunctionMode):
        def __tensorplay_function__(self, func, types, args=(), kwargs=None):
            seen.append(func.__name__)
            return func(*args, **(kwargs or {}))

    x = tp.tensor([1.0, 2.0], requires_grad=True)
    y = (x * x).sum()
    with Names():
        (g,) = tp.autograd.grad(y, x)
    assert g.tolist() == [2.0, 4.0] and seen[2] == "grad"  # modes see it too, as in torch
    torch = pytest.importorskip("torch")

    class TW:
        def __init__(self, t):
            self.t = t

        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            return ("handled", func.__name__)

    assert torch.autograd.grad(TW(torch.ones(1)), TW(torch.ones(1))) == ("handled", "grad")
