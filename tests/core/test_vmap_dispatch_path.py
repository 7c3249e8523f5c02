"""vmap's short dispatch path (issue 19): ops on ``BatchedTensor`` go from ``call`` straight
below autograd and reach the batching rule with the dispatcher's (targs, params), while the
overrides and modes that users write still see every call as before."""

from __future__ import annotations

import numpy as np

import tensorplay as tp
from tensorplay import _vmap
from tensorplay.overrides import DisableTensorPlayFunctionSubclass, TensorPlayFunctionMode
from tensorplay.utils._python_dispatch import (
    TensorPlayDispatchMode,
    claims,
    register_dispatch_rule,
)


class Names(TensorPlayFunctionMode):
    def __init__(self):
        self.seen = []

    def __tensorplay_function__(self, func, types, args=(), kwargs=None):
        self.seen.append(getattr(func, "__name__", str(func)))
        return func(*args, **(kwargs or {}))


class Ops(TensorPlayDispatchMode):
    def __init__(self):
        self.seen = []

    def __tensorplay_dispatch__(self, func, types, args=(), kwargs=None):
        self.seen.append((func.name, tuple(kwargs or {})))
        return func(*args, **(kwargs or {}))


def f(v):
    return tp.tanh(v * 2 + 1).sum(0)


X = tp.randn(5, 3, dtype=tp.float64)
EXPECTED = np.tanh(X.numpy() * 2 + 1).sum(1)


def test_a_batched_argument_takes_the_short_path_only_with_no_layer_active():
    bt = _vmap.BatchedTensor(X, 10**9)
    assert claims((bt, 2), {})
    assert not claims((bt, object()), {})  # an argument of unknown type: the full check
    assert not claims((X, 2), {})  # no wrapper: nothing to claim


def test_the_rule_receives_the_dispatchers_parameters_by_name():
    seen = []
    rule = _vmap._dims

    def spy(func, level, size, args, kwargs):
        seen.append(dict(kwargs))
        return rule(func, level, size, args, kwargs)

    key = (tp._dispatch.OPS["sum"], False)
    _vmap._rules[key] = spy
    try:
        out = tp.vmap(f)(X)
    finally:
        del _vmap._rules[key]
    np.testing.assert_allclose(out.numpy(), EXPECTED)
    assert seen == [{"dim": 0, "keepdim": False, "dtype": None}]


def test_a_function_mode_still_sees_every_call_on_batched_tensors():
    with Names() as mode:
        out = tp.vmap(f)(X)
    np.testing.assert_allclose(out.numpy(), EXPECTED)
    # (vmap's own x.dim() on the input is a call the mode sees too)
    assert [name for name in mode.seen if name != "dim"] == ["mul", "add", "tanh", "sum"]


def test_a_dispatch_mode_still_sees_the_users_call():
    with Ops() as mode:
        out = tp.vmap(f)(X)
    np.testing.assert_allclose(out.numpy(), EXPECTED)
    # the user's form: parameters left at their default are omitted (sum(v, 0))
    assert mode.seen == [("mul", ()), ("add", ()), ("tanh", ()), ("sum", ())]


def test_a_subclass_with_its_own_tensorplay_function_still_gets_the_call():
    class Tagged(tp.Tensor):
        calls: list = []

        @classmethod
        def __tensorplay_function__(cls, func, types, args=(), kwargs=None):
            cls.calls.append(func.__name__)
            with DisableTensorPlayFunctionSubclass():
                return func(*args, **(kwargs or {}))

    tagged = X[0].as_subclass(Tagged)
    out = tp.vmap(lambda v: v + tagged)(X)
    assert Tagged.calls == ["add"]
    np.testing.assert_allclose(out.numpy(), X.numpy() + X[0].numpy())


def test_a_registered_dispatch_rule_for_batched_tensor_still_wins():
    def negate(cls, func, types, args, kwargs):
        return _vmap.BatchedTensor(-args[0].elem, args[0].level)

    remove = register_dispatch_rule("tanh", _vmap.BatchedTensor, negate)
    try:
        out = tp.vmap(lambda v: tp.tanh(v))(X)
    finally:
        remove()
    np.testing.assert_allclose(out.numpy(), -X.numpy())


def test_per_sample_gradients_through_the_short_path_match_the_loop():
    w = tp.randn(3, 2, dtype=tp.float64)

    def grad_of_loss(w, x):
        w = w.detach().requires_grad_()
        return tp.autograd.grad(((x @ w) ** 2).sum(), w)[0]

    got = tp.vmap(grad_of_loss, in_dims=(None, 0))(w, X)
    want = tp.stack([grad_of_loss(w, x) for x in X])
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12)
