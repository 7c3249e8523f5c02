"""``retain_grad()`` on a non-leaf: ``.grad`` accumulates like a leaf's, belongs to the
tensor's current value, and is a fresh writable tensor (all as torch)."""

from __future__ import annotations

import pytest


@pytest.fixture(params=["tensorplay", "torch"])
def lib(request):
    if request.param == "torch":
        return pytest.importorskip("torch", reason="torch is the oracle for this comparison")
    import tensorplay

    return tensorplay


def test_retained_grad_accumulates_over_two_backward_passes(lib):
    x = lib.ones(2, requires_grad=True)
    y = x * 2
    y.retain_grad()
    (y * 1).sum().backward(retain_graph=True)
    (y * 1).sum().backward()
    assert y.grad.tolist() == [2.0, 2.0]
    assert x.grad.tolist() == [4.0, 4.0]


def test_retained_grad_follows_an_inplace_update(lib):
    x = lib.ones(2, requires_grad=True)
    y = x * 2
    y.retain_grad()
    y.mul_(3)
    (y * 5).sum().backward()
    assert y.grad.tolist() == [5.0, 5.0]  # d/dy of the new y, not of the old one (15)
    assert x.grad.tolist() == [30.0, 30.0]
    assert y.retains_grad


def test_retained_grad_of_base_follows_inplace_write_through_a_view(lib):
    x = lib.ones(3, requires_grad=True)
    b = x * 2
    b.retain_grad()
    b[:2].mul_(3)
    (b * 5).sum().backward()
    assert b.grad.tolist() == [5.0, 5.0, 5.0]
    assert x.grad.tolist() == [30.0, 30.0, 10.0]


def test_retained_grad_is_a_fresh_writable_tensor(lib):
    x = lib.ones(2, 3, requires_grad=True)
    y = x * 2
    y.retain_grad()
    y.sum().backward()  # the incoming gradient is an expanded (stride-0) tensor
    assert y.grad.stride() == (3, 1)
    y.grad.add_(1)
    assert y.grad.tolist() == [[2.0, 2.0, 2.0], [2.0, 2.0, 2.0]]
    assert x.grad.tolist() == [[2.0, 2.0, 2.0], [2.0, 2.0, 2.0]]


def test_retained_grad_is_contiguous_for_a_transposed_gradient(lib):
    x = lib.ones(2, 3, requires_grad=True)
    y = x * 2
    y.retain_grad()
    (y.t() * lib.arange(6.0).reshape(3, 2)).sum().backward()
    assert y.grad.stride() == (3, 1)
    assert y.grad.tolist() == [[0.0, 2.0, 4.0], [1.0, 3.0, 5.0]]


@pytest.mark.filterwarnings("ignore:Using backward\\(\\) with create_graph=True")
def test_retained_grad_under_create_graph_is_differentiable(lib):
    x = lib.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    y.retain_grad()
    (y * y).sum().backward(create_graph=True)
    assert y.grad.tolist() == [4.0, 8.0]
    assert y.grad.requires_grad
    assert y.grad.grad_fn.name() == "CloneBackward0"
