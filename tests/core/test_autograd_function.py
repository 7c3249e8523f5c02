"""tp.autograd.Function: the seed's examples verbatim, the ctx API, validation, forward mode."""

from __future__ import annotations

import weakref

import numpy as np
import pytest

import tensorplay as tp
from tensorplay.autograd import Function, forward_ad as fwAD, gradcheck, once_differentiable

# ---- the seed (shared/seeds/extending.md, "Extending autograd"), verbatim -----------------


class Exp(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.exp()

    @staticmethod
    def backward(ctx, grad_out):
        (x,) = ctx.saved_tensors
        return grad_out * x.exp()


class Mul(Function):
    @staticmethod
    def forward(a, b):
        return a * b

    @staticmethod
    def setup_context(ctx, inputs, output):
        a, b = inputs
        ctx.save_for_backward(a, b)

    @staticmethod
    def backward(ctx, grad_out):
        a, b = ctx.saved_tensors
        return grad_out * b, grad_out * a


def test_seed_exp_combined_style():
    x = tp.randn(5, dtype=tp.float64, requires_grad=True)
    out = Exp.apply(x)
    out.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.exp(x.detach().numpy()), rtol=1e-12)
    assert out.grad_fn.name() == "ExpBackward"


def test_seed_mul_separate_style_passes_gradcheck():
    a = tp.randn(5, dtype=tp.float64, requires_grad=True)
    b = tp.randn(5, dtype=tp.float64, requires_grad=True)
    assert gradcheck(Mul.apply, (a, b))


def test_seed_exp_double_backward():
    x = tp.randn(5, dtype=tp.float64, requires_grad=True)
    (g,) = tp.autograd.grad(Exp.apply(x).sum(), x, create_graph=True)
    (gg,) = tp.autograd.grad(g.sum(), x)
    np.testing.assert_allclose(gg.numpy(), np.exp(x.detach().numpy()), rtol=1e-12)
    assert tp.autograd.gradgradcheck(Exp.apply, (x,))


# ---- ctx API --------------------------------------------------------------------------------


def test_needs_input_grad_and_none_gradients():
    seen = {}

    class Scale(Function):
        @staticmethod
        def forward(ctx, x, k, y):
            seen["needs"] = ctx.needs_input_grad
            return x * k + y

        @staticmethod
        def backward(ctx, g):
            return g * 3.0, None, None

    x = tp.ones(2, requires_grad=True)
    y = tp.ones(2)
    Scale.apply(x, 3.0, y).sum().backward()
    assert seen["needs"] == (True, False, False)
    assert x.grad.tolist() == [3.0, 3.0]


def test_incorrect_number_of_gradients_raises():
    class Bad(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1

        @staticmethod
        def backward(ctx, g):
            return g, g

    x = tp.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="incorrect number of gradients"):
        Bad.apply(x).sum().backward()


def test_trailing_none_gradients_are_allowed():
    class Extra(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2, None, None

    x = tp.ones(2, requires_grad=True)
    Extra.apply(x).sum().backward()
    assert x.grad.tolist() == [2.0, 2.0]


def test_wrong_shaped_gradient_names_function_and_index():
    class WrongShape(Function):
        @staticmethod
        def forward(ctx, x):
            return x.sum()

        @staticmethod
        def backward(ctx, g):
            return tp.ones(3)

    x = tp.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"WrongShapeBackward.*index 0.*\[3\].*\[2\]"):
        WrongShape.apply(x).backward()


def test_saved_tensor_modified_in_place_raises():
    x = tp.ones(3, dtype=tp.float64, requires_grad=True)
    y = x * 2
    out = Exp.apply(y)
    y.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()


def test_mark_non_differentiable():
    class SortLike(Function):
        @staticmethod
        def forward(ctx, x):
            idx = tp.argmax(x).to(tp.float32)
            ctx.mark_non_differentiable(idx)
            return x * 1, idx

        @staticmethod
        def backward(ctx, g, g_idx):
            return g

    x = tp.tensor([1.0, 3.0, 2.0], requires_grad=True)
    y, idx = SortLike.apply(x)
    assert y.requires_grad and not idx.requires_grad
    y.sum().backward()
    assert x.grad.tolist() == [1.0, 1.0, 1.0]


def test_mark_dirty_in_place_function():
    class AddOneInPlace(Function):
        @staticmethod
        def forward(ctx, x):
            x.add_(1)
            ctx.mark_dirty(x)
            return x

        @staticmethod
        def backward(ctx, g):
            return g

    base = tp.ones(2, requires_grad=True)
    y = base * 2
    out = AddOneInPlace.apply(y)
    assert out is y and y.grad_fn.name() == "AddOneInPlaceBackward"
    assert y.tolist() == [3.0, 3.0]
    y.sum().backward()
    assert base.grad.tolist() == [2.0, 2.0]


def test_set_materialize_grads_false_gives_none():
    got = {}

    class Two(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.set_materialize_grads(False)
            return x * 1, x * 2

        @staticmethod
        def backward(ctx, g1, g2):
            got["g2"] = g2
            return g1

    x = tp.ones(2, requires_grad=True)
    a, _ = Two.apply(x)
    a.sum().backward()
    assert got["g2"] is None and x.grad.tolist() == [1.0, 1.0]


def test_materialized_grads_are_zeros_by_default():
    got = {}

    class Two(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1, x * 2

        @staticmethod
        def backward(ctx, g1, g2):
            got["g2"] = g2
            return g1 + g2

    x = tp.ones(2, requires_grad=True)
    a, _ = Two.apply(x)
    a.sum().backward()
    assert got["g2"].tolist() == [0.0, 0.0]


def test_arbitrary_ctx_attributes_and_hooks_on_grad_fn():
    class Scale(Function):
        @staticmethod
        def forward(ctx, x, k):
            ctx.k = k
            return x * k

        @staticmethod
        def backward(ctx, g):
            return g * ctx.k, None

    x = tp.ones(2, requires_grad=True)
    y = Scale.apply(x, 5.0)
    calls = []
    y.grad_fn.register_prehook(lambda go: calls.append("pre"))
    y.grad_fn.register_hook(lambda gi, go: calls.append("post"))
    y.sum().backward()
    assert x.grad.tolist() == [5.0, 5.0] and calls == ["pre", "post"]


def test_once_differentiable_blocks_double_backward():
    class NumpyExp(Function):
        @staticmethod
        def forward(ctx, x):
            y = tp.from_numpy(np.exp(x.detach().numpy()))
            ctx.save_for_backward(y)
            return y

        @staticmethod
        @once_differentiable
        def backward(ctx, g):
            (y,) = ctx.saved_tensors
            return g * y

    x = tp.randn(3, dtype=tp.float64, requires_grad=True)
    v = tp.ones(3, dtype=tp.float64, requires_grad=True)  # a gradient that is differentiated
    (g,) = tp.autograd.grad(NumpyExp.apply(x), x, grad_outputs=v, create_graph=True)
    np.testing.assert_allclose(g.detach().numpy(), np.exp(x.detach().numpy()))
    assert g.requires_grad
    with pytest.raises(RuntimeError, match="once_differentiable"):
        g.sum().backward()


def test_backward_twice_without_retain_graph_raises():
    x = tp.ones(2, dtype=tp.float64, requires_grad=True)
    out = Exp.apply(x).sum()
    out.backward()
    with pytest.raises(RuntimeError, match="retain_graph=True"):
        out.backward()


def test_graph_is_freed_when_outputs_die():
    x = tp.ones(2, dtype=tp.float64, requires_grad=True)
    out = Exp.apply(x)
    ref = weakref.ref(out.grad_fn)
    del out
    assert ref() is None  # no reference cycle: freed without waiting for gc


# ---- forward mode (beyond the seed: Function.jvp works) -------------------------------------


class ExpWithJvp(Exp):
    @staticmethod
    def forward(ctx, x):
        y = x.exp()
        ctx.save_for_backward(y)
        ctx.save_for_forward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return g * y

    @staticmethod
    def jvp(ctx, t):
        (y,) = ctx.saved_tensors
        return t * y


def test_function_jvp_in_forward_mode():
    x = tp.randn(4, dtype=tp.float64)
    v = tp.randn(4, dtype=tp.float64)
    with fwAD.dual_level():
        out = ExpWithJvp.apply(fwAD.make_dual(x, v))
        primal, tangent = fwAD.unpack_dual(out)
    np.testing.assert_allclose(primal.numpy(), np.exp(x.numpy()))
    np.testing.assert_allclose(tangent.numpy(), np.exp(x.numpy()) * v.numpy())


def test_function_without_jvp_raises_in_forward_mode():
    with fwAD.dual_level():
        x = fwAD.make_dual(tp.ones(2, dtype=tp.float64), tp.ones(2, dtype=tp.float64))
        with pytest.raises(NotImplementedError, match="jvp"):
            Exp.apply(x)
