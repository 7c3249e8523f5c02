"""The short paths a training step takes: a leaf keeps a gradient nobody else holds instead
of a copy of it (torch's AccumulateGrad does the same), ``p -= lr * p.grad`` under
``no_grad`` on a leaf that requires grad runs in place without the general path, and
``2 * x`` / ``2 + x`` call the op with the tensor first, as torch does. Each is checked for
the values and for what must not change: no aliasing between gradients, version counters,
autograd's refusal of in-place writes on leaves while grad mode is on."""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp


def test_leaf_gradients_never_alias():
    a = tp.tensor([1.0, 2.0], requires_grad=True)
    b = tp.tensor([3.0, 4.0], requires_grad=True)
    (a + b).sum().backward()  # add's backward hands the same gradient to both leaves
    assert a.grad.tolist() == [1.0, 1.0] and b.grad.tolist() == [1.0, 1.0]
    a.grad.add_(5.0)
    assert b.grad.tolist() == [1.0, 1.0]


def test_a_gradient_a_hook_kept_is_copied():
    x = tp.tensor([1.0, 2.0, 3.0], requires_grad=True)
    seen = []
    x.register_hook(lambda g: seen.append(g))
    (x * 2).sum().backward()
    assert x.grad.tolist() == [2.0, 2.0, 2.0]
    x.grad.mul_(10)
    assert seen[0].tolist() == [2.0, 2.0, 2.0]


def test_a_user_gradient_is_copied():
    x = tp.tensor([1.0, 2.0], requires_grad=True)
    g = tp.tensor([0.5, 0.25])
    x.backward(g)  # the leaf is the root: its gradient is the caller's tensor
    assert x.grad.tolist() == [0.5, 0.25]
    x.grad.add_(1.0)
    assert g.tolist() == [0.5, 0.25]


def test_kept_gradient_then_accumulates():
    w = tp.tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
    x = tp.tensor(np.ones((4, 2)))
    for k in range(3):
        (x @ w).sum().backward()
        assert np.array_equal(w.grad.numpy(), np.full((2, 3), 4.0 * (k + 1)))
    assert w.grad.is_contiguous() and w.grad.grad_fn is None and not w.grad.requires_grad


def test_create_graph_keeps_the_history():
    x = tp.tensor([1.0, 2.0], requires_grad=True)
    (x * x).sum().backward(create_graph=True)
    assert x.grad.grad_fn is not None
    assert x.grad.tolist() == [2.0, 4.0]
    x.grad.sum().backward()
    assert x.grad.tolist() == [4.0, 6.0]  # 2x plus d(sum 2x)/dx = 2 accumulated


@pytest.mark.parametrize("op", ["sub_", "add_", "mul_", "div_"])
def test_in_place_update_of_a_leaf_under_no_grad(op):
    p = tp.tensor([1.0, 2.0, 4.0], requires_grad=True)
    g = tp.tensor([0.5, 0.5, 0.5])
    version = p._version
    with tp.no_grad():
        r = getattr(p, op)(g)
        r2 = getattr(p, op)(2.0)
    assert r is p and r2 is p
    want = np.array([1.0, 2.0, 4.0])
    for other in (0.5, 2.0):
        want = {"sub_": want - other, "add_": want + other, "mul_": want * other}.get(
            op, want / other
        )
    np.testing.assert_allclose(p.detach().numpy(), want)
    assert p.requires_grad and p.grad_fn is None and p.is_leaf
    assert p._version == version + 2
    with pytest.raises(RuntimeError, match="leaf"):
        p.sub_(g)  # grad mode on: torch refuses an in-place write on such a leaf


def test_sgd_step_matches_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    w0, x0 = rng.standard_normal((5, 3)), rng.standard_normal((8, 5))
    results = []
    for lib in (tp, torch):
        w = lib.tensor(w0, requires_grad=True)
        x = lib.tensor(x0)
        for _ in range(3):
            loss = (x @ w).relu().mean()
            loss.backward()
            with lib.no_grad():
                w -= 0.1 * w.grad
                w.grad = None
        results.append(w.detach().numpy())
    np.testing.assert_allclose(results[0], results[1], rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize(
    "expr",
    [
        lambda x: 2 * x,
        lambda x: 2.5 * x,
        lambda x: 2 + x,
        lambda x: 0.5 + x,
        lambda x: True * x,
        lambda x: 3 & x,
        lambda x: 3 | x,
        lambda x: 3 ^ x,
    ],
)
@pytest.mark.parametrize("dtype", ["float32", "int64", "int32", "bool"])
def test_reflected_commutative_operators_match_torch(expr, dtype):
    torch = pytest.importorskip("torch")
    a = np.array([0, 1, 2, 5], dtype=dtype)
    try:
        want = expr(torch.tensor(a))
    except (RuntimeError, TypeError) as e:
        with pytest.raises(type(e)):
            expr(tp.tensor(a))
        return
    got = expr(tp.tensor(a))
    assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_reflected_operator_reaches_a_mode_tensor_first():
    from tensorplay.overrides import TensorPlayFunctionMode

    calls = []

    class Record(TensorPlayFunctionMode):
        def __tensorplay_function__(self, func, types, args=(), kwargs=None):
            calls.append((getattr(func, "__name__", str(func)), args))
            return func(*args, **(kwargs or {}))

    x = tp.tensor([1.0, 2.0])
    with Record():
        y = 3.0 * x
    assert y.tolist() == [3.0, 6.0]
    assert any(isinstance(args[0], tp.Tensor) and args[1] == 3.0 for _, args in calls)
