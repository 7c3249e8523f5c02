"""Reductions over ``dim=()`` and over empty dimensions, value for value against PyTorch
(issue 13, items 3 and 15) and numpy."""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp

X = [[0.0, 5.0, 2.0], [5.0, 4.0, 1.0]]  # 5.0 twice: amax's gradient is shared by ties

# ops for which torch reads dim=() as "every dim", with their numpy reference
EVERY_DIM = {
    "sum": np.sum,
    "mean": np.mean,
    "amax": np.max,
    "amin": np.min,
    "var": lambda a: np.var(a, ddof=1),
    "std": lambda a: np.std(a, ddof=1),
    "norm": np.linalg.norm,
}


@pytest.mark.parametrize("name", sorted(EVERY_DIM))
@pytest.mark.parametrize("dim", [(), []])
@pytest.mark.parametrize("keepdim", [False, True])
def test_empty_dim_tuple_reduces_every_dim(name, dim, keepdim):
    got = getattr(tp, name)(tp.tensor(X), dim=dim, keepdim=keepdim)
    assert tuple(got.shape) == ((1, 1) if keepdim else ())
    np.testing.assert_allclose(got.numpy().reshape(()), EVERY_DIM[name](np.array(X)), rtol=1e-6)


def test_sum_over_empty_dim_tuple_of_ints_accumulates_in_int64():
    got = tp.sum(tp.ones(2, 3, dtype=tp.int8) * 100, dim=())
    assert got.dtype is tp.int64 and got.item() == 600


@pytest.mark.parametrize("name", sorted(EVERY_DIM))
@pytest.mark.parametrize("keepdim", [False, True])
def test_empty_dim_tuple_matches_torch(name, keepdim):
    torch = pytest.importorskip("torch")
    want = getattr(torch, name)(torch.tensor(X), dim=(), keepdim=keepdim)
    got = getattr(tp, name)(tp.tensor(X), dim=(), keepdim=keepdim)
    assert tuple(got.shape) == tuple(want.shape)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)


@pytest.mark.parametrize("name", ["sum", "mean", "amax", "amin", "norm"])
def test_empty_dim_tuple_gradient_matches_torch(name):
    torch = pytest.importorskip("torch")
    xt = torch.tensor(X, requires_grad=True)
    getattr(torch, name)(xt, dim=()).backward()
    x = tp.tensor(X, requires_grad=True)
    getattr(tp, name)(x, dim=()).backward()
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-6)


@pytest.mark.parametrize("name", ["var", "std"])
def test_var_std_empty_dim_tuple_gradient_is_that_of_dim_none(name):
    # NOTE: torch 2.13's var/std backward reads dim=() as a reduction over 1 element and
    # returns +-inf; TensorPlay returns the gradient of the value it computed (dim=None's)
    x = tp.tensor(X, requires_grad=True)
    getattr(tp, name)(x, dim=()).backward()
    y = tp.tensor(X, requires_grad=True)
    getattr(tp, name)(y).backward()
    np.testing.assert_allclose(x.grad.numpy(), y.grad.numpy(), rtol=1e-6)
    assert np.isfinite(x.grad.numpy()).all()


@pytest.mark.parametrize("name", ["all", "any"])
def test_all_any_over_empty_dim_tuple_reduce_nothing(name):
    x = tp.tensor([[0, 2], [3, 0]])
    got = getattr(tp, name)(x, dim=())
    assert got.dtype is tp.bool and got.tolist() == [[False, True], [True, False]]


def test_prod_over_empty_dim_tuple_raises_type_error():
    with pytest.raises(TypeError, match=r"prod\(\): dim=\(\) names no dimension"):
        tp.prod(tp.ones(2, 3), dim=())


def test_logsumexp_over_empty_dim_tuple_needs_keepdim():
    x = tp.tensor(X)
    with pytest.raises(RuntimeError, match="keepdim=True"):
        tp.logsumexp(x, dim=())
    got = tp.logsumexp(x, dim=(), keepdim=True)
    assert tuple(got.shape) == (1, 1)
    assert got.item() == pytest.approx(float(np.log(np.exp(np.array(X)).sum())), rel=1e-6)
    # an empty input reduces to -inf, and a 0-d one is returned as is (both as in torch)
    assert tp.logsumexp(tp.ones(2, 0), dim=()).item() == -np.inf
    assert tp.logsumexp(tp.tensor(3.0), dim=()).item() == 3.0


def test_logsumexp_empty_dim_tuple_matches_torch():
    torch = pytest.importorskip("torch")
    with pytest.raises(RuntimeError):
        torch.logsumexp(torch.tensor(X), dim=())
    want = torch.logsumexp(torch.tensor(X), dim=(), keepdim=True)
    np.testing.assert_allclose(
        tp.logsumexp(tp.tensor(X), dim=(), keepdim=True).numpy(), want.numpy(), rtol=1e-6
    )


@pytest.mark.parametrize("name", ["amax", "amin"])
def test_amax_reduces_a_nonempty_dim_of_an_empty_tensor(name):
    got = getattr(tp, name)(tp.ones(2, 0), dim=(0,))
    assert tuple(got.shape) == (0,)
    assert tuple(getattr(tp, name)(tp.ones(2, 0, 3), dim=0).shape) == (0, 3)


@pytest.mark.parametrize("name", ["amax", "amin"])
@pytest.mark.parametrize("dim", [1, -1, (1,), (0, 1)])
def test_amax_over_an_empty_dim_raises_index_error(name, dim):
    shown = dim if isinstance(dim, int) else 1
    with pytest.raises(IndexError, match=rf"{name}\(\): Expected reduction dim {shown} to"):
        getattr(tp, name)(tp.ones(2, 0), dim=dim)


@pytest.mark.parametrize("dim", [None, ()])
def test_amax_of_an_empty_tensor_without_dim_raises(dim):
    with pytest.raises(RuntimeError, match=r"^amax\(\): Expected reduction dim to be specified"):
        tp.amax(tp.ones(2, 0)) if dim is None else tp.amax(tp.ones(2, 0), dim=dim)


def test_arg_and_dim_extremes_of_empty_dims_raise_index_error():
    with pytest.raises(IndexError, match="dim to be specified"):
        tp.argmax(tp.ones(2, 0))
    with pytest.raises(IndexError, match="reduction dim 1 to have non-zero size"):
        tp.argmin(tp.ones(2, 0), dim=-1)
    with pytest.raises(IndexError, match=r"max\(\): Expected reduction dim 1"):
        tp.max(tp.ones(2, 0), dim=1)
    assert tuple(tp.argmax(tp.ones(2, 0), dim=0).shape) == (0,)


@pytest.mark.parametrize("shape", [(2, 0), (0, 3), (2, 0, 3)])
@pytest.mark.parametrize("dim", [0, 1, -1, (0,), (1,), (0, 1), ()])
@pytest.mark.parametrize("name", ["amax", "amin", "sum", "mean", "logsumexp", "norm"])
def test_empty_reductions_match_torch(shape, dim, name):
    torch = pytest.importorskip("torch")
    try:
        want = getattr(torch, name)(torch.ones(*shape), dim=dim)
    except (RuntimeError, IndexError) as e:
        with pytest.raises(type(e)):
            getattr(tp, name)(tp.ones(*shape), dim=dim)
        return
    got = getattr(tp, name)(tp.ones(*shape), dim=dim)
    assert tuple(got.shape) == tuple(want.shape)
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_empty_reductions_on_meta_raise_the_same_errors():
    with pytest.raises(IndexError, match="non-zero size"):
        tp.amax(tp.empty(2, 0, device="meta"), dim=1)
    assert tuple(tp.sum(tp.empty(2, 3, device="meta"), dim=()).shape) == ()
