"""register_autograd, implicit autograd, autocast (spec: Autograd, fake, vmap, autocast)."""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp
from tensorplay import library


def _mul_op(qualname, setup=True):
    op = library.custom_op(qualname(), lambda x, w: x * w)

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    def backward(ctx, g):
        x, w = ctx.saved_tensors
        return g * w, g * x

    op.register_autograd(backward, setup_context=setup_context if setup else None)
    return op


def test_gradients_flow_to_every_input(qualname):
    op = _mul_op(qualname)
    xv, wv = np.array([1.0, 2.0, 3.0]), np.array([-1.0, 0.5, 4.0])
    x, w = tp.tensor(xv, requires_grad=True), tp.tensor(wv, requires_grad=True)
    op(x, w).backward(tp.ones(3))
    np.testing.assert_allclose(x.grad.numpy(), wv)
    np.testing.assert_allclose(w.grad.numpy(), xv)


def test_only_inputs_that_require_grad_get_gradients(qualname):
    op = _mul_op(qualname)
    x, w = tp.tensor([1.0, 2.0], requires_grad=True), tp.tensor([3.0, 4.0])
    seen = {}

    def backward(ctx, g):
        seen["needs"] = ctx.needs_input_grad
        x, w = ctx.saved_tensors
        return g * w, None

    op.register_autograd(backward, setup_context=lambda ctx, i, o: ctx.save_for_backward(*i))
    op(x, w).sum().backward()
    assert seen["needs"] == (True, False) and x.grad.tolist() == [3.0, 4.0] and w.grad is None


def test_no_node_under_no_grad_or_without_grad_inputs(qualname):
    op = _mul_op(qualname)
    x = tp.ones(2, requires_grad=True)
    with tp.no_grad():
        y = op(x, x)
    assert y.grad_fn is None and not y.requires_grad
    z = op(tp.ones(2), tp.ones(2))
    assert z.grad_fn is None and not z.requires_grad


def test_kernel_runs_without_recording_its_inner_ops(qualname):
    inner = {}

    def body(x):
        y = x * 2
        inner["requires_grad"] = y.requires_grad
        return y

    op = library.custom_op(qualname(), body)
    op.register_autograd(lambda ctx, g: g * 2)
    op(tp.ones(1, requires_grad=True))
    assert inner["requires_grad"] is False


def test_backward_without_a_formula_raises_naming_the_op(qualname):
    # torch: the output requires grad; backward raises "... no autograd formula was
    # registered. Please use register_autograd to add one."
    name = qualname()
    op = library.custom_op(name, lambda x: (x * x).sum())
    x = tp.tensor([1.0, -3.0], requires_grad=True)
    y = op(x)
    assert y.requires_grad and y.grad_fn.name() == f"{name}Backward" and y.item() == 10.0
    with pytest.raises(RuntimeError, match="Autograd has not been implemented for operator") as e:
        y.backward()
    assert name in str(e.value) and f"{name}.register_autograd(" in str(e.value)
    assert x.grad is None


def test_without_a_formula_no_graph_is_built_when_nothing_requires_grad(qualname):
    op = library.custom_op(qualname(), lambda x: x * 2)
    x = tp.ones(2, requires_grad=True)
    with tp.no_grad():
        assert op(x).requires_grad is False
    assert op(tp.ones(2)).grad_fn is None and op(tp.ones(2)).tolist() == [2.0, 2.0]


@pytest.mark.parametrize("formula", [False, True], ids=["no_formula", "formula"])
def test_the_kernel_sees_inputs_that_do_not_require_grad(qualname, formula):
    seen = {}

    def body(x, w):
        seen["requires_grad"] = (x.requires_grad, w.requires_grad)
        return tp.from_numpy(x.numpy() * w.numpy())  # numpy() refuses tensors requiring grad

    op = library.custom_op(qualname(), body)
    if formula:
        op.register_autograd(
            lambda ctx, g: (g * ctx.saved_tensors[1], g * ctx.saved_tensors[0]),
            setup_context=lambda ctx, inputs, output: ctx.save_for_backward(*inputs),
        )
    x = tp.tensor([1.0, 2.0], requires_grad=True)
    w = tp.tensor([3.0, 4.0], requires_grad=True)
    y = op(x, w)
    assert seen["requires_grad"] == (False, False) and y.tolist() == [3.0, 8.0]
    assert y.requires_grad
    with tp.no_grad():  # under no_grad too: the kernel is below autograd
        assert op(x, w=w).tolist() == [3.0, 8.0] and seen["requires_grad"] == (False, False)
    if formula:
        y.sum().backward()
        assert x.grad.tolist() == [3.0, 4.0] and w.grad.tolist() == [1.0, 2.0]


def test_the_kernel_sees_views_sharing_memory_and_version(qualname):
    seen = {}

    def body(x, out):
        seen["shares"] = out.data_ptr()
        out.copy_(x)  # the write reaches the caller's tensor
        return x + 1

    op = library.custom_op(qualname(), body, mutates_args=("out",))
    op.register_autograd(lambda ctx, g: (g, None))
    x = tp.ones(2, requires_grad=True)
    out = tp.zeros(2)
    v = out._version
    op(x, out).sum().backward()
    assert seen["shares"] == out.data_ptr() and out.tolist() == [1.0, 1.0]
    assert out._version > v and x.grad.tolist() == [1.0, 1.0]


def test_keyword_arguments_on_the_autograd_path(qualname):
    received = {}

    def body(x, *, scale=1.0):
        received["scale"] = scale
        return x * scale

    op = library.custom_op(qualname(), body)

    def setup_context(ctx, inputs, output):
        ctx.scale = inputs[1]

    op.register_autograd(lambda ctx, g: (g * ctx.scale, None), setup_context=setup_context)
    x = tp.ones(2, requires_grad=True)
    op(x, scale=3.0).sum().backward()
    assert received == {"scale": 3.0} and x.grad.tolist() == [3.0, 3.0]


def test_setup_context_sees_all_inputs_with_defaults(qualname):
    seen = {}

    def body(x, alpha=2.0):
        return x * alpha

    op = library.custom_op(qualname(), body)

    def setup_context(ctx, inputs, output):
        seen["inputs"] = inputs
        seen["output"] = output

    op.register_autograd(lambda ctx, g: (g * 2.0, None), setup_context=setup_context)
    x = tp.ones(2, requires_grad=True)
    y = op(x)
    assert seen["inputs"][0] is x and seen["inputs"][1] == 2.0 and seen["output"] is y


def test_saving_the_output_works(qualname):
    op = library.custom_op(qualname(), lambda x: x.exp())

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output)

    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return g * y

    op.register_autograd(backward, setup_context=setup_context)
    x = tp.tensor([0.0, 1.0], requires_grad=True)
    op(x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.exp([0.0, 1.0]), rtol=1e-6)


def test_wrong_number_of_gradients_names_op_and_inputs(qualname):
    name = qualname()
    op = library.custom_op(name, lambda x, w: x * w)
    op.register_autograd(lambda ctx, g: (g,))
    x = tp.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match=rf"{name}.*returned 1 gradient.*2 input.*\(x, w\)"):
        op(x, x).sum().backward()


def test_gradient_of_the_wrong_shape_is_an_error(qualname):
    name = qualname()
    op = library.custom_op(name, lambda x: x * 2)
    op.register_autograd(lambda ctx, g: tp.ones(5))
    with pytest.raises(RuntimeError, match=rf"{name}: backward returned gradient 0 of shape \[5\]"):
        op(tp.ones(2, requires_grad=True)).sum().backward()


def test_non_tensor_gradient_is_a_type_error(qualname):
    op = library.custom_op(qualname(), lambda x: x * 2)
    op.register_autograd(lambda ctx, g: 3)
    with pytest.raises(TypeError, match="backward returned a int"):
        op(tp.ones(2, requires_grad=True)).sum().backward()


def test_multiple_outputs_and_unused_output(qualname):
    op = library.custom_op(qualname(), lambda x: (x * 2, x * 3))

    def backward(ctx, g1, g2):
        return g1 * 2 + g2 * 3

    op.register_autograd(backward)
    x = tp.ones(2, requires_grad=True)
    a, b = op(x)
    assert a.grad_fn is b.grad_fn
    a.sum().backward()  # b gets no gradient: it is materialised as zeros
    assert x.grad.tolist() == [2.0, 2.0]


def test_list_of_tensors_input(qualname):
    op = library.custom_op(qualname(), lambda xs: xs[0] * xs[1])

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs[0])

    def backward(ctx, g):
        a, b = ctx.saved_tensors
        return ([g * b, g * a],)

    op.register_autograd(backward, setup_context=setup_context)
    a = tp.tensor([2.0], requires_grad=True)
    b = tp.tensor([5.0], requires_grad=True)
    op([a, b]).sum().backward()
    assert a.grad.tolist() == [5.0] and b.grad.tolist() == [2.0]


def test_saved_input_modified_in_place_is_detected(qualname):
    op = _mul_op(qualname)
    x = tp.ones(2, requires_grad=True)
    w = tp.ones(2)
    y = op(x, w)
    w.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_mutated_argument_requiring_grad_is_refused(qualname):
    name = qualname()

    def body(x, out):
        out.copy_(x)
        return x * 2

    op = library.custom_op(name, body, mutates_args=("out",))
    op.register_autograd(lambda ctx, g: (g * 2, None))
    out = tp.zeros(2, requires_grad=True)
    with pytest.raises(RuntimeError, match=rf"{name}: argument 'out' is mutated"):
        op(tp.ones(2), out)


def test_mark_non_differentiable_output(qualname):
    op = library.custom_op(qualname(), lambda x: (x * 2, x.argmax()))

    def setup_context(ctx, inputs, output):
        ctx.mark_non_differentiable(output[1])

    op.register_autograd(lambda ctx, g, _: g * 2, setup_context=setup_context)
    y, idx = op(tp.tensor([1.0, 3.0], requires_grad=True))
    assert y.requires_grad and not idx.requires_grad


def test_higher_order_through_a_differentiable_backward(qualname):
    op = library.custom_op(qualname(), lambda x: x * x * x)

    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * 3 * x * x

    op.register_autograd(backward, setup_context=lambda ctx, i, o: ctx.save_for_backward(i[0]))
    x = tp.tensor([2.0], requires_grad=True)
    (g,) = tp.autograd.grad(op(x).sum(), x, create_graph=True)
    (gg,) = tp.autograd.grad(g.sum(), x)
    assert g.tolist() == [12.0] and gg.tolist() == [12.0]


def test_gradcheck_on_a_registered_formula(qualname):
    op = _mul_op(qualname)
    x = tp.randn(4, dtype=tp.float64, requires_grad=True)
    w = tp.randn(4, dtype=tp.float64, requires_grad=True)
    assert tp.autograd.gradcheck(op, (x, w))


def test_reregistering_autograd_replaces_the_formula(qualname):
    op = library.custom_op(qualname(), lambda x: x * 2)
    op.register_autograd(lambda ctx, g: g * 100)
    op.register_autograd(lambda ctx, g: g * 2)
    x = tp.ones(1, requires_grad=True)
    op(x).sum().backward()
    assert x.grad.tolist() == [2.0]


def test_register_autograd_validates_callables(qualname):
    op = library.custom_op(qualname(), lambda x: x * 2)
    with pytest.raises(TypeError, match="register_autograd: expected a callable"):
        op.register_autograd("nope")
    with pytest.raises(TypeError, match="setup_context"):
        op.register_autograd(lambda ctx, g: g, setup_context=3)


# ---- autocast ---------------------------------------------------------------------------------


def test_register_autocast_casts_floating_inputs(qualname):
    seen = []

    def body(x, y, n):
        seen.append((x.dtype, y.dtype, tp.is_autocast_enabled("cpu")))
        return x + y.to(x.dtype)

    op = library.custom_op(qualname(), body)
    library.register_autocast(op, "cpu", tp.float16)
    x, i = tp.ones(2), tp.ones(2, dtype=tp.int64)
    assert op(x, i, 1).dtype == tp.float32  # autocast off: unchanged
    with tp.autocast("cpu"):
        out = op(x, i, 1)
    assert out.dtype == tp.float16
    assert seen == [(tp.float32, tp.int64, False), (tp.float16, tp.int64, False)]


def test_register_autocast_keeps_gradients_flowing(qualname):
    op = library.custom_op(qualname(), lambda x: x * 2)
    op.register_autograd(lambda ctx, g: g * 2)
    op.register_autocast("cpu", tp.bfloat16)
    x = tp.ones(2, requires_grad=True)
    with tp.autocast("cpu"):
        y = op(x)
    assert y.dtype == tp.bfloat16
    y.float().sum().backward()
    assert x.grad.dtype == tp.float32 and x.grad.tolist() == [2.0, 2.0]


def test_register_autocast_validates_arguments(qualname):
    op = library.custom_op(qualname(), lambda x: x)
    with pytest.raises(TypeError, match="floating dtype"):
        op.register_autocast("cpu", tp.int32)
    with pytest.raises(TypeError, match="floating dtype"):
        op.register_autocast("cpu", "float16")
    with pytest.raises(ValueError, match="device_type"):
        op.register_autocast("default", tp.float16)


def test_forward_mode_goes_through_the_body(qualname):
    fwad = tp.autograd.forward_ad
    op = library.custom_op(qualname(), lambda x: x * x)
    op.register_autograd(lambda ctx, g: g)  # reverse mode only: forward mode uses the body
    with fwad.dual_level():
        dual = fwad.make_dual(tp.tensor([1.0, 3.0]), tp.tensor([1.0, 0.5]))
        assert fwad.unpack_dual(op(dual)).tangent.tolist() == [2.0, 3.0]


def test_once_differentiable_backward(qualname):
    op = library.custom_op(qualname(), lambda x: x * 2)

    @tp.autograd.once_differentiable
    def backward(ctx, g):
        return tp.tensor(g.detach().numpy() * 2)  # leaves TensorPlay: not differentiable

    op.register_autograd(backward)
    x = tp.ones(2, requires_grad=True)
    op(x).sum().backward()
    assert x.grad.tolist() == [2.0, 2.0]


def test_set_materialize_grads_false_passes_none(qualname):
    seen = []
    op = library.custom_op(qualname(), lambda x: (x * 2, x * 3))

    def backward(ctx, g1, g2):
        seen.append(g2)
        return g1 * 2

    op.register_autograd(
        backward, setup_context=lambda ctx, inputs, output: ctx.set_materialize_grads(False)
    )
    x = tp.ones(2, requires_grad=True)
    op(x)[0].sum().backward()
    assert seen == [None] and x.grad.tolist() == [2.0, 2.0]


def test_list_output_gets_one_gradient_per_element(qualname):
    op = library.custom_op(qualname(), lambda x: [x * 2, x * 3])
    op.register_autograd(lambda ctx, g1, g2: g1 * 2 + g2 * 3)
    x = tp.ones(2, requires_grad=True)
    outs = op(x)
    assert isinstance(outs, list) and all(o.grad_fn is outs[0].grad_fn for o in outs)
    (outs[0] + outs[1]).sum().backward()
    assert x.grad.tolist() == [5.0, 5.0]
