"""The Triton tpk ops compiled and run on a GPU (skipped without CUDA): values against
numpy, opcheck on CUDA, the current stream, the allocator, and one launch path that
needs no torch."""

from __future__ import annotations

import numpy as np
import pytest
from kernel_helpers import TOL, rand, to_numpy

import tensorplay as tp
from tensorplay import library

pytestmark = [pytest.mark.cuda, pytest.mark.usefixtures("cuda_triton")]


@pytest.mark.parametrize("dtype", [tp.float32, tp.float16, tp.bfloat16])
def test_elementwise_on_cuda(dtype):
    a, an = rand(3, 1000, dtype=dtype, device="cuda")
    b, bn = rand(1000, dtype=dtype, device="cuda", seed=1)
    np.testing.assert_allclose(to_numpy(tp.ops.tpk.add(a, b)), an + bn, **TOL[dtype])
    np.testing.assert_allclose(to_numpy(tp.ops.tpk.relu(a)), np.maximum(an, 0), **TOL[dtype])
    y = tp.ops.tpk.bias_act(a, b, "silu")
    z = an + bn
    np.testing.assert_allclose(to_numpy(y), z / (1 + np.exp(-z)), **TOL[dtype])


@pytest.mark.parametrize("n", [1000, 40000])
def test_rows_on_cuda(n):
    x, xn = rand(8, n, device="cuda")
    e = np.exp(xn - xn.max(-1, keepdims=True))
    np.testing.assert_allclose(
        to_numpy(tp.ops.tpk.softmax(x)), e / e.sum(-1, keepdims=True), rtol=1e-4, atol=1e-7
    )
    np.testing.assert_allclose(to_numpy(tp.ops.tpk.sum_rows(x)), xn.sum(-1), rtol=1e-4, atol=1e-3)
    ref = (xn - xn.mean(-1, keepdims=True)) / np.sqrt(xn.var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(to_numpy(tp.ops.tpk.layer_norm(x)), ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "dtype, rtol", [(tp.bfloat16, 2e-2), (tp.float16, 2e-3), (tp.float32, 1e-5)]
)
def test_matmul_on_cuda(dtype, rtol):
    a, an = rand(300, 520, dtype=dtype, device="cuda")
    b, bn = rand(520, 260, dtype=dtype, device="cuda", seed=1)
    ref = an @ bn
    c = tp.ops.tpk.matmul(a, b)
    np.testing.assert_allclose(to_numpy(c), ref, rtol=rtol, atol=rtol * np.abs(ref).max())
    t = tp.ops.tpk.matmul(a.float(), b.float(), allow_tf32=True)
    np.testing.assert_allclose(to_numpy(t), ref, rtol=1e-2, atol=1e-2 * np.abs(ref).max())


def test_opcheck_on_cuda():
    x, _ = rand(4, 6, device="cuda")
    w, _ = rand(6, device="cuda", seed=1)
    for op, args in [
        (tp.ops.tpk.gelu, (x,)),
        (tp.ops.tpk.mul, (x, w)),
        (tp.ops.tpk.softmax, (x,)),
        (tp.ops.tpk.layer_norm, (x, w, w, 1e-5)),
        (tp.ops.tpk.max_rows, (x,)),
        (tp.ops.tpk.matmul, (x, x.t().contiguous())),
        (tp.ops.tpk.bias_act, (x, w, "gelu_tanh")),
    ]:
        assert library.opcheck(op, args, test_utils="all") == {}, op


def test_launches_follow_tensorplay_current_stream_and_allocator():
    import cupy as cp
    from triton.runtime import driver

    from tensorplay.kernels._launch import _allocate

    x, xn = rand(1 << 20, device="cuda")
    tp.ops.tpk.exp(x)  # installs the TensorPlay driver
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        assert driver.active.get_current_stream() == stream.ptr
        y = tp.ops.tpk.exp(x)
    stream.synchronize()
    np.testing.assert_allclose(to_numpy(y), np.exp(xn), rtol=1e-5)
    buf = _allocate(4096, 128, None)
    assert buf.device.type == "cuda" and buf.data_ptr() % 128 == 0


def test_autotuner_times_with_cupy_events_not_torch():
    from triton.runtime import driver

    from tensorplay.kernels._launch import _cupy_do_bench

    x, _ = rand(4096, device="cuda")
    tp.ops.tpk.exp(x)  # installs the TensorPlay driver
    assert driver.active.get_benchmarker() is _cupy_do_bench
    low, mid, high = _cupy_do_bench(lambda: tp.ops.tpk.exp(x), quantiles=(0.2, 0.5, 0.8))
    assert 0 < low <= mid <= high
