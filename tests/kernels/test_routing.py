"""tp.kernels.enable()/disable(): built-in CUDA ops routed to the Triton kernels through
core's set_device_kernel. On CPU: the clear error and what the routes decline; on CUDA:
a representative set of core ops gives the same values enabled and disabled."""

from __future__ import annotations

import numpy as np
import pytest
from kernel_helpers import rand, to_numpy

import tensorplay as tp
import tensorplay.kernels as tpk
from tensorplay._dispatch import get_device_kernel


def test_enable_without_cuda_raises_with_the_reason():
    if tp.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(RuntimeError, match=r"tp.kernels.enable\(\): the Triton CUDA kernels"):
        tpk.enable()
    assert not tpk.is_enabled() and get_device_kernel("add", "cuda") is None


def test_tp_kernels_resolves_lazily_from_core():
    assert tp.kernels is tpk
    assert set(tpk.ROUTED_OPS) >= {"add", "mul", "exp", "softmax", "sum", "gelu"}


@pytest.mark.parametrize(
    "name, args, params",
    [
        ("add", (np.ones(3, np.float32), np.ones(3, np.float32)), {"alpha": 2}),
        ("div", (np.ones(3, np.float32), np.ones(3, np.float32)), {"rounding_mode": "floor"}),
        ("mul", (np.ones(3, np.int64), np.ones(3, np.int64)), {}),
        ("add", (np.ones(3, np.float32), np.ones(3, np.float64)), {}),
        ("add", (np.ones((1, 1, 1, 1, 2), np.float32), np.ones(2, np.float32)), {}),
        ("exp", (np.ones((3, 4), np.float32).T,), {}),
        ("gelu", (np.ones(3, np.float32),), {"approximate": "bogus"}),
        ("softmax", (np.ones((3, 4), np.float32),), {"dim": 0}),
        ("sum", (np.ones((3, 4), np.float32),), {"dim": None}),
        ("mean", (np.ones((3, 4), np.float32),), {"dim": (0, 1)}),
        ("amax", (np.ones((3, 0), np.float32),), {"dim": -1}),
    ],
)
def test_routes_decline_what_they_do_not_compute_like_the_op_table(name, args, params):
    # declining happens before any launch, so numpy arrays stand in for CuPy ones
    assert tpk.ROUTED_OPS[name](np, *args, **params) is NotImplemented


# a representative set of core ops: (name, function of CUDA tensors)
CORE_OPS = [
    ("add", lambda a, b: a + b),
    ("add broadcast", lambda a, b: a + b[0]),
    ("sub alpha", lambda a, b: tp.sub(a, b, alpha=3)),
    ("mul transposed", lambda a, b: a.t() * b.t()),
    ("div", lambda a, b: a / (b.abs() + 1)),
    ("maximum", lambda a, b: tp.maximum(a, b)),
    ("exp", lambda a, b: a.exp()),
    ("sigmoid", lambda a, b: a.sigmoid()),
    ("tanh", lambda a, b: a.tanh()),
    ("relu", lambda a, b: a.relu()),
    ("gelu", lambda a, b: tp.gelu(a)),
    ("gelu tanh", lambda a, b: tp.gelu(a, approximate="tanh")),
    ("silu", lambda a, b: tp.silu(a)),
    ("sqrt", lambda a, b: a.abs().sqrt()),
    ("softmax", lambda a, b: a.softmax(dim=-1)),
    ("softmax dim 0", lambda a, b: a.softmax(dim=0)),
    ("sum last", lambda a, b: a.sum(dim=-1)),
    ("sum keepdim", lambda a, b: a.sum(dim=1, keepdim=True)),
    ("sum all", lambda a, b: a.sum()),
    ("mean", lambda a, b: a.mean(dim=-1)),
    ("amax", lambda a, b: a.amax(dim=-1)),
    ("in-place add", lambda a, b: a.clone().add_(b)),
    ("matmul", lambda a, b: a @ b.t()),
]


@pytest.mark.cuda
@pytest.mark.usefixtures("cuda_triton")
@pytest.mark.parametrize("dtype", [tp.float32, tp.float16, tp.float64])
def test_core_cuda_ops_agree_enabled_and_disabled(dtype):
    a, _ = rand(33, 65, dtype=dtype, device="cuda")
    b, _ = rand(33, 65, dtype=dtype, device="cuda", seed=1)
    tpk.disable()
    expected = {name: to_numpy(f(a, b)) for name, f in CORE_OPS}
    tpk.enable()
    try:
        assert tpk.is_enabled() and get_device_kernel("add", "cuda") is tpk.ROUTED_OPS["add"]
        for name, f in CORE_OPS:
            # float16: CuPy may accumulate sums in float16, the kernels in float32
            tol = {tp.float64: 1e-12, tp.float32: 1e-5, tp.float16: 1e-2}[dtype]
            np.testing.assert_allclose(
                to_numpy(f(a, b)), expected[name], rtol=tol, atol=tol, err_msg=name
            )
    finally:
        tpk.disable()
    assert not tpk.is_enabled() and get_device_kernel("add", "cuda") is None


@pytest.mark.cuda
@pytest.mark.usefixtures("cuda_triton")
def test_autograd_through_routed_ops():
    x, xn = rand(8, 16, device="cuda")
    x.requires_grad_(True)
    tpk.enable()
    try:
        (x.exp() * 2).softmax(dim=-1).sum(dim=-1).mean().backward()
    finally:
        tpk.disable()
    grad_enabled = to_numpy(x.grad)
    x.grad = None
    (x.exp() * 2).softmax(dim=-1).sum(dim=-1).mean().backward()
    np.testing.assert_allclose(grad_enabled, to_numpy(x.grad), atol=1e-6)
