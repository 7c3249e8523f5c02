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
