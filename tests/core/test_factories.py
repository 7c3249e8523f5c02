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
        lambda: tp.tensor([-256], dtype=tp.uint8),
        lambda: tp.tensor([-1.0], dtype=tp.uint8),
        lambda: tp.full((2,), 2**40, dtype=tp.int32),
        lambda: tp.tensor([2**70]),
        lambda: tp.tensor(2**64),
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


# ---- lossy conversions of data (issue 13, items 8 and 15) -----------------------------------

# (data, dtype name): each converts exactly as torch.tensor(data, dtype=...) does
CONVERSIONS = [
    (2**63, "float32"),
    ([2**63, 1], "float64"),
    ([[2**64, -(2**63) - 1]], "float32"),
    (2**63, "complex64"),
    (2**63, "bool"),
    (300, "int16"),
    (1.5, "int64"),
    ([1.5, -1.5], "int64"),
    ([-1, 2], "uint8"),
    (-255, "uint8"),
    (float("nan"), "bool"),
    (1 + 2j, "bool"),
    ([True, 2], None),
    ([True, 2.5], None),
    ([1, 2.5], None),
    ([1, 2j], None),
    ([True, False], "float32"),
    ([0.5, 3], "bool"),
    ([[], []], "int8"),
    (1e300, "float32"),
    (70000, "float16"),
]


@pytest.mark.parametrize(("data", "dt"), CONVERSIONS, ids=[repr(c) for c in CONVERSIONS])
def test_tensor_converts_data_like_torch(data, dt):
    torch = pytest.importorskip("torch")
    want = torch.tensor(data) if dt is None else torch.tensor(data, dtype=getattr(torch, dt))
    got = tp.tensor(data) if dt is None else tp.tensor(data, dtype=getattr(tp, dt))
    assert got.dtype.name == str(want.dtype).removeprefix("torch.")
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_big_python_int_with_a_float_dtype_is_read_as_a_float():
    assert tp.tensor(2**63, dtype=tp.float32).item() == float(2**63)
    assert tp.tensor([2**70, 1], dtype=tp.float64).tolist() == [float(2**70), 1.0]
    with pytest.raises(OverflowError, match="int too large to convert to float"):
        tp.tensor(2**1100, dtype=tp.float64)
    with pytest.raises(RuntimeError, match="does not fit in int64; pass dtype=tp.float64"):
        tp.tensor(2**63)


@pytest.mark.parametrize("dt", ["float64", "float32", "int64", "int8"])
@pytest.mark.parametrize("data", [[1 + 2j, 3], 1 + 2j, [1 + 0j]])
def test_complex_data_with_a_real_dtype_raises(data, dt):
    with pytest.raises(TypeError, match=f"complex numbers but dtype=tensorplay.{dt}"):
        tp.tensor(data, dtype=getattr(tp, dt))


def test_complex_data_with_a_real_dtype_raises_in_torch_too():
    torch = pytest.importorskip("torch")
    for dt in ("float64", "int64"):
        with pytest.raises(TypeError):
            torch.tensor([1 + 2j, 3], dtype=getattr(torch, dt))


@pytest.mark.parametrize(
    ("data", "dt"),
    [
        (300, "int8"),
        (-129, "int8"),
        (256, "uint8"),
        (-256, "uint8"),
        (-1.5, "uint8"),
        (1e30, "int64"),
        (float("nan"), "int64"),
    ],
)
def test_out_of_range_data_raises_like_torch(data, dt):
    torch = pytest.importorskip("torch")
    with pytest.raises(RuntimeError, match="without overflow"):
        torch.tensor(data, dtype=getattr(torch, dt))
    with pytest.raises(RuntimeError, match="without overflow"):
        tp.tensor(data, dtype=getattr(tp, dt))


def test_arrays_and_tensors_convert_without_range_checks():
    # torch converts array and tensor data as .to(dtype) does: integers wrap
    assert tp.tensor(np.array([1000], np.int32), dtype=tp.int8).tolist() == [-24]
    assert tp.tensor(tp.tensor([300]), dtype=tp.int8).tolist() == [44]


def test_list_of_multi_element_tensors_raises():
    with pytest.raises(ValueError, match="only one element tensors"):
        tp.tensor([tp.tensor([1.0, 2.0]), tp.tensor([3.0, 4.0])])
    assert tp.tensor([tp.tensor(1), tp.tensor(2.5)]).tolist() == [1.0, 2.5]


# ---- randperm and arange arguments (issue 13, item 19a) -------------------------------------


def test_randperm_checks_n_and_dtype():
    with pytest.raises(RuntimeError, match="negative dimension -1"):
        tp.randperm(-1)
    for bad in (2.0, True):
        with pytest.raises(TypeError, match="argument 'n' must be int"):
            tp.randperm(bad)
    with pytest.raises(RuntimeError, match="value 128 cannot be converted to type int8"):
        tp.randperm(129, dtype=tp.int8)
    with pytest.raises(RuntimeError, match="n cannot be greater than 2049"):
        tp.randperm(3000, dtype=tp.float16)
    with pytest.raises(NotImplementedError, match="dtype tensorplay.bool"):
        tp.randperm(3, dtype=tp.bool)
    assert sorted(tp.randperm(128, dtype=tp.int8).tolist()) == list(range(128))
    assert tuple(tp.randperm(0).shape) == (0,) and tp.randperm(0).dtype is tp.int64


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        ((0, 2**70), {}, "end=1180591620717411303424 does not fit in int64"),
        ((2**63,), {}, "end=9223372036854775808 does not fit in int64"),
        ((0, 10, 2**63), {}, "step=9223372036854775808 does not fit in int64"),
        ((0, 1, 0), {}, "step must be nonzero"),
        ((0, 1, 0.0), {}, "step must be nonzero"),
        ((0, 3, 0.5), {"dtype": tp.int64}, "step 0.5 is 0 once converted"),
        ((float("nan"),), {}, "unsupported range: 0 -> nan"),
        ((0, float("inf")), {}, "unsupported range: 0 -> inf"),
        ((0, 1, 1e-30), {}, "invalid size, possible overflow"),
    ],
)
def test_arange_refuses_overflowing_ranges(args, kwargs, match):
    with pytest.raises(RuntimeError, match=match):
        tp.arange(*args, **kwargs)


def test_arange_dtypes_and_edges_match_torch():
    torch = pytest.importorskip("torch")
    cases = [
        ((2**63 - 3, 2**63 - 1), {}),
        ((-(2**63), -(2**63) + 2), {}),
        ((-1, 3), {"dtype": "uint8"}),
        ((0.5, 3), {"dtype": "int64"}),
        ((0, 1, 0.1), {}),
        ((0, 1, 0.1), {"dtype": "float64"}),
        ((0, 2**63 - 1, 2**62), {"dtype": "float64"}),
        ((250, 255), {"dtype": "int8"}),  # wraps, as in torch
        ((0, 2**33, 2**31), {"dtype": "int32"}),
        ((0.0, 300.0, 100.0), {"dtype": "int8"}),
    ]
    for args, kw in cases:
        want = torch.arange(*args, **{k: getattr(torch, v) for k, v in kw.items()})
        got = tp.arange(*args, **{k: getattr(tp, v) for k, v in kw.items()})
        assert got.dtype.name == str(want.dtype).removeprefix("torch."), (args, kw)
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    assert tp.arange(0, tp.tensor(3)).dtype is tp.int64  # an int tensor bound stays an int
    for dt in (tp.bool, tp.complex64):
        with pytest.raises(NotImplementedError, match="arange"):
            tp.arange(3, dtype=dt)
    with pytest.raises(RuntimeError, match="complex128 is not supported"):
        tp.randint(0, 3, (2,), dtype=tp.complex128)


def test_linspace_into_a_narrow_int_dtype_raises_like_torch():
    with pytest.raises(RuntimeError, match=r"value 300(\.0)? cannot be converted to type int8"):
        tp.linspace(0, 300, 3, dtype=tp.int8)
    assert tp.linspace(0, 10, 4, dtype=tp.int64).tolist() == [0, 3, 6, 10]
