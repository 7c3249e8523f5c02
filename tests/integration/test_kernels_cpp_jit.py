"""tpk::axpby: a C++ (CPU) and CUDA C (GPU) kernel built with cpp_jit, registered as a
custom_op with fake and autograd; the CUDA library is compiled here when nvcc exists
and run on a GPU when there is one.

Cross-component: tensorplay-kernels builds this operator with tensorplay-cppjit, which it
does not declare (tpk::axpby works where both are installed)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

import tensorplay as tp
from tensorplay import library
from tensorplay.kernels import _ops_cuda_c
from tensorplay.utils import cpp_jit


def rand(*shape: int, device: str = "cpu", seed: int = 0):
    """A float32 tensor of normal values and its float64 numpy copy (the oracle's input)."""
    values = np.random.default_rng(seed).standard_normal(shape)
    t = tp.tensor(values, dtype=tp.float64).to(tp.float32).to(device)
    return t, t.cpu().to(tp.float64).numpy()


@pytest.fixture
def engine():
    if not cpp_jit.is_available():
        pytest.skip("apache-tvm-ffi not installed")


@pytest.mark.usefixtures("engine")
def test_axpby_on_cpu_matches_numpy_and_passes_opcheck():
    x, xn = rand(3, 5)
    y, yn = rand(3, 5, seed=1)
    out = tp.ops.tpk.axpby(x, y, 2.0, -0.5)
    np.testing.assert_allclose(out.numpy(), 2 * xn - 0.5 * yn, rtol=1e-6)
    np.testing.assert_allclose(tp.ops.tpk.axpby(x.t(), y.t()).numpy(), (xn + yn).T, rtol=1e-6)
    assert library.opcheck(tp.ops.tpk.axpby, (x, y, 3.0, 0.25)) == {}


@pytest.mark.usefixtures("engine")
def test_axpby_gradients_and_errors():
    x = tp.ones(4, requires_grad=True)
    y = tp.ones(4, requires_grad=True)
    tp.ops.tpk.axpby(x, y, 3.0, -2.0).sum().backward()
    assert x.grad.tolist() == [3.0] * 4 and y.grad.tolist() == [-2.0] * 4
    with pytest.raises(TypeError, match="tpk::axpby: x has dtype .*float64"):
        tp.ops.tpk.axpby(tp.ones(2, dtype=tp.float64), tp.ones(2, dtype=tp.float64))
    with pytest.raises(ValueError, match="must have one shape"):
        tp.ops.tpk.axpby(tp.ones(2), tp.ones(3))
    assert tuple(
        tp.ops.tpk.axpby(tp.empty(2, 3, device="meta"), tp.empty(2, 3, device="meta")).shape
    ) == (2, 3)


@pytest.mark.usefixtures("engine")
def test_axpby_only_reads_its_inputs_so_their_versions_stay():
    # cpp_jit bumps the version of every tensor a kernel may write; axpby declares x and y
    # read-only, so a tensor saved for backward by another op can still go through it
    x = tp.ones(4, requires_grad=True)
    w = x * 2
    s = w.exp()  # saves w for backward
    v = w._version
    tp.ops.tpk.axpby(w.detach(), w.detach(), 1.0, 1.0)
    assert w._version == v
    s.sum().backward()
    assert x.grad.tolist() == pytest.approx([2 * np.exp(2.0)] * 4)


@pytest.mark.usefixtures("engine")
def test_axpby_cuda_library_builds_for_the_h200(monkeypatch):
    if shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").exists():
        pytest.skip("nvcc not installed")
    if not tp.cuda.is_available():
        monkeypatch.setenv("TENSORPLAY_CUDA_ARCH", "9.0")
    path = cpp_jit.build_inline(
        "tpk_axpby_cuda",
        cpp_sources=_ops_cuda_c._CUDA_DECL,
        cuda_sources=_ops_cuda_c.CUDA_SOURCE,
        functions=["axpby_cuda"],
    )
    assert Path(path).is_file()


@pytest.mark.cuda
@pytest.mark.usefixtures("engine")
def test_axpby_runs_on_cuda():
    if not tp.cuda.is_available():
        pytest.skip(f"CUDA not available: {tp.cuda.unavailable_reason()}")
    x, xn = rand(1000, device="cuda")
    y, yn = rand(1000, device="cuda", seed=1)
    out = tp.ops.tpk.axpby(x, y, 1.5, 2.0)
    assert out.device.type == "cuda"
    np.testing.assert_allclose(out.cpu().numpy(), 1.5 * xn + 2.0 * yn, rtol=1e-6)
    assert library.opcheck(tp.ops.tpk.axpby, (x, y, 1.5, 2.0)) == {}
