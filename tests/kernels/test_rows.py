"""Row-wise tpk ops against numpy: sum/max/mean over the last dimension, softmax and its
backward, layer norm and its backward; both the one-block path and the chunked path for
long rows (CPU through Triton's interpreter)."""

from __future__ import annotations

import numpy as np
import pytest
from kernel_helpers import TOL, rand, to_numpy

import tensorplay as tp
from tensorplay import library
from tensorplay.kernels._ops_rows import SINGLE_MAX

pytestmark = pytest.mark.usefixtures("cpu_triton")

LONG = SINGLE_MAX + 3000  # a row that takes the chunked path


def _softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _layer_norm(x, w=None, b=None, eps=1e-5):
    y = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + eps)
    return y * (1 if w is None else w) + (0 if b is None else b)


@pytest.mark.parametrize("dtype", [tp.float32, tp.float64, tp.bfloat16])
def test_row_reductions_match_numpy(dtype):
    x, xn = rand(2, 3, 37, dtype=dtype)
    for op, ref in (
        (tp.ops.tpk.sum_rows, xn.sum(-1)),
        (tp.ops.tpk.max_rows, xn.max(-1)),
        (tp.ops.tpk.mean_rows, xn.mean(-1)),
    ):
        y = op(x)
        assert y.dtype is dtype and tuple(y.shape) == (2, 3)
        np.testing.assert_allclose(to_numpy(y), ref, **TOL[dtype])


def test_row_reductions_on_long_rows_and_strided_input():
    x, xn = rand(2, 5000)
    np.testing.assert_allclose(tp.ops.tpk.sum_rows(x).numpy(), xn.sum(-1), rtol=1e-4)
    np.testing.assert_allclose(tp.ops.tpk.max_rows(x).numpy(), xn.max(-1))
    s, sn = rand(40, 3, seed=1)  # a transposed view: 3 rows of 40
    np.testing.assert_allclose(tp.ops.tpk.mean_rows(s.t()).numpy(), sn.T.mean(-1), rtol=1e-5)


def test_max_rows_propagates_nan_and_sum_of_empty_rows_is_zero():
    x = tp.tensor([[1.0, float("nan"), 3.0], [4.0, 5.0, 6.0]])
    out = tp.ops.tpk.max_rows(x).numpy()
    assert np.isnan(out[0]) and out[1] == 6.0
    assert tp.ops.tpk.sum_rows(tp.empty(3, 0)).tolist() == [0.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="max has no identity"):
        tp.ops.tpk.max_rows(tp.empty(3, 0))


def test_row_reduction_gradients():
    x, xn = rand(3, 4, dtype=tp.float64)
    x.requires_grad_(True)
    tp.ops.tpk.mean_rows(x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.full((3, 4), 0.25))
    y = tp.tensor([[1.0, 3.0, 3.0]], requires_grad=True)
    tp.ops.tpk.max_rows(y).sum().backward()
    assert y.grad.tolist() == [[0.0, 0.5, 0.5]]  # ties share the gradient, as amax


@pytest.mark.parametrize("name", ["sum_rows", "max_rows", "mean_rows"])
def test_row_reduction_opcheck(name):
    x, _ = rand(3, 5, seed=3)
    assert library.opcheck(getattr(tp.ops.tpk, name), (x,), test_utils="all") == {}


@pytest.mark.parametrize("dtype", [tp.float32, tp.float64, tp.float16])
def test_softmax_matches_numpy(dtype):
    x, xn = rand(4, 3, 50, dtype=dtype)
    y = tp.ops.tpk.softmax(x)
    assert y.dtype is dtype
    np.testing.assert_allclose(to_numpy(y), _softmax(xn), **TOL[dtype])


def test_softmax_long_rows_take_the_chunked_online_path():
    x, xn = rand(2, LONG)
    x = x * 10  # a wide range: the running max must rescale correctly
    y = tp.ops.tpk.softmax(x)
    np.testing.assert_allclose(y.numpy(), _softmax(xn * 10), rtol=1e-4, atol=1e-9)
    g, gn = rand(2, LONG, seed=1)
    dx = tp.ops.tpk.softmax_backward(g, y)
    yn = y.numpy().astype(np.float64)
    ref = yn * (gn - (gn * yn).sum(-1, keepdims=True))
    np.testing.assert_allclose(dx.numpy(), ref, rtol=1e-4, atol=1e-6)


def test_softmax_handles_minus_infinity():
    x = tp.tensor([[0.0, float("-inf"), 1.0], [float("-inf"), 2.0, float("-inf")]])
    y = tp.ops.tpk.softmax(x).numpy()
    np.testing.assert_allclose(y, _softmax(x.numpy().astype(np.float64)), rtol=1e-6)


def test_softmax_backward_matches_numpy_and_autograd_uses_it():
    x, xn = rand(3, 7, dtype=tp.float64)
    g, gn = rand(3, 7, dtype=tp.float64, seed=2)
    x.requires_grad_(True)
    y = tp.ops.tpk.softmax(x)
    y.backward(g)
    yn = _softmax(xn)
    np.testing.assert_allclose(x.grad.numpy(), yn * (gn - (gn * yn).sum(-1, keepdims=True)))
    assert y.grad_fn.name() == "tpk::softmaxBackward"


def test_softmax_opchecks_including_second_order():
    x, _ = rand(3, 6)
    assert library.opcheck(tp.ops.tpk.softmax, (x,), test_utils="all") == {}
    g, _ = rand(3, 6, seed=1)
    y = tp.ops.tpk.softmax(x)
    assert library.opcheck(tp.ops.tpk.softmax_backward, (g, y), test_utils="all") == {}


@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("n", [37, LONG])
def test_layer_norm_matches_numpy(affine, n):
    x, xn = rand(3, n)
    w, wn = rand(n, seed=1)
    b, bn = rand(n, seed=2)
    args = (w, b) if affine else (None, None)
    y = tp.ops.tpk.layer_norm(x * 3 + 1, *args, eps=1e-5)
    ref = _layer_norm(xn * 3 + 1, *((wn, bn) if affine else (None, None)))
    np.testing.assert_allclose(y.numpy(), ref, rtol=1e-4, atol=1e-4)


def test_layer_norm_half_types():
    x, xn = rand(4, 64, dtype=tp.bfloat16)
    y = tp.ops.tpk.layer_norm(x)
    assert y.dtype is tp.bfloat16
    np.testing.assert_allclose(to_numpy(y), _layer_norm(xn), rtol=2e-2, atol=2e-2)


def test_layer_norm_backward_matches_numpy():
    x, xn = rand(5, 9, dtype=tp.float64)
    w, wn = rand(9, dtype=tp.float64, seed=1)
    g, gn = rand(5, 9, dtype=tp.float64, seed=2)
    dx, dw, db = tp.ops.tpk.layer_norm_backward(g, x, w, 1e-5)
    mean = xn.mean(-1, keepdims=True)
    rstd = 1 / np.sqrt(xn.var(-1, keepdims=True) + 1e-5)
    xhat = (xn - mean) * rstd
    wg = gn * wn
    ref_dx = rstd * (wg - wg.mean(-1, keepdims=True) - xhat * (wg * xhat).mean(-1, keepdims=True))
    np.testing.assert_allclose(dx.numpy(), ref_dx, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(dw.numpy(), (gn * xhat).sum(0), rtol=1e-9)
    np.testing.assert_allclose(db.numpy(), gn.sum(0), rtol=1e-9)


def test_layer_norm_opcheck_with_and_without_affine():
    x, _ = rand(3, 4)
    w, _ = rand(4, seed=1)
    b, _ = rand(4, seed=2)
    assert library.opcheck(tp.ops.tpk.layer_norm, (x, w, b, 1e-5), test_utils="all") == {}
    assert library.opcheck(tp.ops.tpk.layer_norm, (x,), test_utils="all") == {}
    g, _ = rand(3, 4, seed=3)
    # the backward kernel has no derivative of its own: its checks minus the autograd ones
    checks = ("test_schema", "test_faketensor", "test_aot_dispatch_dynamic")
    assert library.opcheck(tp.ops.tpk.layer_norm_backward, (g, x, w, 1e-5), test_utils=checks) == {}


def test_row_ops_fake_kernels_and_errors():
    m = tp.empty(2, 8, device="meta")
    assert tuple(tp.ops.tpk.sum_rows(m).shape) == (2,)
    assert tuple(tp.ops.tpk.layer_norm(m).shape) == (2, 8)
    dx, dw, db = tp.ops.tpk.layer_norm_backward(m, m, None, 1e-5)
    assert tuple(dw.shape) == (8,) and tuple(dx.shape) == (2, 8)
    with pytest.raises(ValueError, match=r"tpk::layer_norm: weight must have shape \(8,\)"):
        tp.ops.tpk.layer_norm(tp.ones(2, 8), tp.ones(4))
    with pytest.raises(ValueError, match="eps must be a finite number"):
        tp.ops.tpk.layer_norm(tp.ones(2, 8), eps=-1.0)
    with pytest.raises(ValueError, match="at least 1 dimension"):
        tp.ops.tpk.softmax(tp.tensor(1.0))
