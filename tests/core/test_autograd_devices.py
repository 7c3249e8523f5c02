"""Autograd runs on every device: gradients on CUDA equal the CPU's."""

from __future__ import annotations

import numpy as np

import tensorplay as tp
from tensorplay.autograd import forward_ad as fwAD


def _mlp_grads(device):
    tp.manual_seed(0)
    x = tp.randn(4, 3, dtype=tp.float64).to(device)
    w1 = tp.randn(3, 5, dtype=tp.float64).to(device).requires_grad_()
    w2 = tp.randn(5, 2, dtype=tp.float64).to(device).requires_grad_()
    h = (x @ w1).tanh() * 1  # tanh saves its output: write into a copy (as in torch)
    h[:, 0] = h[:, 0] * 2  # in-place through indexing
    loss = tp.log_softmax(h @ w2, dim=1).sum() + (w1**2).mean()
    loss.backward()
    return loss.item(), w1.grad.cpu().numpy(), w2.grad.cpu().numpy()


def test_backward_on_device_matches_cpu(device):
    want = _mlp_grads("cpu")
    got = _mlp_grads(device)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-10)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-10)
    np.testing.assert_allclose(got[2], want[2], rtol=1e-10)


def test_forward_mode_on_device(device):
    x = tp.linspace(-1, 1, 5, dtype=tp.float64, device=device)
    with fwAD.dual_level():
        y = fwAD.make_dual(x, tp.ones_like(x)).sigmoid()
        tangent = fwAD.unpack_dual(y).tangent
    s = 1 / (1 + np.exp(-np.linspace(-1, 1, 5)))
    assert tangent.device.type == device
    np.testing.assert_allclose(tangent.cpu().numpy(), s * (1 - s), rtol=1e-12)


def test_moving_between_devices_is_differentiable(device):
    # x on cpu -> device -> compute there -> gradient arrives back on cpu (and back)
    x = tp.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x.to(device)
    assert y.requires_grad and y.device.type == device
    (y * y).sum().backward()
    assert x.grad.device.type == "cpu"
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 4.0, 6.0])
    w = tp.tensor([1.0, -1.0], device=device, requires_grad=True)
    (w.to("cpu", tp.float64) * 3).sum().backward()  # device and dtype at once
    assert w.grad.device.type == device and w.grad.dtype is tp.float32
    np.testing.assert_allclose(w.grad.cpu().numpy(), [3.0, 3.0])


def test_device_move_records_a_node_and_carries_tangents():
    x = tp.tensor([1.0, 2.0], requires_grad=True)
    m = x.to("meta", tp.float64)  # the meta device holds no data, but the graph is recorded
    assert m.requires_grad and m.grad_fn is not None and m.dtype is tp.float64
    with tp.no_grad():
        assert not x.to("meta").requires_grad
    with fwAD.dual_level():
        d = fwAD.make_dual(tp.tensor([1.0, 2.0]), tp.tensor([3.0, 4.0]))
        moved = d.to("meta")
        assert fwAD.unpack_dual(moved).tangent.device.type == "meta"
