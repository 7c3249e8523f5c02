"""Gradients through indexing, item assignment and dtype conversion."""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp


def _x():
    return tp.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=tp.float64, requires_grad=True)


def test_basic_indexing_is_differentiable():
    x = _x()
    x[1, ::2].sum().backward()
    assert x.grad.tolist() == [[0.0, 0.0, 0.0], [1.0, 0.0, 1.0]]


def test_advanced_indexing_accumulates_repeated_rows():
    x = _x()
    (x[tp.tensor([0, 1, 1])] * 2).sum().backward()
    assert x.grad.tolist() == [[2.0, 2.0, 2.0], [4.0, 4.0, 4.0]]


def test_mask_indexing_is_differentiable():
    x = _x()
    x[x > 2.5].pow(2).sum().backward()
    assert x.grad.tolist() == [[0.0, 0.0, 6.0], [8.0, 10.0, 12.0]]


def test_setitem_basic_and_advanced_match_torch():
    torch = pytest.importorskip("torch", reason="torch is the oracle for this comparison")
    x = _x()
    y = x * 1
    y[0, 1:] = tp.tensor([10.0, 20.0], dtype=tp.float64)
    y[tp.tensor([1]), 0] = 7.0
    (y * y).sum().backward()
    tx = torch.tensor(x.detach().tolist(), dtype=torch.float64, requires_grad=True)
    ty = tx * 1
    ty[0, 1:] = torch.tensor([10.0, 20.0], dtype=torch.float64)
    ty[torch.tensor([1]), 0] = 7.0
    (ty * ty).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy())


def test_setitem_value_receives_gradient():
    v = tp.tensor([3.0, 4.0], dtype=tp.float64, requires_grad=True)
    y = tp.zeros(2, 3, dtype=tp.float64)
    y[:, 1] = v
    assert y.requires_grad
    (y * y).sum().backward()
    assert v.grad.tolist() == [6.0, 8.0]


def test_setitem_on_leaf_requiring_grad_raises():
    x = _x()
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        x[0, 0] = 1.0


def test_dtype_conversion_is_differentiable_to_second_order():
    x = tp.tensor([1.0, 2.0], requires_grad=True)
    y = x.double() ** 3
    (g,) = tp.autograd.grad(y.sum(), x, create_graph=True)
    assert g.dtype is tp.float32 and g.tolist() == [3.0, 12.0]
    (gg,) = tp.autograd.grad(g.sum(), x)
    assert gg.tolist() == [6.0, 12.0]


def test_moving_a_tensor_that_requires_grad_across_devices_records_a_node():
    x = _x()
    moved = x.to("meta")  # differentiable now (test_autograd_devices covers the values)
    assert moved.requires_grad and moved.grad_fn is not None
    assert x.detach().to("meta").shape == (2, 3)
