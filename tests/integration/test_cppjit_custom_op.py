"""The seed's recipe: a custom_op whose body allocates and calls a cpp_jit kernel, with
register_fake and register_autograd, passes opcheck and compiles as one opaque node.

Cross-component: tensorplay-cppjit + tensorplay-library + tensorplay-compile. Run again
with TENSORPLAY_PURE_PYTHON=1 (tp.Tensor without tensorplay._C's DLPack exchange table, so
the kernel gets tensors through cpp_jit's own conversion), as tests/cppjit does for its
kernel tests (test_native_exchange.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tensorplay as tp
from tensorplay import library
from tensorplay.utils import cpp_jit

SRC = r"""
void scale_into(tvm::ffi::TensorView x, tvm::ffi::TensorView y, double factor) {
  if (x.dtype().code != kDLFloat || x.dtype().bits != 32) {
    TVM_FFI_THROW(TypeError) << "cppjit_test::scale: expected float32";
  }
  const float* px = static_cast<const float*>(x.data_ptr());
  float* py = static_cast<float*>(y.data_ptr());
  for (int64_t i = 0; i < x.numel(); ++i) py[i] = px[i] * factor;
}
"""


@pytest.fixture(scope="module")
def scale():
    if not cpp_jit.is_available():
        pytest.skip("apache-tvm-ffi not installed")
    mod = cpp_jit.load_inline("compose_scale", cpp_sources=SRC, functions=["scale_into"])

    @library.custom_op("cppjit_test::scale", mutates_args=())
    def scale(x: tp.Tensor, factor: float) -> tp.Tensor:
        x = x.contiguous()  # the kernel walks memory linearly
        y = tp.empty_like(x)
        mod.scale_into(x, y, factor)
        return y

    library.register_fake("cppjit_test::scale", lambda x, factor: x.new_empty(x.shape))

    def backward(ctx, grad):
        return scale(grad, ctx.factor), None

    def setup_context(ctx, inputs, output):
        ctx.factor = inputs[1]

    library.register_autograd("cppjit_test::scale", backward, setup_context=setup_context)
    return scale


def test_forward_matches_numpy(scale):
    x = tp.randn(3, 4)
    np.testing.assert_allclose(scale(x, 2.5).numpy(), x.numpy() * 2.5, rtol=1e-6)


def test_backward_uses_the_registered_formula(scale):
    x = tp.randn(6, requires_grad=True)
    (scale(x, 3.0) * tp.arange(6, dtype=tp.float32)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 3.0 * np.arange(6, dtype=np.float32))


def test_fake_kernel_propagates_shapes_on_meta(scale):
    y = scale(tp.empty(2, 7, device="meta"), 1.0)
    assert y.device.type == "meta" and tuple(y.shape) == (2, 7)


def test_opcheck_passes(scale):
    assert library.opcheck(scale, (tp.randn(4, 3), 2.0)) == {}
    assert library.opcheck(scale, (tp.randn(5, requires_grad=True), -1.5)) == {}


def test_kernel_error_surfaces_through_the_op(scale):
    with pytest.raises(TypeError, match="cppjit_test::scale: expected float32"):
        scale(tp.ones(3, dtype=tp.float64), 1.0)


def test_compiles_as_one_opaque_node(scale):
    from tensorplay.graph import symbolic_trace

    def f(x):
        return scale(x, 2.0) + 1

    gm = symbolic_trace(f)
    calls = [n for n in gm.graph.nodes if n.op == "call_function"]
    assert [str(getattr(n.target, "name", n.target)) for n in calls][0] == "cppjit_test::scale"
    assert len(calls) == 2  # the operator and the add: nothing traced inside the kernel
    compiled = tp.compile(f)
    x = tp.randn(8)
    np.testing.assert_allclose(compiled(x).numpy(), x.numpy() * 2 + 1, rtol=1e-6)
    routes = {row.op: row.route for row in compiled.report()}
    assert routes.get("cppjit_test::scale") == "custom_op", routes


@pytest.mark.slow
def test_passes_without_the_native_table(cache_dir):
    if not cpp_jit.is_available():
        pytest.skip("apache-tvm-ffi not installed")
    if os.environ.get("TENSORPLAY_PURE_PYTHON") == "1":
        pytest.skip("this run is the pure-Python one already")
    env = {
        **os.environ,
        "TENSORPLAY_PURE_PYTHON": "1",
        "TENSORPLAY_TEST_CACHE_DIR": str(cache_dir),
    }
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", Path(__file__).name],
        cwd=Path(__file__).parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert " passed" in out.stdout and "failed" not in out.stdout
