"""The vectorised CUDA kernels of the op table's ``cuda`` column (``_cuda_pointwise``): for
every row that has one, the same bits as the row's CuPy kernel in every layout they take
(same shape, a repeating operand on either side, a number on either side, in place), with
tails and unaligned views; the CuPy kernel where the layout is not covered."""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp
from tensorplay import _cuda_pointwise
from tensorplay._dispatch import OPS, set_device_kernel

ROWS = sorted(name for name, row in OPS.items() if row.cuda)
BINARY = [n for n in ROWS if OPS[n].n_inputs == 2]
UNARY = [n for n in ROWS if OPS[n].n_inputs == 1]
# log, sqrt, asin, ... are defined on (0, 1); the rest take any value there too
DOMAIN_01 = {"log", "log2", "log10", "log1p", "sqrt", "asin", "acos"}


def _cuda_or_skip():
    if not tp.cuda.is_available():
        pytest.skip(f"CUDA not available: {tp.cuda.unavailable_reason()}")


@pytest.fixture
def launches(monkeypatch):
    """The expressions ``_cuda_pointwise.run`` launched (None results are not counted), with
    every size taken (the default leaves small tensors to CuPy)."""
    _cuda_or_skip()
    monkeypatch.setattr(_cuda_pointwise, "MIN_ELEMENTS", 0)
    seen = []
    real = _cuda_pointwise.run

    def run(expr, arrays, out=None, min_elements=None):
        r = real(expr, arrays, out, min_elements)
        if r is not None:
            seen.append(expr)
        return r

    monkeypatch.setattr(_cuda_pointwise, "run", run)
    return seen


def _values(shape, dtype, rng, name=""):
    if dtype.is_floating_point:
        if name in DOMAIN_01:
            v = rng.uniform(0.01, 0.99, shape)
        else:
            v = rng.standard_normal(shape) * 3
            flat = v.reshape(-1)
            flat[: min(3, flat.size)] = [np.nan, np.inf, -np.inf][: min(3, flat.size)]
        return tp.tensor(v, dtype=dtype)
    return tp.tensor(rng.integers(-50, 50, shape), dtype=dtype)


def _cupy_reference(name, *args):
    """The row's own CuPy kernel on the same arrays (numbers converted as the dispatcher does)."""
    import cupy

    row = OPS[name]
    arrays = [a._data if isinstance(a, tp.Tensor) else a for a in args]
    dtype = next(a.dtype for a in arrays if hasattr(a, "dtype"))
    arrays = [a if hasattr(a, "dtype") else dtype.type(a) for a in arrays]
    return cupy.asnumpy(row.kernel(cupy, *arrays))


def _same(got, want):
    assert got.device.type == "cuda"
    np.testing.assert_array_equal(got.cpu().numpy(), want)


def _dtypes(name):
    allow = OPS[name].allow
    out = [tp.float32, tp.float64] if "f" in allow else []
    if "i" in allow and name in ("add", "sub", "mul", "neg", "relu"):
        out += [tp.int64, tp.int32, tp.int8]
    return out


@pytest.mark.cuda
@pytest.mark.parametrize("name", BINARY)
def test_binary_rows_match_their_cupy_kernel_in_every_layout(launches, name):
    rng = np.random.default_rng(len(name))
    fn = OPS[name].fn
    for dtype in _dtypes(name):
        x = _values((37, 64), dtype, rng).cuda()
        y = _values((37, 64), dtype, rng).cuda()
        row = _values((64,), dtype, rng).cuda()
        launches.clear()
        _same(fn(x, y), _cupy_reference(name, x, y))  # same shape
        _same(fn(x, row), _cupy_reference(name, x, row))  # a bias
        _same(fn(row, x), _cupy_reference(name, row, x))  # repeating on the left
        _same(fn(x, row[None]), _cupy_reference(name, x, row[None]))  # leading 1s
        _same(fn(x, 3), _cupy_reference(name, x, 3))  # a number
        assert len(launches) == 5, (name, dtype, launches)


@pytest.mark.cuda
@pytest.mark.parametrize("name", UNARY)
def test_unary_rows_match_their_cupy_kernel(launches, name):
    rng = np.random.default_rng(len(name))
    for dtype in _dtypes(name):
        x = _values((129, 33), dtype, rng, name).cuda()
        launches.clear()
        _same(OPS[name].fn(x), _cupy_reference(name, x))
        assert launches == [OPS[name].cuda], (name, dtype)


@pytest.mark.cuda
@pytest.mark.parametrize("n", [1, 3, 4, 5, 1023, 4099, 1 << 20])
def test_tails_and_unaligned_views(launches, n):
    rng = np.random.default_rng(n)
    x = _values((n + 1,), tp.float32, rng).cuda()
    y = _values((n + 1,), tp.float32, rng).cuda()
    for a, b in ((x, y), (x[1:], y[1:]), (x[1:], y[:-1])):  # [1:] is 4 bytes off alignment
        _same(a + b, _cupy_reference("add", a, b))
        _same(a * 2.5, _cupy_reference("mul", a, 2.5))
        _same(a.exp(), _cupy_reference("exp", a))
    assert len(launches) == 9


@pytest.mark.cuda
def test_in_place_writes_into_the_tensor(launches):
    rng = np.random.default_rng(0)
    x = _values((1000,), tp.float32, rng).cuda()
    y = _values((1000,), tp.float32, rng).cuda()
    want = _cupy_reference("mul", x, y)
    ptr, version = x.data_ptr(), x._version
    x.mul_(y)
    _same(x, want)
    assert x.data_ptr() == ptr and x._version == version + 1
    assert launches == ["a * b"]


@pytest.mark.cuda
def test_layouts_it_does_not_cover_take_the_cupy_kernel(launches):
    rng = np.random.default_rng(1)
    x = _values((8, 6), tp.float32, rng).cuda()
    col = _values((8, 1), tp.float32, rng).cuda()
    cases = [
        (x.t(), _values((6, 8), tp.float32, rng).cuda()),  # a transposed operand
        (x, col),  # a column broadcast (not a trailing block)
        (x.half(), x.half()),  # float16 stays on CuPy
    ]
    for a, b in cases:
        got = a + b
        want = (a.cpu() + b.cpu()).numpy()
        np.testing.assert_allclose(got.cpu().numpy(), want, rtol=1e-3, equal_nan=True)
    assert launches == []


@pytest.mark.cuda
def test_a_device_kernel_set_by_the_user_comes_first(launches):
    calls = []

    def mine(xp, a, b, alpha=1):
        calls.append(a.shape)
        return xp.add(a, b)

    set_device_kernel("add", "cuda", mine)
    try:
        x = tp.ones(4, device="cuda")
        _same(x + x, np.full(4, 2, np.float32))
    finally:
        set_device_kernel("add", "cuda", None)
    assert calls == [(4,)] and launches == []


@pytest.mark.cuda
def test_gradients_flow_through_the_kernels(launches):
    x = tp.tensor([-1.0, 0.0, 2.0, 3.0], device="cuda", requires_grad=True)
    y = ((x * 2.0).relu() + 1.0).exp().sum()
    y.backward()
    v = np.array([-1.0, 0.0, 2.0, 3.0])
    want = np.where(v > 0, 2 * np.exp(2 * v + 1), 0)
    np.testing.assert_allclose(x.grad.cpu().numpy(), want, rtol=1e-6)
    assert {"a * b", "a + b", "exp(a)"} <= set(launches)


@pytest.mark.cuda
def test_small_tensors_take_cupy_and_large_ones_the_kernel(monkeypatch):
    """The Python route's crossover (the native route, tested in
    test_cuda_pointwise_native.py, launches at every size)."""
    _cuda_or_skip()
    monkeypatch.setattr(_cuda_pointwise, "_native_run", None)
    monkeypatch.setattr(_cuda_pointwise, "_native_checked", True)
    seen = []
    real = _cuda_pointwise.run
    monkeypatch.setattr(
        _cuda_pointwise, "run", lambda *a: (lambda r: (seen.append(r is not None), r)[1])(real(*a))
    )
    small = tp.ones(1000, device="cuda")
    large = tp.ones(_cuda_pointwise.MIN_ELEMENTS, device="cuda")
    assert float((small * 3.0).sum()) == 3000.0
    assert float((large * 3.0).sum()) == 3.0 * _cuda_pointwise.MIN_ELEMENTS
    assert seen == [False, True]


@pytest.mark.parametrize("d", [1, 2, 3, 7, 64, 100, 1000, 1 << 20, (1 << 20) + 1, (1 << 31) - 1])
def test_the_magic_division_matches_the_integer_one(d):
    """The kernels' ``i % m`` without a division (the CPU emulates the 32-bit arithmetic)."""
    magic, shift = map(int, _cuda_pointwise._magic(d))
    rng = np.random.default_rng(d)
    us = [0, 1, d - 1, d, d + 1, 2 * d - 1, (1 << 31) - 1, *rng.integers(0, 1 << 31, 2000)]
    for u in (int(u) for u in us if 0 <= u < 1 << 31):
        q = (((u * magic) >> 32) + u) % (1 << 32) >> shift
        assert u - q * d == u % d, (u, d)


@pytest.mark.cuda
def test_the_pure_python_launch_gives_the_same_bits(launches, monkeypatch):
    from tensorplay import _cuda_launch

    rng = np.random.default_rng(5)
    x = _values((3, 1000), tp.float32, rng).cuda()
    b = _values((1000,), tp.float32, rng).cuda()
    native = [(x + b).cpu().numpy(), (x * 0.5).cpu().numpy(), x.tanh().cpu().numpy()]
    monkeypatch.setattr(_cuda_launch, "NATIVE", None)  # CuPy's Function call instead
    twin = [(x + b).cpu().numpy(), (x * 0.5).cpu().numpy(), x.tanh().cpu().numpy()]
    for got, want in zip(twin, native):
        np.testing.assert_array_equal(got, want)
    assert len(launches) == 6
