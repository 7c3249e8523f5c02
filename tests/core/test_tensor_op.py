"""``TensorOp``: an entry of core's dispatcher with Tensor kernels (what tensorplay-library's
custom ops are), run by the same layers as the op table's rows. Core alone, no library."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import tensorplay as tp
from tensorplay import capture
from tensorplay._extension import NO_TENSOR, TensorOp
from tensorplay.overrides import TensorPlayFunctionMode
from tensorplay.profiler import profile
from tensorplay.utils._python_dispatch import TensorPlayDispatchMode


def _op(kernel, *, name="test::scale", vjp=None, mutates=(), fake=None, bind=True):
    op = TensorOp(name)
    table = {"cpu": kernel, NO_TENSOR: kernel}
    if fake is not None:
        table["meta"] = fake
    op._table = table
    op._vjp = vjp
    op._mutates = mutates
    if bind:
        op.bind_signature(tuple(inspect.signature(kernel).parameters.values()))
    return op


def _scale(x, factor=2.0):
    return x * factor


@pytest.mark.parametrize("bind", [True, False], ids=["generated", "reference"])
def test_plain_call_runs_the_kernel_of_the_device(bind):
    op = _op(_scale, bind=bind)
    assert op(tp.tensor([1.0, 2.0])).tolist() == [2.0, 4.0]
    assert op(tp.tensor([1.0, 2.0]), factor=3.0).tolist() == [3.0, 6.0]
    assert op(x=tp.tensor([1.0]), factor=-1.0).tolist() == [-1.0]


def test_meta_tensors_run_the_fake_kernel():
    op = _op(_scale, fake=lambda x, factor=2.0: tp.empty(x.shape, device="meta"))
    out = op(tp.empty(3, 4, device="meta"))
    assert out.device.type == "meta" and out.shape == (3, 4)


def test_missing_kernel_is_reported_with_the_device():
    op = _op(_scale)
    with pytest.raises(NotImplementedError, match="test::scale has no kernel for 'meta'"):
        op(tp.empty(2, device="meta"))


@pytest.mark.parametrize("bind", [True, False], ids=["generated", "reference"])
def test_autograd_calls_the_vjp_and_detaches_the_kernel_inputs(bind):
    seen = []

    def kernel(x, factor=2.0):
        seen.append(x.requires_grad)
        return x * factor

    def backward(ctx, g):
        return g * ctx.factor, None

    def setup(ctx, inputs, output):
        ctx.factor = inputs[1]

    op = _op(kernel, vjp=(backward, setup), bind=bind)
    x = tp.tensor([1.0, 2.0], requires_grad=True)
    y = op(x, 3.0)
    assert seen == [False] and y.grad_fn.name() == "test::scaleBackward"
    (y * tp.tensor([1.0, 10.0])).sum().backward()
    assert x.grad.tolist() == [3.0, 30.0]


def test_gradient_is_summed_to_the_input_shape_by_the_one_fitter():
    op = _op(lambda x: x * 2.0, vjp=(lambda ctx, g: g.expand(3, 2), None))
    x = tp.ones(2, requires_grad=True)
    op(x).sum().backward()
    assert x.grad.tolist() == [3.0, 3.0]
    bad = _op(lambda x: x * 2.0, name="test::bad", vjp=(lambda ctx, g: tp.ones(5), None))
    x = tp.ones(2, requires_grad=True)
    msg = r"test::bad: backward returned gradient 0 of shape \[5\]"
    with pytest.raises(RuntimeError, match=msg):
        bad(x).sum().backward()


def test_no_vjp_raises_instead_of_differentiating_the_body():
    op = _op(_scale)
    y = op(tp.ones(2, requires_grad=True))
    with pytest.raises(RuntimeError, match="Autograd has not been implemented for operator"):
        y.sum().backward()


def test_declared_mutation_bumps_the_version_and_aliasing_outputs_are_refused():
    def fill(x, value):
        x.numpy()[...] = value
        return x.sum()

    op = _op(fill, name="test::fill", mutates=("x",))
    x = tp.zeros(3)
    before = x._version
    assert op(x, 2.0).item() == 6.0 and x.tolist() == [2.0, 2.0, 2.0]
    assert x._version == before + 1
    ident = _op(lambda x: x[:1], name="test::ident")
    with pytest.raises(RuntimeError, match="output 0 aliases input 'x'"):
        ident(tp.ones(2))


def test_layers_see_the_call_once_each():
    op = _op(_scale)
    funcs, dispatched = [], []

    class FnLog(TensorPlayFunctionMode):
        def __tensorplay_function__(self, func, types, args=(), kwargs=None):
            funcs.append(func)
            return func(*args, **(kwargs or {}))

    class DispatchLog(TensorPlayDispatchMode):
        def __tensorplay_dispatch__(self, func, types, args=(), kwargs=None):
            dispatched.append(func.name)
            return func(*args, **(kwargs or {}))

    x = tp.tensor([1.0, 2.0])  # made outside: inside, the factory reaches FnLog too
    with profile() as prof, FnLog(), DispatchLog():
        out = op(x)
    assert out.tolist() == [2.0, 4.0]
    assert funcs == [op] and dispatched == ["test::scale"]
    assert [e.name for e in prof.events()].count("test::scale") == 1


def test_autocast_policy_casts_floating_inputs_and_turns_autocast_off_inside():
    seen = []

    def kernel(x, y):
        seen.append((x.dtype, y.dtype, tp.amp.is_autocast_enabled("cpu")))
        return x.to(tp.float32) + y.to(tp.float32)

    op = _op(kernel, name="test::add")
    op._autocast = {"cpu": tp.bfloat16}
    out = op(tp.ones(2), tp.ones(2, dtype=tp.float64))
    assert seen[-1] == (tp.float32, tp.float64, False)  # no autocast region: unchanged
    with tp.autocast("cpu"):
        out = op(tp.ones(2), tp.ones(2, dtype=tp.float64))
    assert seen[-1] == (tp.bfloat16, tp.bfloat16, False) and out.tolist() == [2.0, 2.0]


def test_a_capture_proxy_hands_the_call_to_the_tracer_and_the_kernel_never_runs():
    runs = []

    def kernel(x, factor=2.0):
        runs.append(1)
        return x * factor

    op = _op(kernel)

    class Tracer:
        calls: list = []

        def record_call(self, target, args, kwargs):
            self.calls.append((target, args, kwargs))
            return "result"

    p = capture.Proxy()
    with capture.tracing(Tracer()) as t:
        assert op(p, 3.0) == "result"
        assert tp.exp(p) == "result"  # a built-in op takes the same route
    assert t.calls[0] == (op, (p, 3.0), {}) and t.calls[1][0] is tp.exp and runs == []


def test_list_arguments_get_one_gradient_each():
    def total(xs):
        return xs[0] + xs[1]

    op = _op(total, name="test::total", vjp=(lambda ctx, g: [g, g * 2], None))
    a, b = tp.ones(2, requires_grad=True), tp.ones(2, requires_grad=True)
    op([a, b]).sum().backward()
    assert a.grad.tolist() == [1.0, 1.0] and b.grad.tolist() == [2.0, 2.0]
    assert np.array_equal(op([tp.ones(1), tp.ones(1)]).numpy(), [2.0])
