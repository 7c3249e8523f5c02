"""The native convolution and pooling pieces of ``tensorplay._C`` against their Python
twins: ``im2col`` (and a definition written position by position), ``max_pool2d`` (torch's
tie and NaN rules), ``scatter_add`` (numpy's add.at); and their refusals of misuse."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tensorplay import _native
from tensorplay._rows.convolution import _columns_py

GEOMETRIES = [
    # (N, C, H, W), (kh, kw), (sh, sw), (dh, dw), (ph, pw)
    ((2, 3, 5, 6), (3, 3), (1, 1), (1, 1), (1, 1)),
    ((1, 2, 7, 4), (2, 3), (2, 1), (1, 2), (0, 2)),
    ((3, 1, 4, 4), (1, 1), (3, 2), (1, 1), (0, 0)),
    ((1, 2, 1, 9), (1, 4), (1, 3), (1, 2), (0, 3)),
    ((0, 2, 3, 3), (2, 2), (1, 1), (1, 1), (1, 1)),
    # padding wider than the kernel's reach: whole output columns of zeros on both sides
    ((2, 2, 3, 2), (2, 3), (1, 2), (1, 1), (3, 4)),
    # stride and dilation with padding: the first and last valid columns are uneven
    ((1, 3, 6, 7), (3, 3), (2, 3), (2, 2), (2, 3)),
]


def _out(n, k, s, d, p):
    return (n + 2 * p - d * (k - 1) - 1) // s + 1


def _reference(x, kernel, stride, dilation, pads, out):
    n, c, h, w = x.shape
    rows = []
    for ci, ki, kj in itertools.product(range(c), range(kernel[0]), range(kernel[1])):
        row = []
        for b, oy, ox in itertools.product(range(n), range(out[0]), range(out[1])):
            iy = oy * stride[0] - pads[0] + ki * dilation[0]
            ix = ox * stride[1] - pads[1] + kj * dilation[1]
            row.append(x[b, ci, iy, ix] if 0 <= iy < h and 0 <= ix < w else 0)
        rows.append(row)
    return np.array(rows, dtype=x.dtype).reshape(c * kernel[0] * kernel[1], -1)


@pytest.mark.parametrize("geo", GEOMETRIES, ids=str)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int8, np.float16, np.complex128])
def test_twin_and_native_match_the_definition(geo, dtype):
    shape, kernel, stride, dilation, pads = geo
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(shape) * 10).astype(dtype)
    out = tuple(
        _out(m, k, s, d, p) for m, k, s, d, p in zip(shape[2:], kernel, stride, dilation, pads)
    )
    args = (*kernel, *stride, *dilation, *pads, *out)
    want = _reference(x, kernel, stride, dilation, pads, out)
    got = _columns_py(x, *args)
    assert got.dtype == x.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    if _native.NATIVE is None:
        pytest.skip(f"tensorplay._C is not available: {_native.REASON}")
    native = _native.NATIVE.im2col(x, *args)
    assert native.dtype == x.dtype
    np.testing.assert_array_equal(native, want)


def test_native_refuses_misuse():
    if _native.NATIVE is None:
        pytest.skip(f"tensorplay._C is not available: {_native.REASON}")
    im2col = _native.NATIVE.im2col
    x = np.zeros((1, 1, 4, 4), np.float32)
    with pytest.raises(TypeError, match="numpy array"):
        im2col([[1.0]], 1, 1, 1, 1, 1, 1, 0, 0, 1, 1)
    with pytest.raises(ValueError, match="C-contiguous"):
        im2col(x[..., ::2], 1, 1, 1, 1, 1, 1, 0, 0, 1, 2)
    with pytest.raises(ValueError, match=r"\(N, C, H, W\)"):
        im2col(x[0], 1, 1, 1, 1, 1, 1, 0, 0, 1, 1)
    with pytest.raises(ValueError, match="stride"):
        im2col(x, 1, 1, 0, 1, 1, 1, 0, 0, 1, 1)
    with pytest.raises(ValueError, match="padding"):
        im2col(x, 1, 1, 1, 1, 1, 1, -1, 0, 1, 1)
    with pytest.raises(TypeError, match="item size"):
        im2col(np.zeros((1, 1, 2, 2), np.dtype("V3")), 1, 1, 1, 1, 1, 1, 0, 0, 2, 2)


# ---- col2im (im2col's adjoint) -----------------------------------------------------------------


def _col2im_reference(cols, shape, kernel, stride, dilation, pads, out):
    n, c, h, w = shape
    img = np.zeros(shape, np.float64)
    r = 0
    for ci, ki, kj in itertools.product(range(c), range(kernel[0]), range(kernel[1])):
        col = 0
        for b, oy, ox in itertools.product(range(n), range(out[0]), range(out[1])):
            iy = oy * stride[0] - pads[0] + ki * dilation[0]
            ix = ox * stride[1] - pads[1] + kj * dilation[1]
            if 0 <= iy < h and 0 <= ix < w:
                img[b, ci, iy, ix] += cols[r, col]
            col += 1
        r += 1
    return img


@pytest.mark.parametrize("geo", GEOMETRIES, ids=str)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_native_col2im_is_the_adjoint_of_im2col(geo, dtype):
    native = _native.NATIVE
    if native is None:
        pytest.skip(f"tensorplay._C is not available: {_native.REASON}")
    shape, kernel, stride, dilation, pads = geo
    out = tuple(
        _out(m, k, s, d, p) for m, k, s, d, p in zip(shape[2:], kernel, stride, dilation, pads)
    )
    rng = np.random.default_rng(1)
    cols = rng.standard_normal((shape[1] * kernel[0] * kernel[1], shape[0] * out[0] * out[1]))
    cols = cols.astype(dtype)
    got = native.col2im(cols, *shape, *kernel, *stride, *dilation, *pads, *out)
    want = _col2im_reference(cols, shape, kernel, stride, dilation, pads, out)
    assert got.dtype == dtype and got.shape == shape
    np.testing.assert_allclose(got, want, rtol=1e-5 if dtype is np.float32 else 1e-12, atol=1e-5)
    # <im2col(x), cols> == <x, col2im(cols)>
    x = rng.standard_normal(shape).astype(dtype)
    lhs = float((native.im2col(x, *kernel, *stride, *dilation, *pads, *out) * cols).sum())
    np.testing.assert_allclose(lhs, float((x * got).sum()), rtol=1e-4, atol=1e-4)
    # other dtypes and layouts: None (the numpy form runs)
    assert (
        native.col2im(cols.astype(np.int32), *shape, *kernel, *stride, *dilation, *pads, *out)
        is None
    )
    if cols.shape[1] > 1:
        assert (
            native.col2im(cols[:, ::-1], *shape, *kernel, *stride, *dilation, *pads, *out) is None
        )
    with pytest.raises(ValueError, match="cols must be"):
        wrong = np.zeros((cols.shape[0] + 1, cols.shape[1]), dtype)
        native.col2im(wrong, *shape, *kernel, *stride, *dilation, *pads, *out)
    with pytest.raises(ValueError, match="stride"):
        native.col2im(cols, *shape, *kernel, 0, 1, *dilation, *pads, *out)


# ---- max pooling and scatter-add -------------------------------------------------------------


def _need_native():
    if _native.NATIVE is None:
        pytest.skip(f"tensorplay._C is not available: {_native.REASON}")
    return _native.NATIVE


@pytest.mark.parametrize(
    ("kernel", "stride", "padding", "dilation", "ceil_mode"),
    [((2, 2), None, 0, 1, False), ((3, 2), (2, 1), (1, 1), 1, True), ((2, 3), 1, 0, (2, 1), False)],
)
def test_native_max_pool_matches_the_loop_with_ties_and_nans(
    monkeypatch, kernel, stride, padding, dilation, ceil_mode
):
    import tensorplay as tp
    from tensorplay._rows import convolution as conv

    _need_native()
    rng = np.random.default_rng(1)
    x = rng.integers(-3, 3, (2, 3, 7, 6)).astype(np.float32)  # many ties
    x[0, 0, 1, 1] = x[0, 0, 1, 2] = x[1, 2, 4, 4] = np.nan  # two NaNs in one window
    t = tp.tensor(x)
    kw = dict(stride=stride, padding=padding, dilation=dilation, ceil_mode=ceil_mode)
    native = tp.max_pool2d(t, kernel, return_indices=True, **kw)
    monkeypatch.setattr(conv, "NATIVE", None)
    loop = tp.max_pool2d(t, kernel, return_indices=True, **kw)
    np.testing.assert_array_equal(native[0].numpy(), loop[0].numpy())
    np.testing.assert_array_equal(native[1].numpy(), loop[1].numpy())
    torch = pytest.importorskip("torch")
    want = torch.nn.functional.max_pool2d(
        torch.tensor(x), kernel, return_indices=True, **{**kw, "stride": stride or kernel}
    )
    np.testing.assert_array_equal(native[1].numpy(), want[1].numpy())


def test_native_scatter_add_matches_add_at_and_refuses_misuse():
    native = _need_native()
    rng = np.random.default_rng(2)
    for dtype in (np.float32, np.float64, np.int32, np.int64):
        out = rng.integers(-5, 5, (3, 4, 5)).astype(dtype)
        idx = rng.integers(0, 4, (3, 6, 5))
        src = rng.integers(-5, 5, (3, 6, 5)).astype(dtype)
        want = out.copy()
        np.add.at(want, (np.arange(3)[:, None, None], idx, np.arange(5)), src)
        native.scatter_add(out, idx, src, 3, 6, 5)
        np.testing.assert_array_equal(out, want)
    out = np.zeros((2, 3), np.float32)
    with pytest.raises(ValueError, match="out of bounds"):
        native.scatter_add(out, np.array([[3], [0]]), np.ones((2, 1), np.float32), 2, 1, 1)
    with pytest.raises(ValueError, match="one dtype"):
        native.scatter_add(out, np.array([[1], [0]]), np.ones((2, 1)), 2, 1, 1)
    with pytest.raises(TypeError, match="C-contiguous"):
        native.scatter_add(out.T, np.array([[1], [0]]), np.ones((2, 1), np.float32), 2, 1, 1)
    with pytest.raises(TypeError, match="float32/float64/int32/int64"):
        z = np.zeros((2, 3), np.int8)
        native.scatter_add(z, np.array([[1], [0]]), np.ones((2, 1), np.int8), 2, 1, 1)
    with pytest.raises(ValueError, match="float32/float64"):
        native.max_pool2d(np.zeros((1, 4, 4), np.int64), 2, 2, 2, 2, 1, 1, 0, 0, 2, 2)
    with pytest.raises(ValueError, match="padding"):
        native.max_pool2d(np.zeros((1, 4, 4), np.float32), 2, 2, 2, 2, 1, 1, 2, 0, 3, 2)
