"""``tensorplay._C.im2col`` against its Python twin ``_columns_py`` (and a definition
written position by position), and its refusals of misuse."""

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
