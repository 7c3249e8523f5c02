"""The seed's recipe: a custom_op whose body allocates and calls a cpp_jit kernel, with
register_fake and register_autograd, passes opcheck and compiles as one opaque node."""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp
from tensorplay.utils import cpp_jit

library = pytest.importorskip("tensorplay.library")
if not hasattr(library, "custom_op"):
    pytest.skip("tensorplay.library.custom_op not available", allow_module_level=True)

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
