"""The reverse-mode engine: one behaviour per test, values asserted (torch where it helps)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import tensorplay as tp
from tensorplay.autograd.graph import saved_tensors_hooks


def _t(a, requires_grad=True):
    return tp.tensor(np.asarray(a, dtype=np.float64), requires_grad=requires_grad)


def _np(t):
    return t.detach().numpy()


X = np.array([0.5, -1.25, 2.0])


# ---- accumulation, retain_graph, higher order ----------------------------------------------


def test_gradients_accumulate_over_two_backward_calls():
    x = _t(X)
    (x * x).sum().backward()
    (x * 3).sum().backward()
    np.testing.assert_allclose(_np(x.grad), 2 * X + 3)


def test_second_backward_without_retain_graph_fails():
    x = _t(X)
    y = (x * x).sum()
    y.backward()
    with pytest.raises(RuntimeError, match=r"retain_graph=True"):
        y.backward()


def test_retain_graph_allows_a_second_backward():
    x = _t(X)
    y = (x * x).sum()
    y.backward(retain_graph=True)
    y.backward()
    np.testing.assert_allclose(_np(x.grad), 4 * X)


def test_create_graph_third_order():
    x = _t(X)
    y = (x**3).sum()
    (g1,) = tp.autograd.grad(y, x, create_graph=True)
    np.testing.assert_allclose(_np(g1), 3 * X**2)
    (g2,) = tp.autograd.grad(g1.sum(), x, create_graph=True)
    np.testing.assert_allclose(_np(g2), 6 * X)
    (g3,) = tp.autograd.grad(g2.sum(), x)
    np.testing.assert_allclose(_np(g3), np.full(3, 6.0))


def test_backward_create_graph_then_backward_of_grad():
    x = _t(X)
    (x * x * x).sum().backward(create_graph=True)
    g = x.grad
    assert g.requires_grad
    x.grad = None
    g.sum().backward()
    np.testing.assert_allclose(_np(x.grad), 6 * X)


# ---- autograd.grad ------------------------------------------------------------------------------


def test_grad_does_not_touch_dot_grad():
    x = _t(X)
    (g,) = tp.autograd.grad((x * x).sum(), x)
    np.testing.assert_allclose(_np(g), 2 * X)
    assert x.grad is None and not g.requires_grad


def test_grad_unused_input_raises_without_allow_unused():
    x, z = _t(X), _t(X)
    with pytest.raises(RuntimeError, match="allow_unused=True"):
        tp.autograd.grad((x * 2).sum(), [x, z])


def test_grad_allow_unused_gives_none():
    x, z = _t(X), _t(X)
    gx, gz = tp.autograd.grad((x * 2).sum(), [x, z], allow_unused=True)
    np.testing.assert_allclose(_np(gx), np.full(3, 2.0))
    assert gz is None


def test_grad_with_grad_outputs():
    x = _t(X)
    v = _t([1.0, 2.0, 3.0], requires_grad=False)
    (g,) = tp.autograd.grad(x * x, x, grad_outputs=v)
    np.testing.assert_allclose(_np(g), 2 * X * np.array([1.0, 2.0, 3.0]))


def test_backward_non_scalar_without_gradient_fails():
    x = _t(X)
    with pytest.raises(
        RuntimeError, match="grad can be implicitly created only for scalar outputs"
    ):
        (x * 2).backward()


def test_backward_non_scalar_with_gradient():
    x = _t(X)
    (x * 2).backward(tp.ones(3, dtype=tp.float64))
    np.testing.assert_allclose(_np(x.grad), np.full(3, 2.0))


# ---- hooks --------------------------------------------------------------------------------------


def test_tensor_hook_on_leaf_modifies_grad_and_handle_removes_it():
    x = _t(X)
    handle = x.register_hook(lambda g: g * 10)
    (x * 2).sum().backward()
    np.testing.assert_allclose(_np(x.grad), np.full(3, 20.0))
    handle.remove()
    x.grad = None
    (x * 2).sum().backward()
    np.testing.assert_allclose(_np(x.grad), np.full(3, 2.0))


def test_tensor_hook_on_intermediate_sees_and_changes_grad():
    x = _t(X)
    y = x * 2
    seen = []

    def hook(g):
        seen.append(_np(g).copy())
        return g * 0.5

    y.register_hook(hook)
    (y * y).sum().backward()
    np.testing.assert_allclose(seen[0], 2 * 2 * X)  # d(y^2)/dy = 2y = 4x
    np.testing.assert_allclose(_np(x.grad), 0.5 * 4 * X * 2)


def test_node_hook_and_prehook():
    x = _t(X)
    y = x * 3
    calls = []
    fn = y.grad_fn

    def prehook(grad_outputs):
        calls.append("pre")
        return (grad_outputs[0] * 2,)

    def hook(grad_inputs, grad_outputs):
        calls.append("post")
        np.testing.assert_allclose(_np(grad_outputs[0]), np.full(3, 2.0))
        return (grad_inputs[0] + 1, grad_inputs[1])

    h1 = fn.register_prehook(prehook)
    h2 = fn.register_hook(hook)
    y.sum().backward()
    assert calls == ["pre", "post"]
    np.testing.assert_allclose(_np(x.grad), np.full(3, 7.0))  # 3 * (1*2) + 1
    h1.remove()
    h2.remove()
    x.grad = None
    (x * 3).sum().backward()
    np.testing.assert_allclose(_np(x.grad), np.full(3, 3.0))


def test_retain_grad_on_intermediate():
    x = _t(X)
    y = x * 2
    y.retain_grad()
    assert y.retains_grad
    (y * y).sum().backward()
    np.testing.assert_allclose(_np(y.grad), 4 * X)
    z = x * 2
    (z * z).sum().backward()
    assert z.grad is None  # not retained


def test_grad_fn_name_and_next_functions():
    x, w = _t(X), _t(X)
    y = x * w
    assert y.grad_fn.name() == "MulBackward0"
    (a, na), (b, nb) = y.grad_fn.next_functions
    assert a.name() == b.name() == "AccumulateGrad" and na == nb == 0
    assert a.variable is x and b.variable is w
    z = x * 2
    assert z.grad_fn.next_functions[1] == (None, 0)
    s = (y + z).sum()
    assert s.grad_fn.name() == "SumBackward0"
    assert s.grad_fn.next_functions[0][0].name() == "AddBackward0"
    assert x.is_leaf and not y.is_leaf and x.grad_fn is None


# ---- grad modes ---------------------------------------------------------------------------------


def test_no_grad_results_do_not_require_grad():
    x = _t(X)
    with tp.no_grad():
        assert not tp.is_grad_enabled()
        y = x * 2
    assert tp.is_grad_enabled()
    assert not y.requires_grad and y.grad_fn is None


def test_enable_grad_inside_no_grad():
    x = _t(X)
    with tp.no_grad():
        with tp.enable_grad():
            y = x * 2
        z = x * 2
    assert y.requires_grad and not z.requires_grad


def test_no_grad_as_decorator():
    @tp.no_grad()
    def f(t):
        return t * 2

    assert not f(_t(X)).requires_grad
    assert tp.is_grad_enabled()


def test_set_grad_enabled_call_context_and_decorator():
    x = _t(X)
    try:
        tp.set_grad_enabled(False)  # as a call: takes effect at once
        assert not tp.is_grad_enabled()
        assert not (x * 2).requires_grad
    finally:
        tp.set_grad_enabled(True)
    assert tp.is_grad_enabled()
    with tp.set_grad_enabled(False):
        assert not (x * 2).requires_grad
    assert tp.is_grad_enabled()

    @tp.set_grad_enabled(False)
    def f(t):
        return t * 2

    assert tp.is_grad_enabled()  # decorating does not switch the mode
    assert not f(x).requires_grad
    assert tp.is_grad_enabled()


def test_inference_mode():
    x = _t(X)
    with tp.inference_mode():
        assert not tp.is_grad_enabled()
        assert tp.is_inference_mode_enabled()
        y = x * 2
    assert not y.requires_grad
    assert tp.is_grad_enabled() and not tp.is_inference_mode_enabled()

    @tp.inference_mode()
    def f(t):
        return t * 2

    assert not f(x).requires_grad


def test_grad_mode_is_per_thread():
    seen = {}

    def worker():
        seen["enabled"] = tp.is_grad_enabled()
        x = _t(X)
        seen["requires_grad"] = (x * 2).requires_grad

    with tp.no_grad():
        th = threading.Thread(target=worker)
        th.start()
        th.join()
        assert not tp.is_grad_enabled()
    assert seen == {"enabled": True, "requires_grad": True}


def test_grad_mode_restored_after_exception():
    with pytest.raises(ValueError), tp.no_grad():
        raise ValueError
    assert tp.is_grad_enabled()


# ---- views and in-place ---------------------------------------------------------------------


def test_inplace_on_non_leaf():
    x = _t(X)
    y = x * 2
    y.mul_(3)
    assert y.grad_fn.name() == "MulBackward0"
    y.sum().backward()
    np.testing.assert_allclose(_np(x.grad), np.full(3, 6.0))


def test_inplace_on_non_leaf_then_nonlinear():
    x = _t(X)
    y = x + 0
    y.exp_()
    (y * y).sum().backward()
    np.testing.assert_allclose(_np(x.grad), 2 * np.exp(2 * X))


def test_inplace_through_view_of_non_leaf_copyslices():
    torch = pytest.importorskip("torch")
    xn = np.arange(1.0, 5.0)
    x = _t(xn)
    b = x * 1.0
    b.narrow(0, 1, 2).mul_(3)
    assert b.grad_fn.name() == "CopySlices"
    np.testing.assert_allclose(_np(b), xn * [1, 3, 3, 1])
    (b * b).sum().backward()
    tx = torch.tensor(xn, requires_grad=True)
    tb = tx * 1.0
    tb.narrow(0, 1, 2).mul_(3)
    (tb * tb).sum().backward()
    np.testing.assert_allclose(_np(x.grad), tx.grad.numpy())


def test_view_grads_flow_back():
    x = _t(np.arange(6.0))
    y = x.reshape(2, 3).t() * 2
    (y * y).sum().backward()
    np.testing.assert_allclose(_np(x.grad), 8 * np.arange(6.0))


def test_inplace_on_leaf_requiring_grad_fails():
    x = _t(X)
    with pytest.raises(
        RuntimeError, match="a leaf Variable that requires grad is being used in an in-place"
    ):
        x.mul_(2)


def test_inplace_on_leaf_allowed_under_no_grad():
    x = _t(X)
    with tp.no_grad():
        x.mul_(2)
    np.testing.assert_allclose(_np(x), 2 * X)
    assert x.is_leaf and x.requires_grad


def test_saved_tensor_modified_inplace_fails():
    x = _t(X)
    y = x * 1
    z = y.sin()  # saves y
    y.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.sum().backward()


def test_out_with_requires_grad_inputs_fails():
    x = _t(X)
    out = tp.empty(3, dtype=tp.float64)
    with pytest.raises(RuntimeError, match="out="):
        tp.add(x, x, out=out)
    with tp.no_grad():
        tp.add(x, x, out=out)  # fine without recording
    np.testing.assert_allclose(_np(out), 2 * X)


# ---- saved tensor hooks ---------------------------------------------------------------------


def test_saved_tensors_hooks_pack_and_unpack_are_called():
    packed, unpacked = [], []

    def pack(t):
        packed.append(tuple(t.shape))
        return ("box", t)

    def unpack(obj):
        unpacked.append(obj[0])
        return obj[1]

    x = _t(X)
    with saved_tensors_hooks(pack, unpack):
        y = x.sin()
    assert packed
    y.sum().backward()
    assert unpacked and set(unpacked) == {"box"}
    np.testing.assert_allclose(_np(x.grad), np.cos(X))


def test_saved_tensors_hooks_unpack_result_is_used():
    x = _t(X)
    with saved_tensors_hooks(lambda t: t, lambda t: tp.zeros_like(t)):
        y = x.sin()
    y.sum().backward()
    np.testing.assert_allclose(_np(x.grad), np.ones(3))  # cos(0)


def test_saved_tensors_hooks_only_inside_the_context():
    calls = []
    with saved_tensors_hooks(lambda t: calls.append(1) or t, lambda t: t):
        pass
    _t(X).sin().sum().backward()
    assert calls == []


# ---- against torch --------------------------------------------------------------------------


def test_two_layer_mlp_grads_match_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(7)
    xn = rng.standard_normal((4, 3))
    w1n, b1n = rng.standard_normal((3, 5)), rng.standard_normal(5)
    w2n, b2n = rng.standard_normal((5, 2)), rng.standard_normal(2)

    def loss(lib_x, w1, b1, w2, b2):
        h = (lib_x @ w1 + b1).tanh()
        out = h @ w2 + b2
        return (out * out).sum() / 4

    ours = [_t(a) for a in (w1n, b1n, w2n, b2n)]
    theirs = [torch.tensor(a, requires_grad=True) for a in (w1n, b1n, w2n, b2n)]
    lo = loss(_t(xn, requires_grad=False), *ours)
    lt = loss(torch.tensor(xn), *theirs)
    lo.backward()
    lt.backward()
    np.testing.assert_allclose(float(lo), float(lt), rtol=1e-12)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(_np(a.grad), b.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_shared_subexpression_and_broadcast_match_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(8)
    an, bn = rng.standard_normal((2, 3)), rng.standard_normal(3)

    def f(a, b):
        c = a * b  # b broadcast over rows
        return ((c.exp() + c) * a).sum() + (b * b).sum()

    a, b = _t(an), _t(bn)
    ta, tb = torch.tensor(an, requires_grad=True), torch.tensor(bn, requires_grad=True)
    f(a, b).backward()
    f(ta, tb).backward()
    np.testing.assert_allclose(_np(a.grad), ta.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(_np(b.grad), tb.grad.numpy(), rtol=1e-12)


def test_backward_inputs_argument():
    x, w = _t(X), _t(X)
    (x * w).sum().backward(inputs=[w])
    np.testing.assert_allclose(_np(w.grad), X)
    assert x.grad is None
