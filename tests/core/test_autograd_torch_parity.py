"""Gradients that once diverged silently from PyTorch: each case runs in both and compares.

Views written in place (through their base, another view or themselves), masked gradients
that meet inf, tie rules of the extreme reductions, var/std past their degrees of freedom,
norm's p cases, and forward-mode tangents of the overwriting writes.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import tensorplay as tp

torch = pytest.importorskip("torch")

INF, NAN = math.inf, math.nan


def both(fn):
    """``fn(L)`` with L = tensorplay and L = torch, as plain Python values."""
    return fn(tp), fn(torch)


def grad_of(L, f, values, dtype="float64", grad=1.0):
    x = L.tensor(values, dtype=getattr(L, dtype), requires_grad=True)
    y = f(L, x)
    y.backward(L.full(tuple(y.shape), grad, dtype=y.dtype))
    return None if x.grad is None else x.grad.tolist()


def assert_same(a, b):
    assert (a is None) == (b is None), (a, b)
    if a is not None:
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


# ---- views written in place -------------------------------------------------------------------


def test_view_made_before_its_base_is_written_reads_the_new_value():
    def f(L):
        x = L.ones(3, requires_grad=True)
        b = x * 2
        v = b[:2]
        b.mul_(3)
        v.sum().backward()
        return x.grad.tolist()

    tp_grad, torch_grad = both(f)
    assert tp_grad == torch_grad == [6.0, 6.0, 0.0]


def test_view_written_through_another_view_reads_the_new_value():
    def f(L):
        x = L.ones(2, 3, requires_grad=True)
        b = (x * 2).t()
        b[0].mul_(2)
        (b * L.arange(6.0).reshape(3, 2)).sum().backward()
        return x.grad.tolist()

    tp_grad, torch_grad = both(f)
    assert tp_grad == torch_grad == [[0.0, 4.0, 8.0], [4.0, 6.0, 10.0]]


def test_view_gets_an_as_strided_history_after_the_write():
    x = tp.ones(3, requires_grad=True)
    b = x * 2
    v = b[:2]
    v.mul_(2)
    assert v.grad_fn.name() == "AsStridedBackward0"  # as torch names it
    assert b.grad_fn.name() == "CopySlices"


def test_stale_view_has_second_derivatives():
    def f(L):
        x = L.tensor([1.0, 2.0, 3.0], dtype=L.float64, requires_grad=True)
        b = x * x
        v = b[:2]
        b.mul_(x)
        (g,) = L.autograd.grad(v.sum(), x, create_graph=True)
        g.sum().backward()
        return g.tolist(), x.grad.tolist()

    tp_result, torch_result = both(f)
    assert tp_result == torch_result == ([3.0, 12.0, 0.0], [6.0, 12.0, 0.0])


def test_retain_grad_of_a_view_moves_to_its_new_value_on_a_write():
    def f(L):
        x = L.ones(3, requires_grad=True)
        b = x * 2
        v = b[:2]
        v.retain_grad()
        v.mul_(2)
        b.sum().backward()
        return v.grad, x.grad.tolist()

    (tp_v, tp_x), (torch_v, torch_x) = both(f)
    assert tp_v is None and torch_v is None  # the new value's node is not on b's path
    assert tp_x == torch_x == [4.0, 4.0, 2.0]


def test_hook_on_a_view_stays_with_its_old_history():
    def f(L):
        x = L.ones(3, requires_grad=True)
        b = x * 2
        v = b[:2]
        seen = []
        v.register_hook(seen.append)
        b.mul_(3)
        v.sum().backward()
        return len(seen), x.grad.tolist()

    tp_result, torch_result = both(f)
    assert tp_result == torch_result == (0, [6.0, 6.0, 0.0])


def test_in_place_through_a_view_of_a_non_contiguous_base():
    # the base itself is transposed (from numpy): CopySlices works on any geometry
    def f(L):
        base = L.from_numpy(np.zeros((3, 2)).T)  # shape (2, 3), strides (1, 2)
        src = L.tensor([1.0, 2.0], dtype=L.float64, requires_grad=True)
        base[:, 1].copy_(src * 3)
        (base * L.arange(6.0, dtype=L.float64).reshape(2, 3)).sum().backward()
        return src.grad.tolist(), base.stride()

    (tp_grad, tp_stride), (torch_grad, torch_stride) = both(f)
    assert tuple(tp_stride) == tuple(torch_stride) == (1, 2)
    assert tp_grad == torch_grad == [3.0, 12.0]


def test_in_place_on_a_stepped_view_of_a_transposed_view():
    def f(L):
        x = L.arange(12.0, dtype=L.float64).reshape(3, 4).requires_grad_()
        b = (x * 1).t()
        b[::2, 1:].mul_(b[::2, 1:].detach() + 1)
        (b * b).sum().backward()
        return x.grad.tolist()

    tp_grad, torch_grad = both(f)
    np.testing.assert_allclose(tp_grad, torch_grad, rtol=1e-12)


def test_in_place_on_a_view_keeps_an_inf_gradient():
    def f(L):
        x = L.tensor([INF, 1.0], requires_grad=True)
        y = x.clone()
        y[0].mul_(3)
        (y * y).sum().backward()
        return x.grad.tolist()

    tp_grad, torch_grad = both(f)
    assert tp_grad == torch_grad == [INF, 2.0]


# ---- masks select, they do not multiply -------------------------------------------------------


@pytest.mark.parametrize(
    "name, f",
    [
        ("relu", lambda L, x: x.relu()),
        ("clamp", lambda L, x: x.clamp(0, 2)),
        ("clamp_min", lambda L, x: x.clamp(min=1)),
        ("maximum", lambda L, x: L.maximum(x, L.tensor([0.0, 1.0, 2.0], dtype=x.dtype))),
        ("minimum", lambda L, x: L.minimum(x, L.tensor(1.0, dtype=x.dtype))),
        ("amax", lambda L, x: x.amax()),
    ],
)
@pytest.mark.parametrize("values", [[1.0, -2.0, 0.0], [INF, 1.0, 2.0], [NAN, 1.0, 2.0]])
@pytest.mark.parametrize("grad", [1.0, INF])
def test_masked_gradient_matches_torch(name, f, values, grad):
    assert_same(grad_of(tp, f, values, grad=grad), grad_of(torch, f, values, grad=grad))


def test_relu_passes_the_gradient_of_nan():
    assert grad_of(tp, lambda L, x: x.relu(), [NAN, -1.0]) == [1.0, 0.0]


def test_maximum_splits_ties_and_passes_nan():
    def f(L):
        a = L.tensor([1.0, 2.0, NAN, 3.0], dtype=L.float64, requires_grad=True)
        b = L.tensor([1.0, 3.0, 1.0, 0.0], dtype=L.float64, requires_grad=True)
        L.maximum(a, b).backward(L.tensor([1.0, 2.0, 3.0, 4.0], dtype=L.float64))
        return a.grad.tolist(), b.grad.tolist()

    tp_grads, torch_grads = both(f)
    assert tp_grads == torch_grads == ([0.5, 0.0, 3.0, 4.0], [0.5, 2.0, 3.0, 0.0])


# ---- extreme reductions: ties, in the gradient's dtype ----------------------------------------


def test_amax_tie_share_keeps_float64():
    f = lambda L, x: x.expand(3, 3).amax() * 0.7  # noqa: E731
    tp_grad, torch_grad = grad_of(tp, f, [[1.0, 3.0, 2.0]]), grad_of(torch, f, [[1.0, 3.0, 2.0]])
    assert tp_grad == torch_grad == [[0.0, 0.7, 0.0]]


@pytest.mark.parametrize("name", ["amax", "amin"])
@pytest.mark.parametrize("dim", [None, 1])
def test_extreme_ties_share_evenly(name, dim):
    def f(L, x):
        return getattr(x, name)() if dim is None else getattr(x, name)(dim=dim)

    values = [[0.7, 0.7, 0.1], [5.0, 5.0, 5.0]]
    tp_grad, torch_grad = grad_of(tp, f, values), grad_of(torch, f, values)
    assert tp_grad == torch_grad
    if name == "amax" or dim is not None:  # three tied 5s in row 1
        assert tp_grad[1] == [1 / 3] * 3


def test_max_along_a_dim_gives_the_gradient_to_the_selected_index():
    f = lambda L, x: x.max(dim=1)[0]  # noqa: E731
    values = [[0.7, 0.7, 0.1], [5.0, 5.0, 5.0]]
    assert grad_of(tp, f, values) == grad_of(torch, f, values) == [[1, 0, 0], [1, 0, 0]]


@pytest.mark.parametrize("p", [INF, -INF])
def test_norm_inf_shares_ties_in_float64(p):
    f = lambda L, x: x.norm(p=p, dim=1)  # noqa: E731
    values = [[0.7, -0.7, 0.1], [5.0, 5.0, -5.0]]
    tp_grad, torch_grad = grad_of(tp, f, values), grad_of(torch, f, values)
    np.testing.assert_array_equal(tp_grad, torch_grad)


# ---- var / std past their degrees of freedom --------------------------------------------------


@pytest.mark.parametrize("op", ["var", "std"])
@pytest.mark.parametrize("correction", [0, 1, 2, 3, 4])
@pytest.mark.parametrize("dim", [None, 1])
def test_var_std_gradient_for_any_correction(op, correction, dim):
    def f(L, x):
        return getattr(x, op)(correction=correction, **({} if dim is None else {"dim": dim}))

    values = [[1.0, 3.0, 3.0], [0.0, 0.0, 0.0]]
    with warnings.catch_warnings():  # torch warns of the missing degrees of freedom
        warnings.simplefilter("ignore")
        torch_grad = grad_of(torch, f, values)
        tp_grad = grad_of(tp, f, values)
    np.testing.assert_allclose(tp_grad, torch_grad, rtol=1e-14)


def test_var_with_no_degree_of_freedom_is_inf_of_either_sign():
    # torch: inf where x differs from the mean (whatever the side), nan where it equals it
    with pytest.warns(UserWarning):
        torch_grad = grad_of(torch, lambda L, x: x.var(correction=2), [1.0, 2.0])
    tp_grad = grad_of(tp, lambda L, x: x.var(correction=2), [1.0, 2.0])
    assert tp_grad == torch_grad == [INF, INF]


# ---- norm ------------------------------------------------------------------------------------


def test_norm_p0_has_no_gradient():
    def f(L):
        x = L.tensor([1.0, 0.0, 2.0], dtype=L.float64, requires_grad=True)
        y = x.norm(p=0)
        y.backward()
        return y.requires_grad, x.grad

    tp_result, torch_result = both(f)
    assert tp_result == torch_result == (True, None)


@pytest.mark.parametrize("p", [0.5, -1, 3, 1, 2])
@pytest.mark.parametrize("values", [[1.0, -2.0, 0.0], [0.0, 0.0, 0.0]])
@pytest.mark.parametrize("grad", [1.0, INF])
def test_norm_gradient_at_zeros(p, values, grad):
    f = lambda L, x: x.norm(p=p)  # noqa: E731
    with warnings.catch_warnings():  # 0 * inf on the way, as in torch (which is silent)
        warnings.simplefilter("ignore")
        tp_grad = grad_of(tp, f, values, grad=grad)
    np.testing.assert_allclose(tp_grad, grad_of(torch, f, values, grad=grad), rtol=1e-14)


# ---- forward mode: overwriting writes ---------------------------------------------------------


def tangents(L, build):
    fw = L.autograd.forward_ad
    with fw.dual_level():
        x = fw.make_dual(L.zeros(3, dtype=L.float64), L.ones(3, dtype=L.float64))
        out = build(L, fw, x)
        t = fw.unpack_dual(out).tangent
        return None if t is None else t.tolist()


@pytest.mark.parametrize(
    "name, build",
    [
        ("copy_from_dual", lambda L, fw, x: L.zeros(2, 3).copy_(x * 2)),
        ("copy_plain_into_dual", lambda L, fw, x: (x * 1).copy_(L.ones(3))),
        ("fill_number", lambda L, fw, x: (x * 1).fill_(1.0)),
        (
            "fill_dual_value",
            lambda L, fw, x: (x * 1).fill_(
                fw.make_dual(L.tensor(2.0, dtype=L.float64), L.tensor(5.0, dtype=L.float64))
            ),
        ),
        ("zero_", lambda L, fw, x: (x * 1).zero_()),
        ("uniform_", lambda L, fw, x: (x * 1).uniform_()),
        ("copy_into_view", lambda L, fw, x: _write_view(L, x, lambda v, s: v.copy_(s))),
        ("mul_on_view", lambda L, fw, x: _write_view(L, x * 1, lambda v, s: v.mul_(3), base=True)),
    ],
)
def test_overwrite_tangent_matches_torch(name, build):
    assert tangents(tp, build) == tangents(torch, build)


def _write_view(L, x, write, base=False):
    b = x if base else L.zeros(3, dtype=L.float64)
    write(b[1:], x[:2] * 3)
    return b
