"""``tp.autograd.functional`` with ``vectorize=True`` (issue 19): the Jacobian and the Hessian
come from ``tp.func``'s vmap-based transforms; values and return structure against
``torch.autograd.functional`` with ``vectorize=True``."""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp
from tensorplay.autograd import functional as AF

torch = pytest.importorskip("torch")

W = np.random.default_rng(1).standard_normal((4, 3))


def _rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def _close(got, want):
    # (torch's forward-mode jacobian nests lists where its reverse mode nests tuples;
    # TensorPlay nests tuples for both)
    if isinstance(want, (tuple, list)):
        assert isinstance(got, tuple) and len(got) == len(want)
        for g, w in zip(got, want):
            _close(g, w)
        return
    assert tuple(got.shape) == tuple(want.shape)
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-10, atol=1e-12)


def _one(m):
    w = m.tensor(W, dtype=m.float64)
    return lambda x: m.tanh(w @ x) * x.sum()


def _two(m):
    w = m.tensor(W, dtype=m.float64)
    return lambda x, y: (m.tanh(w @ x), (y * x).exp())


@pytest.mark.parametrize("strategy", ["reverse-mode", "forward-mode"])
def test_vectorized_jacobian_of_one_input_matches_torch(strategy):
    x = _rand(3)
    got = AF.jacobian(_one(tp), tp.tensor(x), vectorize=True, strategy=strategy)
    want = torch.autograd.functional.jacobian(
        _one(torch), torch.tensor(x), vectorize=True, strategy=strategy
    )
    _close(got, want)


@pytest.mark.parametrize("strategy", ["reverse-mode", "forward-mode"])
def test_vectorized_jacobian_of_tuples_keeps_torch_structure(strategy):
    x, y = _rand(3), _rand(3, seed=2)
    got = AF.jacobian(_two(tp), (tp.tensor(x), tp.tensor(y)), vectorize=True, strategy=strategy)
    want = torch.autograd.functional.jacobian(
        _two(torch), (torch.tensor(x), torch.tensor(y)), vectorize=True, strategy=strategy
    )
    _close(got, want)


def test_vectorized_jacobian_without_create_graph_is_detached():
    x = tp.tensor(_rand(3)).requires_grad_()
    jac = AF.jacobian(_one(tp), x, vectorize=True)
    assert not jac.requires_grad
    want = torch.autograd.functional.jacobian(
        _one(torch), torch.tensor(_rand(3)).requires_grad_(), vectorize=True
    )
    assert not want.requires_grad


def test_vectorized_jacobian_equals_the_loop():
    x = tp.tensor(_rand(3))
    _close(AF.jacobian(_one(tp), x, vectorize=True), AF.jacobian(_one(tp), x))


@pytest.mark.parametrize("strategy", ["reverse-mode", "forward-mode"])
def test_vectorized_hessian_matches_torch(strategy):
    x = _rand(3)

    def energy(m):
        w = m.tensor(W, dtype=m.float64)
        return lambda v: (m.tanh(w @ v) ** 2).sum()

    got = AF.hessian(energy(tp), tp.tensor(x), vectorize=True, outer_jacobian_strategy=strategy)
    want = torch.autograd.functional.hessian(
        energy(torch), torch.tensor(x), vectorize=True, outer_jacobian_strategy=strategy
    )
    _close(got, want)
    assert not got.requires_grad


def test_jacrev_and_jacfwd_are_tp_funcs():
    x = tp.tensor(_rand(3))
    _close(AF.jacrev(_one(tp))(x), tp.func.jacrev(_one(tp))(x))
    _close(AF.jacfwd(_one(tp))(x), tp.func.jacfwd(_one(tp))(x))
    want = torch.func.jacrev(_one(torch))(torch.tensor(_rand(3)))
    _close(AF.jacrev(_one(tp))(x), want)
