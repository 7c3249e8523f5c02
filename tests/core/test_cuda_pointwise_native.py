"""tensorplay._C.cuda_pointwise (csrc/cuda_pointwise.h) against its twin, the Python
``_cuda_pointwise.run``: the same layouts taken (the same bits out), the same ones declined,
at every size; misuse is an error, not a crash."""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp
from tensorplay import _cuda_pointwise, _native

pytestmark = pytest.mark.cuda

C = _native.NATIVE


@pytest.fixture
def cp():
    if not tp.cuda.is_available():
        pytest.skip(f"CUDA not available: {tp.cuda.unavailable_reason()}")
    if C is None or not hasattr(C, "cuda_pointwise"):
        pytest.skip(f"no _C: {_native.REASON}")
    if _cuda_pointwise._native_route() is None:
        pytest.skip("the native route is off")
    import cupy

    return cupy


def _twin(expr, arrays):
    """The Python route alone, at every size."""
    saved = _cuda_pointwise._native_run
    _cuda_pointwise._native_run = None
    try:
        return _cuda_pointwise.run(expr, arrays, None, 0)
    finally:
        _cuda_pointwise._native_run = saved


def _cases(cp, dtype):
    g = np.random.default_rng(0)

    def arr(*shape):
        return cp.asarray(g.standard_normal(shape).astype(dtype))

    big = arr(6, 5, 8)
    return [
        ("a * b", (arr(1), arr(1))),
        ("a + b", (arr(1025), arr(1025))),  # an odd length: the unvectorised kernel
        ("a / b", (big, arr(5, 8))),  # a repeating operand on the right (mode 1)
        ("a - b", (arr(1, 8), big)),  # ... on the left (mode 2)
        ("a * b", (big, dtype(2.5))),  # a number on the right (mode 3)
        ("a - b", (dtype(-1.5), big)),  # ... on the left (mode 4)
        ("a + b", (arr(4096)[1:1025], arr(1024))),  # an unaligned view: V = 1
        ("-a", (arr(3, 7),)),
        ("exp(a)", (arr(4096),)),
    ]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_native_and_twin_give_the_same_bits(cp, dtype):
    for expr, arrays in _cases(cp, dtype):
        got = C.cuda_pointwise(expr, arrays, 0)
        want = _twin(expr, arrays)
        assert got is not None and want is not None, expr
        assert got.shape == want.shape and got.dtype == want.dtype and got.flags.c_contiguous
        np.testing.assert_array_equal(cp.asnumpy(got), cp.asnumpy(want))


def test_what_the_native_route_declines(cp):
    a = cp.ones((4, 6), cp.float32)
    # a strided view, another dtype, two dtypes, shapes that do not repeat, a Python number
    assert C.cuda_pointwise("a + b", (a.T, a.T.copy()), 0) is None
    assert C.cuda_pointwise("a + b", (a.astype(cp.int32), a.astype(cp.int32)), 0) is None
    assert C.cuda_pointwise("a + b", (a, a.astype(cp.float64)), 0) is None
    assert C.cuda_pointwise("a + b", (a, cp.ones((4, 1), cp.float32)), 0) is None
    assert C.cuda_pointwise("a + b", (a, 2.0), 0) is None
    assert C.cuda_pointwise("a + b", (a, np.float64(2.0)), 0) is None  # not a's dtype
    assert C.cuda_pointwise("a + b", (a, a), 10**9) is None  # below min_elements
    assert C.cuda_pointwise("a + b", (np.ones(3), np.ones(3)), 0) is None  # not CuPy
    # through the op: the same values either way
    x = tp.randn(4, 6, device="cuda")
    np.testing.assert_allclose((x.t() + x.t()).cpu().numpy(), 2 * x.t().cpu().numpy())


def test_small_tensors_take_the_native_route(cp, monkeypatch):
    seen = []
    real = _cuda_pointwise._native_run

    def counting(expr, arrays, min_elements):
        r = real(expr, arrays, min_elements)
        seen.append(r is not None)
        return r

    monkeypatch.setattr(_cuda_pointwise, "_native_run", counting)
    x = tp.tensor([1.0, -2.0, 3.0], device="cuda")
    assert (x * x).cpu().tolist() == [1.0, 4.0, 9.0]
    assert x.relu().cpu().tolist() == [1.0, 0.0, 3.0]
    assert (x + 1.0).cpu().tolist() == [2.0, -1.0, 4.0]
    assert seen and all(seen)


def test_misuse_is_an_error_not_a_crash(cp):
    with pytest.raises(TypeError):
        C.cuda_pointwise("a + b", [1, 2], 0)  # arrays must be a tuple
    with pytest.raises(TypeError):
        C.cuda_pointwise()
    with pytest.raises(ValueError, match="already called"):
        C.init_cuda_pointwise(cp.ndarray, _cuda_pointwise._functions, cp.cuda.get_current_stream)
    assert C.cuda_pointwise("a + b", (), 0) is None
