"""tpk::matmul against numpy: dtypes, odd shapes, strided operands, gradients, opcheck
(CPU through Triton's interpreter)."""

from __future__ import annotations

import numpy as np
import pytest
from kernel_helpers import rand, to_numpy

import tensorplay as tp
from tensorplay import library

pytestmark = pytest.mark.usefixtures("cpu_triton")


@pytest.mark.parametrize(
    "dtype, rtol",
    [(tp.float64, 1e-12), (tp.float32, 1e-5), (tp.float16, 2e-3), (tp.bfloat16, 2e-2)],
)
def test_matmul_matches_numpy(dtype, rtol):
    a, an = rand(19, 35, dtype=dtype)
    b, bn = rand(35, 21, dtype=dtype, seed=1)
    c = tp.ops.tpk.matmul(a, b)
    assert c.dtype is dtype and tuple(c.shape) == (19, 21)
    ref = an @ bn
    np.testing.assert_allclose(to_numpy(c), ref, rtol=rtol, atol=rtol * np.abs(ref).max())


def test_matmul_reads_transposed_operands_in_place():
    a, an = rand(20, 9)
    b, bn = rand(17, 20, seed=1)
    np.testing.assert_allclose(
        tp.ops.tpk.matmul(a.t(), b.t()).numpy(), an.T @ bn.T, rtol=1e-5, atol=1e-5
    )


def test_matmul_empty_dimensions():
    assert tuple(tp.ops.tpk.matmul(tp.ones(0, 3), tp.ones(3, 4)).shape) == (0, 4)
    assert tp.ops.tpk.matmul(tp.ones(2, 0), tp.ones(0, 3)).tolist() == [[0.0] * 3] * 2


def test_matmul_gradients_and_opcheck():
    a, an = rand(5, 3, dtype=tp.float64)
    b, bn = rand(3, 4, dtype=tp.float64, seed=1)
    a.requires_grad_(True)
    b.requires_grad_(True)
    g, gn = rand(5, 4, dtype=tp.float64, seed=2)
    tp.ops.tpk.matmul(a, b).backward(g)
    np.testing.assert_allclose(a.grad.numpy(), gn @ bn.T, rtol=1e-12)
    np.testing.assert_allclose(b.grad.numpy(), an.T @ gn, rtol=1e-12)
    x, _ = rand(4, 3)
    y, _ = rand(3, 2, seed=1)
    assert library.opcheck(tp.ops.tpk.matmul, (x, y), test_utils="all") == {}


def test_matmul_errors_name_the_argument():
    with pytest.raises(ValueError, match=r"a.shape\[1\] must equal b.shape\[0\]"):
        tp.ops.tpk.matmul(tp.ones(2, 3), tp.ones(2, 3))
    with pytest.raises(ValueError, match="expected 2-d a and b"):
        tp.ops.tpk.matmul(tp.ones(2, 2, 3), tp.ones(3, 2))
    with pytest.raises(TypeError, match="b.to"):
        tp.ops.tpk.matmul(tp.ones(2, 3), tp.ones(3, 2, dtype=tp.float16))
    assert tuple(
        tp.ops.tpk.matmul(tp.empty(7, 3, device="meta"), tp.empty(3, 5, device="meta")).shape
    ) == (7, 5)
