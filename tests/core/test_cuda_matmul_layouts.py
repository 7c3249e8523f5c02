"""``a @ b`` on CUDA through cuBLAS for operands cuBLAS cannot read as they are (expanded
stride-0 gradients, overlapping batch views): the operand is copied once and the product
still comes from cuBLAS (``_cublas.matmul`` answers, not CuPy's matmul); values against
numpy for 2-D and batched layouts."""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp
from tensorplay import _cublas

pytestmark = pytest.mark.cuda


def _cupy():
    if not tp.cuda.is_available():
        pytest.skip(f"CUDA not available: {tp.cuda.unavailable_reason()}")
    return pytest.importorskip("cupy")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_expanded_operands(dtype):
    cp = _cupy()
    rng = np.random.default_rng(0)
    row = rng.standard_normal((1, 6)).astype(dtype)
    w = rng.standard_normal((6, 5)).astype(dtype)
    a3 = rng.standard_normal((1, 4, 6)).astype(dtype)
    b3 = rng.standard_normal((3, 6, 2)).astype(dtype)
    cases = [  # (xp -> (a, b)): the same layouts built by numpy and by CuPy
        lambda xp: (xp.broadcast_to(xp.asarray(row), (4, 6)), xp.asarray(w)),  # a: stride 0
        lambda xp: (xp.asarray(w).T, xp.broadcast_to(xp.asarray(row).T, (6, 3))),  # b: stride 0
        lambda xp: (xp.broadcast_to(xp.asarray(a3), (3, 4, 6)), xp.asarray(b3)),  # batch: stride 0
    ]
    for make in cases:
        a, b = make(np)
        da, db = make(cp)
        assert da.strides == a.strides and db.strides == b.strides
        got = _cublas.matmul(da, db)
        assert got is not None, "cuBLAS declined"
        np.testing.assert_allclose(cp.asnumpy(got), a @ b, rtol=1e-5)


def test_gradient_of_a_summed_product_uses_cublas(monkeypatch):
    _cupy()
    calls = []
    real = _cublas.matmul

    def counted(a, b):
        r = real(a, b)
        calls.append(r is not None)
        return r

    monkeypatch.setattr(_cublas, "matmul", counted)
    rng = np.random.default_rng(1)
    a, w = rng.standard_normal((8, 4)), rng.standard_normal((4, 3))
    x = tp.tensor(a, device="cuda", requires_grad=True)
    W = tp.tensor(w, device="cuda", requires_grad=True)
    (x @ W).sum().backward()
    assert calls == [True, True, True]
    np.testing.assert_allclose(x.grad.cpu().numpy(), np.ones((8, 3)) @ w.T, rtol=1e-12)
    np.testing.assert_allclose(W.grad.cpu().numpy(), a.T @ np.ones((8, 3)), rtol=1e-12)
