"""set_device_kernel: the core interface through which tensorplay-kernels routes built-in
CUDA ops to its kernels (tp.kernels.enable/disable)."""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp
from tensorplay._device import cuda_unavailable_reason
from tensorplay._dispatch import get_device_kernel, set_device_kernel

_NO_CUDA = cuda_unavailable_reason()


def test_bad_registrations_name_the_argument_and_the_fix():
    with pytest.raises(ValueError, match="only 'cuda' kernels"):
        set_device_kernel("add", "cpu", lambda xp, a, b, **p: a + b)
    with pytest.raises(ValueError, match="did you mean.*'add'"):
        set_device_kernel("addd", "cuda", lambda xp, a, b, **p: a + b)
    with pytest.raises(TypeError, match="callable or None"):
        set_device_kernel("add", "cuda", 3)
    assert get_device_kernel("add", "cuda") is None
    assert get_device_kernel("no_such_op", "cuda") is None


def test_registration_round_trip_leaves_cpu_untouched():
    def kernel(xp, a, b, **params):
        raise AssertionError("a CUDA kernel never runs for CPU tensors")

    set_device_kernel("mul", "cuda", kernel)
    try:
        assert get_device_kernel("mul", "cuda") is kernel
        x = tp.arange(4.0)
        assert (x * x).tolist() == [0.0, 1.0, 4.0, 9.0]
        assert tp.mul(x, x, out=tp.empty(4)).tolist() == [0.0, 1.0, 4.0, 9.0]
    finally:
        set_device_kernel("mul", "cuda", None)
    assert get_device_kernel("mul", "cuda") is None


@pytest.mark.cuda
def test_cuda_ops_run_the_installed_kernel_with_autograd():
    if _NO_CUDA:
        pytest.skip(f"CUDA not available: {_NO_CUDA}")
    calls = []

    def add(xp, a, b, alpha=1):
        calls.append((a.dtype, a.shape, b.shape, alpha))
        if a.dtype == np.float64:
            return NotImplemented  # declined: the op-table kernel runs
        return xp.add(a, b * alpha)

    set_device_kernel("add", "cuda", add)
    try:
        a = tp.tensor([1.0, 2.0], device="cuda", requires_grad=True)
        b = tp.tensor([3.0, 4.0], device="cuda")
        r = tp.add(a, b, alpha=2)
        assert r.detach().cpu().tolist() == [7.0, 10.0]
        r.sum().backward()
        assert a.grad.cpu().tolist() == [1.0, 1.0]
        d = tp.add(a.double(), b.double())
        assert d.detach().cpu().tolist() == [4.0, 6.0] and d.dtype is tp.float64
        assert calls[0][3] == 2 and len(calls) >= 2
    finally:
        set_device_kernel("add", "cuda", None)
    n = len(calls)
    tp.add(a, b)
    assert len(calls) == n  # restored
