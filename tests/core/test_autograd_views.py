"""Gradients through chains of views: basic indexing records ``as_strided`` over the
tensor's storage, so its gradient must hold for any layout (transposed, stepped,
expanded, offset, zero-size), checked against torch and by finite differences."""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp
from tensorplay.autograd import gradcheck, gradgradcheck

# (name, chain): the same code runs on a tensorplay and a torch tensor of shape (4, 5)
CHAINS = [
    ("t_select", lambda x: x.t()[0]),
    ("t_slice_steps", lambda x: x.t()[1:, ::2]),
    ("slice_steps", lambda x: x[::2, 1::2]),
    ("select_row", lambda x: x[1]),
    ("t_select_column", lambda x: x.t()[:, 2]),
    ("permute_slice", lambda x: x.permute(1, 0)[2:4]),
    ("narrow_t_select", lambda x: x.narrow(1, 1, 3).t()[0]),
    ("slice_t_step_select", lambda x: x[:, 1:].t()[::2, 1]),
    ("expand_index", lambda x: x.unsqueeze(0).expand(3, 4, 5)[1, ::2]),
    ("expand_t_index", lambda x: x[0].expand(3, 5).t()[1:4:2]),
    ("diagonal_slice", lambda x: x.diagonal()[1:]),
    ("t_diagonal_offset", lambda x: x.t().diagonal(1)[::2]),
    ("t_none_ellipsis", lambda x: x.t()[None, 1:3, ...]),
    ("select_of_select", lambda x: x.t()[3][1:][0]),
    ("transpose_twice", lambda x: x.t()[1:].t()[::3]),
    ("unbind_of_t", lambda x: x.t().unbind(0)[2][1:]),
    ("split_of_t", lambda x: x.t().split(2, 0)[1][:, ::2]),
    ("empty_slice", lambda x: x.t()[2:2]),
]


def _pair(seed=0):
    torch = pytest.importorskip("torch", reason="torch is the oracle for this comparison")
    values = np.random.default_rng(seed).standard_normal((4, 5))
    x = tp.tensor(values, dtype=tp.float64, requires_grad=True)
    tx = torch.tensor(values, dtype=torch.float64, requires_grad=True)
    return torch, x, tx


@pytest.mark.parametrize("name,chain", CHAINS, ids=[c[0] for c in CHAINS])
def test_view_chain_gradient_matches_torch(name, chain):
    torch, x, tx = _pair()
    y, ty = chain(x), chain(tx)
    w = np.random.default_rng(1).standard_normal(tuple(ty.shape))
    (y * tp.tensor(w, dtype=tp.float64)).sum().backward()
    (ty * torch.tensor(w, dtype=torch.float64)).sum().backward()
    np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy())
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name,chain", CHAINS, ids=[c[0] for c in CHAINS])
def test_view_chain_passes_gradcheck_with_forward_ad(name, chain):
    x = tp.randn(4, 5, dtype=tp.float64, requires_grad=True)
    assert gradcheck(lambda t: chain(t) * 1.5, (x,), check_forward_ad=True)


@pytest.mark.parametrize("name", ["t_slice_steps", "expand_t_index", "t_diagonal_offset"])
def test_view_chain_passes_gradgradcheck(name):
    chain = dict(CHAINS)[name]
    x = tp.randn(4, 5, dtype=tp.float64, requires_grad=True)
    assert gradgradcheck(lambda t: chain(t) ** 2, (x,))


def test_issue_example_transposed_row_sum():
    x = tp.randn(3, 2, requires_grad=True)
    x.t()[0].sum().backward()
    assert x.grad.tolist() == [[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]]


@pytest.mark.parametrize(
    "shape,index",
    [((0, 3), (slice(1, None),)), ((2, 0), (slice(None), slice(0, None))), ((3, 0, 2), (1,))],
)
def test_slice_of_zero_size_tensor_has_zero_size_gradient(shape, index):
    x = tp.zeros(shape, requires_grad=True)
    x[index].sum().backward()
    assert x.grad.shape == shape
    assert x.grad.numel() == 0


def test_explicit_as_strided_of_transposed_input_matches_torch():
    torch, x, tx = _pair(2)
    y = x.t().as_strided((2, 3), (1, 2), 1)
    ty = tx.t().as_strided((2, 3), (1, 2), 1)
    (y * y).sum().backward()
    (ty * ty).sum().backward()
    np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy())
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-12)


def test_overlapping_as_strided_view_adds_its_gradients():
    torch, x, tx = _pair(3)
    # a sliding window over row 0 (column 0 of x.t()): cells 1 and 2 are read twice
    y = x.t()[:, 0].as_strided((3, 2), (1, 1))
    ty = tx.t()[:, 0].as_strided((3, 2), (1, 1))
    (y * tp.arange(6.0, dtype=tp.float64).reshape(3, 2)).sum().backward()
    (ty * torch.arange(6.0, dtype=torch.float64).reshape(3, 2)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-12)
    assert x.grad[0].tolist() == [0.0, 3.0, 7.0, 5.0, 0.0]


def test_view_chain_tangent_matches_torch():
    torch, x, tx = _pair(4)
    import torch.autograd.forward_ad as tfwd

    from tensorplay.autograd import forward_ad as fwd

    tangent = np.random.default_rng(5).standard_normal((4, 5))
    chain = dict(CHAINS)["slice_t_step_select"]
    with fwd.dual_level():
        out = fwd.unpack_dual(chain(fwd.make_dual(x.detach(), tp.tensor(tangent)))).tangent
    with tfwd.dual_level():
        dual = tfwd.make_dual(tx.detach(), torch.tensor(tangent))
        expected = tfwd.unpack_dual(chain(dual)).tangent
    np.testing.assert_allclose(out.numpy(), expected.numpy())
