"""Factories, dtype inference, random numbers and their error cases."""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp


def test_tensor_infers_dtype_like_torch():
    assert tp.tensor([1, 2]).dtype is tp.int64
    assert tp.tensor([1.0, 2]).dtype is tp.float32
    assert tp.tensor([True]).dtype is tp.bool
    assert tp.tensor(1 + 2j).dtype is tp.complex64
    assert tp.tensor(np.ones(2, np.float16)).dtype is tp.float16
    assert tp.tensor(3.0).shape == () and tp.tensor([]).shape == (0,)


def test_default_dtype_is_configurable():
    try:
        tp.set_default_dtype(tp.float64)
        assert tp.tensor([1.0]).dtype is tp.float64 and tp.ones(1).dtype is tp.float64
        assert (tp.arange(3) / 2).dtype is tp.float64
    finally:
        tp.set_default_dtype(tp.float32)
    with pytest.raises(TypeError, match="floating point"):
        tp.set_default_dtype(tp.int32)


@pytest.mark.parametrize(
    "fn,expected",
    [
        (lambda: tp.zeros(2, 3), np.zeros((2, 3))),
        (lambda: tp.ones((2,)), np.ones(2)),
        (lambda: tp.full((2, 2), 7.5), np.full((2, 2), 7.5)),
        (lambda: tp.arange(5), np.arange(5)),
        (lambda: tp.arange(1, 2, 0.25), np.arange(1, 2, 0.25)),
        (lambda: tp.arange(10, 0, -3), np.arange(10, 0, -3)),
        (lambda: tp.linspace(0, 1, 5), np.linspace(0, 1, 5)),
        (lambda: tp.eye(3, 2), np.eye(3, 2)),
        (lambda: tp.zeros_like(tp.ones(2, 2, dtype=tp.int32)), np.zeros((2, 2), np.int32)),
        (lambda: tp.full_like(tp.ones(3), 2), np.full(3, 2.0)),
    ],
)
def test_factories_match_numpy(fn, expected):
    t = fn()
    assert t.shape == expected.shape
    np.testing.assert_allclose(t.numpy().astype(np.float64), expected, rtol=1e-6)


def test_factory_dtypes():
    assert tp.arange(3).dtype is tp.int64 and tp.arange(3.0).dtype is tp.float32
    assert tp.full((1,), 2).dtype is tp.int64 and tp.full((1,), True).dtype is tp.bool
    assert tp.ones(2, dtype=tp.bfloat16).float().tolist() == [1.0, 1.0]


@pytest.mark.parametrize(
    "make",
    [
        lambda: tp.tensor([300], dtype=tp.uint8),
        lambda: tp.tensor([-1], dtype=tp.uint8),
        lambda: tp.full((2,), 2**40, dtype=tp.int32),
        lambda: tp.tensor([2**70]),
        lambda: tp.tensor(2**64),
        lambda: tp.arange(0, 2**33, 2**31, dtype=tp.int32),
        lambda: tp.randint(0, 1000, (3,), dtype=tp.int8),
        lambda: tp.tensor([float("nan")], dtype=tp.int32),
    ],
)
def test_integer_overflow_in_factories_raises(make):
    with pytest.raises(RuntimeError, match="overflow|Overflow"):
        make()


def test_bad_factory_arguments():
    with pytest.raises(RuntimeError, match="negative dimension"):
        tp.zeros(2, -1)
    with pytest.raises(TypeError, match="size must be a sequence of ints"):
        tp.zeros(2.5)
    with pytest.raises(TypeError, match="dtype must be a tensorplay dtype"):
        tp.zeros(2, dtype="float32")
    with pytest.raises(RuntimeError, match="step must be nonzero"):
        tp.arange(0, 1, 0)
    with pytest.raises(ValueError, match="could not build a tensor"):
        tp.tensor([[1, 2], [3]])
    with pytest.raises(RuntimeError, match="unknown device type"):
        tp.zeros(2, device="tpu")


def test_manual_seed_makes_random_reproducible():
    tp.manual_seed(123)
    a, b = tp.rand(5), tp.randn(5)
    tp.manual_seed(123)
    assert tp.rand(5).tolist() == a.tolist() and tp.randn(5).tolist() == b.tolist()
    assert not tp.equal(tp.rand(5), a)


def test_random_distributions_have_the_right_moments():
    tp.manual_seed(0)
    u = tp.rand(100_000, dtype=tp.float64)
    assert 0.0 <= u.min().item() and u.max().item() < 1.0
    assert abs(u.mean().item() - 0.5) < 0.01
    n = tp.randn(100_000, dtype=tp.float64)
    assert abs(n.mean().item()) < 0.02 and abs(n.std().item() - 1.0) < 0.02
    r = tp.randint(3, 7, (10_000,))
    assert r.dtype is tp.int64 and set(r.tolist()) == {3, 4, 5, 6}
    p = tp.randperm(10)
    assert sorted(p.tolist()) == list(range(10))
    x = tp.empty(1000).uniform_(-2, 2)
    assert -2 <= x.min().item() and x.max().item() < 2
    assert tp.rand_like(tp.ones(2, 3)).shape == (2, 3)
    with pytest.raises(RuntimeError, match="floating point"):
        tp.rand(2, dtype=tp.int32)


def test_dtype_objects():
    assert str(tp.float32) == "tensorplay.float32" and repr(tp.int64) == "tensorplay.int64"
    assert tp.float32.is_floating_point and not tp.int32.is_floating_point
    assert tp.complex64.is_complex and tp.bfloat16.itemsize == 2
    assert tp.float is tp.float32 and tp.long is tp.int64 and tp.double is tp.float64


@pytest.mark.parametrize(
    "a,b,expected",
    [
        (tp.uint8, tp.int8, tp.int16),
        (tp.bool, tp.int32, tp.int32),
        (tp.float16, tp.bfloat16, tp.float32),
        (tp.int64, tp.float16, tp.float16),
        (tp.complex64, tp.float64, tp.complex128),
        (tp.int16, tp.uint8, tp.int16),
    ],
)
def test_promote_types(a, b, expected):
    assert tp.promote_types(a, b) is expected and tp.promote_types(b, a) is expected


def test_scalars_promote_like_torch():
    i8 = tp.tensor([1], dtype=tp.int8)
    assert (i8 + 1).dtype is tp.int8  # int scalar keeps the tensor's category
    assert (i8 + 1.5).dtype is tp.float32  # float scalar lifts int to default float
    assert (tp.tensor([1.0], dtype=tp.float16) + 1.0).dtype is tp.float16
    assert (i8 + tp.tensor(1.0, dtype=tp.float64)).dtype is tp.float64  # 0-d, higher category
    assert (tp.ones(1) + tp.tensor(1.0, dtype=tp.float64)).dtype is tp.float32  # same category
    assert (tp.tensor([True]) + True).dtype is tp.bool
    assert (tp.ones(1) * 1j).dtype is tp.complex64
    assert tp.result_type(i8, 2.0) is tp.float32
