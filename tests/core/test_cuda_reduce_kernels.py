"""The CUDA reductions of ``_cuda_reduce``: ``sum``/``mean``/``var`` over trailing axes (rows),
leading axes (columns: wide, tall and skinny, in one launch or as partial sums over runs of
rows and a second launch) and whole arrays up to 4M elements, and ``softmax``/``log_softmax``
over the last axis, against numpy in float64 (to rounding: the summation order is the
kernel's own) and with torch's NaN and inf rules; layouts they do not cover keep CuPy's
kernel."""

from __future__ import annotations

import math

import numpy as np
import pytest

import tensorplay as tp
from tensorplay import _cuda_reduce

pytestmark = pytest.mark.cuda


@pytest.fixture
def launched(monkeypatch):
    """The kinds ``_cuda_reduce`` ran (None results are not counted)."""
    if not tp.cuda.is_available():
        pytest.skip(f"CUDA not available: {tp.cuda.unavailable_reason()}")
    seen = []
    real_sum, real_softmax = _cuda_reduce.sum, _cuda_reduce.softmax

    def summed(a, axes, keepdims, mean=False):
        r = real_sum(a, axes, keepdims, mean)
        if r is not None:
            seen.append("mean" if mean else "sum")
        return r

    def soft(a, dim, log):
        r = real_softmax(a, dim, log)
        if r is not None:
            seen.append("log_softmax" if log else "softmax")
        return r

    real_backward = _cuda_reduce.softmax_backward

    def backward(g, out, dim, log):
        r = real_backward(g, out, dim, log)
        if r is not None:
            seen.append("log_softmax_backward" if log else "softmax_backward")
        return r

    real_var = _cuda_reduce.var

    def variance(a, axes, keepdims, correction):
        r = real_var(a, axes, keepdims, correction)
        if r is not None:
            seen.append("var")
        return r

    monkeypatch.setattr(_cuda_reduce, "sum", summed)
    monkeypatch.setattr(_cuda_reduce, "var", variance)
    monkeypatch.setattr(_cuda_reduce, "softmax", soft)
    monkeypatch.setattr(_cuda_reduce, "softmax_backward", backward)
    return seen


def _tol(dtype, n=1):
    """Tolerances for a reduction over ``n`` elements: float32 rounding grows like sqrt(n)."""
    if dtype is tp.float32:
        return {"rtol": 1e-5, "atol": 1e-5 * max(1.0, math.sqrt(n / 1000))}
    return {"rtol": 1e-12, "atol": 1e-12}


CASES = [  # (shape, dim): rows, columns, whole
    ((7,), None),
    ((3, 5), 1),
    ((3, 5), -1),
    ((256, 10), 1),
    ((256, 1024), 0),
    ((4, 1000, 3), (1, 2)),
    ((8, 128, 256), (0, 1)),
    ((2049, 33), 0),
    ((5, 3000), 1),
    ((200, 257), None),
    ((300, 1000), None),  # whole, two launches
    ((1 << 17,), None),
    ((1,), 0),
    ((65536, 16), 0),  # tall and skinny: partial sums over runs of rows, then their sum
    ((1 << 17, 1), 0),  # one column
    ((5000, 3), 0),  # a column count that is not a power of two
    ((40000, 100), 0),  # tall, several groups of 32 columns
    ((3, 70000), 0),  # wide, few rows
    ((64, 40000), 0),  # wide enough that the column groups alone fill the GPU
    ((1 << 15, 4, 3), 0),  # columns spanning two trailing axes
    ((1000, 8, 16), (0, 1)),  # rows spanning two leading axes
]


@pytest.mark.parametrize("dtype", [tp.float32, tp.float64])
@pytest.mark.parametrize("shape,dim", CASES)
@pytest.mark.parametrize("keepdim", [False, True])
def test_sum_and_mean_match_numpy(launched, shape, dim, dtype, keepdim):
    rng = np.random.default_rng(0)
    a = rng.standard_normal(shape)
    x = tp.tensor(a, dtype=dtype, device="cuda")
    axes = dim if dim is None or isinstance(dim, tuple) else (dim,)
    if dim is None:
        got_sum, got_mean = x.sum(), x.mean()
    else:
        got_sum, got_mean = x.sum(dim, keepdim=keepdim), x.mean(dim, keepdim=keepdim)
    want_sum = a.sum(axis=axes, keepdims=keepdim and dim is not None)
    want_mean = a.mean(axis=axes, keepdims=keepdim and dim is not None)
    assert launched == ["sum", "mean"]
    for got, want in ((got_sum, want_sum), (got_mean, want_mean)):
        assert got.dtype is dtype and tuple(got.shape) == want.shape
        np.testing.assert_allclose(got.cpu().numpy(), want, **_tol(dtype, a.size // want.size))


# rows of up to 64 get a warp each (8 per block), longer rows a block; (600000, 2) has more
# rows than the warps of the largest grid, so warps loop over rows
SOFTMAX_SHAPES = [(4, 10), (256, 10), (3, 1), (2, 5, 3000), (7,), (20, 64), (20, 65), (600000, 2)]


@pytest.mark.parametrize("dtype", [tp.float32, tp.float64])
@pytest.mark.parametrize("shape", SOFTMAX_SHAPES)
@pytest.mark.parametrize("log", [True, False])
def test_softmax_rows_match_numpy(launched, shape, dtype, log):
    rng = np.random.default_rng(1)
    a = rng.standard_normal(shape) * 4
    x = tp.tensor(a, dtype=dtype, device="cuda")
    got = x.log_softmax(dim=-1) if log else x.softmax(dim=-1)
    shifted = a - a.max(axis=-1, keepdims=True)
    lse = np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    want = shifted - lse if log else np.exp(shifted - lse)
    assert launched == ["log_softmax" if log else "softmax"]
    np.testing.assert_allclose(got.cpu().numpy(), want, **_tol(dtype))


def test_nan_and_inf_follow_torch(launched):
    torch = pytest.importorskip("torch")
    a = np.array(
        [[1.0, np.nan, 2.0], [np.inf, 1.0, 0.0], [-np.inf, -np.inf, -np.inf], [1.0, 2.0, 3.0]],
        dtype=np.float32,
    )
    x, t = tp.tensor(a, device="cuda"), torch.tensor(a)
    for name in ("log_softmax", "softmax"):
        got = getattr(x, name)(dim=1).cpu().numpy()
        want = getattr(t, name)(dim=1).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-6, equal_nan=True)
    np.testing.assert_allclose(x.sum(1).cpu().numpy(), t.sum(1).numpy(), equal_nan=True)
    np.testing.assert_allclose(x.sum(0).cpu().numpy(), t.sum(0).numpy(), equal_nan=True)
    assert "log_softmax" in launched and "sum" in launched


def test_uncovered_layouts_are_declined(launched):
    cupy = pytest.importorskip("cupy")
    a = cupy.asarray(np.random.default_rng(2).standard_normal((6, 5, 4)))
    assert _cuda_reduce.sum(a, (1,), False) is None  # a middle axis
    assert _cuda_reduce.sum(a.transpose(2, 1, 0), (2,), False) is None  # a strided view
    assert _cuda_reduce.softmax(a, 1, log=True) is None  # not the last axis
    assert _cuda_reduce.sum(a.astype(cupy.float16), (2,), False) is None  # another dtype
    assert _cuda_reduce.sum(cupy.ones(1 << 23), None, False) is None  # a large whole sum
    assert _cuda_reduce.sum(cupy.ones((0, 3)), (0,), False) is None  # empty
    # and the op still answers there (CuPy's kernel)
    x = tp.tensor(a.get(), device="cuda")
    np.testing.assert_allclose(x.sum(1).cpu().numpy(), a.get().sum(1), rtol=1e-12)


def test_gradients_through_the_kernels(launched):
    rng = np.random.default_rng(3)
    a = rng.standard_normal((16, 10))
    x = tp.tensor(a, device="cuda", requires_grad=True)
    y = tp.tensor(rng.integers(0, 10, (16, 1)), device="cuda")
    loss = -x.log_softmax(dim=1).gather(1, y).mean()
    loss.backward()
    p = np.exp(a - a.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    onehot = np.zeros_like(a)
    onehot[np.arange(16), y.cpu().numpy()[:, 0]] = 1
    np.testing.assert_allclose(x.grad.cpu().numpy(), (p - onehot) / 16, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("dtype", [tp.float32, tp.float64])
@pytest.mark.parametrize("shape", SOFTMAX_SHAPES)
@pytest.mark.parametrize("log", [True, False])
def test_softmax_backward_rows_match_numpy(launched, shape, dtype, log):
    from tensorplay._dispatch import OPS

    rng = np.random.default_rng(4)
    g, out = rng.standard_normal(shape), rng.standard_normal(shape)
    name = "_log_softmax_backward_data" if log else "_softmax_backward_data"
    got = OPS[name].fn(
        tp.tensor(g, dtype=dtype, device="cuda"), tp.tensor(out, dtype=dtype, device="cuda"), -1
    )
    if log:
        want = g - np.exp(out) * g.sum(-1, keepdims=True)
    else:
        want = out * (g - (g * out).sum(-1, keepdims=True))
    assert launched == [name.strip("_").replace("_data", "")]
    # float32: a row's sum of 3000 terms carries ~1e-5 of rounding, scaled by exp(out)
    tol = {"rtol": 1e-4, "atol": 1e-4} if dtype is tp.float32 else _tol(dtype)
    np.testing.assert_allclose(got.cpu().numpy(), want, **tol)


@pytest.mark.parametrize(
    "shape,launches",
    [((256, 1024), 1), ((256, 10), 1), ((65536, 16), 2), ((1 << 20, 1), 2), ((64, 40000), 1)],
)
def test_column_sums_split_tall_inputs_into_two_launches(launched, monkeypatch, shape, launches):
    cupy = pytest.importorskip("cupy")
    seen = []
    real = _cuda_reduce.launch
    monkeypatch.setattr(_cuda_reduce, "launch", lambda *a: (seen.append(a[1]), real(*a))[1])
    a = np.random.default_rng(5).standard_normal(shape)
    got = _cuda_reduce.sum(cupy.asarray(a), (0,), False)
    assert len(seen) == launches, seen
    np.testing.assert_allclose(cupy.asnumpy(got), a.sum(0), rtol=1e-12, atol=1e-9)


@pytest.mark.parametrize("dtype", [tp.float32, tp.float64])
def test_tall_column_sums_keep_nan_and_inf(launched, dtype):
    a = np.ones((40000, 5))
    a[30000, 0] = np.nan  # NaN anywhere in a column: NaN
    a[12345, 1] = np.inf
    a[39999, 2] = np.inf  # inf and -inf in one column: NaN
    a[7, 2] = -np.inf
    a[20000, 3] = -np.inf
    x = tp.tensor(a, dtype=dtype, device="cuda")
    np.testing.assert_array_equal(x.sum(0).cpu().numpy(), [np.nan, np.inf, np.nan, -np.inf, 4e4])
    np.testing.assert_array_equal(x.mean(0).cpu().numpy(), [np.nan, np.inf, np.nan, -np.inf, 1])
    assert launched == ["sum", "mean"]


@pytest.mark.parametrize("shape,dim", [((8, 128, 256), -1), ((5, 3, 7), (1, 2)), ((3000,), 0)])
@pytest.mark.parametrize("dtype", [tp.float32, tp.float64])
@pytest.mark.parametrize("correction", [0, 1, 2.5])
def test_var_rows_match_numpy(launched, shape, dim, dtype, correction):
    rng = np.random.default_rng(3)
    a = (rng.standard_normal(shape) * 3 + 100).astype(dtype.np)  # an offset: double matters
    x = tp.tensor(a, device="cuda")
    for keepdim in (False, True):
        got = x.var(dim=dim, correction=correction, keepdim=keepdim)
        want = np.var(a.astype(np.float64), axis=dim, ddof=correction, keepdims=keepdim)
        assert got.dtype is dtype and got.shape == want.shape
        np.testing.assert_allclose(
            got.cpu().numpy(), want, rtol=1e-5 if dtype is tp.float32 else 1e-12
        )
        np.testing.assert_allclose(
            x.std(dim=dim, correction=correction, keepdim=keepdim).cpu().numpy(),
            np.sqrt(want),
            rtol=1e-5 if dtype is tp.float32 else 1e-12,
        )
    assert "var" in launched


def test_var_rows_follow_torch_at_the_edges(launched):
    const = tp.full((4, 6), 2.5, device="cuda")
    assert const.var(dim=-1).cpu().tolist() == [0.0] * 4  # exactly 0, accumulated in double
    # a correction of at least the row length: 0/0 is nan for constant rows, x/0 is inf
    assert np.isnan(const.var(dim=-1, correction=6).cpu().numpy()).all()
    x = tp.tensor([[1.0, 2.0, 4.0]], device="cuda")
    assert np.isinf(x.var(dim=-1, correction=3).cpu().numpy()).all()
    nan = tp.tensor([[1.0, float("nan"), 3.0], [1.0, 2.0, 3.0]], device="cuda")
    got = nan.var(dim=-1).cpu().numpy()
    assert np.isnan(got[0]) and got[1] == 1.0
    # a middle axis or a strided view keeps CuPy's kernels, with the same values
    launched.clear()
    y = tp.randn(4, 5, 6, device="cuda")
    np.testing.assert_allclose(
        y.var(dim=1).cpu().numpy(),
        np.var(y.cpu().numpy().astype(np.float64), axis=1, ddof=1),
        rtol=1e-5,
    )
    np.testing.assert_allclose(
        y.transpose(1, 2).var(dim=-1).cpu().numpy(),
        np.var(y.cpu().numpy().astype(np.float64).transpose(0, 2, 1), axis=-1, ddof=1),
        rtol=1e-5,
    )
    assert "var" not in launched
